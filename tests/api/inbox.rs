//! The inbox: events are stored before the 200, kept no longer than needed, and
//! parked when their processing keeps failing.

use crate::helpers::firestore_rest::{document_id, string_field};
use crate::helpers::{TestOptions, events, spawn_app, spawn_app_with};

fn ingest_only() -> TestOptions {
    TestOptions {
        adjust: |config| config.worker_count = 0,
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
    // The catch-all trigger matches, so the event has an effect to store.
    let event = events::text(&events::new_user(), "my private words");

    let response = app.post_webhook(&events::envelope(vec![event.clone()])).await;

    assert_eq!(response.status(), 200);
    let stored = app.firestore.list("webhook_inbox").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(string_field(&stored[0], "state").as_deref(), Some("pending"));
    // The engine's decision, not the event: what to start and the reply token.
    let plan: serde_json::Value = serde_json::from_str(&string_field(&stored[0], "plan").unwrap()).unwrap();
    assert_eq!(plan["webhookEventId"], event["webhookEventId"]);
    assert_eq!(plan["replyToken"], event["replyToken"]);
    assert_eq!(plan["plan"]["kind"], "start");
    assert_eq!(plan["plan"]["scenario"], "lunch");
    assert!(
        !format!("{stored:?}").contains("private words"),
        "the message text is not stored: {stored:?}"
    );
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
async fn an_unsend_before_processing_stops_the_message_and_no_document_holds_its_text() {
    let app = spawn_app_with(ingest_only()).await;
    let user = events::new_user();
    let message = events::text(&user, "my private words");
    let message_id = message["message"]["id"].as_str().unwrap().to_owned();
    app.post_webhook(&events::envelope(vec![message])).await;

    let response = app
        .post_webhook(&events::envelope(vec![events::unsend(&user, &message_id)]))
        .await;
    assert_eq!(response.status(), 200);

    // A worker instance that picks the event up later drops it.
    let worker = spawn_app_with(app.beside()).await;
    worker.settled().await;
    assert!(app.line.calls().is_empty(), "the unsent message started nothing");
    let inbox = app.firestore.list("webhook_inbox").await;
    assert_eq!(string_field(&inbox[0], "state").as_deref(), Some("done"));
    let marks = app.firestore.list("message_marks").await;
    assert_eq!(string_field(&marks[0], "state").as_deref(), Some("unsent"));
    assert!(
        !app.firestore.dump().await.contains("private words"),
        "no stored document holds the text"
    );
}

#[tokio::test]
async fn an_unsend_stops_a_message_already_queued_in_memory() {
    // One worker, kept busy by a slow LINE: the second message waits in memory.
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.worker_count = 1,
        ..TestOptions::default()
    })
    .await;
    app.line.set_latency(std::time::Duration::from_millis(800));
    let (busy, user) = (events::new_user(), events::new_user());
    let message = events::text(&user, "my private words");
    let message_id = message["message"]["id"].as_str().unwrap().to_owned();

    app.post_webhook(&events::envelope(vec![events::text(&busy, "news")]))
        .await;
    app.post_webhook(&events::envelope(vec![message])).await;
    let response = app
        .post_webhook(&events::envelope(vec![events::unsend(&user, &message_id)]))
        .await;
    assert_eq!(response.status(), 200);
    app.settled().await;

    assert_eq!(app.line.accepted().len(), 1, "only the news went out");
    assert!(app.line.accepted()[0].texts()[0].starts_with("Today's news"));
    assert!(!app.firestore.dump().await.contains("private words"));
}

#[tokio::test]
async fn an_unreadable_pending_record_is_parked_and_the_sweep_goes_on_for_the_others() {
    let ingest = spawn_app_with(ingest_only()).await;
    ingest
        .post_webhook(&events::envelope(vec![events::text(&events::new_user(), "news")]))
        .await;
    // A pending record the service cannot read (another version wrote it, or it
    // was damaged), due for the sweeper like the real one.
    ingest
        .firestore
        .patch(
            "webhook_inbox",
            "unreadable",
            &[
                ("state", serde_json::json!({"stringValue": "pending"})),
                ("shard", serde_json::json!({"integerValue": "0"})),
                ("attempts", serde_json::json!({"stringValue": "many"})),
                (
                    "leaseUntil",
                    serde_json::json!({"timestampValue": "2001-01-01T00:00:00Z"}),
                ),
            ],
        )
        .await;

    let worker = spawn_app_with(ingest.beside()).await;
    worker.settled().await;

    assert_eq!(worker.line.accepted().len(), 1, "the readable event was processed");
    let parked = worker.firestore.get("webhook_inbox", "unreadable").await.unwrap();
    assert_eq!(string_field(&parked, "state").as_deref(), Some("dead"));
    let letter = worker.firestore.get("dead_letters", "event-unreadable").await.unwrap();
    assert!(string_field(&letter, "reason").unwrap().contains("cannot be read"));
}

#[tokio::test]
async fn an_event_that_kept_failing_is_parked_and_a_replay_runs_it_through_the_guards() {
    let ingest = spawn_app_with(ingest_only()).await;
    let user = events::new_user();
    let tap = events::postback(&user, &events::answer_data("lunch", "ask_food", "good"));
    let again = events::postback(&user, &events::answer_data("lunch", "ask_food", "bad"));
    ingest.post_webhook(&events::envelope(vec![tap, again])).await;
    // As three attempts that each failed would leave them: attempts counted, the
    // last error kept, the lease run out.
    for record in ingest.firestore.list("webhook_inbox").await {
        ingest
            .firestore
            .patch(
                "webhook_inbox",
                &document_id(&record),
                &[
                    ("attempts", serde_json::json!({"integerValue": "3"})),
                    (
                        "lastError",
                        serde_json::json!({"stringValue": "Firestore is unavailable"}),
                    ),
                    (
                        "leaseUntil",
                        serde_json::json!({"timestampValue": "2001-01-01T00:00:00Z"}),
                    ),
                ],
            )
            .await;
    }
    let mut options = ingest.beside();
    options.adjust = |config| config.max_event_attempts = 3;
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
            .contains("gave up after 3 attempts: Firestore is unavailable")
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

    // A letter left behind for an event that did succeed: a replay changes
    // nothing and says what the record is.
    let done = &worker.firestore.list("webhook_inbox").await[0];
    let letter_id = format!("event-{}", document_id(done));
    worker
        .firestore
        .patch(
            "dead_letters",
            &letter_id,
            &[
                ("kind", serde_json::json!({"stringValue": "event"})),
                ("targetId", serde_json::json!({"stringValue": document_id(done)})),
                ("reason", serde_json::json!({"stringValue": "left behind"})),
                ("attempts", serde_json::json!({"integerValue": "3"})),
                (
                    "parkedAt",
                    serde_json::json!({"timestampValue": "2026-01-01T00:00:00Z"}),
                ),
            ],
        )
        .await;
    let replay = worker
        .post_admin(&format!("/admin/dead-letters/{letter_id}/replay"))
        .await;
    assert_eq!(replay.status(), 409);
    let body: serde_json::Value = replay.json().await.unwrap();
    assert_eq!(body["state"], "done", "{body}");
    worker.settled().await;
    assert_eq!(worker.firestore.count("survey_responses").await, 1);
    assert_eq!(worker.line.accepted_of_kind("template"), 1, "nothing was sent again");
}

#[tokio::test]
async fn an_unsend_in_the_same_request_as_its_message_leaves_no_text_and_at_most_one_effect() {
    let app = spawn_app().await;
    let user = events::new_user();
    let message = events::text(&user, "my private words");
    let message_id = message["message"]["id"].as_str().unwrap().to_owned();

    let response = app
        .post_webhook(&events::envelope(vec![message, events::unsend(&user, &message_id)]))
        .await;
    assert_eq!(response.status(), 200);
    app.settled().await;

    // Whichever came first wins the message's mark: the unsend (nothing sent) or
    // the effect (the survey started once, the unsend found it too late).
    let marks = app.firestore.list("message_marks").await;
    assert_eq!(marks.len(), 1);
    let sent = app.line.accepted().len();
    match string_field(&marks[0], "state").as_deref() {
        Some("unsent") => assert_eq!(sent, 0),
        Some("processed") => assert_eq!(sent, 1),
        other => panic!("unexpected mark {other:?}"),
    }
    assert!(!app.firestore.dump().await.contains("private words"));
}

#[tokio::test]
async fn an_unsend_after_its_message_was_processed_changes_nothing_and_no_text_is_stored() {
    let app = spawn_app().await;
    let user = events::new_user();
    let message = events::text(&user, "my private words");
    let message_id = message["message"]["id"].as_str().unwrap().to_owned();
    app.deliver(&message).await;
    assert_eq!(app.line.accepted().len(), 1, "the survey started");

    app.deliver(&events::unsend(&user, &message_id)).await;

    assert_eq!(app.line.accepted().len(), 1);
    let marks = app.firestore.list("message_marks").await;
    assert_eq!(string_field(&marks[0], "state").as_deref(), Some("processed"));
    assert!(!app.firestore.dump().await.contains("private words"));
}

/// A signed body whose event is older than the inbox keeps its records (less
/// a day: 7 days) may be a captured request sent again after its record
/// expired: it is acknowledged and changes nothing. A 6-day-old event (LINE
/// redelivering late) is still processed.
#[tokio::test]
async fn an_event_older_than_the_inbox_keeps_records_is_acknowledged_and_ignored() {
    let app = spawn_app().await;
    let user = events::new_user();
    const DAY_MS: i64 = 24 * 60 * 60 * 1000;
    let captured = events::with_timestamp(&events::text(&user, "lunch"), events::now_ms() - 7 * DAY_MS - 60_000);
    app.deliver(&captured).await;
    assert_eq!(app.firestore.count("webhook_inbox").await, 0, "nothing stored");
    assert!(app.line.calls().is_empty(), "nothing sent");
    assert!(
        app.firestore.get("users", &user).await.is_none(),
        "the user was not touched"
    );

    let late = events::with_timestamp(&events::text(&user, "lunch"), events::now_ms() - 6 * DAY_MS);
    app.deliver(&late).await;
    assert_eq!(app.firestore.count("webhook_inbox").await, 1);
    assert_eq!(
        app.line.accepted().len(),
        1,
        "the survey starts (by push: its token is long gone)"
    );
}
