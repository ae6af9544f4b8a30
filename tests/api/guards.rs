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
    assert_eq!(
        sorted(app.user_tags(&user).await),
        ["answered:lunch", "flex_image_tap", "lunch_bad"]
    );
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
    assert_eq!(sorted(app.user_tags(&user).await), ["answered:lunch", "lunch_bad"]);
}

/// Fires all `bodies` at once; each must be acknowledged.
async fn race(app: &crate::helpers::TestApp, bodies: &[serde_json::Value]) {
    let responses = futures::future::join_all(bodies.iter().map(|body| app.post_webhook(body))).await;
    for response in responses {
        assert_eq!(response.status(), 200);
    }
    app.settled().await;
}

/// How many survey starts (the intro) each user received.
fn intros_per_user(app: &crate::helpers::TestApp, users: &[String], events: &[serde_json::Value]) -> Vec<usize> {
    let tokens: std::collections::HashMap<&str, &str> = events
        .iter()
        .filter_map(|event| Some((event["replyToken"].as_str()?, event["source"]["userId"].as_str()?)))
        .collect();
    users
        .iter()
        .map(|user| {
            app.line
                .accepted()
                .iter()
                .filter(|call| {
                    let to = call
                        .to()
                        .or_else(|| call.reply_token().and_then(|token| tokens.get(token).copied()));
                    to == Some(user.as_str()) && call.texts().iter().any(|text| text == INTRO)
                })
                .count()
        })
        .collect()
}

#[tokio::test]
async fn a_card_tapped_twice_at_once_starts_the_survey_once_and_tags_the_taps() {
    let app = spawn_app().await;
    let users: Vec<String> = (0..30).map(|_| events::new_user()).collect();
    let taps: Vec<serde_json::Value> = users
        .iter()
        .flat_map(|user| {
            let data = card_tap_data("welcome", "card");
            [postback(user, &data), postback(user, &data)]
        })
        .collect();

    race(
        &app,
        &taps
            .iter()
            .map(|tap| events::envelope(vec![tap.clone()]))
            .collect::<Vec<_>>(),
    )
    .await;

    assert_eq!(intros_per_user(&app, &users, &taps), vec![1; users.len()]);
    for user in &users {
        assert_eq!(app.user_tags(user).await, ["flex_image_tap"]);
    }
}

#[tokio::test]
async fn a_start_within_the_dedup_window_starts_once_and_one_after_it_starts_again() {
    let app = spawn_app().await;
    let user = events::new_user();
    let data = card_tap_data("welcome", "card");
    // 40 s ago (its reply token still fresh), then now, then now again.
    let early = events::with_timestamp(&postback(&user, &data), events::now_ms() - 40_000);

    app.deliver(&early).await;
    app.deliver(&postback(&user, &data)).await;
    app.deliver(&postback(&user, &data)).await;
    app.deliver(&text(&user, "lunch")).await;

    assert_eq!(
        app.line.accepted_with_text(INTRO),
        2,
        "the tap after the window started it again; the tap and the keyword within it did not"
    );
}

#[tokio::test]
async fn a_trigger_racing_the_answer_never_starts_the_survey_after_the_answer_landed() {
    // Firestore answers 20 ms late each way, so a guard's read and its commit are
    // far apart, and the answer of the same user lands in between for some users.
    let proxy = crate::helpers::tcp_proxy::TcpProxy::start(crate::helpers::emulator_host()).await;
    proxy.set_latency(std::time::Duration::from_millis(20));
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        // No dedup window: only the answer may stop the restart.
        adjust: |config| config.start_dedup = std::time::Duration::ZERO,
        ..TestOptions::default()
    })
    .await;
    let users: Vec<String> = (0..40).map(|_| events::new_user()).collect();
    let bodies: Vec<serde_json::Value> = users
        .iter()
        .flat_map(|user| {
            [
                events::envelope(vec![postback(user, &events::answer_data("lunch", "ask_food", "good"))]),
                events::envelope(vec![text(user, "lunch")]),
            ]
        })
        .collect();

    race(&app, &bodies).await;

    // The commit times Firestore gave the answer and any start: a start may come
    // before the answer (the user had not answered yet), never after it.
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), users.len());
    let commit_time = |document: &serde_json::Value| -> firestore::jiff::Timestamp {
        document["createTime"]
            .as_str()
            .and_then(|time| time.parse().ok())
            .expect("documents carry their commit time")
    };
    let answered_at: std::collections::HashMap<String, firestore::jiff::Timestamp> = answers
        .iter()
        .map(|answer| {
            (
                crate::helpers::firestore_rest::string_field(answer, "lineUserId").unwrap_or_default(),
                commit_time(answer),
            )
        })
        .collect();
    let mut starts = 0;
    for entry in app.firestore.list("outbound_ledger").await {
        if entry["fields"].get("answerId").is_some() {
            continue;
        }
        starts += 1;
        let user = crate::helpers::firestore_rest::string_field(&entry, "lineUserId").unwrap_or_default();
        let started_at = commit_time(&entry);
        assert!(
            started_at < answered_at[&user],
            "{user}: the survey was started at {started_at}, after the answer landed at {}",
            answered_at[&user]
        );
    }
    println!(
        "{starts} of {} triggers started the survey before the answer",
        users.len()
    );
}
