//! A campaign against the account's monthly message quota: the dry run and the
//! status show what it will send beside what LINE says is left, and a campaign
//! that would go beyond it is refused with the figures unless the operator
//! allows it.

use crate::campaigns::{seed_users, start_campaign, wait_for_state};
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app, spawn_app_with};
use serde_json::{Value, json};
use std::time::Duration;

async fn post(app: &TestApp, body: &Value, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .json(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.expect("service reachable")
}

#[tokio::test]
async fn a_campaign_beyond_the_months_quota_is_refused_with_the_figures_unless_allowed() {
    // The step fixtures' `remind`: the question, one reminder and a closing
    // message, 3 messages a recipient.
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/steps"),
        ..TestOptions::default()
    })
    .await;
    seed_users(&app.firestore, 10, |_| true, |_| false).await;
    app.line.set_quota(Some(1000), 980);

    let dry: Value = post(&app, &json!({"scenarioId": "remind", "dryRun": true}), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(dry["messages"], json!(30), "{dry}");
    assert_eq!(dry["quota"], json!({"limit": 1000, "used": 980, "remaining": 20}));

    let refused = post(&app, &json!({"scenarioId": "remind"}), Some("over")).await;
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["reason"], "over_quota", "{body}");
    assert_eq!(body["messages"], json!(30));
    assert_eq!(body["quota"], json!({"limit": 1000, "used": 980, "remaining": 20}));
    assert!(body["error"].as_str().unwrap().contains("allowOverQuota"), "{body}");
    assert_eq!(
        app.firestore.count("campaigns").await,
        0,
        "a refused campaign is not stored"
    );

    // The operator knows: it goes out, and its status shows the figures.
    let allowed = json!({"scenarioId": "remind", "allowOverQuota": true});
    let id = start_campaign(&app.address, &allowed, "over-allowed").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    assert_eq!(status["sent"], json!(10));
    assert_eq!(status["quota"]["messages"], json!(30), "{status}");
    // A retry of the created campaign is the same campaign, whatever the quota now.
    let retry = post(&app, &allowed, Some("over-allowed")).await;
    assert_eq!(retry.status(), 202);
}

#[tokio::test]
async fn within_the_quota_or_without_a_limit_a_campaign_goes_out() {
    let app = spawn_app().await;
    seed_users(&app.firestore, 5, |_| true, |_| false).await;
    // lunch asks one question: 1 message a recipient; 5 left is enough.
    app.line.set_quota(Some(100), 95);
    let id = start_campaign(&app.address, &json!({"scenarioId": "lunch"}), "within").await;
    wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    // Those 5 used the rest: the next one is refused.
    let refused = post(&app, &json!({"scenarioId": "lunch"}), Some("next")).await;
    assert_eq!(refused.status(), 409);
    // No limit: nothing to count against.
    app.line.set_quota(None, 0);
    let id = start_campaign(&app.address, &json!({"scenarioId": "lunch"}), "unlimited").await;
    wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
}
