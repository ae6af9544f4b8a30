//! The outbound ledger under LINE faults: lost acknowledgements, timeouts, 5xx,
//! 429, refusals. Pushes are retried with the same retry key; replies with the
//! same single-use token while it is fresh; a reply that cannot be settled before
//! its token may have expired is uncertain and never pushed.

use crate::helpers::firestore_rest::string_field;
use crate::helpers::line_stand_in::Fault;
use crate::helpers::{TestApp, TestOptions, events, spawn_app_with};
use std::time::Duration;

const NEWS: &str = "Today's news: the cafeteria has a new menu.";

/// A "news" text event too old for its reply token: answered by push.
fn old_news(user: &str) -> serde_json::Value {
    events::with_timestamp(&events::text(user, "news"), events::now_ms() - 120_000)
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

fn paths(app: &TestApp) -> Vec<String> {
    app.line.calls().iter().map(|call| call.path.clone()).collect()
}

#[tokio::test]
async fn a_reply_whose_answer_was_lost_is_retried_with_its_token_and_recorded_sent() {
    let app = app_with_short_line_timeout().await;
    // The reply goes out, but its answer comes after the service stopped waiting.
    app.line
        .fail_next_replies([Fault::AcceptSlowly(Duration::from_millis(1500))]);
    let event = events::text(&events::new_user(), "news");

    app.deliver(&event).await;

    let calls = app.line.calls();
    assert_eq!(
        paths(&app),
        ["/v2/bot/message/reply"; 2],
        "retried as a reply, never pushed"
    );
    assert!(
        calls
            .iter()
            .all(|call| call.reply_token() == event["replyToken"].as_str())
    );
    assert_eq!(
        calls[1].status, 400,
        "LINE refused the used token: the first one arrived"
    );
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(ledger_states(&app).await, ["sent"]);
    assert_eq!(app.firestore.count("dead_letters").await, 0);
}

#[tokio::test]
async fn a_reply_answered_500_is_retried_with_the_same_token_and_arrives_once() {
    let app = app_with_short_line_timeout().await;
    app.line.fail_next_replies([Fault::Refuse(500), Fault::Refuse(502)]);
    let event = events::text(&events::new_user(), "news");

    app.deliver(&event).await;

    let statuses: Vec<u16> = app.line.calls().iter().map(|call| call.status).collect();
    assert_eq!(statuses, [500, 502, 200]);
    assert_eq!(paths(&app), ["/v2/bot/message/reply"; 3]);
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(ledger_states(&app).await, ["sent"]);
}

/// An app whose replies end `uncertain`: LINE keeps answering 500 until the
/// token is too old to try again (its tokens, like the service's setting, live
/// 2 s here).
async fn app_whose_replies_end_uncertain() -> TestApp {
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            config.line_timeout = Duration::from_millis(500);
            config.reply_token_max_age = Duration::from_secs(2);
        },
        ..TestOptions::default()
    })
    .await;
    app.line.set_reply_token_lifetime(Duration::from_secs(2));
    app.line.fail_next_replies(std::iter::repeat_n(Fault::Refuse(500), 100));
    app
}

#[tokio::test]
async fn a_reply_not_settled_before_its_token_may_expire_is_uncertain_and_never_pushed() {
    let app = app_whose_replies_end_uncertain().await;
    let event = events::text(&events::new_user(), "news");

    app.deliver(&event).await;

    let paths = paths(&app);
    assert!(paths.len() >= 2, "retried while fresh: {paths:?}");
    assert!(
        paths.iter().all(|path| path == "/v2/bot/message/reply"),
        "never pushed: {paths:?}"
    );
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
    // Ids with path characters, or Firestore's reserved ones, name no dead
    // letter: 404, never a Firestore error (503).
    for bad in ["a%2Fb", "..", "__x__", "a%00b", "x%20y", &"a".repeat(300)] {
        let response = app.post_admin(&format!("/admin/dead-letters/{bad}/replay")).await;
        assert_eq!(response.status(), 404, "{bad}");
    }
}

/// Replays the dead letter `id` with `body` as its JSON.
async fn replay_with(app: &TestApp, id: &str, body: serde_json::Value) -> reqwest::Response {
    app.http
        .post(format!("{}/admin/dead-letters/{id}/replay", app.address))
        .bearer_auth(crate::helpers::ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .expect("service reachable")
}

/// An app on the test clock with one push LINE refused (the answer came too
/// late for a reply), parked: the app and the dead letter's id.
async fn a_parked_push() -> (TestApp, String) {
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.max_send_attempts = 4,
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    app.line.fail_next_pushes([Fault::Refuse(400)]);
    app.deliver(&events::with_timestamp(
        &events::text(&events::new_user(), "news"),
        app.now_ms() - 120_000,
    ))
    .await;
    let id = crate::helpers::firestore_rest::document_id(&app.firestore.list("dead_letters").await[0]);
    (app, id)
}

#[tokio::test]
async fn a_push_first_sent_over_23_hours_ago_is_replayed_only_with_force() {
    let (app, id) = a_parked_push().await;

    // 22 hours on, LINE still remembers the retry key: no confirmation needed
    // (checked without sending: a bad body is refused before anything happens).
    app.advance_clock(Duration::from_secs(22 * 3600)).await;
    let malformed = replay_with(&app, &id, serde_json::json!({ "force": "yes" })).await;
    assert_eq!(malformed.status(), 400);
    // Past 23 hours: 409 naming the reason, and nothing is sent or changed.
    app.advance_clock(Duration::from_secs(3600 + 1)).await;
    let refused = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;
    assert_eq!(refused.status(), 409);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["reason"], "retry_key_expired", "{body}");
    assert!(body["error"].as_str().unwrap().contains("force"), "{body}");
    let unforced = replay_with(&app, &id, serde_json::json!({ "force": false })).await;
    assert_eq!(unforced.status(), 409);
    assert_eq!(app.line.accepted_with_text(NEWS), 0);
    assert_eq!(ledger_states(&app).await, ["failed"]);
    assert_eq!(app.firestore.count("dead_letters").await, 1, "still parked");

    let forced = replay_with(&app, &id, serde_json::json!({ "force": true })).await;
    assert_eq!(forced.status(), 200);
    let forced: serde_json::Value = forced.json().await.unwrap();
    assert_eq!(forced["result"], "sent");
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(app.firestore.count("dead_letters").await, 0);
}

#[tokio::test]
async fn a_push_parked_within_the_retry_key_window_replays_without_force() {
    let (app, id) = a_parked_push().await;
    app.advance_clock(Duration::from_secs(22 * 3600)).await;
    let replayed = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;
    assert_eq!(replayed.status(), 200);
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
}

#[tokio::test]
async fn an_uncertain_reply_is_pushed_on_replay_only_with_force() {
    let app = app_whose_replies_end_uncertain().await;
    app.deliver(&events::text(&events::new_user(), "news")).await;
    assert_eq!(ledger_states(&app).await, ["uncertain"]);
    let id = crate::helpers::firestore_rest::document_id(&app.firestore.list("dead_letters").await[0]);

    let refused = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;
    assert_eq!(refused.status(), 409);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["reason"], "reply_outcome_unknown", "{body}");
    assert!(
        paths(&app).iter().all(|path| path == "/v2/bot/message/reply"),
        "nothing was pushed"
    );

    let forced = replay_with(&app, &id, serde_json::json!({ "force": true })).await;
    assert_eq!(forced.status(), 200);
    assert_eq!(
        paths(&app)
            .iter()
            .filter(|path| *path == "/v2/bot/message/push")
            .count(),
        1,
        "pushed once, by the operator's choice"
    );
}

#[tokio::test]
async fn a_replay_that_fails_again_leaves_a_dead_letter() {
    let app = app_with_short_line_timeout().await;
    app.line.fail_next_pushes([Fault::Refuse(400), Fault::Refuse(400)]);
    app.deliver(&old_news(&events::new_user())).await;
    let letter = &app.firestore.list("dead_letters").await[0];
    let id = crate::helpers::firestore_rest::document_id(letter);

    let replayed = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;

    assert_eq!(replayed.status(), 502);
    app.settled().await;
    assert_eq!(ledger_states(&app).await, ["failed"]);
    let letters = app.firestore.list("dead_letters").await;
    assert_eq!(letters.len(), 1, "the new failure left its letter");
    assert!(string_field(&letters[0], "reason").unwrap().contains("400"));
    assert_eq!(app.line.accepted_with_text(NEWS), 0);
}

#[tokio::test]
async fn replaying_an_action_that_was_sent_answers_409_with_its_state() {
    let app = app_with_short_line_timeout().await;
    app.line.fail_next_pushes([Fault::Refuse(400)]);
    app.deliver(&old_news(&events::new_user())).await;
    let id = crate::helpers::firestore_rest::document_id(&app.firestore.list("dead_letters").await[0]);
    let first = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;
    assert_eq!(first.status(), 200);
    app.settled().await;
    // The same letter written again, as a stale copy would be.
    let entry = &app.firestore.list("outbound_ledger").await[0];
    app.firestore
        .patch(
            "dead_letters",
            &id,
            &[
                ("kind", serde_json::json!({"stringValue": "outbound"})),
                (
                    "targetId",
                    serde_json::json!({"stringValue": crate::helpers::firestore_rest::document_id(entry)}),
                ),
                ("reason", serde_json::json!({"stringValue": "stale"})),
                ("attempts", serde_json::json!({"integerValue": "1"})),
                (
                    "parkedAt",
                    serde_json::json!({"timestampValue": "2026-01-01T00:00:00Z"}),
                ),
            ],
        )
        .await;

    let again = app.post_admin(&format!("/admin/dead-letters/{id}/replay")).await;

    assert_eq!(again.status(), 409);
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["state"], "sent", "{body}");
    assert_eq!(app.line.accepted_with_text(NEWS), 1, "nothing was sent again");
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
