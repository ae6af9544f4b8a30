//! Operators in the console and on the admin API (issue 27 §1): each role
//! reaches what it may and the server refuses the rest (403 on a forged
//! request), sessions live in Firestore so a logout, a disabled operator or a
//! changed role holds on the next request on another instance, idle sessions
//! end by the service's clock, a wrong password slows its account down
//! without locking it, and personal API tokens act with their operator's
//! current role until revoked; and the same roles in Chromium, signed in
//! with their passwords.

use crate::console::{LoginForm, login_form, session_cookie};
use crate::export::export_scenarios;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app_with};
use std::time::Duration;

pub(crate) const OWNER: &str = "owner@shop.example";
pub(crate) const EDITOR: &str = "staff@shop.example";
pub(crate) const VIEWER: &str = "parttime@shop.example";
pub(crate) const PASSWORD: &str = "correct horse battery staple";

async fn app(test_clock: bool) -> TestApp {
    spawn_app_with(TestOptions {
        adjust: export_scenarios,
        test_clock,
        ..TestOptions::default()
    })
    .await
}

/// `line-survey operators ARGS` against `app`'s Firestore, `stdin` piped in.
pub(crate) fn operators(app: &TestApp, args: &[&str], stdin: &str) {
    let output = crate::operators::operators(&app.project_id, args, stdin);
    assert_eq!(
        output.status.code(),
        Some(0),
        "operators {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

pub(crate) fn add_staff(app: &TestApp) {
    for (email, role) in [(OWNER, "owner"), (EDITOR, "editor"), (VIEWER, "viewer")] {
        operators(app, &["add", email, "--role", role], &format!("{PASSWORD}\n"));
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

fn form_body(fields: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(fields).expect("a form")
}

/// A password login's response.
async fn sign_in(address: &str, email: &str, password: &str) -> reqwest::Response {
    let client = client();
    let LoginForm { pair, csrf, .. } = login_form(&client, address).await;
    client
        .post(format!("{address}/console/login"))
        .header("Cookie", &pair)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form_body(&[("email", email), ("password", password), ("csrf", &csrf)]))
        .send()
        .await
        .expect("service reachable")
}

/// A session cookie (`console_session=...`) for `email`.
pub(crate) async fn session(address: &str, email: &str) -> String {
    let response = sign_in(address, email, PASSWORD).await;
    assert_eq!(response.status(), 303, "{email} signs in");
    session_cookie(&response).expect("a session cookie")
}

pub(crate) async fn get(address: &str, path: &str, cookie: &str) -> reqwest::Response {
    client()
        .get(format!("{address}{path}"))
        .header("Cookie", cookie)
        .send()
        .await
        .expect("service reachable")
}

/// The CSRF token of the session's forms, read from a page.
pub(crate) async fn csrf_of(address: &str, cookie: &str) -> String {
    let page = get(address, "/console/tokens", cookie).await;
    assert_eq!(page.status(), 200);
    page.text()
        .await
        .expect("a page")
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a form's CSRF token")
        .to_owned()
}

pub(crate) async fn post(address: &str, path: &str, cookie: &str, fields: &[(&str, &str)]) -> reqwest::Response {
    client()
        .post(format!("{address}{path}"))
        .header("Cookie", cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form_body(fields))
        .send()
        .await
        .expect("service reachable")
}

async fn admin_call(method: reqwest::Method, address: &str, path: &str, token: &str) -> u16 {
    client()
        .request(method, format!("{address}{path}"))
        .bearer_auth(token)
        .send()
        .await
        .expect("service reachable")
        .status()
        .as_u16()
}

async fn admin_get(address: &str, path: &str, token: &str) -> u16 {
    admin_call(reqwest::Method::GET, address, path, token).await
}

async fn admin_post(address: &str, path: &str, token: &str) -> u16 {
    admin_call(reqwest::Method::POST, address, path, token).await
}

const CSV: &str = "/console/scenarios/export/answers.csv";
/// No such letter: an editor's replay gets through to say so (303 with the
/// result), a viewer's is refused before.
const REPLAY: &str = "/console/dead-letters/no-such-letter/replay";

#[tokio::test]
async fn each_role_reaches_what_it_may_and_the_server_refuses_the_rest() {
    let app = app(false).await;
    add_staff(&app);

    // A wrong password and an unknown email get the same answer, and no session.
    for (email, password) in [
        (OWNER, "wrong password 123"),
        ("nobody@shop.example", PASSWORD),
        ("", ""),
    ] {
        let refused = sign_in(&app.address, email, password).await;
        assert_eq!(refused.status(), 401, "{email}");
        assert_eq!(session_cookie(&refused), None);
        let page = refused.text().await.unwrap();
        assert!(page.contains("Wrong email or password."), "{page}");
        assert!(!page.contains(email) || email.is_empty(), "the email is not echoed");
    }
    // A wrong password for the owner slowed the account down (unit-tested
    // in access::slowdown); it did not lock it.
    let owner = session(&app.address, OWNER).await;
    let editor = session(&app.address, EDITOR).await;
    let viewer = session(&app.address, VIEWER).await;
    // Sessions are records under a digest of the cookie, never the cookie itself.
    let stored = app.firestore.list("console_sessions").await;
    assert_eq!(stored.len(), 3);
    for cookie in [&owner, &editor, &viewer] {
        let value = cookie.split_once('=').unwrap().1;
        assert!(!serde_json::to_string(&stored).unwrap().contains(value));
    }

    // Everyone reads every page, and the header says who is signed in.
    for (cookie, email, role) in [
        (&owner, OWNER, "owner"),
        (&editor, EDITOR, "editor"),
        (&viewer, VIEWER, "viewer"),
    ] {
        for path in [
            "/console",
            "/console/dead-letters",
            "/console/campaigns",
            "/console/users",
            "/console/sources",
        ] {
            let page = get(&app.address, path, cookie).await;
            assert_eq!(page.status(), 200, "{role} {path}");
            let body = page.text().await.unwrap();
            assert!(body.contains(&format!("{email} ({role})")), "{role} {path}");
        }
        let answers = get(&app.address, "/console/scenarios/export", cookie)
            .await
            .text()
            .await
            .unwrap();
        assert_eq!(
            answers.contains("id=\"csv\""),
            role == "owner",
            "only owners see the CSV link"
        );
    }

    // Exports are the owners': a forged request is refused by the server.
    assert_eq!(get(&app.address, CSV, &owner).await.status(), 200);
    for cookie in [&editor, &viewer] {
        assert_eq!(get(&app.address, CSV, cookie).await.status(), 403);
    }
    // Sending (a replay) is the editors' and owners'.
    for (cookie, status) in [(&owner, 303), (&editor, 303), (&viewer, 403)] {
        let csrf = csrf_of(&app.address, cookie).await;
        let replay = post(&app.address, REPLAY, cookie, &[("csrf", &csrf)]).await;
        assert_eq!(replay.status(), status);
        if status == 403 {
            let page = replay.text().await.unwrap();
            assert!(
                page.contains("This needs the editor role"),
                "refused for the role: {page}"
            );
        }
    }
    // Without the session's CSRF token nobody posts.
    let forged = post(&app.address, REPLAY, &owner, &[("csrf", "forged")]).await;
    assert_eq!(forged.status(), 403);
    assert!(forged.text().await.unwrap().contains("did not come from the console"));

    // The admin token still signs in, as an owner.
    let client = client();
    let LoginForm { pair, csrf, .. } = login_form(&client, &app.address).await;
    let by_token = client
        .post(format!("{}/console/login", app.address))
        .header("Cookie", &pair)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form_body(&[("token", ADMIN_TOKEN), ("csrf", &csrf)]))
        .send()
        .await
        .unwrap();
    let by_token = session_cookie(&by_token).expect("a session");
    assert_eq!(get(&app.address, CSV, &by_token).await.status(), 200);
    let page = get(&app.address, "/console", &by_token).await.text().await.unwrap();
    assert!(page.contains("ADMIN_TOKEN (owner)"));
}

#[tokio::test]
async fn a_logout_a_role_change_and_a_disabled_operator_hold_on_the_next_request_on_another_instance() {
    let first = app(false).await;
    let second = spawn_app_with(TestOptions {
        adjust: export_scenarios,
        ..first.beside()
    })
    .await;
    add_staff(&first);

    // A session opened on one instance works on the other.
    let editor = session(&first.address, EDITOR).await;
    assert_eq!(get(&second.address, "/console", &editor).await.status(), 200);
    let csrf = csrf_of(&second.address, &editor).await;
    assert_eq!(
        post(&second.address, REPLAY, &editor, &[("csrf", &csrf)])
            .await
            .status(),
        303
    );

    // Made a viewer: the next send on the other instance is refused.
    operators(&first, &["set-role", EDITOR, "viewer"], "");
    assert_eq!(
        post(&second.address, REPLAY, &editor, &[("csrf", &csrf)])
            .await
            .status(),
        403
    );
    assert_eq!(
        get(&second.address, "/console", &editor).await.status(),
        200,
        "still reads"
    );

    // Disabled: the open session is refused on the next click, and the
    // password no longer signs in.
    operators(&first, &["disable", EDITOR], "");
    let refused = get(&second.address, "/console", &editor).await;
    assert_eq!(refused.status(), 303);
    assert_eq!(refused.headers()["location"], "/console/login");
    assert_eq!(sign_in(&first.address, EDITOR, PASSWORD).await.status(), 401);

    // A logout on one instance ends the session on both: the cookie, kept
    // and sent again, is refused.
    let owner = session(&first.address, OWNER).await;
    assert_eq!(get(&second.address, "/console", &owner).await.status(), 200);
    let csrf = csrf_of(&first.address, &owner).await;
    let out = post(&first.address, "/console/logout", &owner, &[("csrf", &csrf)]).await;
    assert_eq!(out.status(), 303);
    for address in [&first.address, &second.address] {
        assert_eq!(get(address, "/console", &owner).await.status(), 303, "{address}");
    }
    assert_eq!(
        first.firestore.count("console_sessions").await,
        1,
        "only the disabled editor's record is left"
    );
}

#[tokio::test]
async fn an_idle_session_ends_while_an_active_one_lasts_until_its_lifetime() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            export_scenarios(config);
            config.console_idle = Duration::from_secs(60);
            config.console_session = Duration::from_secs(600);
        },
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    add_staff(&app);
    let active = session(&app.address, VIEWER).await;
    let idle = session(&app.address, VIEWER).await;
    // CONSOLE_IDLE_MINUTES=1: used every 40 s, one session stays (each use
    // moves its idle clock on); the other, unused for 80 s, ends.
    for _ in 0..2 {
        app.advance_clock(Duration::from_secs(40)).await;
        assert_eq!(get(&app.address, "/console/campaigns", &active).await.status(), 200);
    }
    assert_eq!(
        get(&app.address, "/console/campaigns", &idle).await.status(),
        303,
        "idle"
    );
    // Kept busy, the active one still ends at its lifetime (600 s).
    for _ in 0..12 {
        app.advance_clock(Duration::from_secs(40)).await;
        assert_eq!(get(&app.address, "/console/campaigns", &active).await.status(), 200);
    }
    app.advance_clock(Duration::from_secs(40)).await;
    assert_eq!(
        get(&app.address, "/console/campaigns", &active).await.status(),
        303,
        "lifetime"
    );
}

/// A personal token made on the tokens page: (the token, its record id).
pub(crate) async fn make_token(address: &str, cookie: &str, role: &str) -> (reqwest::StatusCode, Option<String>) {
    let csrf = csrf_of(address, cookie).await;
    let made = post(
        address,
        "/console/tokens",
        cookie,
        &[("csrf", &csrf), ("label", "集計スクリプト"), ("role", role)],
    )
    .await;
    let status = made.status();
    let page = made.text().await.unwrap();
    let token = page
        .split("id=\"new-token\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .map(str::to_owned);
    (status, token)
}

#[tokio::test]
async fn personal_api_tokens_act_with_their_operators_current_role_until_revoked() {
    let app = app(false).await;
    add_staff(&app);
    let editor = session(&app.address, EDITOR).await;

    // Not above the operator's own role.
    let (status, token) = make_token(&app.address, &editor, "owner").await;
    assert_eq!((status.as_u16(), token), (400, None));
    let (status, token) = make_token(&app.address, &editor, "editor").await;
    assert_eq!(status, 200);
    let token = token.expect("the new token is shown once");
    assert!(token.starts_with("lsv_") && token.len() == 68, "{token}");
    // Stored as a digest: the token itself is nowhere in Firestore.
    let stored = app.firestore.list("api_tokens").await;
    assert_eq!(stored.len(), 1);
    assert!(!serde_json::to_string(&stored).unwrap().contains(&token[4..]));
    let listed = get(&app.address, "/console/tokens", &editor)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        listed.contains(&token[..12]) && !listed.contains(&token),
        "listed by its prefix only"
    );

    // The token reads and sends as an editor; exports stay the owners'.
    assert_eq!(admin_get(&app.address, "/admin/dead-letters", &token).await, 200);
    assert_eq!(
        admin_post(&app.address, "/admin/dead-letters/no-such-letter/replay", &token).await,
        404
    );
    assert_eq!(
        admin_get(&app.address, "/admin/scenarios/export/answers.csv", &token).await,
        403
    );
    assert_eq!(
        admin_get(&app.address, "/admin/scenarios/export/answers.csv", ADMIN_TOKEN).await,
        200
    );

    // The operator made a viewer: the token is bounded by it at once.
    operators(&app, &["set-role", EDITOR, "viewer"], "");
    assert_eq!(
        admin_post(&app.address, "/admin/dead-letters/no-such-letter/replay", &token).await,
        403
    );
    assert_eq!(admin_get(&app.address, "/admin/dead-letters", &token).await, 200);

    // Revoked: refused as an unknown token.
    let viewer_again = session(&app.address, EDITOR).await;
    let id = get(&app.address, "/console/tokens", &viewer_again)
        .await
        .text()
        .await
        .unwrap()
        .split("data-token=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the token's row")
        .to_owned();
    let csrf = csrf_of(&app.address, &viewer_again).await;
    let revoked = post(
        &app.address,
        &format!("/console/tokens/{id}/revoke"),
        &viewer_again,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(revoked.status(), 200);
    assert_eq!(admin_get(&app.address, "/admin/dead-letters", &token).await, 401);

    // Another operator cannot revoke it, nor see it.
    let owner = session(&app.address, OWNER).await;
    let csrf = csrf_of(&app.address, &owner).await;
    let (status, other) = make_token(&app.address, &owner, "viewer").await;
    assert_eq!(status, 200);
    let other = other.unwrap();
    let page = get(&app.address, "/console/tokens", &owner).await.text().await.unwrap();
    assert!(!page.contains(&token[..12]), "not another operator's tokens");
    let not_theirs = post(
        &app.address,
        &format!("/console/tokens/{id}/revoke"),
        &owner,
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(not_theirs.status(), 404);
    // A disabled operator's tokens stop too.
    assert_eq!(admin_get(&app.address, "/admin/dead-letters", &other).await, 200);
    operators(&app, &["disable", OWNER], "");
    assert_eq!(admin_get(&app.address, "/admin/dead-letters", &other).await, 401);
    // Every sending route refuses a viewer's token, every owner's route an
    // editor's, before looking at the request.
    let viewer = session(&app.address, VIEWER).await;
    let viewer_token = make_token(&app.address, &viewer, "viewer").await.1.unwrap();
    let editor_now = session(&app.address, EDITOR).await;
    operators(&app, &["set-role", EDITOR, "editor"], "");
    let editor_token = make_token(&app.address, &editor_now, "editor").await.1.unwrap();
    let some_user = format!("U{}", "a".repeat(32));
    let some_id = "b".repeat(40);
    let editors: [(reqwest::Method, String); 6] = [
        (reqwest::Method::POST, "/admin/scenarios/export/send".into()),
        (reqwest::Method::POST, "/admin/campaigns".into()),
        (reqwest::Method::POST, format!("/admin/campaigns/{some_id}/cancel")),
        (
            reqwest::Method::DELETE,
            format!("/admin/users/{some_user}/timers/{some_id}"),
        ),
        (reqwest::Method::POST, "/admin/rich-menus/member/link".into()),
        (reqwest::Method::POST, "/admin/dead-letters/x/replay".into()),
    ];
    for (method, path) in &editors {
        assert_eq!(
            admin_call(method.clone(), &app.address, path, &viewer_token).await,
            403,
            "{method} {path}"
        );
    }
    let owners: [(reqwest::Method, &str); 3] = [
        (reqwest::Method::POST, "/admin/followers/sync"),
        (reqwest::Method::GET, "/admin/scenarios/export/answers.csv"),
        (reqwest::Method::GET, "/admin/audit"),
    ];
    for (method, path) in &owners {
        assert_eq!(
            admin_call(method.clone(), &app.address, path, &editor_token).await,
            403,
            "{method} {path}"
        );
    }
    for path in [
        "/admin/dead-letters",
        "/admin/campaigns",
        "/admin/metrics",
        "/admin/sources",
        "/admin/followers/sync",
    ] {
        let status = admin_get(&app.address, path, &viewer_token).await;
        assert!(status != 401 && status != 403, "a viewer reads {path}: {status}");
    }

    // Malformed tokens are unknown, not errors.
    for bad in ["lsv_", "lsv_../../x", &format!("lsv_{}", "Z".repeat(64))] {
        assert_eq!(admin_get(&app.address, "/admin/dead-letters", bad).await, 401, "{bad}");
    }
}

/// Signs `browser` in at `address` with `email`'s password, as a person would.
async fn browser_sign_in(browser: &crate::helpers::browser::Browser, address: &str, email: &str) {
    browser.goto(&format!("{address}/console/login")).await;
    browser.fill("#email", email).await;
    browser.fill("#password", PASSWORD).await;
    browser.click("#sign-in").await;
    assert_eq!(browser.wait_for_path("/console").await, "/console", "{email} signed in");
}

/// A request from the page itself (its session cookie; for a POST the
/// page's CSRF token): the status the server answers.
async fn from_page(browser: &crate::helpers::browser::Browser, method: &str, path: &str, body: &str) -> u64 {
    let script = format!(
        "const csrf = document.querySelector('input[name=csrf]').value; \
         return fetch({path:?}, {{method: {method:?}, redirect: 'manual', \
         headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, \
         body: {method:?} === 'POST' ? 'csrf=' + encodeURIComponent(csrf) + '&' + {body:?} : undefined}}).then(r => r.status)"
    );
    browser.run(&script).await.as_u64().expect("a status")
}

/// In Chromium, signed in with each role's password: the pages offer each
/// role what it may, the server refuses a viewer's forged send, export and
/// audit reads and an editor's export, and a disabled editor's open session
/// is refused on the next click on another instance.
#[tokio::test]
async fn each_role_in_a_real_browser_and_a_disabled_editor_on_another_instance() {
    let Some(browser) = crate::helpers::browser::Browser::start().await else {
        return;
    };
    let first = app(false).await;
    let second = spawn_app_with(TestOptions {
        adjust: export_scenarios,
        ..first.beside()
    })
    .await;
    add_staff(&first);
    let user = crate::helpers::events::new_user();
    first.deliver(&crate::helpers::events::text(&user, "export")).await;
    let user_page = format!("/console/users?id={user}");
    let send = format!("user={user}&scenario=export&key=console-{}", "0".repeat(32));

    browser_sign_in(&browser, &first.address, VIEWER).await;
    assert_eq!(
        browser.count("a[href='/console/audit']").await,
        0,
        "no audit link for a viewer"
    );
    browser.goto(&format!("{}{user_page}", first.address)).await;
    browser.wait_for("#timeline").await;
    for offered in ["#send-scenario", "#user-data", "#erase-user", "#add-tag"] {
        assert_eq!(browser.count(offered).await, 0, "a viewer is offered no {offered}");
    }
    let calls = first.line.accepted().len();
    assert_eq!(from_page(&browser, "POST", "/console/users/send", &send).await, 403);
    assert_eq!(
        from_page(&browser, "GET", "/console/scenarios/export/answers.csv", "").await,
        403
    );
    assert_eq!(from_page(&browser, "GET", "/console/audit", "").await, 403);
    assert_eq!(first.line.accepted().len(), calls, "nothing was sent");
    browser.click("#logout").await;
    browser.wait_for_path("/console/login").await;

    browser_sign_in(&browser, &first.address, EDITOR).await;
    browser.goto(&format!("{}{user_page}", first.address)).await;
    browser.wait_for("#timeline").await;
    assert_eq!(browser.count("#send-scenario").await, 1, "an editor may send");
    assert_eq!(browser.count("#user-data").await, 0, "but not export");
    // A tag added from the page, as a person would: the audit log names the editor.
    browser.fill("#new-tag", "常連").await;
    browser.click("#add-tag button").await;
    browser.wait_for("#confirm-edit").await;
    assert!(browser.text_of("#edit-does").await.contains("常連"));
    browser.click("#confirm-edit").await;
    browser.wait_for("tr[data-tag='常連']").await;
    // ... removed again, and a scenario sent to the user, from the pages.
    browser.click("tr[data-tag='常連'] button").await;
    browser.wait_for("#confirm-edit").await;
    browser.click("#confirm-edit").await;
    browser.wait_for("#timeline").await;
    assert_eq!(browser.count("tr[data-tag='常連']").await, 0, "the tag is gone");
    let calls = first.line.accepted().len();
    browser.click("#send-scenario").await;
    browser.wait_for("#preview").await;
    browser
        .run("document.querySelector('#scenario').value = 'export'; return true")
        .await;
    browser.click("#preview").await;
    browser.wait_for("#confirm-send").await;
    browser.click("#confirm-send").await;
    browser.wait_for("#back-to-user").await;
    assert_eq!(
        first.line.accepted().len(),
        calls + 1,
        "the editor's send went out once"
    );
    assert_eq!(
        from_page(&browser, "GET", "/console/scenarios/export/answers.csv", "").await,
        403
    );
    // Disabled while signed in: the next click, on the other instance (the
    // cookie is the host's, whatever the port), leads to the login.
    operators(&first, &["disable", EDITOR], "");
    browser.goto(&format!("{}/console/campaigns", second.address)).await;
    assert_eq!(browser.path().await, "/console/login");

    browser_sign_in(&browser, &second.address, OWNER).await;
    assert_eq!(
        from_page(&browser, "GET", "/console/scenarios/export/answers.csv", "").await,
        200,
        "an owner downloads the answers"
    );
    // Every action of theirs is a row of the owner's audit page, naming who did it.
    browser.goto(&format!("{}/console/audit", second.address)).await;
    let rows = browser
        .run("return Array.from(document.querySelectorAll('#audit tr[data-entry]')).map(row => row.innerText)")
        .await;
    let rows: Vec<&str> = rows
        .as_array()
        .map(|rows| rows.iter().filter_map(|row| row.as_str()).collect())
        .unwrap_or_default();
    for (action, who) in [
        ("tag_add", EDITOR),
        ("tag_remove", EDITOR),
        ("manual_send", EDITOR),
        ("export", OWNER),
    ] {
        assert_eq!(
            rows.iter()
                .filter(|row| row.contains(action) && row.contains(who))
                .count(),
            1,
            "one {action} by {who}: {rows:#?}"
        );
    }
    browser
        .goto(&format!("{}/console/audit?action=tag_add", second.address))
        .await;
    assert_eq!(browser.path().await, "/console/audit", "an owner reads the audit log");
    let rows = browser.text_of("#audit").await;
    assert!(
        rows.contains(EDITOR) && rows.contains("tag_add"),
        "the editor's tag, as theirs: {rows}"
    );
    browser.goto(&format!("{}/console/audit", second.address)).await;
    let by_viewer = browser
        .run(&format!(
            "return Array.from(document.querySelectorAll('#audit tr[data-entry] td:nth-child(2)')).filter(td => td.innerText.startsWith({VIEWER:?})).length"
        ))
        .await;
    assert_eq!(by_viewer, 0, "the viewer's refused requests are no action of theirs");
    assert!(
        browser.count("#audit tr[data-entry]").await > 0,
        "the log lists the others"
    );
}
