//! `branch` nodes: decided from the user's state where it is read, with the
//! step's commit conditional on the user's record. A tag changed at the same
//! moment never leaves a decision standing on a state it did not see.
//! Scenarios: tests/fixtures/branch (route reads the tag, toggle changes it).

use crate::helpers::events::{self, answer_data, postback, text};
use crate::helpers::firestore_rest::string_field;
use crate::helpers::storm::deliver_like_line;
use crate::helpers::{TestApp, TestOptions, spawn_app_with};
use line_survey::config::Config;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

fn branch_scenarios(config: &mut Config) {
    config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/branch");
}

async fn give_vip(app: &TestApp, user: &str) {
    app.firestore
        .patch(
            "users",
            user,
            &[
                ("lineUserId", json!({ "stringValue": user })),
                (
                    "tags",
                    json!({ "arrayValue": { "values": [{ "stringValue": "vip" }] } }),
                ),
            ],
        )
        .await;
}

/// A document's commit time, as Firestore reports it (RFC 3339, nanoseconds).
fn commit_time(document: &Value) -> chrono::DateTime<chrono::Utc> {
    let raw = document["createTime"].as_str().expect("a createTime");
    chrono::DateTime::parse_from_rfc3339(raw).expect("RFC 3339").to_utc()
}

/// 200 users, half of them VIPs, each send "offer" (a branch on the VIP tag)
/// while, at the same moment, answering a question that removes the tag (for
/// the VIPs) or adds it (for the others). Every user gets exactly one offer,
/// and it is the one their tags imply at the decision: the answer's commit
/// came first (its commit time is earlier) or the offer's did, and the offer
/// matches the tags as of that order. A decision on a state that changed
/// under it would show as a mismatch.
#[tokio::test]
async fn each_user_gets_the_offer_their_tags_imply_while_answers_change_them() {
    let app = spawn_app_with(TestOptions {
        adjust: branch_scenarios,
        ..TestOptions::default()
    })
    .await;
    let users: Vec<String> = (0..200).map(|_| events::new_user()).collect();
    let was_vip = |index: usize| index.is_multiple_of(2);
    for (index, user) in users.iter().enumerate() {
        if was_vip(index) {
            give_vip(&app, user).await;
        }
    }
    let starts: Vec<Value> = users.iter().map(|user| text(user, "toggle")).collect();
    let address = app.address.clone();
    deliver_like_line(&starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    // The race: each user's offer and answer at the same moment, shuffled.
    let mut race = Vec::new();
    for (index, user) in users.iter().enumerate() {
        let choice = if was_vip(index) { "remove" } else { "add" };
        race.push(text(user, "offer"));
        race.push(postback(user, &answer_data("toggle", "q", choice)));
    }
    let mut keyed: Vec<(u128, Value)> = race
        .into_iter()
        .map(|event| (uuid::Uuid::new_v4().as_u128(), event))
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    let race: Vec<Value> = keyed.into_iter().map(|(_, event)| event).collect();
    deliver_like_line(&race, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    let mut offers: HashMap<String, Vec<String>> = HashMap::new();
    for (user, call) in app.line.accepted_by_user(&race) {
        for text in call.texts().into_iter().filter(|text| text.ends_with("offer")) {
            offers.entry(user.clone()).or_default().push(text);
        }
    }
    // Commit times: the offer's ledger entry and the toggle answer, per user.
    let mut offer_committed = HashMap::new();
    for entry in app.firestore.list("outbound_ledger").await {
        if string_field(&entry, "messages").is_some_and(|messages| messages.contains("offer")) {
            let user = string_field(&entry, "lineUserId").expect("a user");
            assert!(
                offer_committed.insert(user, commit_time(&entry)).is_none(),
                "one offer entry per user"
            );
        }
    }
    let mut answer_committed = HashMap::new();
    for answer in app.firestore.list("survey_responses").await {
        let user = string_field(&answer, "lineUserId").expect("a user");
        answer_committed.insert(user, commit_time(&answer));
    }
    let (mut answer_first, mut offer_first) = (0, 0);
    for (index, user) in users.iter().enumerate() {
        let got = offers.get(user).cloned().unwrap_or_default();
        assert_eq!(got.len(), 1, "{user}: exactly one offer: {got:?}");
        let answered_before = answer_committed[user] < offer_committed[user];
        if answered_before {
            answer_first += 1;
        } else {
            offer_first += 1;
        }
        // The tag flips with the answer: VIP at the decision is the initial
        // state unless the answer came first.
        let vip_at_decision = was_vip(index) != answered_before;
        let expected = if vip_at_decision { "VIP offer" } else { "Plain offer" };
        assert_eq!(got[0], expected, "{user}: answer first: {answered_before}");
    }
    println!("answer committed first for {answer_first} users, the offer first for {offer_first}");
    // Every user ends with the tag the answer left.
    for (index, user) in users.iter().enumerate() {
        let vip = app.user_tags(user).await.contains(&"vip".to_owned());
        assert_eq!(vip, !was_vip(index), "{user}");
    }
}

/// A manual send decides the branch per user, from each user's own tags.
#[tokio::test]
async fn a_manual_send_decides_the_branch_per_user() {
    let app = spawn_app_with(TestOptions {
        adjust: branch_scenarios,
        ..TestOptions::default()
    })
    .await;
    let vip = events::new_user();
    let plain = events::new_user();
    give_vip(&app, &vip).await;
    let response = app
        .admin_send(
            "route",
            &[&vip, &plain],
            Some("route-1"),
            Some(crate::helpers::ADMIN_TOKEN),
        )
        .await;
    assert!(
        response.status().is_success(),
        "{}",
        response.text().await.unwrap_or_default()
    );
    app.settled().await;
    let pushed = |user: &str| -> Vec<String> {
        app.line
            .accepted()
            .into_iter()
            .filter(|call| call.to() == Some(user))
            .flat_map(|call| call.texts())
            .collect()
    };
    assert_eq!(pushed(&vip), ["VIP offer"]);
    assert_eq!(pushed(&plain), ["Plain offer"]);
}

/// The results' `sent` of each question node of `scenario`.
async fn sent_per_node(app: &TestApp, scenario: &str) -> HashMap<String, u64> {
    let results = crate::helpers::admin_json(&app.address, &format!("/admin/scenarios/{scenario}/results")).await;
    results["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|node| {
            (
                node["nodeId"].as_str().unwrap_or_default().to_owned(),
                node["sent"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_push_repeated_after_a_lost_answer_sends_and_records_what_was_decided_before_it() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/branch_question"),
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    // Tagged: the branch sends them the VIP question.
    let users = crate::campaigns::seed_users(&app.firestore, 1, |_| true, |_| false).await;
    let user = &users[0];
    // LINE takes the push, and its answer is lost.
    app.line
        .fail_next_pushes([crate::helpers::line_stand_in::Fault::AcceptThenFail]);
    let id = crate::campaigns::start_campaign(&app.address, &json!({"scenarioId": "offer_q"}), "lost-answer").await;
    crate::helpers::wait_until(Duration::from_secs(30), || {
        app.line.calls().iter().any(|call| call.status == 500)
    })
    .await;
    // Before the push is repeated, the user loses the tag: decided again,
    // the branch would go the other way.
    app.firestore
        .patch(
            "users",
            user,
            &[("tags", json!({"arrayValue": {"values": [{"stringValue": "visited"}]}}))],
        )
        .await;
    app.advance_clock(Duration::from_secs(120)).await;
    let status = crate::campaigns::wait_for_state(&app.address, &id, "done", Duration::from_secs(60)).await;
    assert_eq!(status["delivery"], "push", "{status}");
    assert_eq!(status["sent"], json!(1), "{status}");

    // LINE took the first push (the repeat got 409): the VIP question, once.
    let accepted = app.line.accepted();
    assert_eq!(accepted.len(), 1, "received once");
    let asked: Vec<String> = accepted[0]
        .messages()
        .iter()
        .filter_map(|message| message["template"]["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(asked, ["VIP question?"]);
    assert!(
        app.line.calls().iter().any(|call| call.status == 409),
        "the push was repeated"
    );
    // And the run records the question they received, not a new decision.
    let sent = sent_per_node(&app, "offer_q").await;
    assert_eq!(
        (sent.get("vip_q").copied(), sent.get("plain_q").copied()),
        (Some(1), Some(0)),
        "{sent:?}"
    );
    // The settled chunk keeps no decisions (nor the values they rendered with).
    let chunks = app.firestore.list("campaign_chunks").await;
    assert!(
        chunks.iter().all(|chunk| chunk["fields"].get("pushes").is_none()),
        "{chunks:?}"
    );
}
