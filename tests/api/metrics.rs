//! `GET /metrics`: real webhook traffic, then the Prometheus text it left.
//!
//! The recorder is process-wide. `scripts/test.sh` runs the tests with cargo
//! nextest, one process per test, so each test here sees only its own app's
//! numbers and checks them exactly. Under plain `cargo test` (one process for
//! all tests, in parallel) other tests count into the same series, so the
//! numbers are only checked to be at least what this test caused.

use crate::helpers::events::{self, answer_data, postback, redelivered};
use crate::helpers::{TestApp, TestOptions, spawn_app, spawn_app_with};
use std::collections::BTreeSet;

/// One process per test (nextest sets `NEXTEST`): the numbers are this test's alone.
pub(crate) fn own_process() -> bool {
    std::env::var_os("NEXTEST").is_some()
}

/// The value of the sample `name{labels}` (labels in any order), if present.
pub(crate) fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeSet<String> = labels.iter().map(|(key, value)| format!("{key}=\"{value}\"")).collect();
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, found) = match series.split_once('{') {
            Some((series_name, rest)) => (
                series_name,
                rest.trim_end_matches('}')
                    .split(',')
                    .filter(|label| !label.is_empty())
                    .map(str::to_owned)
                    .collect::<BTreeSet<_>>(),
            ),
            None => (series, BTreeSet::new()),
        };
        (series_name == name && found == wanted).then(|| value.parse().ok())?
    })
}

/// Asserts the counter `name{labels}` is `expected` (at least, when other tests share the process).
fn assert_count(text: &str, name: &str, labels: &[(&str, &str)], expected: f64) {
    let value = sample(text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{text}"));
    if own_process() {
        assert_eq!(value, expected, "{name}{labels:?} in\n{text}");
    } else {
        assert!(
            value >= expected,
            "{name}{labels:?} is {value}, want at least {expected}"
        );
    }
}

async fn scrape(app: &TestApp) -> String {
    let response = app.get_admin("/metrics").await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    response.text().await.unwrap()
}

#[tokio::test]
async fn webhook_traffic_shows_in_the_counters_and_the_backlog_in_the_gauges() {
    let app = spawn_app().await;
    let user = events::new_user();
    let tap = postback(&user, &answer_data("lunch", "ask_food", "good"));

    app.deliver(&tap).await;
    // LINE redelivers the same event: the inbox stops it.
    app.deliver(&redelivered(&tap)).await;
    // A second tap of the answered question: a new event, stopped by the answer guard.
    app.deliver(&postback(&user, &answer_data("lunch", "ask_food", "bad")))
        .await;
    // A dead letter waiting for an operator.
    app.firestore
        .create_with_random_id("dead_letters", &[("kind", "event"), ("reason", "test")])
        .await;

    let text = scrape(&app).await;

    let webhook = "line_survey_webhook_events_total";
    assert_count(&text, webhook, &[("kind", "postback"), ("outcome", "stored")], 2.0);
    assert_count(&text, webhook, &[("kind", "postback"), ("outcome", "duplicate")], 1.0);
    let processed = "line_survey_events_processed_total";
    assert_count(&text, processed, &[("kind", "postback"), ("outcome", "answered")], 1.0);
    assert_count(
        &text,
        processed,
        &[("kind", "postback"), ("outcome", "already_answered")],
        1.0,
    );
    let duplicates = "line_survey_duplicates_stopped_total";
    assert_count(&text, duplicates, &[("guard", "inbox"), ("reason", "redelivered")], 1.0);
    assert_count(
        &text,
        duplicates,
        &[("guard", "answer"), ("reason", "already_answered")],
        1.0,
    );

    // The next question went out once, by reply or push: one call counted under its endpoint.
    let calls = app.line.accepted();
    assert_eq!(calls.len(), 1, "one message sent");
    let endpoint = if calls[0].reply_token().is_some() {
        "reply"
    } else {
        "push"
    };
    let line = "line_survey_line_api_call_seconds_count";
    assert_count(&text, line, &[("endpoint", endpoint), ("status", "200")], 1.0);
    assert!(
        text.contains("line_survey_line_api_call_seconds_bucket{"),
        "a latency histogram, with buckets:\n{text}"
    );

    // Firestore round trips: a histogram with buckets, commits among them.
    let commits = sample(
        &text,
        "line_survey_firestore_round_trip_seconds_count",
        &[("operation", "commit"), ("outcome", "ok")],
    )
    .unwrap_or_default();
    assert!(
        commits >= 1.0,
        "commits counted (claims go by batch write), got {commits}\n{text}"
    );
    assert!(
        text.contains("line_survey_firestore_round_trip_seconds_bucket{"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE line_survey_firestore_round_trip_seconds histogram"),
        "{text}"
    );

    // The backlog of this test's database: everything settled, one dead letter.
    // (Gauges are set at each scrape from the scraping app's database.)
    assert_eq!(sample(&text, "line_survey_dead_letters", &[]), Some(1.0), "{text}");
    assert_eq!(sample(&text, "line_survey_ledger_pending", &[]), Some(0.0), "{text}");
    assert_eq!(
        sample(&text, "line_survey_ledger_oldest_pending_age_seconds", &[]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, "line_survey_inbox_pending", &[]), Some(0.0), "{text}");
    for queue in ["events", "sends", "timers"] {
        assert!(
            sample(&text, "line_survey_queue_depth", &[("queue", queue)]).is_some(),
            "queue {queue}:\n{text}"
        );
    }
    // No label carries a user id.
    assert!(!text.contains(&user), "{text}");
}

#[tokio::test]
async fn metrics_on_the_main_port_need_the_admin_token() {
    let app = spawn_app().await;

    let url = format!("{}/metrics", app.address);
    let missing = app.http.get(&url).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let wrong = app.http.get(&url).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    assert_eq!(app.get_admin("/metrics").await.status(), 200);
    assert!(app.metrics_address.is_none());
}

#[tokio::test]
async fn without_an_admin_token_metrics_are_off_like_the_admin_routes() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.admin_token = None,
        ..TestOptions::default()
    })
    .await;

    let response = app.http.get(format!("{}/metrics", app.address)).send().await.unwrap();
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn a_metrics_port_serves_them_without_a_token_and_the_main_port_not_at_all() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.metrics_port = Some(0),
        ..TestOptions::default()
    })
    .await;
    let user = events::new_user();
    let tap = postback(&user, &answer_data("lunch", "ask_food", "good"));
    app.deliver(&tap).await;
    app.deliver(&redelivered(&tap)).await;

    let metrics = app.metrics_address.clone().expect("a metrics port");
    let response = app.http.get(format!("{metrics}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert_count(
        &text,
        "line_survey_duplicates_stopped_total",
        &[("guard", "inbox"), ("reason", "redelivered")],
        1.0,
    );
    // Nothing else on the metrics port; no /metrics on the main port, even with the token.
    let webhook = app.http.post(format!("{metrics}/webhook")).send().await.unwrap();
    assert_eq!(webhook.status(), 404);
    assert_eq!(app.get_admin("/metrics").await.status(), 404);
    assert_eq!(
        app.http
            .get(format!("{}/metrics", app.address))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}
