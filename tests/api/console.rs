//! `/console` in a real browser (headless Chromium over WebDriver): login,
//! funnels equal to Firestore's after a storm of answers, the CSV compared row
//! by row, a dead letter replayed from its button, CSRF and session expiry.
//! Screenshots of each page go to `target/console-screenshots/`.
//! Scenario: tests/fixtures/export.

use crate::campaigns::{seed_users, start_campaign, wait_for_state};
use crate::export::{csv_rows, expected_row, export_scenarios};
use crate::helpers::browser::Browser;
use crate::helpers::events::{self, postback, text};
use crate::helpers::firestore_rest::string_field;
use crate::helpers::line_stand_in::Fault;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app_with};
use serde_json::json;
use std::time::Duration;

async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: export_scenarios,
        ..TestOptions::default()
    })
    .await
}

/// The same, with a clock the test moves.
async fn app_on_the_test_clock() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: export_scenarios,
        test_clock: true,
        ..TestOptions::default()
    })
    .await
}

/// A user whose answer came too late for a reply and whose push LINE
/// refuses: the message is parked as a dead letter.
async fn park_a_refused_push(app: &TestApp) -> String {
    let parked = events::new_user();
    app.deliver(&text(&parked, "export")).await;
    app.line.fail_next_pushes([Fault::Refuse(400)]);
    let late = events::with_timestamp(
        &postback(&parked, &events::answer_data("export", "rating", "good")),
        events::now_ms() - 120_000,
    );
    app.deliver(&late).await;
    parked
}

/// Several users answer at once, each tap delivered three times concurrently
/// (redeliveries) and tapped again (a double tap); some also comment.
async fn answer_storm(app: &TestApp, users: &[String]) {
    for user in users {
        app.deliver(&text(user, "export")).await;
    }
    let mut bodies = Vec::new();
    for (i, user) in users.iter().enumerate() {
        let choice = if i % 3 == 0 { "bad" } else { "good" };
        let tap = events::envelope(vec![postback(user, &events::answer_data("export", "rating", choice))]);
        bodies.extend([tap.clone(), tap.clone(), tap]);
        bodies.push(events::envelope(vec![postback(
            user,
            &events::answer_data("export", "rating", choice),
        )]));
    }
    let sends = bodies.iter().map(|body| app.post_webhook(body));
    for response in futures::future::join_all(sends).await {
        assert_eq!(response.status(), 200);
    }
    app.settled().await;
    for (index, user) in users.iter().enumerate().step_by(2) {
        // One comment a spreadsheet would run as a formula: the console's
        // download defuses it (see export::expected_row).
        let comment = if index == 0 {
            "=HYPERLINK(\"https://x.example/\",\"open\")"
        } else {
            "駐車場が狭い, \"とても\""
        };
        app.deliver(&text(user, comment)).await;
    }
}

/// What Firestore holds of `node`: messages that asked it (ledger entries, and
/// the users of sent campaign chunks: the campaign starts with the rating) and
/// its answers.
async fn stored_funnel(app: &TestApp, node: &str) -> (usize, usize) {
    let mut sent = app
        .firestore
        .list("outbound_ledger")
        .await
        .iter()
        .filter(|entry| entry["fields"]["asks"]["mapValue"]["fields"]["node"]["stringValue"] == node)
        .count();
    if node == "rating" {
        sent += app
            .firestore
            .list("campaign_chunks")
            .await
            .iter()
            .filter(|chunk| string_field(chunk, "state").as_deref() == Some("sent"))
            .map(|chunk| {
                chunk["fields"]["count"]["integerValue"]
                    .as_str()
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum::<usize>();
    }
    let answered = app
        .firestore
        .list("survey_responses")
        .await
        .iter()
        .filter(|answer| string_field(answer, "nodeId").as_deref() == Some(node))
        .count();
    (sent, answered)
}

/// The console's login form as a client without a browser gets it: the
/// `Set-Cookie` header of the form's pairing cookie, that cookie as a request
/// sends it back (`name=value`), and the form's CSRF token.
pub(crate) struct LoginForm {
    pub(crate) set_cookie: String,
    pub(crate) pair: String,
    pub(crate) csrf: String,
}

pub(crate) async fn login_form(client: &reqwest::Client, address: &str) -> LoginForm {
    let page = client
        .get(format!("{address}/console/login"))
        .send()
        .await
        .expect("service reachable");
    assert_eq!(page.status(), 200);
    let set_cookie = page.headers()["set-cookie"].to_str().expect("a cookie").to_owned();
    let pair = set_cookie.split(';').next().unwrap_or_default().to_owned();
    let body = page.text().await.expect("the form");
    let csrf = body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the form's token")
        .to_owned();
    LoginForm { set_cookie, pair, csrf }
}

pub(crate) async fn log_in(browser: &Browser, address: &str, token: &str) {
    browser.goto(&format!("{address}/console/login")).await;
    browser.fill("#token", token).await;
    browser.click("#login").await;
}

/// A POST from the page itself (with the session cookie) and `body`: its status.
async fn post_from_page(browser: &Browser, path: &str, body: &str) -> u64 {
    let script = format!(
        "return fetch({path:?}, {{method: 'POST', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {body:?}, redirect: 'manual'}}).then(r => r.status)"
    );
    browser.run(&script).await.as_u64().expect("a status")
}

#[tokio::test]
async fn the_console_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = app().await;
    let users: Vec<String> = (0..6).map(|_| events::new_user()).collect();
    answer_storm(&app, &users).await;
    // A message LINE refuses: the answer came too late for a reply, and the
    // push is refused, so it is parked as a dead letter.
    let parked = park_a_refused_push(&app).await;
    assert_eq!(app.firestore.count("dead_letters").await, 1);
    // A campaign to three tagged friends, for the campaigns page.
    let friends = seed_users(&app.firestore, 3, |_| true, |_| false).await;
    let campaign = start_campaign(
        &app.address,
        &json!({"scenarioId": "export", "audience": {"tags": {"anyOf": ["unsatisfied"]}}}),
        "console-campaign",
    )
    .await;
    wait_for_state(&app.address, &campaign, "done", Duration::from_secs(30)).await;

    // Not logged in: every page leads to the login.
    browser.goto(&format!("{}/console", app.address)).await;
    assert_eq!(browser.path().await, "/console/login");
    browser.screenshot("login").await;
    assert!(browser.fits_width().await, "the login page fits a phone");

    // A wrong token is refused, and leaves no session.
    log_in(&browser, &app.address, "not-the-token").await;
    assert!(browser.text_of("#flash").await.contains("not the admin token"));
    browser.goto(&format!("{}/console", app.address)).await;
    assert_eq!(browser.path().await, "/console/login");

    // The right one opens the scenarios page.
    log_in(&browser, &app.address, ADMIN_TOKEN).await;
    assert_eq!(browser.wait_for_path("/console").await, "/console");
    browser.screenshot("scenarios").await;
    assert!(browser.fits_width().await, "the scenarios page fits a phone");
    assert!(
        browser.count("[data-scenario=export] svg.funnel").await == 1,
        "a funnel chart"
    );
    for node in ["rating", "comment"] {
        let (sent, answered) = stored_funnel(&app, node).await;
        let row = format!("[data-scenario=export] tr[data-node={node}]");
        let shown_sent: usize = browser
            .text_of(&format!("{row} [data-metric=sent]"))
            .await
            .parse()
            .unwrap();
        let shown_answered: usize = browser
            .text_of(&format!("{row} [data-metric=answered]"))
            .await
            .parse()
            .unwrap();
        assert_eq!((shown_sent, shown_answered), (sent, answered), "{node}");
    }
    assert_eq!(
        stored_funnel(&app, "rating").await.1,
        users.len() + 1,
        "one answer per user"
    );
    let page = browser.run("return document.body.innerText").await;
    assert!(
        page.as_str().unwrap().contains("とても良い"),
        "Japanese labels render as text"
    );

    // Answers, paged, and the CSV from the page's own session, row by row.
    browser
        .goto(&format!("{}/console/scenarios/export?by=answer", app.address))
        .await;
    browser.screenshot("answers").await;
    assert!(browser.fits_width().await, "the answers page fits a phone");
    let stored = app.firestore.list("survey_responses").await;
    assert_eq!(
        browser.count("#answers tr").await,
        stored.len() + 1,
        "a header and every answer"
    );
    let href = browser
        .run("return document.querySelector('#csv').getAttribute('href')")
        .await;
    let bytes = browser
        .run(&format!(
            "return fetch({href}).then(r => r.arrayBuffer()).then(b => Array.from(new Uint8Array(b)))"
        ))
        .await;
    let bytes: Vec<u8> = bytes
        .as_array()
        .expect("bytes")
        .iter()
        .map(|byte| u8::try_from(byte.as_u64().unwrap()).unwrap())
        .collect();
    let mut downloaded = csv_rows(&bytes);
    let mut expected: Vec<Vec<String>> = stored.iter().map(expected_row).collect();
    downloaded.sort();
    expected.sort();
    assert_eq!(downloaded, expected);
    assert!(
        downloaded.iter().any(|row| row[2].starts_with("'=HYPERLINK(")),
        "the formula is defused in the console's download"
    );

    // A POST without the CSRF token, or with another, is refused.
    let letter = crate::helpers::firestore_rest::document_id(&app.firestore.list("dead_letters").await[0]);
    let replay_path = format!("/console/dead-letters/{letter}/replay");
    assert_eq!(post_from_page(&browser, &replay_path, "").await, 403);
    assert_eq!(post_from_page(&browser, &replay_path, "csrf=forged").await, 403);
    assert_eq!(post_from_page(&browser, "/console/logout", "").await, 403);
    assert_eq!(app.firestore.count("dead_letters").await, 1, "nothing was replayed");

    // A crafted result link shows nothing as the console's.
    browser
        .goto(&format!(
            "{}/console/dead-letters?ok=true&message=All+good&sig=forged",
            app.address
        ))
        .await;
    assert_eq!(browser.count("#flash").await, 0);

    // The dead letter, replayed from its button: sent once.
    browser.goto(&format!("{}/console/dead-letters", app.address)).await;
    browser.screenshot("dead-letters").await;
    assert!(browser.fits_width().await, "the dead letters page fits a phone");
    browser.click(&format!("tr[data-letter='{letter}'] a.replay")).await;
    // First a confirmation: nothing goes out before it is pressed.
    browser.wait_for("#confirm-replay").await;
    browser.screenshot("dead-letter-replay-confirm").await;
    assert!(
        browser
            .text_of("#replay-does")
            .await
            .contains("sends the parked message")
    );
    assert_eq!(browser.count("#replay-risk").await, 0);
    assert_eq!(
        app.firestore.count("dead_letters").await,
        1,
        "nothing replayed before the confirmation"
    );
    browser.click("#confirm-replay").await;
    let result = browser.text_of("#flash").await;
    assert!(result.contains("Replayed") && result.contains("sent"), "{result}");
    browser.screenshot("dead-letter-replayed").await;
    assert_eq!(app.firestore.count("dead_letters").await, 0);
    let pushes = pushes_to(&app, &parked);
    assert_eq!(pushes, 1, "the parked message went out once");

    // One user's timeline, found by the search.
    browser.goto(&format!("{}/console/users", app.address)).await;
    browser.fill("#id", &users[0]).await;
    browser.click("form[action='/console/users'] button").await;
    browser.wait_for("#timeline").await;
    assert_eq!(browser.path().await, "/console/users");
    browser.screenshot("user").await;
    assert!(browser.fits_width().await, "the user page fits a phone");
    let answers_of_user = stored
        .iter()
        .filter(|answer| string_field(answer, "lineUserId").as_deref() == Some(users[0].as_str()))
        .count();
    assert_eq!(browser.count("tr[data-entry=answer]").await, answers_of_user);
    assert!(
        browser.count("tr[data-entry=event]").await >= 3,
        "trigger, tap and comment"
    );

    // Campaigns with their progress.
    browser.goto(&format!("{}/console/campaigns", app.address)).await;
    browser.screenshot("campaigns").await;
    assert!(browser.fits_width().await, "the campaigns page fits a phone");
    let row = format!("tr[data-campaign='{campaign}']");
    assert_eq!(
        browser.text_of(&format!("{row} td:nth-child(4)")).await,
        friends.len().to_string()
    );
    // One campaign's results.
    browser.click(&format!("{row} td a")).await;
    browser.screenshot("campaign").await;
    assert!(browser.fits_width().await, "the campaign page fits a phone");
    assert_eq!(
        browser.text_of("tr[data-figure='Delivered'] td").await,
        friends.len().to_string()
    );

    // Logout ends the session.
    browser.goto(&format!("{}/console", app.address)).await;
    browser.click("#logout").await;
    assert_eq!(browser.wait_for_path("/console/login").await, "/console/login");
    browser.goto(&format!("{}/console/dead-letters", app.address)).await;
    assert_eq!(browser.path().await, "/console/login");

    // A session past its lifetime leads back to the login: the browser's
    // cookie, replayed after it expired, is refused by the service itself.
    let short = spawn_app_with(TestOptions {
        adjust: |config| config.console_session = Duration::from_secs(5),
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    log_in(&browser, &short.address, ADMIN_TOKEN).await;
    assert_eq!(browser.wait_for_path("/console").await, "/console");
    let session = browser
        .client
        .get_named_cookie("console_session")
        .await
        .expect("the session cookie");
    let replay = |address: String, cookie: String| async move {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(format!("{address}/console/campaigns"))
            .header("Cookie", format!("console_session={cookie}"))
            .send()
            .await
            .unwrap()
    };
    let fresh = replay(short.address.clone(), session.value().to_owned()).await;
    assert_eq!(fresh.status(), 200, "valid while fresh");
    // The service's clock moves past the session's end (the browser's copy of
    // the cookie has not expired: the service alone refuses it).
    short.advance_clock(Duration::from_millis(5_200)).await;
    let stale = replay(short.address.clone(), session.value().to_owned()).await;
    assert_eq!(stale.status(), 303, "refused once expired");
    assert_eq!(stale.headers()["location"], "/console/login");
    browser.goto(&format!("{}/console/campaigns", short.address)).await;
    assert_eq!(
        browser.path().await,
        "/console/login",
        "the browser is sent to the login"
    );
    browser.client.clone().close().await.expect("the browser closes");
}

#[tokio::test]
async fn a_console_page_with_a_query_it_cannot_read_still_sends_a_stranger_to_the_login_first() {
    let app = app().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for path in [
        "/console?days=7&days=30",
        "/console/scenarios/lunch?after=a&after=b",
        "/console/scenarios/lunch/answers.csv?campaign=a&campaign=b",
        "/console/dead-letters?ok=1&ok=2",
        "/console/users?id=a&id=b",
    ] {
        let response = client.get(format!("{}{path}", app.address)).send().await.unwrap();
        assert_eq!(response.status(), 303, "{path}");
        assert_eq!(response.headers()["location"], "/console/login", "{path}");
    }
    // Logged in, the same query gets a clear 400.
    let cookie = console_cookie(&app).await;
    let refused = client
        .get(format!(
            "{}/console/scenarios/lunch/answers.csv?campaign=a&campaign=b",
            app.address
        ))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
}

#[tokio::test]
async fn the_console_is_off_without_an_admin_token_and_sets_strict_cookies() {
    let off = spawn_app_with(TestOptions {
        adjust: |config| config.admin_token = None,
        ..TestOptions::default()
    })
    .await;
    for path in ["/console", "/console/login"] {
        let response = off.http.get(format!("{}{path}", off.address)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }

    let app = app().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let LoginForm {
        set_cookie: login_cookie,
        pair,
        csrf,
    } = login_form(&client, &app.address).await;
    assert!(login_cookie.contains("HttpOnly") && login_cookie.contains("SameSite=Strict"));
    assert!(!login_cookie.contains("Secure"), "on localhost: {login_cookie}");
    let form = |token: &str, csrf: &str| format!("token={token}&csrf={csrf}");

    // Under another host name the cookies are Secure.
    let remote = client
        .get(format!("{}/console/login", app.address))
        .header("Host", "survey.example.jp")
        .send()
        .await
        .unwrap();
    assert!(remote.headers()["set-cookie"].to_str().unwrap().contains("Secure"));

    // Without the form's token, or with a wrong admin token: no session.
    for (body, status) in [(form(ADMIN_TOKEN, ""), 403), (form("wrong", &csrf), 401)] {
        let response = client
            .post(format!("{}/console/login", app.address))
            .header("Cookie", &pair)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(session_cookie(&response), None, "no session");
    }
    let response = client
        .post(format!("{}/console/login", app.address))
        .header("Cookie", &pair)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form(ADMIN_TOKEN, &csrf))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    let session = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .find(|cookie| cookie.starts_with("console_session="))
        .expect("a session cookie");
    assert!(session.contains("HttpOnly") && session.contains("SameSite=Strict") && session.contains("Max-Age="));
    let page = client
        .get(format!("{}/console", app.address))
        .header("Cookie", session.split(';').next().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["cache-control"], "no-store");
    let unauthenticated = client.get(format!("{}/console", app.address)).send().await.unwrap();
    assert_eq!(unauthenticated.status(), 303);
    assert_eq!(unauthenticated.headers()["location"], "/console/login");
}

#[tokio::test]
async fn a_replay_that_may_send_twice_asks_for_a_confirmation_first() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = app_on_the_test_clock().await;
    let parked = events::new_user();
    app.deliver(&text(&parked, "export")).await;
    app.line.fail_next_pushes([Fault::Refuse(400)]);
    let late = events::with_timestamp(
        &postback(&parked, &events::answer_data("export", "rating", "good")),
        app.now_ms() - 120_000,
    );
    app.deliver(&late).await;
    let letter = crate::helpers::firestore_rest::document_id(&app.firestore.list("dead_letters").await[0]);
    let pushes = || pushes_to(&app, &parked);
    // A day later LINE no longer remembers the push's retry key.
    app.advance_clock(Duration::from_secs(23 * 3600 + 60)).await;

    log_in(&browser, &app.address, ADMIN_TOKEN).await;
    // The login lands before the next page is asked for (a navigation started
    // while the form's POST is in flight would cancel it).
    assert_eq!(browser.wait_for_path("/console").await, "/console");
    browser.goto(&format!("{}/console/dead-letters", app.address)).await;
    assert_eq!(
        browser.count("#replay-anyway").await,
        0,
        "no confirmation before it is asked for"
    );
    browser.click(&format!("tr[data-letter='{letter}'] a.replay")).await;
    // The confirmation names the risk and offers only "Replay anyway".
    browser.wait_for("#replay-anyway").await;
    let warning = browser.text_of("#replay-risk").await;
    assert!(warning.contains("23 hours"), "{warning}");
    assert_eq!(browser.count("#confirm-replay").await, 0);
    browser.screenshot("dead-letter-confirm").await;
    assert_eq!(pushes(), 0, "nothing went out without the confirmation");
    assert_eq!(app.firestore.count("dead_letters").await, 1);
    // A replay posted without the force (a form from before the day passed)
    // is still refused, and the list then offers "Replay anyway" itself.
    let csrf = browser
        .run("return document.querySelector('input[name=csrf]').value")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let post = |body: String| {
        format!(
            "return fetch('/console/dead-letters/{letter}/replay', {{method: 'POST', headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: '{body}'}}).then(r => r.url)"
        )
    };
    let landed = browser.run(&post(format!("csrf={csrf}"))).await;
    assert!(
        landed.as_str().unwrap_or_default().contains("confirm="),
        "refused, and the list offers the force: {landed}"
    );
    assert_eq!(pushes(), 0, "a replay without the force sends nothing");
    // A force from a page that saw the letter parked at another time (it
    // was parked again since) is refused too.
    let landed = browser.run(&post(format!("csrf={csrf}&force=true&seen=1"))).await;
    assert!(landed.as_str().unwrap_or_default().contains("parked+again"), "{landed}");
    assert_eq!(pushes(), 0, "a stale force sends nothing");
    assert_eq!(app.firestore.count("dead_letters").await, 1);
    browser
        .goto(&format!("{}/console/dead-letters/{letter}/replay", app.address))
        .await;
    browser.wait_for("#replay-anyway").await;

    browser.click("#replay-anyway").await;
    // The page being left has a #flash too: read the new one's, by script (an
    // element found on the old page would go stale under the navigation).
    let read_flash = "const flash = document.querySelector('#flash'); return flash ? flash.innerText : '';";
    let mut result = String::new();
    for _ in 0..100 {
        result = browser.run(read_flash).await.as_str().unwrap_or_default().to_owned();
        if result.contains("Replayed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(result.contains("Replayed") && result.contains("sent"), "{result}");
    assert_eq!(pushes(), 1, "sent once, by the operator's choice");
    assert_eq!(app.firestore.count("dead_letters").await, 0);
}

#[tokio::test]
async fn a_dead_letter_keeps_lines_details_and_is_replayed_only_after_its_confirmation() {
    let app = app().await;
    let parked = events::new_user();
    app.deliver(&text(&parked, "export")).await;
    // LINE's documented shape: a message and a detail naming the property.
    app.line.fail_next_pushes([Fault::RefuseWith(
        400,
        json!({"message": "Failed to send messages", "details": [
            {"message": "The user hasn't added the LINE Official Account as a friend.", "property": "to"}
        ]}),
    )]);
    let late = events::with_timestamp(
        &postback(&parked, &events::answer_data("export", "rating", "good")),
        chrono::Utc::now().timestamp_millis() - 120_000,
    );
    app.deliver(&late).await;
    let letters = app.firestore.list("dead_letters").await;
    let letter = crate::helpers::firestore_rest::document_id(&letters[0]);
    let reason = string_field(&letters[0], "reason").unwrap_or_default();
    assert!(
        reason.contains("Failed to send messages (to: The user hasn't added the LINE Official Account as a friend.)"),
        "{reason}"
    );

    let cookie = console_cookie(&app).await;
    let page = |path: String| {
        let cookie = cookie.clone();
        let address = app.address.clone();
        async move {
            let response = crate::operator_access::get(&address, &path, &cookie).await;
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    // The list shows LINE's detail (escaped) and a link, not a button that replays.
    let (status, list) = page("/console/dead-letters".to_owned()).await;
    assert_eq!(status, 200);
    assert!(
        list.contains("hasn&#39;t added the LINE Official Account as a friend")
            || list.contains("hasn't added the LINE Official Account as a friend"),
        "{list}"
    );
    let row = list
        .split(&format!("data-letter=\"{letter}\""))
        .nth(1)
        .unwrap_or_default();
    assert!(
        row.contains("class=\"button replay\"") && row.contains("/replay\">"),
        "{row}"
    );
    assert!(
        !list.contains("action=\"/console/dead-letters/"),
        "no form on the list replays"
    );
    // The confirmation: why, what a replay does, the button; reading it replays nothing.
    let (status, confirm) = page(format!("/console/dead-letters/{letter}/replay")).await;
    assert_eq!(status, 200);
    assert!(confirm.contains("id=\"letter-reason\"") && confirm.contains("as a friend"));
    assert!(confirm.contains("id=\"confirm-replay\"") && !confirm.contains("id=\"replay-risk\""));
    assert_eq!(app.firestore.count("dead_letters").await, 1);
    assert_eq!(pushes_to(&app, &parked), 0, "reading the confirmation sends nothing");
    // Replayed from the confirmation's own form: sent once, the result shown.
    let csrf = hidden_value(&confirm, "csrf").expect("the confirmation's form");
    // The form carries its own key: three clicks at once replay once.
    let key = hidden_value(&confirm, "key").expect("the confirmation's key");
    assert!(key.starts_with("console-"), "{key}");
    let path = format!("/console/dead-letters/{letter}/replay");
    let click = || async {
        crate::operator_access::post(&app.address, &path, &cookie, &[("csrf", &csrf), ("key", &key)]).await
    };
    // LINE refuses the first try: the letter is parked again, and the same
    // form may try once more (a failed replay leaves no receipt).
    app.line
        .fail_next_pushes([Fault::RefuseWith(400, json!({"message": "Failed to send messages"}))]);
    let refused = click().await;
    let location = refused.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("ok=false"), "{location}");
    assert_eq!(app.firestore.count("dead_letters").await, 1, "parked again");
    assert_eq!(pushes_to(&app, &parked), 0);
    let clicks = futures::future::join_all([click(), click(), click()]).await;
    let locations: Vec<String> = clicks
        .iter()
        .map(|replayed| {
            assert_eq!(replayed.status(), 303);
            replayed.headers()["location"].to_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        locations
            .iter()
            .filter(|location| location.contains("Replayed"))
            .count(),
        1,
        "{locations:?}"
    );
    assert_eq!(pushes_to(&app, &parked), 1);
    assert_eq!(app.firestore.count("dead_letters").await, 0);
    // Sent again later (a reload), the form says it replayed already.
    let again = click().await;
    let location = again.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        location.contains("replayed") && location.contains("already") && location.contains("ok=true"),
        "{location}"
    );
    assert_eq!(pushes_to(&app, &parked), 1, "a resent form replays nothing");
    let replays: Vec<(String, i64)> = app
        .firestore
        .list("audit_log")
        .await
        .iter()
        .filter(|entry| string_field(entry, "action").as_deref() == Some("replay"))
        .map(|entry| {
            (
                string_field(entry, "result").unwrap_or_default(),
                entry["fields"]["status"]["integerValue"]
                    .as_str()
                    .and_then(|status| status.parse().ok())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(replays.len(), 5, "{replays:?}");
    assert!(
        replays
            .iter()
            .any(|(result, status)| result == "failed" && *status == 502),
        "the refused try: {replays:?}"
    );
    assert_eq!(
        replays
            .iter()
            .filter(|(result, status)| result == "done" && *status == 200)
            .count(),
        1,
        "{replays:?}"
    );
    assert!(
        replays.contains(&("repeat".to_owned(), 208)),
        "the resent form is a repeat: {replays:?}"
    );
    // Unknown and malformed letters: 404.
    for missing in [
        "outbound-0123456789abcdef0123456789abcdef01234567",
        "..%2F..%2Fusers",
        "x",
    ] {
        assert_eq!(
            page(format!("/console/dead-letters/{missing}/replay")).await.0,
            404,
            "{missing}"
        );
    }
}

/// The value of the hidden field `name` of the first form on `page` that has one.
pub(crate) fn hidden_value(page: &str, name: &str) -> Option<String> {
    page.split(&format!("type=\"hidden\" name=\"{name}\" value=\""))
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(str::to_owned)
}

/// The messages LINE accepted for `user`.
fn pushes_to(app: &TestApp, user: &str) -> usize {
    app.line
        .accepted()
        .into_iter()
        .filter(|call| call.to() == Some(user))
        .count()
}

/// The console session cookie (`console_session=...`) a response sets, if any.
pub(crate) fn session_cookie(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|cookie| cookie.starts_with("console_session="))
        .and_then(|cookie| cookie.split(';').next())
        .map(str::to_owned)
}

/// A console session for `app` (logged in with the admin token): its cookie.
async fn console_cookie(app: &TestApp) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let LoginForm { pair, csrf, .. } = login_form(&client, &app.address).await;
    let response = client
        .post(format!("{}/console/login", app.address))
        .header("Cookie", &pair)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN_TOKEN}&csrf={csrf}"))
        .send()
        .await
        .unwrap();
    session_cookie(&response).expect("a session")
}

#[tokio::test]
async fn the_home_page_counts_the_last_30_days_unless_another_range_is_chosen() {
    let app = app_on_the_test_clock().await;
    let user = events::new_user();
    app.deliver(&app.sent_now(&text(&user, "export"))).await;
    app.deliver(&app.sent_now(&postback(&user, &events::answer_data("export", "rating", "good"))))
        .await;
    let answered = |page: &str| {
        // The first question's "Answered" cell in the export scenario's section.
        let section = page.split("data-scenario=\"export\"").nth(1).unwrap_or_default();
        let row = section.split("data-node=\"rating\"").nth(1).unwrap_or_default();
        row.split("data-metric=\"answered\">")
            .nth(1)
            .and_then(|rest| rest.split('<').next())
            .and_then(|count| count.parse::<u64>().ok())
            .expect("the answered count is shown")
    };
    let home = |query: &'static str, cookie: String| {
        let address = app.address.clone();
        async move {
            let response = reqwest::Client::new()
                .get(format!("{address}/console{query}"))
                .header("Cookie", cookie)
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let cookie = console_cookie(&app).await;
    let (status, today) = home("", cookie.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(answered(&today), 1, "today's answer is in the last 30 days");
    assert!(
        today.contains("<strong data-range=\"30\">30 days</strong>"),
        "30 days is the default"
    );

    // 31 days later (a new session: the old one has expired meanwhile).
    app.advance_clock(Duration::from_secs(31 * 24 * 3600)).await;
    let cookie = console_cookie(&app).await;
    let (_, later) = home("", cookie.clone()).await;
    assert_eq!(answered(&later), 0, "outside the last 30 days");
    let (_, quarter) = home("?days=90", cookie.clone()).await;
    assert_eq!(answered(&quarter), 1, "inside the last 90 days");
    let (_, all) = home("?days=all", cookie.clone()).await;
    assert_eq!(answered(&all), 1);
    for bad in ["?days=31", "?days=-1", "?days=week"] {
        let (status, _) = home(bad, cookie.clone()).await;
        assert_eq!(status, 400, "{bad}");
    }
}

#[tokio::test]
async fn the_user_page_shows_the_rich_menu_asked_for_and_the_menus_tapped() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&postback(&user, "v=1&k=m&s=export&m=survey_tab")).await;
    app.settled().await;
    app.firestore
        .patch("users", &user, &[("richMenu", json!({"stringValue": "member"}))])
        .await;
    let cookie = console_cookie(&app).await;

    let page = reqwest::Client::new()
        .get(format!("{}/console/users?id={user}", app.address))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    let line = page
        .split("id=\"rich-menu\"")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .expect("the rich menu line is shown");
    assert!(line.contains("<strong>member</strong>"), "{line}");
    assert!(line.contains("tapped: survey_tab"), "{line}");
}

/// The words inside table cells that a line breaks through: a run of Latin
/// letters and digits (with `-_.:/@` inside it, as in ids, dates and times)
/// whose characters sit on more than one line. Japanese text may wrap
/// between any two characters, so only such runs are checked.
const BROKEN_WORDS: &str = r#"
// Folded details (a timeline's ids) are measured open.
document.querySelectorAll('details').forEach(d => { d.open = true; });
const broken = [];
for (const cell of document.querySelectorAll('td, th')) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const match of node.textContent.matchAll(/[A-Za-z0-9]+(?:[-_.:\/@][A-Za-z0-9]+)*/g)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (tops.size > 1) broken.push(match[0]);
    }
  }
}
return broken;
"#;

/// Labels of the English console: none may show on a Japanese page.
const ENGLISH_LABELS: [&str; 30] = [
    "Cancel",
    "Filter",
    "Find",
    "Question",
    "Latest",
    "Value",
    "Kind",
    "Reason",
    "Attempts",
    "Users",
    "Campaign",
    "Following",
    "Tags",
    "When",
    "Log out",
    "Log in",
    "Scenarios",
    "Dead letters",
    "Campaigns",
    "Sources",
    "Audit log",
    "Answered",
    "Replay",
    "Preview",
    "Back to",
    "Download",
    "Created",
    "Role",
    "Cross-tab",
    "Nothing",
];

/// Opens `path` and checks it as a Japanese operator on a phone would see
/// it; saves its screenshot as `ja-{name}`.
async fn check_japanese_page(browser: &Browser, address: &str, path: &str, name: &str) {
    browser.goto(&format!("{address}{path}")).await;
    browser.screenshot(&format!("ja-{name}")).await;
    assert_eq!(
        browser.run("return document.documentElement.lang").await,
        "ja",
        "{path} is marked Japanese"
    );
    assert!(browser.fits_width().await, "{path} fits a 390 px window");
    let broken = browser.run(BROKEN_WORDS).await;
    assert_eq!(broken, json!([]), "{path}: no word or number broken inside a cell");
    let text = browser.run("return document.body.innerText").await;
    let text = text.as_str().unwrap_or_default();
    for label in ENGLISH_LABELS {
        assert!(!text.contains(label), "{path} shows the English {label:?}:\n{text}");
    }
}

/// The export scenarios with the console in Japanese, its default.
pub(crate) async fn japanese_app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: |config| {
            export_scenarios(config);
            config.console_lang = line_survey::values::ConsoleLang::Ja;
        },
        ..TestOptions::default()
    })
    .await
}

/// The console's default language is Japanese: every page an operator
/// opens, at a phone's width, with screenshots (`ja-*.png`).
#[tokio::test]
async fn the_console_is_japanese_and_fits_a_phone() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = japanese_app().await;
    let users: Vec<String> = (0..3).map(|_| events::new_user()).collect();
    answer_storm(&app, &users).await;
    park_a_refused_push(&app).await;
    let letter = crate::helpers::firestore_rest::document_id(&app.firestore.list("dead_letters").await[0]);
    seed_users(&app.firestore, 2, |_| true, |_| false).await;
    let campaign = start_campaign(
        &app.address,
        &json!({"scenarioId": "export", "audience": {"tags": {"anyOf": ["unsatisfied"]}}}),
        "console-japanese",
    )
    .await;
    wait_for_state(&app.address, &campaign, "done", Duration::from_secs(30)).await;

    check_japanese_page(&browser, &app.address, "/console/login", "login").await;
    assert_eq!(browser.text_of("#login").await, "トークンでログイン");
    log_in(&browser, &app.address, ADMIN_TOKEN).await;
    assert_eq!(browser.wait_for_path("/console").await, "/console");
    assert_eq!(browser.text_of("#logout").await, "ログアウト");
    let user = &users[0];
    let pages = [
        ("/console".to_owned(), "scenarios"),
        ("/console/scenarios/export".to_owned(), "answers"),
        ("/console/scenarios/export?by=answer".to_owned(), "answers-every"),
        ("/console/scenarios/export/crosstab".to_owned(), "crosstab"),
        ("/console/scenarios/export/graph".to_owned(), "graph"),
        ("/console/dead-letters".to_owned(), "dead-letters"),
        (format!("/console/dead-letters/{letter}/replay"), "replay-confirm"),
        ("/console/users".to_owned(), "users"),
        (format!("/console/users?id={user}"), "user"),
        ("/console/users?q=unsatisfied&by=tag".to_owned(), "user-search"),
        (format!("/console/users/send?id={user}"), "send-choice"),
        (format!("/console/users/send?id={user}&scenario=export"), "send-preview"),
        (format!("/console/users/erase?id={user}"), "erase"),
        ("/console/campaigns".to_owned(), "campaigns"),
        (format!("/console/campaigns/{campaign}"), "campaign"),
        (format!("/console/campaigns/{campaign}/cancel"), "campaign-cancel"),
        ("/console/campaigns/new".to_owned(), "campaign-builder"),
        (
            "/console/campaigns/new?preview=1&scenario=export&tags_any=unsatisfied&when=now".to_owned(),
            "campaign-preview",
        ),
        ("/console/sources".to_owned(), "sources"),
        ("/console/tokens".to_owned(), "tokens"),
        ("/console/audit".to_owned(), "audit"),
    ];
    for (path, name) in &pages {
        check_japanese_page(&browser, &app.address, path, name).await;
    }
    // The timeline tells what the bot asked in the scenario's words.
    browser.goto(&format!("{}/console/users?id={user}", app.address)).await;
    let story = browser.text_of("#timeline").await;
    // The keyword started a run; the answer reads with its choice's label
    // and the question (the scenario has no title: its id names it).
    assert!(
        story.contains("アンケート「export」を開始: 質問「How was it?」を送信（返信）"),
        "{story}"
    );
    assert!(
        story.contains("回答: bad Bad, really（export「How was it?」）"),
        "{story}"
    );
    assert!(
        story.contains("ボットが質問「Anything else?」を送信（返信）"),
        "{story}"
    );
    assert!(story.contains("ボタンをタップ（回答を1件記録）"), "{story}");
    assert!(
        story.contains("「Thank you!」"),
        "what the bot said, as the scenario wrote it: {story}"
    );
    // What a refusal says is Japanese too.
    check_japanese_page(&browser, &app.address, "/console/campaigns/ffff", "not-found").await;
    assert!(browser.text_of("#flash").await.contains("一斉配信はありません"));
}

/// The answers page: a row per user and run, newest first, with the cached
/// display name linked to the user; days and a tag narrow it, the CSV link
/// carries the same filters and its file holds the same users' answers;
/// pages continue where they stopped and a broken cursor is 400.
#[tokio::test]
async fn the_answers_page_has_a_row_per_user_newest_first_and_the_csv_takes_its_filters() {
    let app = app().await;
    let cookie = console_cookie(&app).await;
    let users: Vec<String> = (0..3).map(|_| events::new_user()).collect();
    for (i, user) in users.iter().enumerate() {
        app.deliver(&text(user, "export")).await;
        let choice = if i == 1 { "bad" } else { "good" };
        app.deliver(&postback(user, &events::answer_data("export", "rating", choice)))
            .await;
        if i != 1 {
            app.deliver(&text(user, &format!("comment {i}"))).await;
        }
        // Answers a millisecond apart at least: the order below is the order here.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    app.firestore
        .patch(
            "users",
            &users[0],
            &[("displayName", json!({"stringValue": "田中 花子"}))],
        )
        .await;
    let get = |path: String| {
        let app = &app;
        let cookie = cookie.clone();
        async move {
            app.http
                .get(format!("{}{path}", app.address))
                .header("Cookie", cookie)
                .send()
                .await
                .unwrap()
        }
    };
    let rows_of = |page: &str| -> Vec<String> {
        page.split("<tr data-user=\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next().map(str::to_owned))
            .collect()
    };

    let page = get("/console/scenarios/export".to_owned()).await.text().await.unwrap();
    let newest_first: Vec<String> = users.iter().rev().cloned().collect();
    assert_eq!(rows_of(&page), newest_first, "a row per user, newest first");
    assert!(page.contains("田中 花子"), "the cached name");
    assert!(page.contains(&format!("href=\"/console/users?id={}\"", users[0])));
    assert!(
        page.contains("とても良い") && page.contains("Bad, really"),
        "choice labels"
    );
    assert!(page.contains("comment 2"), "the typed answer in its column");
    assert!(
        page.contains("<th title=\"rating\">How was it?</th>"),
        "a column per question"
    );

    // A tag the user has now: only the one who answered "bad".
    let page = get("/console/scenarios/export?tag=unhappy".to_owned())
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(rows_of(&page), vec![users[1].clone()]);
    assert!(
        page.contains("href=\"/console/scenarios/export/answers.csv?tag=unhappy\""),
        "{page}"
    );
    let csv = get("/console/scenarios/export/answers.csv?tag=unhappy".to_owned()).await;
    assert_eq!(csv.status(), 200);
    let rows = crate::export::csv_rows(&csv.bytes().await.unwrap());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][0], users[1]);
    // Days: tomorrow onwards holds nothing; a bad date is 400 on both.
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(2))
        .format("%Y-%m-%d")
        .to_string();
    let page = get(format!("/console/scenarios/export?from={tomorrow}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(rows_of(&page).is_empty() && page.contains("id=\"no-runs\""));
    let csv = get(format!("/console/scenarios/export/answers.csv?from={tomorrow}")).await;
    assert!(crate::export::csv_rows(&csv.bytes().await.unwrap()).is_empty());
    assert_eq!(
        get("/console/scenarios/export?from=2026-13-01".to_owned())
            .await
            .status(),
        400
    );
    assert_eq!(
        get("/console/scenarios/export/answers.csv?to=soon".to_owned())
            .await
            .status(),
        400
    );
    assert_eq!(
        get("/console/scenarios/export?after=nope".to_owned()).await.status(),
        400
    );
    // The old list, one answer per row, stays a click away.
    let every = get("/console/scenarios/export?by=answer".to_owned())
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        every.matches("<tr>").count(),
        app.firestore.count("survey_responses").await + 1
    );
}

/// Pages of the answers page hold every run once, newest first, however the
/// runs tie: 130 users answered, three at a time inside one millisecond (a
/// few hundred microseconds apart), some a second question later, and
/// answers to a node the scenario no longer has. Seeded as stored, so the
/// times are exact.
#[tokio::test]
async fn the_answers_pages_hold_every_run_once_newest_first_through_ties() {
    let app = app().await;
    let cookie = console_cookie(&app).await;
    // On a whole millisecond, so the microseconds below stay inside theirs.
    let base =
        chrono::DateTime::from_timestamp_millis((chrono::Utc::now() - chrono::Duration::hours(1)).timestamp_millis())
            .expect("a time");
    let at = |ms: i64, micros: i64| {
        (base + chrono::Duration::milliseconds(ms) + chrono::Duration::microseconds(micros))
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    };
    let mut documents = Vec::new();
    // (user, newest ms, newest micros within it)
    let mut expected: Vec<(i64, i64, String)> = Vec::new();
    for i in 0..130_i64 {
        let user = format!("U{:032x}", 0xabc000 + i);
        let (ms, micros) = (-(i / 3), (i % 3) * 300);
        let answer = |node: &str, value: &str, when: String| {
            (
                "survey_responses".to_owned(),
                format!("{node}-{user}"),
                json!({
                    "scenarioId": {"stringValue": "export"},
                    "nodeId": {"stringValue": node},
                    "lineUserId": {"stringValue": user},
                    "value": {"stringValue": value},
                    "valueType": {"stringValue": "choice"},
                    "tags": {"arrayValue": {}},
                    "scenarioVersion": {"integerValue": "4"},
                    "answeredAt": {"timestampValue": when},
                    "webhookEventId": {"stringValue": format!("seed-{node}-{i}")},
                }),
            )
        };
        documents.push(answer("rating", "good", at(ms - 10_000, micros)));
        if i % 7 == 0 {
            // A second question, later: the run's newest answer.
            documents.push(answer("comment", "later", at(ms, micros)));
            expected.push((ms, micros, user.clone()));
        } else {
            expected.push((ms - 10_000, micros, user.clone()));
        }
        if i % 11 == 0 {
            // Newer than anything, but to a node the scenario no longer has.
            documents.push(answer("removed_node", "x", at(5_000, 0)));
        }
    }
    app.firestore.write_all(&documents).await;
    // Newest first; runs in one millisecond by user id (the page's key order).
    expected.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.2.cmp(&b.2)));
    let expected: Vec<String> = expected.into_iter().map(|(_, _, user)| user).collect();

    let mut seen: Vec<String> = Vec::new();
    let mut path = "/console/scenarios/export".to_owned();
    for _ in 0..20 {
        let page = app
            .http
            .get(format!("{}{path}", app.address))
            .header("Cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        seen.extend(
            page.split("<tr data-user=\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next().map(str::to_owned)),
        );
        match page
            .split("id=\"next\" href=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        {
            Some(next) => path = next.replace("&amp;", "&"),
            None => break,
        }
    }
    assert_eq!(seen.len(), expected.len(), "every run once");
    assert_eq!(seen, expected, "newest first, ties in key order");
}
