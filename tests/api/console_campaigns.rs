//! A campaign cancelled from the console (issue 27 §3): its page offers the
//! cancel to editors, a confirmation says what stops, the confirmed cancel
//! stops it and is audited as the operator's; viewers cannot.

use crate::helpers::{ADMIN_TOKEN, spawn_app};
use crate::operator_access::{EDITOR, VIEWER, add_staff, csrf_of, get, post, session};
use chrono::{TimeDelta, Timelike, Utc};
use serde_json::json;

/// A campaign of `news` scheduled two days ahead through the API: its id.
async fn scheduled_campaign(app: &crate::helpers::TestApp, key: &str) -> String {
    let send_at = (Utc::now() + TimeDelta::days(2))
        .with_nanosecond(0)
        .expect("a whole second")
        .to_rfc3339();
    let created = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .header("Idempotency-Key", key)
        .json(&json!({"scenarioId": "news", "sendAt": send_at}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 202);
    created.json::<serde_json::Value>().await.unwrap()["campaignId"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn an_editor_cancels_a_scheduled_campaign_after_a_confirmation() {
    let app = spawn_app().await;
    add_staff(&app);
    let id = scheduled_campaign(&app, "console-cancel").await;
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

/// A cancel form sent three times at once (a double click) and once more
/// (a reload) cancels once: every answer is 200, the last says this form
/// did it already, and the form's receipt is one.
#[tokio::test]
async fn a_cancel_form_sent_again_cancels_once() {
    let app = spawn_app().await;
    add_staff(&app);
    let id = scheduled_campaign(&app, "console-cancel-twice").await;
    let cancel = format!("/console/campaigns/{id}/cancel");
    let editor = session(&app.address, EDITOR).await;
    let page = get(&app.address, &cancel, &editor).await.text().await.unwrap();
    let key = page
        .split("name=\"key\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form's key")
        .to_owned();
    let csrf = csrf_of(&app.address, &editor).await;
    let fields = [("csrf", csrf.as_str()), ("key", key.as_str())];
    let send = || post(&app.address, &cancel, &editor, &fields);
    let clicks = futures::future::join_all([send(), send(), send()]).await;
    for click in clicks {
        assert_eq!(click.status(), 200);
    }
    let reload = send().await;
    assert_eq!(reload.status(), 200);
    assert!(
        reload
            .text()
            .await
            .unwrap()
            .contains("This form cancelled the campaign already.")
    );
    let receipts = app
        .firestore
        .list("admin_requests")
        .await
        .iter()
        .filter(|doc| doc["fields"]["operation"]["stringValue"] == "campaign_cancel")
        .count();
    assert_eq!(receipts, 1, "one form, one receipt");
    let state = crate::helpers::admin_json(&app.address, &format!("/admin/campaigns/{id}")).await["state"].clone();
    assert!(state == "cancelling" || state == "cancelled", "{state}");
}

/// The hidden fields of the confirm form on a campaign preview, unescaped.
fn confirm_fields(page: &str) -> Vec<(String, String)> {
    let unescape = |value: &str| {
        value
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let form = page
        .split("action=\"/console/campaigns/new\"")
        .nth(1)
        .unwrap_or_default();
    form.split("<input type=\"hidden\" ")
        .skip(1)
        .filter_map(|input| {
            let name = input.split("name=\"").nth(1)?.split('"').next()?;
            let value = input.split("value=\"").nth(1)?.split('"').next()?;
            Some((name.to_owned(), unescape(value)))
        })
        .collect()
}

/// The users LINE delivered campaign `id` to, sorted (each once: a second
/// delivery to a user fails the test).
async fn recipients_of(app: &crate::helpers::TestApp, id: &str) -> Vec<String> {
    let campaign = app
        .firestore
        .get("campaigns", id)
        .await
        .expect("the campaign is stored");
    let unit = crate::helpers::firestore_rest::string_field(&campaign, "aggregationUnit").expect("a unit");
    let mut users: Vec<String> = app
        .line
        .accepted()
        .into_iter()
        .filter(|call| call.is_multicast() && call.body["customAggregationUnits"] == json!([unit]))
        .flat_map(|call| call.recipients())
        .collect();
    users.sort();
    let before = users.len();
    users.dedup();
    assert_eq!(users.len(), before, "a user got campaign {id} twice");
    users
}

/// What the console's builder sends for the audience the API test uses:
/// users tagged `unsatisfied`, first seen on 2026-09-21 or before, who did
/// not answer `news`.
const BUILDER_FIELDS: [(&str, &str); 4] = [
    ("scenario", "lunch"),
    ("tags_any", "unsatisfied"),
    ("first_seen_to", "2026-09-21"),
    ("not_answered", "news"),
];

fn api_twin() -> serde_json::Value {
    json!({
        "scenarioId": "lunch",
        "audience": {"tags": {"anyOf": ["unsatisfied"]}, "firstSeenTo": "2026-09-21", "notAnswered": ["news"]},
    })
}

/// Users 0 to 39 (see `campaigns::seed_users`): even ones tagged, user 0
/// unfollowed; users 0 to 19 first seen on the 21st. The audience is the
/// even users 2 to 18: nine.
fn expected_audience(users: &[String]) -> Vec<String> {
    let mut expected: Vec<String> = (2..20).step_by(2).map(|i| users[i].clone()).collect();
    expected.sort();
    expected
}

/// Sends the builder's audience through the API too; once both are done,
/// each reached exactly the expected users.
async fn same_recipients_as_the_api(app: &crate::helpers::TestApp, console_id: &str, users: &[String]) {
    let api_id = crate::campaigns::start_campaign(&app.address, &api_twin(), "api-twin").await;
    for id in [console_id, &api_id] {
        crate::campaigns::wait_for_state(&app.address, id, "done", std::time::Duration::from_secs(60)).await;
    }
    let from_console = recipients_of(app, console_id).await;
    assert_eq!(from_console, expected_audience(users));
    assert_eq!(from_console, recipients_of(app, &api_id).await);
}

#[tokio::test]
async fn a_campaign_built_in_the_console_reaches_who_the_same_api_request_reaches() {
    let app = spawn_app().await;
    add_staff(&app);
    let users = crate::campaigns::seed_users(&app.firestore, 40, |i| i % 2 == 0, |i| i == 0).await;
    let query = |extra: &[(&str, &str)]| {
        let mut pairs: Vec<(&str, &str)> = BUILDER_FIELDS.to_vec();
        pairs.extend_from_slice(extra);
        serde_urlencoded::to_string(&pairs).unwrap()
    };

    // A viewer can neither open the builder nor post it.
    let viewer = session(&app.address, VIEWER).await;
    assert_eq!(get(&app.address, "/console/campaigns/new", &viewer).await.status(), 403);
    let viewer_csrf = csrf_of(&app.address, &viewer).await;
    let forged = post(
        &app.address,
        "/console/campaigns/new",
        &viewer,
        &[
            ("csrf", &viewer_csrf),
            ("scenario", "lunch"),
            ("key", "console-0123456789abcdef0123456789abcdef"),
        ],
    )
    .await;
    assert_eq!(forged.status(), 403);

    let editor = session(&app.address, EDITOR).await;
    let list = get(&app.address, "/console/campaigns", &editor)
        .await
        .text()
        .await
        .unwrap();
    assert!(list.contains("id=\"new-campaign\""));
    let builder = get(&app.address, "/console/campaigns/new", &editor).await;
    assert_eq!(builder.status(), 200);
    assert!(builder.text().await.unwrap().contains("id=\"campaign-builder\""));

    // A wrong line: 400, the problem named, the values kept, nothing stored.
    let wrong = get(
        &app.address,
        &format!(
            "/console/campaigns/new?{}",
            query(&[("preview", "1"), ("fields", "age > 3")])
        ),
        &editor,
    )
    .await;
    assert_eq!(wrong.status(), 400);
    let wrong = wrong.text().await.unwrap();
    assert!(wrong.contains("Field condition &quot;age &gt; 3&quot;") && wrong.contains(">unsatisfied</textarea>"));
    // An unknown tag-free scenario: the dry run's refusal, 400.
    let unknown = get(&app.address, "/console/campaigns/new?preview=1&scenario=nope", &editor).await;
    assert_eq!(unknown.status(), 400);

    // The preview: the count and the sample of the dry run.
    let preview = get(
        &app.address,
        &format!("/console/campaigns/new?{}", query(&[("preview", "1")])),
        &editor,
    )
    .await;
    assert_eq!(preview.status(), 200);
    let preview = preview.text().await.unwrap();
    assert!(
        preview.contains("<strong id=\"audience-count\">9</strong>"),
        "{preview}"
    );
    assert!(
        app.firestore.list("campaigns").await.is_empty(),
        "a preview creates nothing"
    );
    let fields = confirm_fields(&preview);
    let first_key = fields
        .iter()
        .find(|(name, _)| name == "key")
        .expect("a form key")
        .1
        .clone();
    assert!(
        fields
            .iter()
            .any(|(name, value)| name == "tags_any" && value == "unsatisfied")
    );

    // The confirm form sent three times at once: one campaign.
    let body: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let sends = (0..3).map(|_| post(&app.address, "/console/campaigns/new", &editor, &body));
    let answers = futures::future::join_all(sends).await;
    let locations: Vec<String> = answers
        .iter()
        .map(|answer| {
            assert_eq!(answer.status(), 303);
            answer.headers()["location"].to_str().unwrap().to_owned()
        })
        .collect();
    assert!(locations.iter().all(|location| *location == locations[0]));
    let console_id = locations[0]
        .strip_prefix("/console/campaigns/")
        .and_then(|rest| rest.strip_suffix("?created=1"))
        .expect("the campaign's page")
        .to_owned();
    assert_eq!(app.firestore.list("campaigns").await.len(), 1);
    let page = get(&app.address, &locations[0], &editor).await.text().await.unwrap();
    assert!(page.contains("The campaign is created"));

    // The same audience through the API.
    same_recipients_as_the_api(&app, &console_id, &users).await;

    // Every box filled (lists on lines, field conditions, both boxes ticked,
    // a send time): the console stores the very request the API would.
    let local_send_at = (Utc::now() + TimeDelta::days(30))
        .with_timezone(&chrono::FixedOffset::east_opt(9 * 3600).unwrap())
        .format("%Y-%m-%dT%H:%M")
        .to_string();
    let every_box = [
        ("scenario", "lunch"),
        ("tags_any", "unsatisfied\r\nvisited"),
        ("tags_all", "visited"),
        ("tags_none", "banned、 closed"),
        ("answered", "news"),
        ("not_answered", "lunch"),
        ("first_seen_from", "2026-09-01"),
        ("first_seen_to", "2026-09-30"),
        ("sources", "instagram_dec"),
        ("fields", "age >= 20\r\nage <= 29\r\nvip = yes\r\ncode = \"007\""),
        ("skip_answered", "true"),
        ("allow_over_quota", "true"),
        ("when", "later"),
        ("send_at", &local_send_at),
        ("preview", "1"),
    ];
    let preview = get(
        &app.address,
        &format!(
            "/console/campaigns/new?{}",
            serde_urlencoded::to_string(every_box).unwrap()
        ),
        &editor,
    )
    .await;
    let status = preview.status();
    let preview = preview.text().await.unwrap();
    assert_eq!(
        status,
        200,
        "{}",
        preview.split("id=\"flash\"").nth(1).unwrap_or_default()
    );
    let fields = confirm_fields(&preview);
    let body: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let scheduled = post(&app.address, "/console/campaigns/new", &editor, &body).await;
    assert_eq!(scheduled.status(), 303);
    let scheduled_id = scheduled.headers()["location"].to_str().unwrap()["/console/campaigns/".len()..]
        .trim_end_matches("?created=1")
        .to_owned();
    let twin = json!({
        "scenarioId": "lunch",
        "audience": {
            "tags": {"anyOf": ["unsatisfied", "visited"], "allOf": ["visited"], "noneOf": ["banned", "closed"]},
            "answered": ["news"],
            "notAnswered": ["lunch"],
            "firstSeenFrom": "2026-09-01",
            "firstSeenTo": "2026-09-30",
            "sources": {"anyOf": ["instagram_dec"]},
            "fields": {"age": {"min": 20, "max": 29}, "vip": {"equals": true}, "code": {"equals": "007"}},
        },
        "skipAnswered": true,
        "allowOverQuota": true,
        "sendAt": format!("{local_send_at}:00+09:00"),
    });
    let twin_id = crate::campaigns::start_campaign(&app.address, &twin, "api-every-box").await;
    let hash = |id: String| {
        let firestore = &app.firestore;
        async move {
            let doc = firestore.get("campaigns", &id).await.expect("stored");
            crate::helpers::firestore_rest::string_field(&doc, "requestHash").expect("a hash")
        }
    };
    assert_eq!(hash(scheduled_id.clone()).await, hash(twin_id).await);
    // Its audit entry names the fields and their tests, never the values.
    let scheduled_entry = app
        .firestore
        .list("audit_log")
        .await
        .into_iter()
        .find(|entry| {
            entry["fields"]["action"]["stringValue"] == "campaign_schedule"
                && entry["fields"]["via"]["stringValue"] == "console"
        })
        .expect("the schedule is audited");
    let audience = scheduled_entry["fields"]["summary"]["mapValue"]["fields"]["audience"]["stringValue"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        audience.contains("\"age\":[\"min\",\"max\"]") && !audience.contains("007"),
        "{audience}"
    );

    // Over the month's quota: 409, the values kept for a change, and the
    // same form (the same key) to try again.
    app.line.set_quota(Some(10), 10);
    let preview = get(
        &app.address,
        &format!("/console/campaigns/new?{}", query(&[("preview", "1")])),
        &editor,
    )
    .await
    .text()
    .await
    .unwrap();
    let fields = confirm_fields(&preview);
    let key = fields
        .iter()
        .find(|(name, _)| name == "key")
        .expect("a form key")
        .1
        .clone();
    let body: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let refused = post(&app.address, "/console/campaigns/new", &editor, &body).await;
    assert_eq!(refused.status(), 409);
    let refused = refused.text().await.unwrap();
    assert!(
        refused.contains("quota") && refused.contains("tags_any=unsatisfied"),
        "{refused}"
    );
    assert!(refused.contains("id=\"retry-campaign\"") && refused.contains(&key));
    app.line.set_quota(None, 0);

    // Audited: an entry per submission (three landed, one refused), each the
    // editor's, in the console, naming the one campaign and the form's key.
    let entries = app.firestore.list("audit_log").await;
    let creates: Vec<_> = entries
        .iter()
        .filter(|entry| {
            entry["fields"]["action"]["stringValue"] == "campaign_create"
                && entry["fields"]["via"]["stringValue"] == "console"
        })
        .collect();
    assert_eq!(
        creates.len(),
        3 + 1,
        "three submissions, one refused over quota: {creates:?}"
    );
    let landed: Vec<_> = creates
        .into_iter()
        .filter(|entry| entry["fields"]["status"]["integerValue"] == "303")
        .collect();
    assert_eq!(landed.len(), 3);
    for entry in landed {
        assert_eq!(entry["fields"]["operator"]["stringValue"], EDITOR);
        assert_eq!(entry["fields"]["status"]["integerValue"], "303");
        assert_eq!(
            entry["fields"]["touched"]["arrayValue"]["values"][0]["stringValue"],
            console_id.as_str()
        );
        assert_eq!(
            entry["fields"]["summary"]["mapValue"]["fields"]["idempotencyKey"]["stringValue"],
            first_key.as_str()
        );
    }
}

#[tokio::test]
async fn a_campaign_built_in_a_real_browser_reaches_who_the_api_reaches_once() {
    let Some(browser) = crate::helpers::browser::Browser::start().await else {
        return;
    };
    let app = spawn_app().await;
    add_staff(&app);
    let users = crate::campaigns::seed_users(&app.firestore, 40, |i| i % 2 == 0, |i| i == 0).await;
    browser.goto(&format!("{}/console/login", app.address)).await;
    browser.fill("#email", EDITOR).await;
    browser.fill("#password", crate::operator_access::PASSWORD).await;
    browser.click("#sign-in").await;
    assert_eq!(browser.wait_for_path("/console").await, "/console");
    browser.goto(&format!("{}/console/campaigns", app.address)).await;
    browser.click("#new-campaign").await;
    browser.wait_for("#campaign-builder").await;
    browser
        .run("document.querySelector('#scenario').value = 'lunch'; document.querySelector('#first_seen_to').value = '2026-09-21'; return true")
        .await;
    browser.fill("#tags_any", "unsatisfied").await;
    browser.fill("#not_answered", "news").await;
    browser.screenshot("campaign-builder").await;
    browser.click("#preview").await;
    browser.wait_for("#confirm-campaign").await;
    browser.screenshot("campaign-preview").await;
    assert_eq!(browser.text_of("#audience-count").await, "9");
    // The form as the page holds it, sent once more after the clicks (what
    // a resubmission does): still one campaign.
    let form = browser
        .run("return new URLSearchParams(new FormData(document.querySelector('#confirm-campaign').form)).toString()")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    browser
        .run("const button = document.querySelector('#confirm-campaign'); button.click(); button.click(); return true")
        .await;
    browser.wait_for("#campaign-state").await;
    browser.screenshot("campaign-created").await;
    let path = browser.path().await;
    let console_id = path
        .strip_prefix("/console/campaigns/")
        .expect("the campaign's page")
        .to_owned();
    let landed = browser
        .run(&format!(
            "return fetch('/console/campaigns/new', {{method: 'POST', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {form:?}}}).then(r => r.url)"
        ))
        .await;
    assert!(
        landed.as_str().unwrap_or_default().contains(&console_id),
        "the resubmission lands on the same campaign: {landed}"
    );
    assert_eq!(app.firestore.list("campaigns").await.len(), 1, "one campaign");

    same_recipients_as_the_api(&app, &console_id, &users).await;
    browser.client.clone().close().await.expect("the browser closes");
}
