//! Our webhook fixtures and our outbound bodies, checked against LINE's own
//! OpenAPI schemas in `../shared/line-openapi/` (skipped with a notice when that
//! folder is absent, as on a machine without the shared checkout).

use crate::helpers::events::{self, card_tap_data, follow, postback, text};
use crate::helpers::line_stand_in::Call;
use crate::helpers::spawn_app;
use std::path::PathBuf;
use std::process::Command;

pub(crate) fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("LINE_SHARED_DIR").map_or_else(|| crate::helpers::repo_path("../shared"), PathBuf::from);
    if !(dir.join("line-openapi/messaging-api.yml").exists() && dir.join("tools/line_contract.py").exists()) {
        println!("NOTICE: {} has no LINE schemas; contract check skipped", dir.display());
        return None;
    }
    // line_contract.py reads the schemas with PyYAML, which scripts/test.sh installs
    // when it can; CI (REQUIRE_CONTRACT=1) must not skip for want of it.
    let required = std::env::var("REQUIRE_CONTRACT").is_ok_and(|value| value == "1");
    let yaml = Command::new("python3").args(["-c", "import yaml"]).output();
    if !yaml.is_ok_and(|output| output.status.success()) {
        assert!(!required, "REQUIRE_CONTRACT=1 but python3 cannot import yaml (PyYAML)");
        println!("NOTICE: python3 has no PyYAML; contract check skipped");
        return None;
    }
    Some(dir)
}

fn run_python(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let output = Command::new("python3").args(args).output().expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn webhook_fixtures_match_the_webhook_schema() {
    let Some(shared) = shared_dir() else { return };
    let checker = crate::helpers::repo_path("tests/contract/check_webhook.py");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(events::fixture_path(""))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 6);
    let mut args = vec![checker.as_os_str(), shared.as_os_str()];
    args.extend(fixtures.iter().map(|path| path.as_os_str()));
    let (ok, report) = run_python(&args);
    assert!(ok, "{report}");
    println!("{report}");
}

#[test]
fn the_checker_catches_a_broken_event() {
    // Guards against a checker that passes everything.
    let Some(shared) = shared_dir() else { return };
    let checker = crate::helpers::repo_path("tests/contract/check_webhook.py");
    let mut broken = events::fixture("text_message.json");
    broken["events"][0].as_object_mut().unwrap().remove("deliveryContext");
    broken["events"][0]["message"]
        .as_object_mut()
        .unwrap()
        .remove("quoteToken");
    let file = std::env::temp_dir().join(format!("broken-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, broken.to_string()).unwrap();
    let (ok, report) = run_python(&[checker.as_os_str(), shared.as_os_str(), file.as_os_str()]);
    std::fs::remove_file(file).unwrap();
    assert!(!ok, "{report}");
    assert!(
        report.contains("deliveryContext") && report.contains("quoteToken"),
        "{report}"
    );
}

#[tokio::test]
async fn every_outbound_body_matches_the_messaging_api_schema() {
    let Some(shared) = shared_dir() else { return };
    let app = spawn_app().await;
    let user = events::new_user();
    // Every message kind, by reply and by push.
    app.deliver(&follow(&user)).await; // text + flex
    app.deliver(&postback(&user, &card_tap_data("welcome", "card"))).await; // text + buttons
    app.answer(&user, "ask_food", "good").await; // buttons with a title
    app.answer(&user, "ask_drink", "tea").await; // end text
    let mut old = text(&user, "news");
    old["timestamp"] = (events::now_ms() - 120_000).into();
    app.deliver(&old).await; // push
    app.admin_send("welcome", &[&user], None, Some(crate::helpers::ADMIN_TOKEN))
        .await; // push of text + flex

    let calls = app.line.calls_for_contract();
    let kinds: std::collections::BTreeSet<String> = app
        .line
        .calls()
        .iter()
        .flat_map(Call::messages)
        .map(|message| message["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["flex", "template", "text"]);
    check_calls(&shared, &calls);
}

#[tokio::test]
async fn campaign_multicasts_match_the_messaging_api_schema() {
    let Some(shared) = shared_dir() else { return };
    let app = spawn_app().await;
    let users: Vec<String> = (0..3).map(|_| events::new_user()).collect();
    for user in &users {
        app.deliver(&follow(user)).await;
    }
    let response = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(crate::helpers::ADMIN_TOKEN)
        .header("Idempotency-Key", "contract")
        .json(&serde_json::json!({"scenarioId": "lunch"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    crate::helpers::wait_until(std::time::Duration::from_secs(30), || {
        app.line.accepted().iter().any(Call::is_multicast)
    })
    .await;
    let calls: Vec<serde_json::Value> = app
        .line
        .calls()
        .into_iter()
        .filter(Call::is_multicast)
        .map(|call| serde_json::json!({"method": "POST", "path": call.path, "body": call.body}))
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["body"]["to"].as_array().map(Vec::len), Some(3));
    check_calls(&shared, &calls);
}

/// Runs line_contract.py on `calls` (`[{"method", "path", "body"}]`).
fn check_calls(shared: &std::path::Path, calls: &impl serde::Serialize) {
    let file = std::env::temp_dir().join(format!("line-calls-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, serde_json::to_vec_pretty(calls).unwrap()).unwrap();
    let tool = shared.join("tools/line_contract.py");
    let (ok, report) = run_python(&[tool.as_os_str(), file.as_os_str()]);
    std::fs::remove_file(file).unwrap();
    assert!(ok, "{report}");
    assert!(report.contains("0 schema problems"), "{report}");
}
