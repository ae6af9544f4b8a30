//! The audit log (issue 27 §2): each write through the API, the console and
//! the operators command leaves one entry saying who, what, when, the
//! result and the ids touched; owners read it at `GET /admin/audit` and on
//! the console's audit page, newest first and filtered; nobody else can, and
//! nothing can change it.

use crate::helpers::{ADMIN_TOKEN, TestApp, events, spawn_app};
use crate::operator_access::{EDITOR, OWNER, VIEWER, add_staff, csrf_of, get, make_token, post, session};
use serde_json::{Value, json};

async fn call(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> u16 {
    let mut request = app
        .http
        .request(method, format!("{}{path}", app.address))
        .bearer_auth(token);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("service reachable").status().as_u16()
}

async fn audit(app: &TestApp, query: &str, token: &str) -> (u16, Vec<Value>) {
    let response = app
        .http
        .get(format!("{}/admin/audit{query}", app.address))
        .bearer_auth(token)
        .send()
        .await
        .expect("service reachable");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (status, body["entries"].as_array().cloned().unwrap_or_default())
}

/// The one entry of `action` (asserted one).
fn only<'a>(entries: &'a [Value], action: &str) -> &'a Value {
    let found: Vec<&Value> = entries.iter().filter(|entry| entry["action"] == action).collect();
    assert_eq!(found.len(), 1, "{action}: {found:#?}");
    found[0]
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn every_action_leaves_one_entry_with_who_what_and_the_result() {
    let app = spawn_app().await;
    add_staff(&app);
    let editor = session(&app.address, EDITOR).await;
    let owner = session(&app.address, OWNER).await;
    let (_, token) = make_token(&app.address, &editor, "editor").await;
    let token = token.expect("an editor's token");
    let users = [events::new_user(), events::new_user()];

    // The API, by the admin token and by the editor's token.
    let send = json!({ "userIds": users });
    let path = "/admin/scenarios/news/send";
    assert_eq!(
        call(
            &app,
            reqwest::Method::POST,
            path,
            ADMIN_TOKEN,
            Some("audit-send"),
            Some(send.clone())
        )
        .await,
        200
    );
    let campaign = json!({"scenarioId": "news", "audience": {"tags": {"anyOf": ["nobody-has-this"]}}});
    let created = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(&token)
        .header("Idempotency-Key", "audit-campaign")
        .json(&campaign)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 202);
    let campaign_id = created.json::<Value>().await.unwrap()["campaignId"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancel = format!("/admin/campaigns/{campaign_id}/cancel");
    let cancelled = call(&app, reqwest::Method::POST, &cancel, &token, None, None).await;
    let replay = "/admin/dead-letters/no-such-letter/replay";
    assert_eq!(call(&app, reqwest::Method::POST, replay, &token, None, None).await, 404);
    let timer = format!("/admin/users/{}/timers/{}", users[0], "0".repeat(40));
    assert_eq!(
        call(&app, reqwest::Method::DELETE, &timer, &token, None, None).await,
        404
    );
    let link = "/admin/rich-menus/member/link";
    let linked = call(
        &app,
        reqwest::Method::POST,
        link,
        &token,
        Some("audit-link"),
        Some(json!({})),
    )
    .await;
    let synced = call(
        &app,
        reqwest::Method::POST,
        "/admin/followers/sync",
        ADMIN_TOKEN,
        None,
        None,
    )
    .await;
    let export = "/admin/scenarios/news/answers.csv";
    assert_eq!(
        call(&app, reqwest::Method::GET, export, ADMIN_TOKEN, None, None).await,
        200
    );
    // The console, by signed-in operators.
    let csrf = csrf_of(&app.address, &editor).await;
    let console_replay = post(
        &app.address,
        "/console/dead-letters/no-such-letter/replay",
        &editor,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(console_replay.status(), 303);
    assert_eq!(
        get(&app.address, "/console/scenarios/news/answers.csv", &owner)
            .await
            .status(),
        200
    );

    // Cancelled, or done already (an audience of nobody); a menu not deployed
    // is 404; the sync starts or is running. None of them failed.
    assert!([200, 409].contains(&cancelled), "{cancelled}");
    assert_eq!(linked, 404);
    assert_eq!(synced, 202);
    // More of the operators command and the console: a role change, a
    // disabled operator, a revoked token.
    crate::operator_access::operators(&app, &["set-role", VIEWER, "editor"], "");
    crate::operator_access::operators(&app, &["disable", VIEWER], "");
    let tokens_page = get(&app.address, "/console/tokens", &editor)
        .await
        .text()
        .await
        .unwrap();
    let token_id = tokens_page
        .split("data-token=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let csrf = csrf_of(&app.address, &editor).await;
    let revoked = post(
        &app.address,
        &format!("/console/tokens/{token_id}/revoke"),
        &editor,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(revoked.status(), 200);

    let (status, entries) = audit(&app, "", ADMIN_TOKEN).await;
    assert_eq!(status, 200);
    // No message text: the news scenario's message is nowhere in the log.
    let stored = serde_json::to_string(&app.firestore.list("audit_log").await).unwrap();
    assert!(!stored.contains("cafeteria"), "message text in the audit log");
    // Newest first.
    let times: Vec<i64> = entries.iter().map(|entry| entry["atMs"].as_i64().unwrap()).collect();
    assert!(times.windows(2).all(|pair| pair[0] >= pair[1]), "{times:?}");

    let sent = only(&entries, "manual_send");
    assert_eq!(sent["operator"], "ADMIN_TOKEN");
    assert_eq!(sent["via"], "api");
    assert_eq!(
        (sent["result"].as_str(), sent["status"].as_u64()),
        (Some("done"), Some(200))
    );
    assert_eq!(sent["route"], "POST /admin/scenarios/{scenario_id}/send");
    assert_eq!(sent["summary"]["scenarioId"], "news");
    assert_eq!(sent["summary"]["users"], "2");
    let mut touched = strings(&sent["touched"]);
    touched.sort();
    let mut expected = users.to_vec();
    expected.sort();
    assert_eq!(touched, expected);

    let made = only(&entries, "campaign_create");
    assert_eq!(made["operator"], EDITOR);
    assert_eq!(
        made["token"].as_str().map(|prefix| token.starts_with(prefix)),
        Some(true)
    );
    assert_eq!(strings(&made["touched"]), vec![campaign_id.clone()]);
    assert_eq!(made["status"], 202);
    let cancel_entry = only(&entries, "campaign_cancel");
    assert_eq!(
        (cancel_entry["status"].as_u64(), strings(&cancel_entry["touched"])),
        (Some(u64::from(cancelled)), vec![campaign_id.clone()])
    );

    let replays: Vec<&Value> = entries.iter().filter(|entry| entry["action"] == "replay").collect();
    assert_eq!(replays.len(), 2, "one by the API, one by the console");
    for entry in &replays {
        assert_eq!(entry["operator"], EDITOR);
        assert_eq!(
            (entry["result"].as_str(), entry["status"].as_u64()),
            (Some("refused"), Some(404))
        );
        assert_eq!(strings(&entry["touched"]), ["no-such-letter"]);
    }
    assert_eq!(replays.iter().filter(|entry| entry["via"] == "console").count(), 1);
    assert_eq!(only(&entries, "timer_cancel")["status"], 404);
    assert_eq!(
        only(&entries, "rich_menu_link")["status"].as_u64(),
        Some(u64::from(linked))
    );
    assert_eq!(
        only(&entries, "followers_sync")["status"].as_u64(),
        Some(u64::from(synced))
    );
    let exports: Vec<&Value> = entries.iter().filter(|entry| entry["action"] == "export").collect();
    assert_eq!(exports.len(), 2);
    assert!(
        exports
            .iter()
            .any(|entry| entry["operator"] == OWNER && entry["via"] == "console")
    );
    assert!(
        exports
            .iter()
            .any(|entry| entry["operator"] == "ADMIN_TOKEN" && entry["via"] == "api")
    );
    let token_made = only(&entries, "api_token_create");
    assert_eq!(
        (token_made["operator"].as_str(), token_made["summary"]["role"].as_str()),
        (Some(EDITOR), Some("editor"))
    );
    // The operators command's changes, each in its own commit.
    let added: Vec<&Value> = entries
        .iter()
        .filter(|entry| entry["action"] == "operator_add")
        .collect();
    assert_eq!(added.len(), 3);
    assert!(
        added
            .iter()
            .all(|entry| entry["operator"] == "cli" && entry["via"] == "cli" && entry["result"] == "done")
    );
    let role = only(&entries, "operator_set_role");
    assert_eq!(
        (role["summary"]["email"].as_str(), role["summary"]["role"].as_str()),
        (Some(VIEWER), Some("editor"))
    );
    assert_eq!(only(&entries, "operator_disable")["result"], "done");
    let revoke = only(&entries, "api_token_revoke");
    assert_eq!(
        (revoke["operator"].as_str(), strings(&revoke["touched"])),
        (Some(EDITOR), vec![token_id.clone()])
    );
    // Every entry was completed with its result.
    assert!(entries.iter().all(|entry| entry["result"] != "pending"), "{entries:#?}");

    // A retry is an entry of its own, and still sends nothing twice.
    assert_eq!(
        call(
            &app,
            reqwest::Method::POST,
            path,
            ADMIN_TOKEN,
            Some("audit-send"),
            Some(send)
        )
        .await,
        200
    );
    let (_, sends) = audit(&app, "?action=manual_send", ADMIN_TOKEN).await;
    assert_eq!(sends.len(), 2);
    let pushed = app
        .line
        .accepted()
        .iter()
        .filter(|call| call.to().is_some_and(|to| users.iter().any(|user| user == to)))
        .count();
    assert_eq!(pushed, 2, "one push per user");

    // Filters: by operator, by action, by days (Tokyo).
    let (_, by_editor) = audit(&app, &format!("?operator={EDITOR}"), ADMIN_TOKEN).await;
    assert!(!by_editor.is_empty() && by_editor.iter().all(|entry| entry["operator"] == EDITOR));
    let (_, typed) = audit(&app, "?operator=Staff@Shop.Example", ADMIN_TOKEN).await;
    assert_eq!(typed.len(), by_editor.len(), "an email however typed");
    let (_, both) = audit(&app, &format!("?operator={EDITOR}&action=replay"), ADMIN_TOKEN).await;
    assert_eq!(both.len(), 2);
    let (_, one) = audit(&app, "?limit=1", ADMIN_TOKEN).await;
    assert_eq!(one.len(), 1);
    assert_eq!(one[0]["id"], sends[0]["id"], "the newest");
    assert_eq!(audit(&app, "?limit=501", ADMIN_TOKEN).await.0, 400);
    let (_, later) = audit(&app, "?from=2999-01-01", ADMIN_TOKEN).await;
    assert!(later.is_empty());
    let (_, earlier) = audit(&app, "?to=2000-01-01", ADMIN_TOKEN).await;
    assert!(earlier.is_empty());
    // The days (Tokyo, inclusive) from the oldest entry's to the retry's hold them all.
    let day = |entry: &Value| entry["at"].as_str().unwrap()[..10].to_owned();
    let (first, last) = (day(entries.last().unwrap()), day(&sends[0]));
    assert!(entries.last().unwrap()["at"].as_str().unwrap().ends_with("+09:00"));
    let (_, in_days) = audit(&app, &format!("?from={first}&to={last}&limit=500"), ADMIN_TOKEN).await;
    assert_eq!(in_days.len(), entries.len() + 1, "every entry, the retry included");
    assert_eq!(audit(&app, "?from=yesterday", ADMIN_TOKEN).await.0, 400);
}

#[tokio::test]
async fn only_owners_read_the_audit_log_and_nothing_can_change_it() {
    let app = spawn_app().await;
    add_staff(&app);
    let editor = session(&app.address, EDITOR).await;
    let viewer = session(&app.address, VIEWER).await;
    let owner = session(&app.address, OWNER).await;
    let (_, editor_token) = make_token(&app.address, &editor, "editor").await;
    let editor_token = editor_token.unwrap();
    let owner_token = make_token(&app.address, &owner, "owner").await.1.unwrap();
    assert_eq!(audit(&app, "", &editor_token).await.0, 403);
    let (status, entries) = audit(&app, "", &owner_token).await;
    assert_eq!(status, 200);
    assert!(!entries.is_empty());
    for cookie in [&editor, &viewer] {
        assert_eq!(get(&app.address, "/console/audit", cookie).await.status(), 403);
    }
    let page = get(&app.address, "/console/audit?action=api_token_create", &owner).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert_eq!(
        page.matches("data-action=\"api_token_create\"").count(),
        2,
        "the two tokens made"
    );
    assert!(!page.contains("data-action=\"operator_add\""), "filtered");
    // No route edits or deletes an entry.
    let id = entries[0]["id"].as_str().unwrap();
    for method in [
        reqwest::Method::DELETE,
        reqwest::Method::PUT,
        reqwest::Method::PATCH,
        reqwest::Method::POST,
    ] {
        for path in [format!("/admin/audit/{id}"), "/admin/audit".to_owned()] {
            let status = call(&app, method.clone(), &path, ADMIN_TOKEN, None, Some(json!({}))).await;
            assert!(status == 404 || status == 405, "{method} {path}: {status}");
        }
    }
    assert_eq!(
        audit(&app, "", ADMIN_TOKEN).await.1.len(),
        entries.len(),
        "reads and refused routes leave no entry"
    );
}
