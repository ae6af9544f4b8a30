//! Each kind of failure answers its own status on the admin API: a Firestore
//! that does not answer 503 (try again later), a request that can never
//! succeed 400, a record that kept changing under the call 409 (try again
//! now). A value the service cannot encode answers 500, but only a defect of
//! ours reaches that, so the mapping's unit test in `http::admin` covers it.
//! The webhook's 503 while Firestore is unreachable is in `bad_input.rs`.

use crate::helpers::firestore_rest::FirestoreRest;
use crate::helpers::tcp_proxy::TcpProxy;
use crate::helpers::{ADMIN_TOKEN, TestOptions, emulator_host, events, spawn_app, spawn_app_with};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A campaign id: 40 hex digits.
const CAMPAIGN: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

async fn error_of(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("a JSON error body");
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {body}"))
        .to_owned()
}

#[tokio::test]
async fn an_unreachable_firestore_answers_503_and_the_same_call_works_once_it_is_back() {
    let proxy = TcpProxy::start(emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        ..TestOptions::default()
    })
    .await;

    proxy.cut();
    let listed = app.get_admin("/admin/campaigns").await;
    assert_eq!(listed.status(), 503);
    assert!(
        error_of(listed)
            .await
            .starts_with("Firestore is unavailable; try again"),
        "the error says what failed"
    );
    let cancelled = app.post_admin(&format!("/admin/campaigns/{CAMPAIGN}/cancel")).await;
    assert_eq!(cancelled.status(), 503);
    let sent = app
        .admin_send("lunch", &[&events::new_user()], None, Some(ADMIN_TOKEN))
        .await;
    assert_eq!(sent.status(), 503);
    assert!(app.line.calls().is_empty(), "nothing was sent without its ledger entry");

    proxy.restore();
    assert_eq!(app.get_admin("/admin/campaigns").await.status(), 200);
    assert_eq!(
        app.post_admin(&format!("/admin/campaigns/{CAMPAIGN}/cancel"))
            .await
            .status(),
        404,
        "no such campaign, now that Firestore answers"
    );
}

#[tokio::test]
async fn a_request_that_can_never_succeed_answers_400_and_a_malformed_id_404() {
    let app = spawn_app().await;

    let too_fast = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", "too-fast")
        .json(&json!({ "scenarioId": "lunch", "callsPerSecond": 0 }))
        .send()
        .await
        .expect("service reachable");
    assert_eq!(too_fast.status(), 400);
    assert!(error_of(too_fast).await.contains("callsPerSecond"));
    let bad_user = app.admin_send("lunch", &["not-a-user"], None, Some(ADMIN_TOKEN)).await;
    assert_eq!(bad_user.status(), 400);
    // Not 40 hex digits: no campaign can have that id, so nothing is read.
    for id in ["not-hex", &CAMPAIGN[..39], &format!("{CAMPAIGN}0")] {
        let response = app.post_admin(&format!("/admin/campaigns/{id}/cancel")).await;
        assert_eq!(response.status(), 404, "{id}");
    }
    assert_eq!(app.firestore.count("campaigns").await, 0);
    assert!(app.line.calls().is_empty());
}

/// A sending campaign leased to another instance (so this one never drives
/// it), written as the service writes campaigns.
fn campaign_leased_elsewhere() -> Value {
    json!({
        "scenarioId": {"stringValue": "lunch"},
        "scenarioVersion": {"integerValue": "1"},
        "run": {"stringValue": "run-elsewhere"},
        "idempotencyKey": {"stringValue": "elsewhere"},
        "requestHash": {"stringValue": "0"},
        "audience": {"stringValue": "{}"},
        "skipAnswered": {"booleanValue": false},
        "callsPerSecond": {"integerValue": "1"},
        "messages": {"stringValue": "[]"},
        "aggregationUnit": {"stringValue": "elsewhere"},
        "state": {"stringValue": "sending"},
        "planned": {"integerValue": "0"},
        "chunks": {"integerValue": "0"},
        "leaseOwner": {"stringValue": "another-instance"},
        "leaseUntil": {"timestampValue": "2099-01-01T00:00:00Z"},
        "attempts": {"integerValue": "1"},
        "createdAt": {"timestampValue": "2026-01-01T00:00:00Z"},
    })
}

#[tokio::test]
async fn a_campaign_that_keeps_changing_under_a_cancel_answers_409_not_503() {
    let proxy = TcpProxy::start(emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        ..TestOptions::default()
    })
    .await;
    app.firestore
        .write_all(&[("campaigns".to_owned(), CAMPAIGN.to_owned(), campaign_leased_elsewhere())])
        .await;

    // Each of the cancel's rounds reads the campaign and writes conditional on
    // what it read; with 100 ms each way between the service and Firestore,
    // writers straight to the emulator change it in between, every round.
    proxy.set_latency(Duration::from_millis(100));
    let stop = Arc::new(AtomicBool::new(false));
    let touches = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let firestore = FirestoreRest::new(&emulator_host(), &app.project_id);
            let (stop, touches) = (stop.clone(), touches.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let touch = touches.fetch_add(1, Ordering::SeqCst);
                    firestore
                        .patch(
                            "campaigns",
                            CAMPAIGN,
                            &[("touch", json!({"integerValue": touch.to_string()}))],
                        )
                        .await;
                }
            })
        })
        .collect();
    let contended = app.post_admin(&format!("/admin/campaigns/{CAMPAIGN}/cancel")).await;
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.await.expect("the writer ends");
    }
    assert_eq!(contended.status(), 409, "contention is no Firestore outage");
    assert_eq!(error_of(contended).await, "the campaign kept changing; try again");
    assert!(touches.load(Ordering::SeqCst) >= 4, "the campaign did change meanwhile");

    // Once nothing else writes, the same call succeeds: it was worth retrying.
    proxy.set_latency(Duration::ZERO);
    let cancelled = app.post_admin(&format!("/admin/campaigns/{CAMPAIGN}/cancel")).await;
    assert_eq!(cancelled.status(), 200);
    let body: Value = cancelled.json().await.expect("JSON");
    assert_eq!(body["state"], "cancelling");
}
