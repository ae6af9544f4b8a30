//! `GET /admin/users/{id}/timeline`: one user's events, answers, messages,
//! dead letters and open question, newest first and linked by their ids,
//! compared with what Firestore holds. Scenario: tests/fixtures/export.

use crate::export::export_scenarios;
use crate::helpers::events::{self, postback, text};
use crate::helpers::firestore_rest::{document_id, string_field};
use crate::helpers::line_stand_in::Fault;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app_with};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: export_scenarios,
        ..TestOptions::default()
    })
    .await
}

async fn timeline(app: &TestApp, user: &str, query: &str) -> Value {
    let response = app.get_admin(&format!("/admin/users/{user}/timeline{query}")).await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON")
}

fn entries<'a>(timeline: &'a Value, kind: &str) -> Vec<&'a Value> {
    timeline["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|entry| entry["type"] == kind)
        .collect()
}

fn ids(entries: &[&Value]) -> BTreeSet<String> {
    entries
        .iter()
        .map(|entry| entry["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// The ids of `collection`'s documents that belong to `user`.
async fn stored_ids(app: &TestApp, collection: &str, user: &str) -> BTreeSet<String> {
    app.firestore
        .list(collection)
        .await
        .iter()
        .filter(|document| string_field(document, "lineUserId").as_deref() == Some(user))
        .map(document_id)
        .collect()
}

/// Sends `event` in `copies` concurrent requests, as LINE's redeliveries and a
/// retrying proxy would, then waits for the work to settle.
async fn storm(app: &TestApp, event: &Value, copies: usize) {
    let body = events::envelope(vec![event.clone()]);
    let sends = (0..copies).map(|_| app.post_webhook(&body));
    for response in futures::future::join_all(sends).await {
        assert_eq!(response.status(), 200);
    }
    app.settled().await;
}

#[tokio::test]
async fn a_users_story_lists_each_event_once_and_links_answers_and_messages_to_it() {
    let app = app().await;
    let (user, other) = (events::new_user(), events::new_user());
    app.deliver(&text(&user, "export")).await;
    let tap = postback(&user, &events::answer_data("export", "rating", "good"));
    // The tap redelivered five times at once, then tapped again (a new event):
    // guard 1 keeps one answer; the inbox keeps one record per event.
    storm(&app, &tap, 5).await;
    app.deliver(&postback(&user, &events::answer_data("export", "rating", "good")))
        .await;
    app.deliver(&text(&user, "ありがとう、また来ます")).await;
    app.deliver(&text(&other, "export")).await;

    let story = timeline(&app, &user, "").await;

    assert_eq!(story["userId"], user.as_str());
    assert_eq!(story["truncated"], false);
    let events = entries(&story, "event");
    assert_eq!(events.len(), 4, "trigger, tap, second tap, comment: {story:#}");
    assert!(events.iter().all(|event| event["outcome"] == "done"), "{story:#}");
    assert_eq!(ids(&events), stored_ids(&app, "webhook_inbox", &user).await);
    let answers = entries(&story, "answer");
    assert_eq!(ids(&answers), stored_ids(&app, "survey_responses", &user).await);
    assert_eq!(answers.len(), 2, "the rating once and the comment");
    let messages = entries(&story, "message");
    assert_eq!(ids(&messages), stored_ids(&app, "outbound_ledger", &user).await);
    assert_eq!(
        messages.len(),
        3,
        "the rating question, the comment question, the thanks"
    );
    assert!(
        messages
            .iter()
            .all(|message| message["state"] == "sent" && message["route"] == "reply")
    );

    // Links: every answer and message names an event of the list, whose LINE
    // id is its own; each answer's message names the answer.
    let by_id: HashMap<&str, &Value> = events
        .iter()
        .map(|event| (event["id"].as_str().unwrap(), *event))
        .collect();
    for linked in answers.iter().chain(&messages) {
        let event = by_id[linked["eventId"].as_str().expect("linked to its event")];
        assert_eq!(event["webhookEventId"], linked["webhookEventId"], "{linked}");
    }
    let rating = answers.iter().find(|answer| answer["nodeId"] == "rating").unwrap();
    assert_eq!(rating["value"], "good");
    assert_eq!(by_id[rating["eventId"].as_str().unwrap()]["kind"], "postback");
    let asked_comment = messages
        .iter()
        .find(|message| message["answerId"] == rating["id"])
        .expect("the rating's answer sent the next question");
    assert_eq!(asked_comment["asks"], "comment");
    // Each event lists what it caused: the first tap the answer and the next
    // question, the second tap (guard 1 stopped it) nothing.
    let taps: Vec<&&Value> = events.iter().filter(|event| event["kind"] == "postback").collect();
    assert_eq!(taps.len(), 2);
    let (first_tap, second_tap) = if taps[0]["answerIds"].as_array().unwrap().is_empty() {
        (taps[1], taps[0])
    } else {
        (taps[0], taps[1])
    };
    assert_eq!(first_tap["id"], rating["eventId"]);
    assert_eq!(first_tap["answerIds"], serde_json::json!([rating["id"]]));
    assert_eq!(first_tap["messageIds"], serde_json::json!([asked_comment["id"]]));
    assert_eq!(second_tap["answerIds"], serde_json::json!([]), "{story:#}");
    assert_eq!(second_tap["messageIds"], serde_json::json!([]), "{story:#}");
    let comment = answers.iter().find(|answer| answer["nodeId"] == "comment").unwrap();
    assert_eq!(comment["value"], "ありがとう、また来ます");

    let times: Vec<&str> = story["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["at"].as_str().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|pair| pair[0] >= pair[1]),
        "newest first: {times:?}"
    );
    assert!(story["openQuestion"].is_null(), "the scenario ended");
    assert!(
        story["user"]["tags"]
            .as_array()
            .unwrap()
            .contains(&Value::from("happy")),
        "{story:#}"
    );

    // The other user's story holds only their own records, and their open
    // question: the rating was not answered, the comment not asked.
    let theirs = timeline(&app, &other, "").await;
    assert_eq!(entries(&theirs, "event").len(), 1);
    assert_eq!(entries(&theirs, "answer").len(), 0);
    let cut = timeline(&app, &user, "?limit=2").await;
    assert_eq!(cut["entries"].as_array().unwrap().len(), 2);
    assert_eq!(cut["truncated"], true);
    assert_eq!(cut["entries"][0], story["entries"][0]);
}

#[tokio::test]
async fn an_open_question_and_a_refused_message_show_with_its_dead_letter() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "export")).await;
    // The answer comes two minutes late: its reply token is too old, so the
    // next question goes by push, which LINE refuses.
    app.line.fail_next_pushes([Fault::Refuse(400)]);
    let late = events::with_timestamp(
        &postback(&user, &events::answer_data("export", "rating", "bad")),
        events::now_ms() - 120_000,
    );
    app.deliver(&late).await;

    let story = timeline(&app, &user, "").await;

    let question = &story["openQuestion"];
    assert_eq!(question["scenarioId"], "export");
    assert_eq!(question["nodeId"], "comment", "{story:#}");
    let failed: Vec<&Value> = entries(&story, "message")
        .into_iter()
        .filter(|message| message["state"] == "failed")
        .collect();
    assert_eq!(failed.len(), 1, "{story:#}");
    assert_eq!(failed[0]["route"], "push");
    let letters = entries(&story, "dead_letter");
    assert_eq!(letters.len(), 1, "{story:#}");
    assert_eq!(letters[0]["kind"], "outbound");
    assert_eq!(letters[0]["targetId"], failed[0]["id"]);
    assert!(letters[0]["reason"].as_str().unwrap().contains("400"));
    assert_eq!(ids(&letters), stored_ids(&app, "dead_letters", &user).await);
}

#[tokio::test]
async fn a_bad_user_id_or_limit_gets_400_and_a_missing_token_401() {
    let app = app().await;
    let user = events::new_user();
    for (path, status) in [
        (format!("/admin/users/{user}/timeline?limit=0"), 400),
        (format!("/admin/users/{user}/timeline?limit=501"), 400),
        (format!("/admin/users/{user}/timeline?limit=many"), 400),
        ("/admin/users/not-a-line-user/timeline".to_owned(), 400),
        (format!("/admin/users/{}/timeline", user.to_uppercase()), 400),
        (format!("/admin/users/{}/timeline", "U".repeat(120)), 400),
    ] {
        let response = app.get_admin(&path).await;
        assert_eq!(response.status(), status, "{path}");
        let body: Value = response.json().await.unwrap();
        assert!(
            body["error"].as_str().is_some_and(|error| !error.is_empty()),
            "{path}: {body}"
        );
    }
    let unauthenticated = app
        .http
        .get(format!("{}/admin/users/{user}/timeline", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let wrong = app
        .http
        .get(format!("{}/admin/users/{user}/timeline", app.address))
        .bearer_auth(format!("{ADMIN_TOKEN}x"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // A user the service never saw: an empty story, not an error.
    let unseen = timeline(&app, &user, "").await;
    assert!(unseen["user"].is_null());
    assert_eq!(unseen["entries"], Value::Array(Vec::new()));

    // A record that cannot be read (edited by hand, or by a newer version) is
    // left out; the rest of the story still shows.
    app.deliver(&text(&user, "export")).await;
    app.firestore
        .create_with_random_id("timers", &[("lineUserId", user.as_str()), ("kind", "no-such-kind")])
        .await;
    app.firestore
        .create_with_random_id("webhook_inbox", &[("lineUserId", user.as_str()), ("state", "exploded")])
        .await;
    let story = timeline(&app, &user, "").await;
    assert_eq!(entries(&story, "event").len(), 1, "{story:#}");
    assert_eq!(entries(&story, "timer").len(), 0);
    assert_eq!(entries(&story, "message").len(), 1);
}
