//! Campaigns with a send time: scheduled, fired once across instances at their
//! time (moved out of the scenario's quiet hours), not at all when cancelled
//! first; refused in the past or more than 90 days ahead, except as the retry
//! of a campaign already created.

use crate::campaigns::{seed_users, start_campaign, wait_for_state};
use crate::helpers::firestore_rest::string_field;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app, spawn_app_with};
use chrono::{DateTime, Duration as TimeDelta, FixedOffset, Timelike, Utc};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Tokyo's offset: operators write their times in it.
fn tokyo() -> FixedOffset {
    FixedOffset::east_opt(9 * 3600).expect("a valid offset")
}

/// `from_now` ahead (to the next whole second), in Tokyo time, as an operator
/// would write it.
fn send_at(from_now: TimeDelta) -> String {
    let at = Utc::now() + from_now + TimeDelta::seconds(1);
    at.with_timezone(&tokyo())
        .with_nanosecond(0)
        .expect("a whole second")
        .to_rfc3339()
}

async fn post(app: &TestApp, body: &Value, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("service reachable")
}

async fn status(app: &TestApp, id: &str) -> Value {
    app.get_admin(&format!("/admin/campaigns/{id}"))
        .await
        .json()
        .await
        .expect("JSON")
}

fn at(raw: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(raw.as_str().expect("a time"))
        .expect("RFC 3339")
        .to_utc()
}

#[tokio::test]
async fn a_scheduled_campaign_fires_once_at_its_time_with_three_instances_running() {
    const USERS: usize = 30;
    let first = spawn_app().await;
    let _second = spawn_app_with(first.beside()).await;
    let _third = spawn_app_with(first.beside()).await;
    let users = seed_users(&first.firestore, USERS, |_| true, |_| false).await;
    let body = json!({"scenarioId": "lunch", "sendAt": send_at(TimeDelta::seconds(5))});
    let id = start_campaign(&first.address, &body, "lunch-at-5s").await;

    let scheduled = status(&first, &id).await;
    assert_eq!(scheduled["state"], "scheduled");
    let starts = at(&scheduled["startsAt"]);
    assert_eq!(starts, at(&body["sendAt"]), "lunch has no quiet hours");
    // Listed first, with its time, before a campaign created after it.
    let now_id = start_campaign(&first.address, &json!({"scenarioId": "news"}), "news-now").await;
    let listed: Value = first.get_admin("/admin/campaigns").await.json().await.unwrap();
    let listed = listed["campaigns"].as_array().expect("a list").clone();
    assert_eq!(listed[0]["campaignId"], json!(id));
    assert!(listed[0]["startsAt"].is_string());
    assert!(listed.iter().any(|campaign| campaign["campaignId"] == json!(now_id)));
    wait_for_state(&first.address, &now_id, "done", Duration::from_secs(30)).await;

    // Nothing of it before its time.
    let unit = json!([scheduled["aggregationUnit"].clone()]);
    while Utc::now() < starts - TimeDelta::milliseconds(300) {
        assert!(
            first
                .line
                .calls()
                .iter()
                .all(|call| call.body["customAggregationUnits"] != unit),
            "sent before its time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = wait_for_state(&first.address, &id, "done", Duration::from_secs(60)).await;
    assert!(Utc::now() >= starts);
    assert_eq!(done["sent"], json!(USERS));
    // Fired once: one plan of chunks, and each user got it once.
    let plans: HashSet<String> = first
        .firestore
        .list("campaign_chunks")
        .await
        .iter()
        .filter(|chunk| string_field(chunk, "campaignId").as_deref() == Some(id.as_str()))
        .filter_map(|chunk| string_field(chunk, "planId"))
        .collect();
    assert_eq!(plans.len(), 1, "fired more than once: {plans:?}");
    let lunch_calls: Vec<_> = first
        .line
        .accepted()
        .into_iter()
        .filter(|call| call.is_multicast() && call.body["customAggregationUnits"] == unit)
        .collect();
    let mut got: Vec<String> = lunch_calls
        .iter()
        .flat_map(crate::helpers::line_stand_in::Call::recipients)
        .collect();
    got.sort();
    let mut expected = users.clone();
    expected.sort();
    assert_eq!(got, expected, "each user once");
}

#[tokio::test]
async fn a_scheduled_campaign_cancelled_before_its_time_sends_nothing() {
    let app = spawn_app().await;
    seed_users(&app.firestore, 5, |_| true, |_| false).await;
    let body = json!({"scenarioId": "lunch", "sendAt": send_at(TimeDelta::seconds(5))});
    let id = start_campaign(&app.address, &body, "lunch-cancelled").await;
    let cancel: Value = reqwest::Client::new()
        .post(format!("{}/admin/campaigns/{id}/cancel", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(cancel["state"], "cancelled");
    // Well past its time (the campaign loop looks every 100 ms here).
    while Utc::now() < at(&body["sendAt"]) + TimeDelta::seconds(2) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = status(&app, &id).await;
    assert_eq!(after["state"], "cancelled");
    assert_eq!(after["sent"], json!(0));
    assert!(app.line.calls().is_empty(), "a cancelled campaign sent something");
    assert_eq!(app.firestore.count("campaign_chunks").await, 0, "nothing was planned");
}

#[tokio::test]
async fn send_times_past_or_too_far_are_refused_but_a_retry_after_the_time_is_the_same_campaign() {
    let app = spawn_app().await;
    seed_users(&app.firestore, 3, |_| true, |_| false).await;
    let cases = [
        (json!(send_at(TimeDelta::seconds(-60))), "has passed"),
        (json!(send_at(TimeDelta::days(91))), "more than 90 days ahead"),
        (json!("2026-12-07 10:00"), "is not a time with an offset"),
        (json!("2026-12-07T10:00:00"), "is not a time with an offset"),
    ];
    for (when, problem) in cases {
        let response = post(&app, &json!({"scenarioId": "lunch", "sendAt": when}), "refused").await;
        assert_eq!(response.status(), 400, "{when}");
        let text = response.text().await.unwrap();
        assert!(text.contains(problem), "{when}: {text}");
    }
    assert_eq!(
        app.firestore.count("campaigns").await,
        0,
        "a refused campaign is not stored"
    );

    // Created for a few seconds from now, then retried once its time has passed.
    let body = json!({"scenarioId": "lunch", "sendAt": send_at(TimeDelta::seconds(4))});
    let first = post(&app, &body, "retried").await;
    assert_eq!(first.status(), 202);
    let id = first.json::<Value>().await.unwrap()["campaignId"].clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Utc::now() < at(&body["sendAt"]) + TimeDelta::milliseconds(500) {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retry = post(&app, &body, "retried").await;
    assert_eq!(retry.status(), 202, "a retry of a created campaign");
    assert_eq!(retry.json::<Value>().await.unwrap()["campaignId"], id);
    let other = post(
        &app,
        &json!({"scenarioId": "news", "sendAt": body["sendAt"]}),
        "retried",
    )
    .await;
    assert_eq!(other.status(), 422, "the key with another body");
    assert_eq!(app.firestore.count("campaigns").await, 1);
    wait_for_state(&app.address, id.as_str().unwrap(), "done", Duration::from_secs(30)).await;
}

#[tokio::test]
async fn a_send_time_inside_the_quiet_hours_waits_for_their_end() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.scenarios_dir = crate::helpers::repo_path("scenarios"),
        ..TestOptions::default()
    })
    .await;
    // ja_followup is quiet 21:00-09:00 in Tokyo: 23:30 tomorrow waits for 09:00.
    let tomorrow = (Utc::now().with_timezone(&tokyo()) + TimeDelta::days(1)).date_naive();
    let late = tomorrow
        .and_hms_opt(23, 30, 0)
        .expect("a time")
        .and_local_timezone(tokyo())
        .single()
        .expect("one instant");
    let morning = (tomorrow + TimeDelta::days(1))
        .and_hms_opt(9, 0, 0)
        .expect("a time")
        .and_local_timezone(tokyo())
        .single()
        .expect("one instant");
    let body = json!({"scenarioId": "ja_followup", "sendAt": late.to_rfc3339(), "dryRun": true});
    let dry: Value = post(&app, &body, "unused").await.json().await.unwrap();
    assert_eq!(at(&dry["startsAt"]), morning.to_utc(), "{dry}");
    let id = start_campaign(
        &app.address,
        &json!({"scenarioId": "ja_followup", "sendAt": late.to_rfc3339()}),
        "followup-late",
    )
    .await;
    let scheduled = status(&app, &id).await;
    assert_eq!(scheduled["state"], "scheduled");
    assert_eq!(at(&scheduled["sendAt"]), late.to_utc());
    assert_eq!(at(&scheduled["startsAt"]), morning.to_utc());
}
