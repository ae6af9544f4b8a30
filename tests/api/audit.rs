//! The audit log (issue 27 §2): each write through the API, the console and
//! the operators command leaves one entry saying who, what, when, the
//! result and the ids touched; owners read it at `GET /admin/audit` and on
//! the console's audit page, newest first and filtered; nobody else can, and
//! nothing can change it.

use crate::helpers::firestore_rest::{document_id, string_field};
use crate::helpers::line_stand_in::Fault;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, events, spawn_app, spawn_app_with};
use crate::operator_access::{EDITOR, OWNER, VIEWER, add_staff, csrf_of, get, make_token, post, session};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

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

// ---- Each action done, and its entry read field by field ----

/// The `operators/{id}` of `email`: the id an entry names for its operator.
async fn operator_doc_id(app: &TestApp, email: &str) -> String {
    let records = app.firestore.list("operators").await;
    let record = records
        .iter()
        .find(|record| string_field(record, "email").as_deref() == Some(email))
        .unwrap_or_else(|| panic!("no operator {email}: {records:#?}"));
    document_id(record)
}

/// The stored `audit_log/{id}` of a listed entry (it also holds what the
/// listing leaves out: the operator's id).
async fn stored_entry(app: &TestApp, entry: &Value) -> Value {
    let id = entry["id"].as_str().expect("an entry's id");
    app.firestore.get("audit_log", id).await.expect("the stored entry")
}

/// `entry` was made by `email` (with the personal `token`, or signed in when
/// `None`): its email, its token's prefix only, and its operator's id.
async fn assert_made_by(app: &TestApp, entry: &Value, email: &str, token: Option<&str>) {
    assert_eq!(entry["operator"], email, "{entry:#}");
    match token {
        Some(token) => {
            // `lsv_` and 8 characters: never the secret itself.
            let prefix: String = token.chars().take(12).collect();
            assert!(prefix.starts_with("lsv_") && token.len() > prefix.len(), "{token}");
            assert_eq!(entry["token"], prefix.as_str(), "{entry:#}");
        }
        None => assert_eq!(entry["token"], Value::Null, "{entry:#}"),
    }
    let stored = stored_entry(app, entry).await;
    assert_eq!(
        string_field(&stored, "operatorId"),
        Some(operator_doc_id(app, email).await),
        "{stored:#}"
    );
    if let Some(token) = token {
        assert!(!stored.to_string().contains(token), "the token's secret is stored");
    }
}

/// The whole audit log as stored: none of `texts` is in it.
async fn assert_nowhere_in_the_log(app: &TestApp, texts: &[&str]) {
    let stored = serde_json::to_string(&app.firestore.list("audit_log").await).unwrap();
    for text in texts {
        assert!(!stored.contains(text), "{text:?} is in the audit log");
    }
}

/// `entry`'s summary is exactly `expected` (every value a string).
fn assert_summary(entry: &Value, expected: Value) {
    assert_eq!(entry["summary"], expected, "{entry:#}");
}

/// `entry` ended `result` with `status`, and was completed.
fn assert_ended(entry: &Value, result: &str, status: u16) {
    assert_eq!(
        (entry["result"].as_str(), entry["status"].as_u64()),
        (Some(result), Some(u64::from(status))),
        "{entry:#}"
    );
    assert!(entry["completedAt"].is_string(), "{entry:#}");
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

#[tokio::test]
async fn an_operators_password_reset_from_the_shell_leaves_its_entry() {
    const NEW_PASSWORD: &str = "a brand new passphrase 2026";
    let app = spawn_app().await;
    add_staff(&app);
    let viewer_id = operator_doc_id(&app, VIEWER).await;
    let hash_of = |records: Vec<Value>| {
        records
            .iter()
            .find(|record| string_field(record, "email").as_deref() == Some(VIEWER))
            .and_then(|record| string_field(record, "passwordHash"))
            .expect("the viewer's hash")
    };
    let before = hash_of(app.firestore.list("operators").await);

    // Typed as an operator might: the entry names the operator as stored.
    crate::operator_access::operators(
        &app,
        &["reset-password", " Parttime@Shop.Example "],
        &format!("{NEW_PASSWORD}\n"),
    );
    let after = hash_of(app.firestore.list("operators").await);
    assert_ne!(before, after, "the password was reset");
    // An unknown operator: refused, and an entry of its own.
    let unknown = crate::operators::operators(&app.project_id, &["reset-password", "nobody@shop.example"], "");
    assert_ne!(unknown.status.code(), Some(0), "{}", crate::operators::shown(&unknown));

    let (status, entries) = audit(&app, "?action=operator_reset_password", ADMIN_TOKEN).await;
    assert_eq!(status, 200);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    let reset = entries
        .iter()
        .find(|entry| entry["summary"]["email"] == VIEWER)
        .expect("the viewer's reset");
    assert_eq!(
        (reset["via"].as_str(), reset["operator"].as_str()),
        (Some("cli"), Some("cli"))
    );
    assert_eq!(reset["token"], Value::Null);
    assert_eq!(reset["route"], "line-survey operators reset-password");
    assert_summary(reset, json!({ "email": VIEWER }));
    assert_ended(reset, "done", 200);
    assert_eq!(strings(&reset["touched"]), vec![viewer_id.clone()]);
    assert_eq!(reset["touchedCount"], 1);
    let stored = stored_entry(&app, reset).await;
    assert_eq!(stored["fields"].get("operatorId"), None, "the command is no operator");

    let refused = entries
        .iter()
        .find(|entry| entry["summary"]["email"] == "nobody@shop.example")
        .expect("the unknown operator's reset");
    assert_ended(refused, "refused", 404);
    assert_ne!(strings(&refused["touched"]), vec![viewer_id]);
    // Neither the password nor its hash is in the log.
    assert_nowhere_in_the_log(&app, &[NEW_PASSWORD, &after, &before]).await;
}

#[tokio::test]
async fn a_campaign_test_send_leaves_its_entry_naming_the_testers_and_no_message_text() {
    let app = spawn_app().await;
    add_staff(&app);
    let editor = session(&app.address, EDITOR).await;
    let token = make_token(&app.address, &editor, "editor").await.1.expect("a token");
    let users = crate::campaigns::seed_users(&app.firestore, 3, |_| true, |_| false).await;
    let testers = vec![users[0].clone(), users[1].clone()];

    let response = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(&token)
        .header("Idempotency-Key", "audit-test-send")
        .json(&json!({"scenarioId": "lunch", "testTo": testers}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["test"], true, "{answer}");
    assert!(
        answer["results"]
            .as_array()
            .is_some_and(|results| results.len() == 2 && results.iter().all(|result| result["result"] == "sent")),
        "{answer}"
    );

    let (status, entries) = audit(&app, "", ADMIN_TOKEN).await;
    assert_eq!(status, 200);
    let sent = only(&entries, "campaign_test_send");
    assert!(
        !entries.iter().any(|entry| entry["action"] == "campaign_create"),
        "a test is no campaign"
    );
    assert_made_by(&app, sent, EDITOR, Some(&token)).await;
    assert_eq!(sent["via"], "api");
    assert_eq!(sent["route"], "POST /admin/campaigns");
    assert_summary(sent, json!({ "scenarioId": "lunch", "audience": "{}", "users": "2" }));
    assert_ended(sent, "done", 200);
    assert_eq!(sorted(strings(&sent["touched"])), sorted(testers));
    assert_eq!(sent["touchedCount"], 2);
    // The messages the testers got are nowhere in the log.
    assert_nowhere_in_the_log(
        &app,
        &["A quick survey about today's lunch.", "How was the food?", "テスト配信"],
    )
    .await;
}

#[tokio::test]
async fn a_dead_letter_replayed_by_the_api_and_by_the_console_leaves_done_entries() {
    const NEWS: &str = "Today's news: the cafeteria has a new menu.";
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.max_send_attempts = 4,
        ..TestOptions::default()
    })
    .await;
    add_staff(&app);
    let editor = session(&app.address, EDITOR).await;
    let token = make_token(&app.address, &editor, "editor").await.1.expect("a token");
    // Two pushes LINE refuses (the answers came too late for a reply): parked.
    let users = [events::new_user(), events::new_user()];
    app.line.fail_next_pushes([Fault::Refuse(400), Fault::Refuse(400)]);
    for user in &users {
        app.deliver(&events::with_timestamp(
            &events::text(user, "news"),
            events::now_ms() - 120_000,
        ))
        .await;
    }
    let letters = app.firestore.list("dead_letters").await;
    assert_eq!(letters.len(), 2, "{letters:#?}");
    let letter_of = |user: &str| {
        letters
            .iter()
            .find(|letter| string_field(letter, "lineUserId").as_deref() == Some(user))
            .map(document_id)
            .expect("the user's dead letter")
    };
    let (by_api, by_console) = (letter_of(&users[0]), letter_of(&users[1]));

    let replayed = call(
        &app,
        reqwest::Method::POST,
        &format!("/admin/dead-letters/{by_api}/replay"),
        &token,
        None,
        None,
    )
    .await;
    assert_eq!(replayed, 200);
    let csrf = csrf_of(&app.address, &editor).await;
    let from_console = post(
        &app.address,
        &format!("/console/dead-letters/{by_console}/replay"),
        &editor,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(from_console.status(), 303);
    let location = from_console.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("ok=true"), "{location}");
    assert_eq!(app.line.accepted_with_text(NEWS), 2, "both were sent");
    assert_eq!(app.firestore.count("dead_letters").await, 0);

    let (status, entries) = audit(&app, "?action=replay", ADMIN_TOKEN).await;
    assert_eq!(status, 200);
    assert_eq!(entries.len(), 2, "{entries:#?}");
    let api = entries.iter().find(|entry| entry["via"] == "api").expect("the API's");
    assert_made_by(&app, api, EDITOR, Some(&token)).await;
    assert_eq!(api["route"], "POST /admin/dead-letters/{id}/replay");
    assert_summary(api, json!({ "force": "false" }));
    assert_ended(api, "done", 200);
    assert_eq!(strings(&api["touched"]), vec![by_api]);
    assert_eq!(api["touchedCount"], 1);

    let console = entries
        .iter()
        .find(|entry| entry["via"] == "console")
        .expect("the console's");
    assert_made_by(&app, console, EDITOR, None).await;
    assert_eq!(console["route"], "POST /console/dead-letters/{id}/replay");
    assert_summary(console, json!({ "force": "false" }));
    assert_ended(console, "done", 200);
    assert_eq!(strings(&console["touched"]), vec![by_console]);
    assert_eq!(console["touchedCount"], 1);
    // The replayed message is nowhere in the log.
    assert_nowhere_in_the_log(&app, &["cafeteria", NEWS]).await;
}

/// A link request by `token` (`dryRun` in `body` or not).
async fn link(app: &TestApp, token: &str, key: &str, body: &Value) -> (u16, Value) {
    let response = app
        .http
        .post(format!("{}/admin/rich-menus/member/link", app.address))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("service reachable");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

/// A service with the fixture menus, deployed as it starts (`RICH_MENUS_DEPLOY`).
async fn menu_app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: |config| {
            config.rich_menus_deploy = true;
            config.rich_menus_dir = crate::helpers::repo_path("tests/fixtures/richmenus");
            config.scenarios_dir = crate::helpers::repo_path("scenarios");
        },
        ..TestOptions::default()
    })
    .await
}

/// Once the deploy has made the menu (a dry run answers 404 until then; it
/// is a read), the dry run's report for `audience`.
async fn menu_deployed(app: &TestApp, token: &str, audience: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let dry = json!({"audience": audience, "dryRun": true});
        let (status, report) = link(app, token, "audit-dry", &dry).await;
        if status == 200 {
            return report;
        }
        assert!(status == 404 && Instant::now() < deadline, "{status}: {report}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_rich_menu_linked_to_an_audience_leaves_its_entry() {
    let app = menu_app().await;
    add_staff(&app);
    let editor = session(&app.address, EDITOR).await;
    let token = make_token(&app.address, &editor, "editor").await.1.expect("a token");
    let users = crate::campaigns::seed_users(&app.firestore, 4, |i| i % 2 == 0, |_| false).await;
    let audience = json!({"tags": {"anyOf": ["unsatisfied"]}});

    let dry = menu_deployed(&app, &token, &audience).await;
    assert_eq!(dry["users"], 2, "{dry}");
    let (status, report) = link(&app, &token, "audit-link", &json!({ "audience": audience })).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["users"].as_u64(), report["done"].as_bool()),
        (Some(2), Some(true))
    );
    let member = app.line.rich_menu_aliases()["member"].clone();
    for (i, user) in users.iter().enumerate() {
        let expected = (i % 2 == 0).then_some(&member);
        assert_eq!(app.line.user_rich_menu(user).as_ref(), expected, "{user}");
    }

    let (status, entries) = audit(&app, "", ADMIN_TOKEN).await;
    assert_eq!(status, 200);
    let linked = only(&entries, "rich_menu_link");
    assert_made_by(&app, linked, EDITOR, Some(&token)).await;
    assert_eq!(linked["via"], "api");
    assert_eq!(linked["route"], "POST /admin/rich-menus/{id}/link");
    assert_eq!(
        linked["summary"]
            .as_object()
            .map(|summary| summary.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["audience".to_owned(), "menu".to_owned()]),
        "{linked:#}"
    );
    assert_eq!(linked["summary"]["menu"], "member");
    let recorded: Value = serde_json::from_str(linked["summary"]["audience"].as_str().unwrap()).unwrap();
    assert_eq!(recorded, audience);
    assert_ended(linked, "done", 200);
    // The entry names the link's job (what `GET .../link/{jobId}` reports).
    let job = report["jobId"].as_str().expect("the link's job").to_owned();
    assert_eq!(strings(&linked["touched"]), vec![job]);
    assert_eq!(linked["touchedCount"], 1);
    // The menu's words are nowhere in the log.
    assert_nowhere_in_the_log(&app, &["アンケート", "メニュー"]).await;
}

/// A link's audience is recorded as a campaign's is: field names and the
/// kinds of test, never the values (the audit log is never erased).
#[tokio::test]
async fn a_rich_menu_links_field_values_stay_out_of_the_log_as_a_campaigns_do() {
    let app = menu_app().await;
    let audience = json!({"fields": {"phone": {"equals": "090-1234-5678"}}});
    menu_deployed(&app, ADMIN_TOKEN, &audience).await;
    let (status, report) = link(&app, ADMIN_TOKEN, "audit-link", &json!({ "audience": audience })).await;
    assert_eq!(status, 200, "{report}");
    let (_, entries) = audit(&app, "", ADMIN_TOKEN).await;
    assert_eq!(
        only(&entries, "rich_menu_link")["summary"]["audience"],
        r#"{"fields":{"phone":["equals"]}}"#
    );
    assert_nowhere_in_the_log(&app, &["090-1234-5678"]).await;
}
