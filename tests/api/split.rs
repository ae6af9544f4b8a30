//! `split` nodes (A/B tests): a user's arm is a pure function of (scenario,
//! node, user), so redeliveries, double sends, double taps and manual re-sends
//! all land in the same arm; the arm is recorded on the answer, the marker and
//! the CSV, and the results count runs, sends and answers by arm exactly.
//! Scenario: tests/fixtures/split/ab.toml.

use crate::export::csv_rows;
use crate::helpers::events::{self, answer_data, postback, redelivered, text};
use crate::helpers::firestore_rest::string_field;
use crate::helpers::storm::deliver_like_line;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app_with};
use line_survey::config::Config;
use serde_json::Value;
use sha2::Digest;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

fn split_scenarios(config: &mut Config) {
    config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/split");
}

/// The arm the README documents: SHA-256 of `ab`, NUL, `opening`, NUL, the
/// user id; its first 8 bytes (big-endian) over 2^64 is a point in [0, 1)
/// that falls in arm A (weight 1 of 2) below one half. Written out here, not
/// taken from the service, so the test pins the documented rule.
fn documented_arm(user: &str) -> &'static str {
    let digest = sha2::Sha256::new()
        .chain_update(b"ab\0opening\0")
        .chain_update(user.as_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    if u64::from_be_bytes(first) < 1 << 63 { "A" } else { "B" }
}

fn opening(arm: &str) -> String {
    format!("Opening {arm}")
}

/// The texts each user received (replies by their token, pushes by `to`).
fn texts_by_user(app: &TestApp, tokens: &HashMap<String, String>) -> HashMap<String, Vec<String>> {
    let mut received: HashMap<String, Vec<String>> = HashMap::new();
    for call in app.line.accepted() {
        let user = call
            .reply_token()
            .and_then(|token| tokens.get(token).cloned())
            .or_else(|| call.to().map(str::to_owned));
        if let Some(user) = user {
            received.entry(user).or_default().extend(call.texts());
        }
    }
    received
}

fn count(value: &Value) -> u64 {
    value.as_u64().unwrap_or_else(|| panic!("a count, not {value}"))
}

/// 2,000 users each send the keyword twice (and LINE redelivers the first),
/// then tap twice (and LINE redelivers a tap), all at once: each user gets
/// exactly one opening, of the documented arm, and one answer recorded in that
/// arm; the results per arm equal the documents per arm. Then a manual re-send
/// to some of them sends each the same arm again.
#[tokio::test]
async fn each_user_stays_in_one_arm_and_the_results_per_arm_equal_the_answers() {
    let app = spawn_app_with(TestOptions {
        adjust: split_scenarios,
        ..TestOptions::default()
    })
    .await;
    let users: Vec<String> = (0..2000).map(|_| events::new_user()).collect();
    let arm: HashMap<&str, &str> = users.iter().map(|user| (user.as_str(), documented_arm(user))).collect();

    let mut starts = Vec::new();
    for user in &users {
        let first = text(user, "ab");
        starts.push(redelivered(&first));
        starts.push(first);
        starts.push(text(user, "ab"));
    }
    let address = app.address.clone();
    deliver_like_line(&starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    let mut taps = Vec::new();
    for (index, user) in users.iter().enumerate() {
        let choice = if index % 3 == 0 { "bad" } else { "good" };
        let first = postback(user, &answer_data("ab", "rating", choice));
        taps.push(redelivered(&first));
        taps.push(first);
        taps.push(postback(user, &answer_data("ab", "rating", choice)));
    }
    deliver_like_line(&taps, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    let tokens: HashMap<String, String> = starts
        .iter()
        .chain(&taps)
        .filter_map(|event| {
            Some((
                event["replyToken"].as_str()?.to_owned(),
                event["source"]["userId"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let received = texts_by_user(&app, &tokens);
    for user in &users {
        let texts = received.get(user).cloned().unwrap_or_default();
        let mine = opening(arm[user.as_str()]);
        let openings: Vec<&String> = texts.iter().filter(|text| text.starts_with("Opening")).collect();
        assert_eq!(openings, [&mine], "{user}: one opening, of its arm: {texts:?}");
        assert_eq!(
            texts.iter().filter(|text| *text == "Thanks!").count(),
            1,
            "{user}: one answer's follow-up: {texts:?}"
        );
    }

    // One answer per user, in its arm; the marker names the arm too.
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), users.len());
    let mut by_arm_and_value: BTreeMap<(String, String), u64> = BTreeMap::new();
    for answer in &answers {
        let user = string_field(answer, "lineUserId").expect("a user");
        let variant = string_field(answer, "variant").expect("answers behind a split carry their arm");
        assert_eq!(variant, arm[user.as_str()], "{user}");
        let value = string_field(answer, "value").expect("a choice");
        *by_arm_and_value.entry((variant, value)).or_default() += 1;
    }
    let markers = app.firestore.list("scenario_answers").await;
    assert_eq!(markers.len(), users.len());
    for marker in &markers {
        let user = string_field(marker, "lineUserId").expect("a user");
        assert_eq!(
            string_field(marker, "variant").as_deref(),
            Some(arm[user.as_str()]),
            "{user}"
        );
    }

    let per_arm = |label: &str| users.iter().filter(|user| arm[user.as_str()] == label).count() as u64;
    let results: Value = app
        .get_admin("/admin/scenarios/ab/results")
        .await
        .json()
        .await
        .expect("JSON");
    let split = &results["variants"][0];
    assert_eq!(split["node"], "opening", "{results}");
    let runs: Vec<(String, u64)> = split["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|arm| {
            (
                arm["label"].as_str().unwrap_or_default().to_owned(),
                count(&arm["runs"]),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [("A".to_owned(), per_arm("A")), ("B".to_owned(), per_arm("B"))],
        "one run per user, in its arm"
    );
    let rating = &results["nodes"][0];
    assert_eq!(rating["nodeId"], "rating");
    for label in ["A", "B"] {
        let by_variant = &rating["byVariant"][label];
        assert_eq!(count(&by_variant["sent"]), per_arm(label), "{label}: {rating}");
        let answered: u64 = by_arm_and_value
            .iter()
            .filter(|((arm, _), _)| arm == label)
            .map(|(_, count)| count)
            .sum();
        assert_eq!(count(&by_variant["answered"]), answered, "{label}: {rating}");
        for choice in rating["choices"].as_array().expect("choices") {
            let value = choice["value"].as_str().unwrap_or_default().to_owned();
            let documents = by_arm_and_value
                .get(&(label.to_owned(), value.clone()))
                .copied()
                .unwrap_or(0);
            assert_eq!(count(&choice["byVariant"][label]), documents, "{label} {value}");
        }
    }
    assert_eq!(count(&rating["sent"]), users.len() as u64);
    assert_eq!(count(&rating["answered"]), users.len() as u64);

    // The CSV names each answer's arm.
    let csv = app
        .http
        .get(format!("{}/admin/scenarios/ab/answers.csv", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("service reachable")
        .bytes()
        .await
        .expect("the whole body");
    let rows = csv_rows(&csv);
    assert_eq!(rows.len(), users.len());
    for row in &rows {
        assert_eq!(row[7], arm[row[0].as_str()], "{row:?}");
    }

    // An operator re-sends the scenario: a new run, in the same arm.
    let again: Vec<&str> = users.iter().take(40).map(String::as_str).collect();
    let response = app.admin_send("ab", &again, Some("resend-1"), Some(ADMIN_TOKEN)).await;
    assert!(
        response.status().is_success(),
        "{}",
        response.text().await.unwrap_or_default()
    );
    app.firestore.settled(LIMIT).await;
    let received = texts_by_user(&app, &tokens);
    for user in &again {
        let openings: Vec<&String> = received[*user]
            .iter()
            .filter(|text| text.starts_with("Opening"))
            .collect();
        let mine = opening(arm[user]);
        assert_eq!(openings, [&mine, &mine], "{user}: the re-send took the same arm");
    }
}

/// A split first is refused for a campaign (every recipient would get the
/// same messages), with the reason and the route that can send it.
#[tokio::test]
async fn a_campaign_of_a_scenario_that_splits_first_is_refused_with_the_reason() {
    let app = spawn_app_with(TestOptions {
        adjust: split_scenarios,
        ..TestOptions::default()
    })
    .await;
    let response = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", "split-campaign")
        .json(&serde_json::json!({ "scenarioId": "ab", "audience": { "tags": { "anyOf": ["x"] } } }))
        .send()
        .await
        .expect("service reachable");
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("JSON");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("split") && error.contains("/admin/scenarios/ab/send"),
        "{body}"
    );
    assert_eq!(app.firestore.count("campaigns").await, 0, "nothing was stored");
}
