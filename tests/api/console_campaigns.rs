//! A campaign cancelled from the console (issue 27 §3): its page offers the
//! cancel to editors, a confirmation says what stops, the confirmed cancel
//! stops it and is audited as the operator's; viewers cannot.

use crate::helpers::{ADMIN_TOKEN, spawn_app};
use crate::operator_access::{EDITOR, VIEWER, add_staff, csrf_of, get, post, session};
use chrono::{TimeDelta, Timelike, Utc};
use serde_json::json;

#[tokio::test]
async fn an_editor_cancels_a_scheduled_campaign_after_a_confirmation() {
    let app = spawn_app().await;
    add_staff(&app);
    let send_at = (Utc::now() + TimeDelta::days(2))
        .with_nanosecond(0)
        .expect("a whole second")
        .to_rfc3339();
    let created = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", "console-cancel")
        .json(&json!({"scenarioId": "news", "sendAt": send_at}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 202);
    let id = created.json::<serde_json::Value>().await.unwrap()["campaignId"]
        .as_str()
        .unwrap()
        .to_owned();
    let page = format!("/console/campaigns/{id}");
    let cancel = format!("{page}/cancel");

    // A viewer sees the campaign, not the cancel, and cannot use it.
    let viewer = session(&app.address, VIEWER).await;
    let seen = get(&app.address, &page, &viewer).await.text().await.unwrap();
    assert!(seen.contains("scheduled") && !seen.contains("id=\"cancel-campaign\""));
    assert_eq!(get(&app.address, &cancel, &viewer).await.status(), 403);
    let viewer_csrf = csrf_of(&app.address, &viewer).await;
    assert_eq!(
        post(&app.address, &cancel, &viewer, &[("csrf", &viewer_csrf)])
            .await
            .status(),
        403
    );

    // The editor: the page offers it, the confirmation says what stops,
    // and nothing stops before the confirmation.
    let editor = session(&app.address, EDITOR).await;
    assert!(
        get(&app.address, &page, &editor)
            .await
            .text()
            .await
            .unwrap()
            .contains("id=\"cancel-campaign\"")
    );
    let confirm = get(&app.address, &cancel, &editor).await;
    assert_eq!(confirm.status(), 200);
    assert!(
        confirm
            .text()
            .await
            .unwrap()
            .contains("Cancelling stops what has not been sent yet")
    );
    let state = || async {
        crate::helpers::admin_json(&app.address, &format!("/admin/campaigns/{id}")).await["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(state().await, "scheduled");
    let csrf = csrf_of(&app.address, &editor).await;
    let done = post(&app.address, &cancel, &editor, &[("csrf", &csrf)]).await;
    assert_eq!(done.status(), 200);
    assert!(done.text().await.unwrap().contains("The campaign is cancel"));
    assert!(["cancelling", "cancelled"].contains(&state().await.as_str()));
    // Again: it says so, and changes nothing.
    let again = post(&app.address, &cancel, &editor, &[("csrf", &csrf)]).await;
    assert_eq!(again.status(), 200);

    let entries = app.firestore.list("audit_log").await;
    let cancels: Vec<_> = entries
        .iter()
        .filter(|entry| entry["fields"]["action"]["stringValue"] == "campaign_cancel")
        .collect();
    assert_eq!(cancels.len(), 2);
    assert!(
        cancels
            .iter()
            .all(|entry| entry["fields"]["operator"]["stringValue"] == EDITOR
                && entry["fields"]["via"]["stringValue"] == "console"
                && entry["fields"]["touched"]["arrayValue"]["values"][0]["stringValue"] == id.as_str())
    );
}
