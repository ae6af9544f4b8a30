//! Manual sends by operators: deliberately unguarded, but never doubled by a retry.

use crate::helpers::events;
use crate::helpers::{ADMIN_TOKEN, spawn_app};
use serde_json::Value;

const INTRO: &str = "A quick survey about today's lunch.";

#[tokio::test]
async fn a_manual_send_reaches_users_who_already_answered() {
    let app = spawn_app().await;
    let answered = events::new_user();
    let fresh = events::new_user();
    app.answer(&answered, "ask_food", "good").await;

    let response = app
        .admin_send("lunch", &[&answered, &fresh], Some("campaign-1"), Some(ADMIN_TOKEN))
        .await;

    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["sent"], 2);
    let pushed_to: Vec<_> = app
        .line
        .accepted()
        .iter()
        .filter(|call| call.texts().contains(&INTRO.to_owned()))
        .map(|call| call.to().unwrap().to_owned())
        .collect();
    assert_eq!(
        crate::helpers::sorted(pushed_to),
        crate::helpers::sorted(vec![answered.clone(), fresh])
    );
    assert!(
        app.line
            .accepted()
            .iter()
            .filter(|c| c.to().is_some())
            .all(|call| call.retry_key.is_some())
    );
}

#[tokio::test]
async fn a_retried_call_with_the_same_idempotency_key_sends_nothing_new() {
    let app = spawn_app().await;
    let users = [events::new_user(), events::new_user()];
    let users: Vec<&str> = users.iter().map(String::as_str).collect();

    let first = app
        .admin_send("lunch", &users, Some("retry-me"), Some(ADMIN_TOKEN))
        .await;
    assert_eq!(first.status(), 200);
    let accepted = app.line.accepted().len();
    let second = app
        .admin_send("lunch", &users, Some("retry-me"), Some(ADMIN_TOKEN))
        .await;

    assert_eq!(second.status(), 200);
    let body: Value = second.json().await.unwrap();
    assert!(
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["result"] == "already_sent"),
        "{body}"
    );
    assert_eq!(app.line.accepted().len(), accepted, "LINE accepted nothing new");
    assert_eq!(accepted, 2);

    // A new key is a new send, on purpose.
    let third = app
        .admin_send("lunch", &users, Some("another-campaign"), Some(ADMIN_TOKEN))
        .await;
    assert_eq!(third.status(), 200);
    assert_eq!(app.line.accepted().len(), 4);
}

#[tokio::test]
async fn an_idempotency_key_is_generated_and_returned_when_absent() {
    let app = spawn_app().await;
    let user = events::new_user();

    let response = app.admin_send("news", &[&user], None, Some(ADMIN_TOKEN)).await;

    assert_eq!(response.status(), 200);
    let header = response
        .headers()
        .get("idempotency-key")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["idempotencyKey"], header.as_str());
    assert!(uuid::Uuid::parse_str(&header).is_ok());
}

#[tokio::test]
async fn answers_to_a_resent_survey_are_still_guarded() {
    let app = spawn_app().await;
    let user = events::new_user();
    app.answer(&user, "ask_food", "good").await;
    app.admin_send("lunch", &[&user], Some("resend"), Some(ADMIN_TOKEN))
        .await;

    app.answer(&user, "ask_food", "bad").await;

    assert_eq!(app.firestore.count("survey_responses").await, 1);
    assert_eq!(
        crate::helpers::sorted(app.user_tags(&user).await),
        ["answered:lunch", "foodie", "lunch_good"]
    );
}

#[tokio::test]
async fn a_missing_or_wrong_token_is_refused_and_sends_nothing() {
    let app = spawn_app().await;
    let user = events::new_user();

    for token in [None, Some("wrong"), Some("")] {
        let response = app.admin_send("lunch", &[&user], None, token).await;
        assert_eq!(response.status(), 401, "token {token:?}");
    }
    assert!(app.line.calls().is_empty());
    // A malformed query gets 401 before anything reads it; with the token, 400.
    let user_path = format!("/admin/users/{user}/timers?all=maybe");
    let paths = [
        "/admin/dead-letters?limit=many",
        "/admin/campaigns?limit=-1",
        "/admin/scenarios/lunch/answers.csv?raw=maybe",
        "/admin/scenarios/lunch/results?from=a&from=b",
        "/admin/audit?limit=x",
        user_path.as_str(),
    ];
    for path in paths {
        let stranger = app.http.get(format!("{}{path}", app.address)).send().await.unwrap();
        assert_eq!(stranger.status(), 401, "{path}");
        assert_eq!(app.get_admin(path).await.status(), 400, "{path}");
    }
}

#[tokio::test]
async fn bad_requests_are_refused_with_a_reason() {
    let app = spawn_app().await;

    let unknown = app
        .admin_send("no_such_scenario", &[&events::new_user()], None, Some(ADMIN_TOKEN))
        .await;
    assert_eq!(unknown.status(), 404);
    let bad_user = app.admin_send("lunch", &["not-a-user"], None, Some(ADMIN_TOKEN)).await;
    assert_eq!(bad_user.status(), 400);
    assert!(bad_user.text().await.unwrap().contains("not-a-user"));
    let empty = app.admin_send("lunch", &[], None, Some(ADMIN_TOKEN)).await;
    assert_eq!(empty.status(), 400);
    assert!(app.line.calls().is_empty());
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let app = spawn_app().await;
    let response = app
        .http
        .post(format!("{}/admin/scenarios/news/send", app.address))
        .header("Authorization", format!("bearer {ADMIN_TOKEN}"))
        .json(&serde_json::json!({ "userIds": [events::new_user()] }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn reusing_an_idempotency_key_with_a_different_body_gets_422_and_sends_nothing() {
    let app = spawn_app().await;
    let (first, second) = (events::new_user(), events::new_user());
    let sent = app
        .admin_send("news", &[&first], Some("key-1"), Some(ADMIN_TOKEN))
        .await;
    assert_eq!(sent.status(), 200);

    let other_users = app
        .admin_send("news", &[&second], Some("key-1"), Some(ADMIN_TOKEN))
        .await;
    let other_scenario = app
        .admin_send("lunch", &[&first], Some("key-1"), Some(ADMIN_TOKEN))
        .await;

    assert_eq!(other_users.status(), 422);
    assert!(other_users.text().await.unwrap().contains("Idempotency-Key"));
    assert_eq!(other_scenario.status(), 422);
    assert_eq!(app.line.accepted().len(), 1, "only the first call sent");
    let again = app
        .admin_send("news", &[&first], Some("key-1"), Some(ADMIN_TOKEN))
        .await;
    assert_eq!(again.status(), 200, "the same request with the same key is a retry");
}
