//! Guards 2 (Flex card tap) and 3 (text and follow triggers), and legacy answers.

use crate::helpers::events::{self, card_tap_data, follow, postback, text};
use crate::helpers::{TestOptions, sorted, spawn_app, spawn_app_with};

const INTRO: &str = "A quick survey about today's lunch.";
const NEWS: &str = "Today's news: the cafeteria has a new menu.";

#[tokio::test]
async fn a_text_trigger_starts_the_survey_for_a_user_who_has_not_answered() {
    let app = spawn_app().await;
    let user = events::new_user();

    app.deliver(&text(&user, "Lunch ")).await;

    assert_eq!(app.line.accepted_with_text(INTRO), 1);
    assert_eq!(
        app.line.accepted_of_kind("template"),
        1,
        "the first question follows the intro"
    );
}

#[tokio::test]
async fn text_sent_after_answering_does_not_restart_the_survey() {
    let app = spawn_app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "lunch")).await;
    app.answer(&user, "ask_food", "good").await;
    let sent = app.line.accepted().len();

    // The keyword again, and the "yes" typed after answering (catch-all trigger).
    app.deliver(&text(&user, "lunch")).await;
    app.deliver(&text(&user, "yes")).await;

    assert_eq!(app.line.accepted().len(), sent, "nothing more was sent");
    assert_eq!(app.line.accepted_with_text(INTRO), 1);
}

#[tokio::test]
async fn the_guard_is_per_user() {
    let app = spawn_app().await;
    let answered = events::new_user();
    let other = events::new_user();
    app.answer(&answered, "ask_food", "good").await;

    app.deliver(&text(&other, "lunch")).await;

    assert_eq!(app.line.accepted_with_text(INTRO), 1);
}

#[tokio::test]
async fn a_scenario_without_survey_nodes_runs_every_time() {
    let app = spawn_app().await;
    let user = events::new_user();
    app.answer(&user, "ask_food", "good").await;

    app.deliver(&text(&user, "news")).await;
    app.deliver(&text(&user, "NEWS")).await;

    assert_eq!(app.line.accepted_with_text(NEWS), 2);
}

#[tokio::test]
async fn a_follow_greets_with_the_flex_card() {
    let app = spawn_app().await;
    let user = events::new_user();

    app.deliver(&follow(&user)).await;

    let calls = app.line.accepted();
    assert_eq!(calls.len(), 1);
    let kinds: Vec<_> = calls[0]
        .messages()
        .iter()
        .map(|m| m["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["text", "flex"]);
}

#[tokio::test]
async fn a_card_tap_before_answering_starts_the_survey_and_is_tagged() {
    let app = spawn_app().await;
    let user = events::new_user();

    app.deliver(&postback(&user, &card_tap_data("welcome", "card"))).await;

    assert_eq!(app.line.accepted_with_text(INTRO), 1);
    assert_eq!(app.user_tags(&user).await, ["flex_image_tap"]);
}

#[tokio::test]
async fn a_card_tap_after_answering_is_tagged_but_does_not_restart_the_survey() {
    let app = spawn_app().await;
    let user = events::new_user();
    app.answer(&user, "ask_food", "bad").await;
    let sent = app.line.accepted().len();

    app.deliver(&postback(&user, &card_tap_data("welcome", "card"))).await;
    app.deliver(&postback(&user, &card_tap_data("welcome", "card"))).await;

    assert_eq!(app.line.accepted().len(), sent);
    assert_eq!(sorted(app.user_tags(&user).await), ["flex_image_tap", "lunch_bad"]);
}

#[tokio::test]
async fn an_answer_to_a_later_question_also_counts_as_answered() {
    let app = spawn_app().await;
    let user = events::new_user();
    app.answer(&user, "ask_drink", "coffee").await;

    app.deliver(&text(&user, "lunch")).await;

    assert_eq!(app.line.accepted_with_text(INTRO), 0);
}

async fn seed_legacy_answer(app: &crate::helpers::TestApp, user: &str) {
    app.firestore
        .create_with_random_id(
            "survey_responses",
            &[
                ("scenarioId", "lunch"),
                ("nodeId", "ask_food"),
                ("lineUserId", user),
                ("value", "good"),
            ],
        )
        .await;
}

#[tokio::test]
async fn with_legacy_lookup_an_answer_under_a_random_id_blocks_answers_and_restarts() {
    let app = spawn_app_with(TestOptions {
        legacy_answer_lookup: true,
        ..TestOptions::default()
    })
    .await;
    let user = events::new_user();
    seed_legacy_answer(&app, &user).await;

    app.answer(&user, "ask_food", "bad").await;
    app.deliver(&text(&user, "lunch")).await;
    app.deliver(&postback(&user, &card_tap_data("welcome", "card"))).await;

    assert_eq!(
        app.firestore.count("survey_responses").await,
        1,
        "only the legacy answer"
    );
    assert_eq!(app.user_tags(&user).await, ["flex_image_tap"]);
    assert!(app.line.accepted().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn without_legacy_lookup_answers_under_random_ids_are_not_seen() {
    let app = spawn_app().await;
    let user = events::new_user();
    seed_legacy_answer(&app, &user).await;

    app.answer(&user, "ask_food", "bad").await;

    assert_eq!(app.firestore.count("survey_responses").await, 2);
    assert_eq!(app.user_tags(&user).await, ["lunch_bad"]);
}
