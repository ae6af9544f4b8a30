//! The outbound ledger under LINE faults: lost acknowledgements, timeouts, 429,
//! refusals. Pushes are retried with the same retry key; a reply with an unknown
//! outcome is marked uncertain and never resent.

use crate::helpers::firestore_rest::string_field;
use crate::helpers::line_stand_in::Fault;
use crate::helpers::{TestApp, TestOptions, events, spawn_app_with};
use std::time::Duration;

const NEWS: &str = "Today's news: the cafeteria has a new menu.";

/// A "news" text event too old for its reply token: answered by push.
fn old_news(user: &str) -> serde_json::Value {
    let mut event = events::text(user, "news");
    event["timestamp"] = (events::now_ms() - 120_000).into();
    event
}

async fn app_with_short_line_timeout() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: |config| {
            config.line_timeout = Duration::from_millis(500);
            config.max_send_attempts = 4;
        },
        ..TestOptions::default()
    })
    .await
}

async fn ledger_states(app: &TestApp) -> Vec<String> {
    app.firestore
        .list("outbound_ledger")
        .await
        .iter()
        .filter_map(|doc| string_field(doc, "state"))
        .collect()
}

fn retry_keys(app: &TestApp) -> Vec<String> {
    app.line
        .calls()
        .iter()
        .map(|call| call.retry_key.clone().expect("pushes carry a retry key"))
        .collect()
}

#[tokio::test]
async fn a_push_whose_acknowledgement_is_lost_is_retried_with_the_same_key_and_arrives_once() {
    let app = app_with_short_line_timeout().await;
    app.line.fail_next_pushes([Fault::AcceptThenFail]);

    app.deliver(&old_news(&events::new_user())).await;

    let statuses: Vec<u16> = app.line.calls().iter().map(|call| call.status).collect();
    assert_eq!(statuses, [500, 409], "retried, and LINE recognised the key");
    let keys = retry_keys(&app);
    assert_eq!(keys[0], keys[1]);
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(ledger_states(&app).await, ["sent"]);
}

#[tokio::test]
async fn a_push_that_times_out_is_retried_with_the_same_key_and_arrives_once() {
    let app = app_with_short_line_timeout().await;
    app.line
        .fail_next_pushes([Fault::AcceptSlowly(Duration::from_millis(1500))]);

    app.deliver(&old_news(&events::new_user())).await;

    let keys = retry_keys(&app);
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(ledger_states(&app).await, ["sent"]);
}

#[tokio::test]
async fn a_rate_limited_push_waits_for_retry_after_and_is_sent_once() {
    let app = app_with_short_line_timeout().await;
    app.line.fail_next_pushes([
        Fault::RateLimit { retry_after_secs: 1 },
        Fault::RateLimit { retry_after_secs: 1 },
    ]);

    app.deliver(&old_news(&events::new_user())).await;

    let calls = app.line.calls();
    let statuses: Vec<u16> = calls.iter().map(|call| call.status).collect();
    assert_eq!(statuses, [429, 429, 200]);
    assert!(
        calls[1].at - calls[0].at >= Duration::from_millis(1000),
        "Retry-After was honoured"
    );
    assert!(
        calls[2].at - calls[1].at >= Duration::from_millis(1000),
        "Retry-After was honoured"
    );
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(ledger_states(&app).await, ["sent"]);
}

#[tokio::test]
async fn a_reply_without_an_answer_is_marked_uncertain_and_never_resent() {
    let app = app_with_short_line_timeout().await;
    app.line
        .fail_next_replies([Fault::AcceptSlowly(Duration::from_millis(1500))]);

    app.deliver(&events::text(&events::new_user(), "news")).await;
    // Give any (wrong) retry time to happen.
    tokio::time::sleep(Duration::from_millis(700)).await;

    let paths: Vec<String> = app.line.calls().iter().map(|call| call.path.clone()).collect();
    assert_eq!(paths, ["/v2/bot/message/reply"], "no second reply and no push");
    assert_eq!(ledger_states(&app).await, ["uncertain"]);
    let letters = app.firestore.list("dead_letters").await;
    assert_eq!(letters.len(), 1);
    assert_eq!(string_field(&letters[0], "kind").as_deref(), Some("uncertain_reply"));
}

#[tokio::test]
async fn a_refused_push_is_parked_and_a_replay_sends_it_once() {
    let app = app_with_short_line_timeout().await;
    let user = events::new_user();
    app.line.fail_next_pushes([Fault::Refuse(400)]);

    app.deliver(&old_news(&user)).await;

    assert_eq!(ledger_states(&app).await, ["failed"]);
    let listed: serde_json::Value = app.get_admin("/admin/dead-letters").await.json().await.unwrap();
    let letters = listed["deadLetters"].as_array().unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0]["kind"], "outbound");
    assert_eq!(letters[0]["lineUserId"], user.as_str());
    assert!(letters[0]["reason"].as_str().unwrap().contains("400"));
    assert!(letters[0]["webhookEventId"].is_string());

    let id = letters[0]["id"].as_str().unwrap();
    let replayed = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;
    assert_eq!(replayed.status(), 200);
    let replayed: serde_json::Value = replayed.json().await.unwrap();
    assert_eq!(replayed["result"], "sent");

    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(ledger_states(&app).await, ["sent"]);
    assert_eq!(app.firestore.count("dead_letters").await, 0);
    let unknown = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn retries_are_bounded_and_then_parked() {
    let app = app_with_short_line_timeout().await;
    app.line.fail_next_pushes(std::iter::repeat_n(Fault::Refuse(503), 4));

    app.deliver(&old_news(&events::new_user())).await;

    assert_eq!(app.line.calls().len(), 4, "MAX_SEND_ATTEMPTS pushes, then no more");
    assert_eq!(ledger_states(&app).await, ["failed"]);
    let letter = &app.firestore.list("dead_letters").await[0];
    assert!(
        string_field(letter, "reason")
            .unwrap()
            .contains("gave up after 4 attempts")
    );
}

#[tokio::test]
async fn dead_letter_routes_need_the_admin_token() {
    let app = app_with_short_line_timeout().await;
    let listed = app
        .http
        .get(format!("{}/admin/dead-letters", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 401);
    let replayed = app
        .http
        .post(format!("{}/admin/dead-letters/x/replay", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), 401);
}
