//! The inbox: events are stored before the 200, kept no longer than needed, and
//! parked when their processing keeps failing.

use crate::helpers::firestore_rest::string_field;
use crate::helpers::{TestOptions, events, spawn_app, spawn_app_with};
use std::time::Duration;

fn ingest_only() -> TestOptions {
    TestOptions {
        adjust: |config| {
            config.worker_count = 0;
            config.lease = Duration::from_millis(300);
        },
        ..TestOptions::default()
    }
}

fn timestamp(document: &serde_json::Value, field: &str) -> firestore::jiff::Timestamp {
    document["fields"][field]["timestampValue"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn an_event_is_stored_with_what_is_needed_to_process_it_before_the_200() {
    let app = spawn_app_with(ingest_only()).await;
    let event = events::text(&events::new_user(), "news");

    let response = app.post_webhook(&events::envelope(vec![event.clone()])).await;

    assert_eq!(response.status(), 200);
    let stored = app.firestore.list("webhook_inbox").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(string_field(&stored[0], "state").as_deref(), Some("pending"));
    let payload: serde_json::Value = serde_json::from_str(&string_field(&stored[0], "payload").unwrap()).unwrap();
    assert_eq!(payload, event);
    let kept = timestamp(&stored[0], "expireAt").duration_since(timestamp(&stored[0], "receivedAt"));
    assert!(
        kept >= firestore::jiff::SignedDuration::from_hours(7 * 24),
        "kept {kept:?}"
    );
    assert!(app.line.calls().is_empty(), "nothing was processed on the request path");
}

#[tokio::test]
async fn a_processed_event_keeps_no_copy_of_the_message_text() {
    let app = spawn_app().await;
    // Matches the catch-all trigger, so the event has an effect.
    app.deliver(&events::text(&events::new_user(), "a secret remark")).await;

    let stored = app.firestore.list("webhook_inbox").await;
    assert_eq!(string_field(&stored[0], "state").as_deref(), Some("done"));
    assert!(stored[0]["fields"].get("payload").is_none(), "{stored:?}");
    let everything =
        format!("{:?}", app.firestore.counts().await) + &format!("{:?}", app.firestore.list("outbound_ledger").await);
    assert!(!everything.contains("secret remark"));
    assert_eq!(
        app.line.accepted_of_kind("template"),
        1,
        "the event did start the survey"
    );
}

#[tokio::test]
async fn an_unsend_removes_the_stored_text_and_the_message_is_not_acted_on() {
    let app = spawn_app_with(ingest_only()).await;
    let user = events::new_user();
    let message = events::text(&user, "lunch");
    let message_id = message["message"]["id"].as_str().unwrap().to_owned();
    app.post_webhook(&events::envelope(vec![message])).await;
    let before = string_field(&app.firestore.list("webhook_inbox").await[0], "payload").unwrap();
    assert!(before.contains("\"text\":\"lunch\""), "the text was stored: {before}");

    let response = app
        .post_webhook(&events::envelope(vec![events::unsend(&user, &message_id)]))
        .await;

    assert_eq!(response.status(), 200);
    let stored = &app.firestore.list("webhook_inbox").await[0];
    assert!(!string_field(stored, "payload").unwrap().contains("lunch"));
    assert_eq!(stored["fields"]["textRemoved"]["booleanValue"], true);

    // A worker instance that picks the event up later drops it.
    let worker = spawn_app_with(app.beside()).await;
    worker.settled().await;
    assert!(app.line.calls().is_empty());
}

#[tokio::test]
async fn an_event_whose_processing_never_finishes_is_parked_and_a_replay_runs_it_through_the_guards() {
    // This instance stores events but never processes them: their one attempt
    // never finishes, like a process that keeps dying on them.
    let ingest = spawn_app_with(ingest_only()).await;
    let user = events::new_user();
    let tap = events::postback(&user, &events::answer_data("lunch", "ask_food", "good"));
    let again = events::postback(&user, &events::answer_data("lunch", "ask_food", "bad"));
    ingest.post_webhook(&events::envelope(vec![tap, again])).await;
    // A second instance allows one attempt per event, so it parks both.
    let mut options = ingest.beside();
    options.adjust = |config| config.max_event_attempts = 1;
    let worker = spawn_app_with(options).await;
    worker.settled().await;

    let listed: serde_json::Value = worker.get_admin("/admin/dead-letters").await.json().await.unwrap();
    let letters = listed["deadLetters"].as_array().unwrap().clone();
    assert_eq!(letters.len(), 2, "{listed}");
    assert!(
        letters
            .iter()
            .all(|letter| letter["kind"] == "event" && letter["eventType"] == "postback")
    );
    assert!(
        letters[0]["reason"]
            .as_str()
            .unwrap()
            .contains("gave up after 1 attempts")
    );
    assert_eq!(worker.firestore.count("survey_responses").await, 0);

    let mut results = Vec::new();
    for letter in &letters {
        let replay = worker
            .post_admin(&format!(
                "/admin/dead-letters/{}/replay",
                letter["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(replay.status(), 200);
        let body: serde_json::Value = replay.json().await.unwrap();
        results.push(body["result"].as_str().unwrap().to_owned());
    }
    worker.settled().await;

    results.sort();
    assert_eq!(
        results,
        ["already_answered", "answered"],
        "the second replay met the answer guard"
    );
    assert_eq!(worker.firestore.count("survey_responses").await, 1);
    assert_eq!(worker.firestore.count("dead_letters").await, 0);
    assert_eq!(worker.line.accepted_of_kind("template"), 1, "one follow-up");
}
