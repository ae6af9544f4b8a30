//! Duplicate deliveries raced for real against the emulator, counting effects.

use crate::helpers::events::{self, answer_data, envelope, postback, redelivered};
use crate::helpers::{sorted, spawn_app};
use futures::future::join_all;

const THANKS_AFTER_FOOD: &str = "Coffee or tea?";

/// Fires `count` requests at once, each a separate tap (distinct event ids).
async fn race_taps(app: &crate::helpers::TestApp, user: &str, data_for: impl Fn(usize) -> String, count: usize) {
    let bodies: Vec<_> = (0..count)
        .map(|i| envelope(vec![postback(user, &data_for(i))]))
        .collect();
    let responses = join_all(bodies.iter().map(|body| app.post_webhook(body))).await;
    for response in responses {
        assert_eq!(response.status(), 200);
    }
    app.settled().await;
}

#[tokio::test]
async fn fifty_concurrent_taps_of_one_choice_record_one_answer_one_tag_set_and_one_next_message() {
    let app = spawn_app().await;
    let user = events::new_user();

    race_taps(&app, &user, |_| answer_data("lunch", "ask_food", "good"), 50).await;

    assert_eq!(app.firestore.count("survey_responses").await, 1);
    assert_eq!(
        sorted(app.user_tags(&user).await),
        ["answered:lunch", "foodie", "lunch_good"],
        "the choice's tags and the scenario's answer tag"
    );
    assert_eq!(app.firestore.count("scenario_answers").await, 1);
    // The next node (the drink question, a buttons template) went out exactly once.
    assert_eq!(app.line.accepted_of_kind("template"), 1);
    assert_eq!(app.line.accepted().len(), 1, "no other message was sent");
    // All 50 taps were claimed in the inbox as separate events.
    assert_eq!(app.firestore.count("webhook_inbox").await, 50);
}

#[tokio::test]
async fn concurrent_taps_of_different_choices_keep_only_the_recorded_choices_tags() {
    let app = spawn_app().await;
    let user = events::new_user();

    race_taps(
        &app,
        &user,
        |i| answer_data("lunch", "ask_food", if i % 2 == 0 { "good" } else { "bad" }),
        40,
    )
    .await;

    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), 1);
    let recorded = crate::helpers::firestore_rest::string_field(&answers[0], "value").unwrap();
    let expected: Vec<String> = match recorded.as_str() {
        "good" => vec!["answered:lunch".into(), "foodie".into(), "lunch_good".into()],
        "bad" => vec!["answered:lunch".into(), "lunch_bad".into()],
        other => panic!("unexpected recorded value {other}"),
    };
    assert_eq!(sorted(app.user_tags(&user).await), expected);
    assert_eq!(app.line.accepted().len(), 1);
}

#[tokio::test]
async fn concurrent_answers_to_two_questions_both_keep_their_tags() {
    // Array union, not read-modify-write: neither commit overwrites the other's tags.
    let app = spawn_app().await;
    let user = events::new_user();

    race_taps(
        &app,
        &user,
        |i| {
            if i % 2 == 0 {
                answer_data("lunch", "ask_food", "good")
            } else {
                answer_data("lunch", "ask_drink", "tea")
            }
        },
        20,
    )
    .await;

    assert_eq!(app.firestore.count("survey_responses").await, 2);
    assert_eq!(
        sorted(app.user_tags(&user).await),
        ["answered:lunch", "foodie", "lunch_good", "tea"]
    );
    assert_eq!(app.line.accepted_with_text("Thank you for answering!"), 1);
    assert_eq!(app.line.accepted_of_kind("template"), 1);
}

#[tokio::test]
async fn a_redelivered_answer_has_no_effect() {
    let app = spawn_app().await;
    let user = events::new_user();
    let tap = postback(&user, &answer_data("lunch", "ask_food", "good"));

    app.deliver(&tap).await;
    let counts = app.firestore.counts().await;
    let calls = app.line.calls().len();
    app.deliver(&redelivered(&tap)).await;

    assert_eq!(app.firestore.counts().await, counts);
    assert_eq!(app.line.calls().len(), calls, "nothing was sent again");
    assert_eq!(app.line.accepted_of_kind("template"), 1);
}

#[tokio::test]
async fn a_redelivered_trigger_of_a_scenario_without_survey_sends_once() {
    let app = spawn_app().await;
    let user = events::new_user();
    let news = events::text(&user, "news");

    let deliveries = [news.clone(), redelivered(&news), redelivered(&news)];
    join_all(deliveries.iter().map(|event| app.deliver(event))).await;

    assert_eq!(
        app.line
            .accepted_with_text("Today's news: the cafeteria has a new menu."),
        1
    );
    assert_eq!(app.line.calls().len(), 1);
    assert_eq!(app.firestore.count("webhook_inbox").await, 1);
}

#[tokio::test]
async fn one_request_with_the_same_event_twice_acts_once() {
    let app = spawn_app().await;
    let user = events::new_user();
    let tap = postback(&user, &answer_data("lunch", "ask_food", "bad"));

    let response = app.post_webhook(&envelope(vec![tap.clone(), redelivered(&tap)])).await;
    app.settled().await;

    assert_eq!(response.status(), 200);
    assert_eq!(app.firestore.count("survey_responses").await, 1);
    assert_eq!(app.line.accepted().len(), 1);
    assert_eq!(app.line.accepted()[0].texts(), Vec::<String>::new());
    assert_eq!(
        app.line.accepted()[0].messages()[0]["template"]["text"],
        THANKS_AFTER_FOOD
    );
}
