//! `GET /admin/scenarios/{id}/results`: exact counters, raised in the commits
//! that record answers and ledger entries, equal what Firestore holds after a
//! storm of duplicates.

use crate::helpers::events::{self, answer_data, postback, redelivered, text};
use crate::helpers::firestore_rest::string_field;
use crate::helpers::storm::send_all;
use crate::helpers::{TestApp, TestOptions, spawn_app, spawn_app_with};
use serde_json::Value;
use std::collections::BTreeMap;

async fn results(app: &TestApp, scenario: &str, query: &str) -> Value {
    let response = app
        .get_admin(&format!("/admin/scenarios/{scenario}/results{query}"))
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("JSON")
}

fn node<'a>(results: &'a Value, id: &str) -> &'a Value {
    results["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .find(|node| node["nodeId"] == id)
        .unwrap_or_else(|| panic!("node {id} in {results}"))
}

/// Answer documents per (node, value), as Firestore holds them.
async fn answers_by_value(app: &TestApp) -> BTreeMap<(String, String), u64> {
    let mut counted = BTreeMap::new();
    for answer in app.firestore.list("survey_responses").await {
        let node = string_field(&answer, "nodeId").expect("nodeId");
        let value = string_field(&answer, "value").expect("a choice value");
        *counted.entry((node, value)).or_default() += 1;
    }
    counted
}

/// Ledger entries per node they ask, as Firestore holds them.
async fn entries_asking(app: &TestApp) -> BTreeMap<String, u64> {
    let mut counted = BTreeMap::new();
    for entry in app.firestore.list("outbound_ledger").await {
        if let Some(node) = entry["fields"]["asks"]["mapValue"]["fields"]["node"]["stringValue"].as_str() {
            *counted.entry(node.to_owned()).or_default() += 1;
        }
    }
    counted
}

#[tokio::test]
async fn the_totals_equal_the_answer_documents_after_a_duplicate_storm() {
    let app = spawn_app().await;
    let users: Vec<String> = (0..24).map(|_| events::new_user()).collect();
    // Everyone starts; then, all at once and shuffled by concurrency: three
    // taps of one choice, one of the other, and a redelivery of the first, on
    // both questions. Guard 1 records the first tap to land, whichever it is.
    let starts: Vec<Value> = users.iter().map(|user| text(user, "lunch")).collect();
    assert!(send_all(&starts, |_| app.address.clone()).await.is_empty());
    app.settled().await;
    let mut taps = Vec::new();
    for (index, user) in users.iter().enumerate() {
        let (food, other) = if index % 3 == 0 {
            ("bad", "good")
        } else {
            ("good", "bad")
        };
        let first = postback(user, &answer_data("lunch", "ask_food", food));
        taps.push(redelivered(&first));
        taps.push(first);
        taps.push(postback(user, &answer_data("lunch", "ask_food", food)));
        taps.push(postback(user, &answer_data("lunch", "ask_food", other)));
    }
    assert!(send_all(&taps, |_| app.address.clone()).await.is_empty());
    app.settled().await;
    let mut drinks = Vec::new();
    for (index, user) in users.iter().enumerate() {
        let drink = if index % 2 == 0 { "tea" } else { "coffee" };
        let first = postback(user, &answer_data("lunch", "ask_drink", drink));
        drinks.push(redelivered(&first));
        drinks.push(first);
        drinks.push(postback(user, &answer_data("lunch", "ask_drink", drink)));
    }
    assert!(send_all(&drinks, |_| app.address.clone()).await.is_empty());
    app.settled().await;

    let stored = answers_by_value(&app).await;
    let asked = entries_asking(&app).await;
    let results = results(&app, "lunch", "").await;
    for question in ["ask_food", "ask_drink"] {
        let counted = node(&results, question);
        let documents: u64 = stored
            .iter()
            .filter(|((node, _), _)| node == question)
            .map(|(_, count)| count)
            .sum();
        assert_eq!(documents, users.len() as u64, "one answer per user to {question}");
        assert_eq!(counted["answered"], documents, "{question}: {counted}");
        assert_eq!(
            counted["sent"], asked[question],
            "{question}: sent = its ledger entries"
        );
        assert_eq!(asked[question], users.len() as u64, "{question} asked once per user");
        for choice in counted["choices"].as_array().expect("choices") {
            let value = choice["value"].as_str().expect("value").to_owned();
            let expected = stored.get(&(question.to_owned(), value.clone())).copied().unwrap_or(0);
            assert_eq!(choice["count"], expected, "{question}={value}");
        }
    }
    let food = node(&results, "ask_food");
    assert_eq!(food["responseRate"], 1.0);
    assert_eq!(food["choices"][0]["label"], "Good");
    let shares: f64 = food["choices"]
        .as_array()
        .expect("choices")
        .iter()
        .map(|choice| choice["share"].as_f64().expect("a share"))
        .sum();
    assert!((shares - 1.0).abs() < 1e-9, "shares add up to 1: {shares}");

    // Today (in the scenario's zone, Tokyo) holds them all; yesterday nothing.
    let today = chrono::Utc::now().with_timezone(&chrono_tz::Asia::Tokyo).date_naive();
    let yesterday = today.pred_opt().expect("a day before");
    let on = |day: chrono::NaiveDate| format!("?from={day}&to={day}");
    let today_results = self::results(&app, "lunch", &on(today)).await;
    assert_eq!(node(&today_results, "ask_food")["answered"], users.len());
    let before = self::results(&app, "lunch", &on(yesterday)).await;
    assert_eq!(node(&before, "ask_food")["answered"], 0);
    assert_eq!(node(&before, "ask_food")["sent"], 0);
    assert_eq!(node(&before, "ask_food")["responseRate"], Value::Null);
}

#[tokio::test]
async fn a_free_text_question_lists_its_latest_answers_newest_first() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/typed");
        },
        ..TestOptions::default()
    })
    .await;
    let comments = ["美味しかった、また来ます", "too \"salty\", sorry", "line one\nline two"];
    for comment in comments {
        let user = events::new_user();
        app.deliver(&text(&user, "feedback")).await;
        app.deliver(&postback(&user, &answer_data("feedback", "scale", "5")))
            .await;
        app.deliver(&text(&user, comment)).await;
    }
    let results = results(&app, "feedback", "").await;
    let comment = node(&results, "comment");
    assert_eq!(comment["kind"], "text_question");
    assert_eq!(comment["answered"], 3);
    assert_eq!(comment["sent"], 3);
    let latest: Vec<&str> = comment["latest"]
        .as_array()
        .expect("latest answers")
        .iter()
        .map(|answer| answer["value"].as_str().expect("text"))
        .collect();
    assert_eq!(
        latest,
        ["line one\nline two", "too \"salty\", sorry", "美味しかった、また来ます"]
    );
    assert!(
        comment["latest"][0]["answeredAt"]
            .as_str()
            .is_some_and(|at| at.ends_with("+09:00")),
        "answered at, in the scenario's zone: {comment}"
    );
    assert_eq!(node(&results, "scale")["choices"][4]["count"], 3);
}

#[tokio::test]
async fn bad_ranges_and_unknown_scenarios_get_clear_answers() {
    let app = spawn_app().await;
    let cases = [
        (
            "/admin/scenarios/lunch/results?from=2026-13-01",
            400,
            "from must be a date",
        ),
        ("/admin/scenarios/lunch/results?to=soon", 400, "to must be a date"),
        (
            "/admin/scenarios/lunch/results?from=2026-12-02&to=2026-12-01",
            400,
            "is after",
        ),
        ("/admin/scenarios/nope/results", 404, "no scenario"),
    ];
    for (path, status, words) in cases {
        let response = app.get_admin(path).await;
        assert_eq!(response.status(), status, "{path}");
        let body: Value = response.json().await.expect("JSON");
        assert!(
            body["error"].as_str().is_some_and(|error| error.contains(words)),
            "{path}: {body}"
        );
    }
    let anonymous = app
        .http
        .get(format!("{}/admin/scenarios/lunch/results", app.address))
        .send()
        .await
        .expect("reachable");
    assert_eq!(anonymous.status(), 401);
}
