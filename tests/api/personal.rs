//! Personal text: `{name}` from LINE's profile (cached on `users/{id}`),
//! `{answer.n}` and `{field.x}` from what the user answered and set, each with
//! its fallback when the value is missing. What is sent on a retry, even by
//! another process after a crash, is what was decided: the ledger entry keeps
//! the values until it is settled, then drops them.
//! Scenarios: tests/fixtures/personal (greet, news).

use crate::helpers::events::{self, answer_data, follow, postback, text, unfollow};
use crate::helpers::firestore_rest::{FirestoreRest, string_field};
use crate::helpers::line_stand_in::{Call, Fault, LineStandIn};
use crate::helpers::process::ServiceProcess;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, emulator_host, new_project_id, spawn_app_with, wait_until};
use line_survey::config::Config;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

fn personal_dir() -> PathBuf {
    crate::helpers::repo_path("tests/fixtures/personal")
}

fn personal_scenarios(config: &mut Config) {
    config.scenarios_dir = personal_dir();
}

/// A service with the personal-text scenarios (greet, news).
pub(crate) async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: personal_scenarios,
        ..TestOptions::default()
    })
    .await
}

/// Every text a call carried: message texts, template texts and alt texts.
fn all_texts(call: &Call) -> Vec<String> {
    let mut texts = Vec::new();
    for message in call.messages() {
        for text in [&message["text"], &message["altText"], &message["template"]["text"]] {
            if let Some(text) = text.as_str() {
                texts.push(text.to_owned());
            }
        }
    }
    texts
}

/// The texts LINE accepted for `user`, in order: pushes to them, and replies
/// (a test calling this has one user's replies only).
/// Per user, the texts of every push LINE accepted.
fn pushed_texts(line: &LineStandIn) -> HashMap<String, Vec<String>> {
    let mut received: HashMap<String, Vec<String>> = HashMap::new();
    for call in line.accepted() {
        let to = call.to().expect("a push").to_owned();
        received.entry(to).or_default().extend(all_texts(&call));
    }
    received
}

/// Each user got the monthly notice once, by their own name.
fn each_named_once(received: &HashMap<String, Vec<String>>, names: &HashMap<&str, String>) {
    for (user, name) in names {
        assert_eq!(
            received.get(*user).map(Vec::as_slice),
            Some([format!("{name}さん、今月のお知らせです。")].as_slice()),
            "{user}"
        );
    }
}

fn received(line: &LineStandIn, user: &str) -> Vec<String> {
    line.accepted()
        .iter()
        .filter(|call| call.to() == Some(user) || call.to().is_none())
        .flat_map(all_texts)
        .collect()
}

async fn ledger_entries_hold_no_personal_values(firestore: &FirestoreRest) {
    let entries = firestore.list("outbound_ledger").await;
    assert!(!entries.is_empty());
    for entry in entries {
        assert!(
            entry["fields"].get("personal").is_none(),
            "a settled entry keeps no personal value: {entry}"
        );
        let messages = string_field(&entry, "messages").expect("messages");
        assert!(
            !messages.contains("太郎"),
            "the ledger keeps templates, not names: {messages}"
        );
    }
}

#[tokio::test]
async fn a_new_friend_is_greeted_by_name_and_the_end_names_the_answer_and_the_field() {
    let app = app().await;
    let user = events::new_user();
    app.line.set_profile(&user, "太郎");
    app.deliver(&follow(&user)).await;
    app.deliver(&postback(&user, &answer_data("greet", "plan", "gold")))
        .await;

    let texts = received(&app.line, &user);
    assert_eq!(
        texts,
        [
            "太郎さん、友だち追加ありがとうございます。",
            // The buttons template: its alt text and its text.
            "太郎さんのご利用プランは？",
            "太郎さんのご利用プランは？",
            "太郎さん、ゴールドですね（gold）。{またね}",
        ]
    );
    // Fetched once at the follow, then read from the cache.
    assert_eq!(app.line.profile_calls(), std::slice::from_ref(&user));
    let record = app.firestore.get("users", &user).await.expect("the user's record");
    assert_eq!(string_field(&record, "displayName").as_deref(), Some("太郎"));
    assert!(record["fields"].get("profileFetchedMs").is_some());
    ledger_entries_hold_no_personal_values(&app.firestore).await;

    // An unfollow forgets the name: it is personal data.
    app.deliver(&unfollow(&user)).await;
    let record = app.firestore.get("users", &user).await.expect("the user's record");
    assert!(record["fields"].get("displayName").is_none(), "{record}");
    assert!(record["fields"].get("profileFetchedMs").is_none(), "{record}");
}

/// A user who blocked the account (404), a profile call LINE fails (500) and
/// one slower than LINE_TIMEOUT_MS: each gets the fallback, and the step goes
/// on; nothing is cached. What LINE said is remembered for a minute (a follow
/// and its greeting ask once); after it, the next step asks again.
#[tokio::test]
async fn a_profile_that_is_refused_failing_or_slow_renders_the_fallback() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            personal_scenarios(config);
            config.line_timeout = Duration::from_millis(1500);
        },
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    let blocked = events::new_user();
    app.deliver(&app.sent_now(&text(&blocked, "こんにちは"))).await;
    assert_eq!(
        received(&app.line, &blocked)[0],
        "お客さまさん、友だち追加ありがとうございます。"
    );

    // A follow whose profile call fails: the greeting does not ask again.
    let friend = events::new_user();
    app.line.set_profile(&friend, "次郎");
    app.line.fail_next_profiles([Fault::Refuse(500)]);
    let before = app.line.accepted().len();
    app.deliver(&app.sent_now(&follow(&friend))).await;
    let texts: Vec<String> = app.line.accepted()[before..].iter().flat_map(all_texts).collect();
    assert_eq!(texts[0], "お客さまさん、友だち追加ありがとうございます。");
    assert_eq!(
        app.line.profile_calls().iter().filter(|user| **user == friend).count(),
        1
    );

    for fault in [Fault::Refuse(500), Fault::AcceptSlowly(Duration::from_secs(4))] {
        let user = events::new_user();
        app.line.set_profile(&user, "花子");
        app.line.fail_next_profiles([fault]);
        let before = app.line.accepted().len();
        app.deliver(&app.sent_now(&text(&user, "こんにちは"))).await;
        let texts: Vec<String> = app.line.accepted()[before..].iter().flat_map(all_texts).collect();
        assert_eq!(texts[0], "お客さまさん、友だち追加ありがとうございます。");
        let record = app.firestore.get("users", &user).await;
        assert!(
            record.is_none_or(|record| record["fields"].get("displayName").is_none()),
            "a failed fetch caches nothing"
        );
        // A minute later the next step asks LINE again, and now gets the name.
        app.advance_clock(Duration::from_secs(61)).await;
        let before = app.line.accepted().len();
        app.deliver(&app.sent_now(&postback(&user, &answer_data("greet", "plan", "silver"))))
            .await;
        let texts: Vec<String> = app.line.accepted()[before..].iter().flat_map(all_texts).collect();
        assert_eq!(texts, ["花子さん、シルバーですね（silver）。{またね}"]);
        assert_eq!(
            app.line
                .profile_calls()
                .iter()
                .filter(|called| **called == user)
                .count(),
            2
        );
    }
    assert_eq!(
        app.line.profile_calls().iter().filter(|user| **user == blocked).count(),
        1
    );

    // LINE failing 30% of profile calls and answering 20% too late, at random:
    // each user gets one greeting, with their name or the fallback, and only
    // the names that came are cached.
    app.line.fail_profiles_randomly(0.3, 0.2);
    let users: Vec<String> = (0..30).map(|_| events::new_user()).collect();
    for (index, user) in users.iter().enumerate() {
        app.line.set_profile(user, &format!("利用者{index:02}"));
    }
    let starts: Vec<Value> = users
        .iter()
        .map(|user| app.sent_now(&text(user, "こんにちは")))
        .collect();
    assert!(
        crate::helpers::storm::send_all(&starts, |_| app.address.clone())
            .await
            .is_empty()
    );
    app.settled().await;
    let mut greeted: HashMap<String, Vec<String>> = HashMap::new();
    for (user, call) in app.line.accepted_by_user(&starts) {
        greeted.entry(user).or_default().push(all_texts(&call)[0].clone());
    }
    let mut named = 0;
    for (index, user) in users.iter().enumerate() {
        let name = format!("利用者{index:02}");
        let got = greeted.get(user).cloned().unwrap_or_default();
        assert_eq!(got.len(), 1, "{user}: one greeting, {got:?}");
        let cached = app
            .firestore
            .get("users", user)
            .await
            .and_then(|record| string_field(&record, "displayName"));
        if got[0] == format!("{name}さん、友だち追加ありがとうございます。") {
            named += 1;
            assert_eq!(cached.as_deref(), Some(name.as_str()));
        } else {
            assert_eq!(got[0], "お客さまさん、友だち追加ありがとうございます。");
            assert_eq!(cached, None, "a failed fetch caches nothing");
        }
    }
    assert!(named > 0 && named < 30, "some names came, some did not ({named} of 30)");
}

/// The push of a personalised message is made, and its process is killed while
/// LINE holds the answer (it will be a 500: nothing went out). The user's name
/// changes meanwhile, in LINE and in the cache. The instance that takes the
/// action over sends the bytes that were decided, with the old name, once.
#[tokio::test]
async fn the_send_after_a_crash_carries_the_bytes_decided_before_it() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let dir = personal_dir();
    let settings = [
        ("SCENARIOS_DIR", dir.to_str().expect("a UTF-8 path")),
        ("REPLY_TOKEN_MAX_AGE_SECS", "0"),
    ];
    let user = events::new_user();
    line.set_profile(&user, "太郎");
    line.fail_next_pushes([Fault::FailSlowly(Duration::from_secs(20))]);
    let mut first = ServiceProcess::start(&project, &line.uri(), &settings).await;
    let response = reqwest::Client::new()
        .post(format!("{}/admin/scenarios/news/send", first.address))
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", "crash-1")
        .json(&json!({ "userIds": [user] }))
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(response.is_err(), "the send waits on LINE's answer");
    wait_until(Duration::from_secs(20), || {
        line.calls().iter().any(|call| call.to() == Some(user.as_str()))
    })
    .await;
    first.kill();

    line.set_profile(&user, "次郎");
    firestore
        .patch("users", &user, &[("displayName", json!({ "stringValue": "次郎" }))])
        .await;
    let _second = ServiceProcess::start(&project, &line.uri(), &settings).await;
    wait_until(Duration::from_secs(60), || !line.accepted().is_empty()).await;
    firestore.settled(Duration::from_secs(60)).await;

    let calls: Vec<Call> = line
        .calls()
        .into_iter()
        .filter(|call| call.to() == Some(user.as_str()))
        .collect();
    assert_eq!(calls.len(), 2, "the lost attempt and the one after the crash");
    assert_eq!(
        calls[0].body.to_string(),
        calls[1].body.to_string(),
        "the same bytes after the crash"
    );
    assert_eq!(calls[0].retry_key, calls[1].retry_key);
    let accepted: Vec<String> = line.accepted().iter().flat_map(all_texts).collect();
    assert_eq!(accepted, ["太郎さん、今月のお知らせです。"]);
    ledger_entries_hold_no_personal_values(&firestore).await;
}

/// A manual send of a personalised scenario to 500 users while LINE fails 30%
/// of pushes: each user gets their own name, exactly once.
#[tokio::test]
async fn five_hundred_users_each_get_their_own_name_once_while_pushes_fail() {
    let app = app().await;
    let users: Vec<String> = (0..500).map(|_| events::new_user()).collect();
    let names: HashMap<&str, String> = users
        .iter()
        .enumerate()
        .map(|(index, user)| (user.as_str(), format!("利用者{index:03}")))
        .collect();
    for (user, name) in &names {
        app.line.set_profile(user, name);
    }
    app.line.fail_randomly(0.3);
    let ids: Vec<&str> = users.iter().map(String::as_str).collect();
    let response = app.admin_send("news", &ids, Some("news-500"), Some(ADMIN_TOKEN)).await;
    // 502 when some pushes are still to be retried (the sweeper does).
    let status = response.status().as_u16();
    assert!(status == 200 || status == 502, "{status}");
    app.firestore.settled(Duration::from_secs(240)).await;

    let received = pushed_texts(&app.line);
    assert_eq!(received.len(), 500, "every user got the message");
    each_named_once(&received, &names);
    let failed = app.line.calls().iter().filter(|call| call.status == 500).count();
    assert!(failed > 50, "LINE failed pushes ({failed})");
    // One profile call per user: the values were decided once.
    assert_eq!(app.line.profile_calls().len(), 500);
    let entries: Vec<Value> = app.firestore.list("outbound_ledger").await;
    assert_eq!(entries.len(), 500);
    assert!(entries.iter().all(|entry| entry["fields"].get("personal").is_none()));
}

/// A campaign of a personalised scenario goes by push: 120 recipients while
/// LINE fails a tenth of the pushes and loses the answer to another tenth it
/// delivered; each recipient gets their own name, once, and the campaign
/// counts all of them sent.
#[tokio::test]
async fn a_campaign_of_a_personalised_scenario_pushes_each_recipient_their_own_name_once() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            personal_scenarios(config);
            config.campaign_calls_per_second = 200;
        },
        ..TestOptions::default()
    })
    .await;
    let users = crate::campaigns::seed_users(&app.firestore, 120, |_| true, |_| false).await;
    let names: HashMap<&str, String> = users
        .iter()
        .enumerate()
        .map(|(index, user)| (user.as_str(), format!("会員{index:03}")))
        .collect();
    for (user, name) in &names {
        app.line.set_profile(user, name);
    }
    app.line.fail_randomly(0.1);
    app.line.fail_pushes_randomly(0.0, 0.1);
    let body = json!({ "scenarioId": "news", "audience": { "tags": { "anyOf": ["unsatisfied"] } } });
    let mut dry_body = body.clone();
    dry_body["dryRun"] = json!(true);
    let dry: Value = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .json(&dry_body)
        .send()
        .await
        .expect("service reachable")
        .json()
        .await
        .expect("JSON");
    assert_eq!(dry["delivery"], "push", "{dry}");
    let id = crate::campaigns::start_campaign(&app.address, &body, "c-personal").await;
    let status = crate::campaigns::wait_for_state(&app.address, &id, "done", Duration::from_secs(180)).await;
    assert_eq!(status["delivery"], "push", "{status}");
    assert_eq!(
        (status["sent"].as_u64(), status["failed"].as_u64()),
        (Some(120), Some(0)),
        "{status}"
    );

    let received = pushed_texts(&app.line);
    assert_eq!(received.len(), 120, "every recipient got it");
    each_named_once(&received, &names);
    let failed = app.line.calls().iter().filter(|call| call.status == 500).count();
    assert!(failed > 10, "LINE failed pushes ({failed})");
    // Nothing of a campaign's push goes through the outbound ledger.
    assert_eq!(app.firestore.count("outbound_ledger").await, 0);
}
