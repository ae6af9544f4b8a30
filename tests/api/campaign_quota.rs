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

#[tokio::test]
async fn a_test_send_reaches_only_the_listed_users_marked_as_a_test_and_counts_nothing() {
    let app = spawn_app().await;
    let users = seed_users(&app.firestore, 5, |_| true, |_| false).await;
    let testers = [users[0].clone(), users[1].clone()];
    let body = json!({"scenarioId": "lunch", "testTo": testers});
    let response = post(&app, &body, Some("lunch-test")).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["test"], json!(true));
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|result| result["result"] == "sent"), "{answer}");
    let calls = app.line.accepted();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|call| !call.is_multicast()
        && testers.contains(&call.to().unwrap_or_default().to_owned())
        && call.texts()[0].starts_with("【テスト配信】")));
    // Retried with the same key: LINE already took both, nothing twice.
    let again: Value = post(&app, &body, Some("lunch-test")).await.json().await.unwrap();
    assert!(
        again["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|result| result["result"] == "already_sent"),
        "{again}"
    );
    assert_eq!(app.line.accepted().len(), 2);
    // The tester tries the survey: taps on a test's buttons record nothing
    // and send nothing (no answer, tag, run, timer, follow-up).
    let tapped: Vec<String> = calls[0]
        .messages()
        .iter()
        .filter_map(|message| message["template"]["actions"][0]["data"].as_str().map(str::to_owned))
        .collect();
    assert!(!tapped.is_empty(), "the test carries the survey's buttons");
    let tester = calls[0].to().expect("a push").to_owned();
    let before = app.firestore.get("users", &tester).await;
    for data in &tapped {
        app.deliver(&app.sent_now(&crate::helpers::events::postback(&tester, data)))
            .await;
    }
    assert_eq!(app.line.accepted().len(), 2, "no follow-up to a test's tap");
    let after = app.firestore.get("users", &tester).await;
    assert_eq!(
        before.as_ref().map(|user| &user["fields"]),
        after.as_ref().map(|user| &user["fields"]),
        "the tester's record is untouched"
    );
    // No campaign, no chunk, no run, no count.
    for collection in [
        "campaigns",
        "campaign_chunks",
        "scenario_answers",
        "survey_responses",
        "timers",
        "open_questions",
        "result_counters",
        "outbound_ledger",
    ] {
        assert_eq!(app.firestore.count(collection).await, 0, "{collection}");
    }

    // Bad lists are refused, and so is a test that is also a dry run.
    let eleven: Vec<String> = (0..11).map(|_| crate::helpers::events::new_user()).collect();
    for (bad, problem) in [
        (json!({"scenarioId": "lunch", "testTo": []}), "testTo must hold 1 to 10"),
        (
            json!({"scenarioId": "lunch", "testTo": eleven}),
            "testTo must hold 1 to 10",
        ),
        (
            json!({"scenarioId": "lunch", "testTo": ["someone"]}),
            "not a LINE user id",
        ),
        (
            json!({"scenarioId": "lunch", "testTo": [testers[0]], "dryRun": true}),
            "give one of them",
        ),
    ] {
        let response = post(&app, &bad, None).await;
        assert_eq!(response.status(), 400, "{bad}");
        let text = response.text().await.unwrap();
        assert!(text.contains(problem), "{bad}: {text}");
    }
}
