//! Reply while the token is fresh, push otherwise, and log-only without a token.

use crate::helpers::events::{self, text};
use crate::helpers::firestore_rest::{FirestoreRest, string_field};
use crate::helpers::{TestOptions, spawn_app, spawn_app_with};

const NEWS: &str = "Today's news: the cafeteria has a new menu.";

#[tokio::test]
async fn a_fresh_reply_token_is_used_for_the_answer() {
    let app = spawn_app().await;
    let event = text(&events::new_user(), "news");

    app.deliver(&event).await;

    let calls = app.line.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].path, "/v2/bot/message/reply");
    assert_eq!(calls[0].body["replyToken"], event["replyToken"]);
}

#[tokio::test]
async fn an_old_event_is_answered_by_push_with_a_retry_key() {
    let app = spawn_app().await;
    let user = events::new_user();
    let event = text(&user, "news");
    let event = events::with_timestamp(&event, events::now_ms() - 55_000);

    app.deliver(&event).await;

    let calls = app.line.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].path, "/v2/bot/message/push");
    assert_eq!(calls[0].to(), Some(user.as_str()));
    let key = calls[0].retry_key.as_deref().expect("a push carries X-Line-Retry-Key");
    assert!(uuid::Uuid::parse_str(key).is_ok());
}

#[tokio::test]
async fn a_refused_reply_falls_back_to_push() {
    let app = spawn_app().await;
    let user = events::new_user();
    let first = text(&user, "news");
    let mut second = text(&user, "news");
    // The stand-in, like LINE, refuses a reply token used before.
    second["replyToken"] = first["replyToken"].clone();

    app.deliver(&first).await;
    app.deliver(&second).await;

    let paths: Vec<_> = app
        .line
        .calls()
        .iter()
        .map(|call| (call.path.clone(), call.status))
        .collect();
    assert_eq!(
        paths,
        [
            ("/v2/bot/message/reply".to_owned(), 200),
            ("/v2/bot/message/reply".to_owned(), 400),
            ("/v2/bot/message/push".to_owned(), 200)
        ]
    );
    assert_eq!(app.line.accepted_with_text(NEWS), 2);
}

#[tokio::test]
async fn a_dry_run_sends_nothing_records_logged_never_sent_and_still_records_answers() {
    let app = spawn_app_with(TestOptions {
        access_token: false,
        ..TestOptions::default()
    })
    .await;
    let user = events::new_user();

    app.deliver(&text(&user, "lunch")).await;
    app.answer(&user, "ask_food", "good").await;

    assert!(app.line.calls().is_empty());
    assert_eq!(app.firestore.count("survey_responses").await, 1);
    let states: Vec<_> = app
        .firestore
        .list("outbound_ledger")
        .await
        .iter()
        .filter_map(|entry| string_field(entry, "state"))
        .collect();
    assert_eq!(states, ["logged", "logged"], "never recorded as sent");
}

#[tokio::test]
async fn a_named_database_holds_everything_and_the_default_one_nothing() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.firestore_database = "surveys-db".to_owned(),
        ..TestOptions::default()
    })
    .await;
    let named = FirestoreRest::in_database(&crate::helpers::emulator_host(), &app.project_id, "surveys-db");
    let user = events::new_user();

    let response = app.post_webhook(&events::envelope(vec![text(&user, "lunch")])).await;
    assert_eq!(response.status(), 200);
    named.settled(std::time::Duration::from_secs(20)).await;

    assert_eq!(app.line.accepted_with_text("A quick survey about today's lunch."), 1);
    assert_eq!(named.count("webhook_inbox").await, 1);
    assert_eq!(named.count("outbound_ledger").await, 1);
    assert!(
        app.firestore.collections().await.is_empty(),
        "the default database is untouched"
    );
}

#[tokio::test]
async fn a_local_dry_run_prints_what_the_bot_would_say() {
    let project = crate::helpers::new_project_id();
    let line = crate::helpers::line_stand_in::LineStandIn::start().await;
    let service =
        crate::helpers::process::ServiceProcess::start(&project, &line.uri(), &[("LINE_DRY_RUN", "true")]).await;
    let firestore = FirestoreRest::new(&crate::helpers::emulator_host(), &project);
    let user = events::new_user();
    let client = reqwest::Client::new();

    let status = crate::helpers::storm::post_event(&client, &service.address, &text(&user, "lunch please"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    firestore.settled(std::time::Duration::from_secs(20)).await;

    crate::helpers::wait_until(std::time::Duration::from_secs(10), || {
        service.log_text().contains("[dry run] reply:")
    })
    .await;
    let output = service.log_text();
    assert!(output.contains("A quick survey about today's lunch."), "{output}");
    assert!(output.contains("How was the food? [Good] [Bad]"), "{output}");
    assert!(!output.contains("lunch please"), "the user's own text is never printed");
    assert!(line.calls().is_empty(), "nothing was sent");
}
