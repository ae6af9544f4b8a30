//! Brute force: after 10 wrong tokens from one client address within 10
//! minutes, that address gets 429 with `Retry-After` for 15 minutes on
//! `/admin`, `/metrics` and the console's login, even with the right token;
//! other addresses are not affected. The address is the last
//! `X-Forwarded-For` entry (Cloud Run's front end appends it; a client cannot
//! forge it by sending its own header).

use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app_with};
use std::time::Duration;

async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        test_clock: true,
        ..TestOptions::default()
    })
    .await
}

async fn admin_call(app: &TestApp, forwarded: &str, token: &str) -> reqwest::Response {
    app.http
        .get(format!("{}/admin/dead-letters", app.address))
        .header("X-Forwarded-For", forwarded)
        .bearer_auth(token)
        .send()
        .await
        .expect("service reachable")
}

#[tokio::test]
async fn ten_wrong_tokens_from_one_address_block_it_for_fifteen_minutes() {
    let app = app().await;
    let guesser = "198.51.100.9, 203.0.113.7";
    for attempt in 1..=10 {
        let response = admin_call(&app, guesser, &format!("guess-{attempt}")).await;
        assert_eq!(response.status(), 401, "attempt {attempt}");
    }
    let blocked = admin_call(&app, guesser, ADMIN_TOKEN).await;
    assert_eq!(blocked.status(), 429, "even the right token, from that address");
    assert_eq!(blocked.headers()["retry-after"], "900");
    // A forged first entry changes nothing: the last one is the client.
    let forged = admin_call(&app, "203.0.113.8, 203.0.113.7", ADMIN_TOKEN).await;
    assert_eq!(forged.status(), 429);
    let metrics = app
        .http
        .get(format!("{}/metrics", app.address))
        .header("X-Forwarded-For", "203.0.113.7")
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 429, "/metrics too");
    let login = app
        .http
        .post(format!("{}/console/login", app.address))
        .header("X-Forwarded-For", "203.0.113.7")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN_TOKEN}&csrf=x"))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 429, "the console's login too");
    assert!(login.headers().contains_key("retry-after"));

    // Another address is not affected.
    let other = admin_call(&app, "198.51.100.9, 203.0.113.8", ADMIN_TOKEN).await;
    assert_eq!(other.status(), 200);

    // The block lasts 15 minutes.
    app.advance_clock(Duration::from_secs(14 * 60)).await;
    assert_eq!(admin_call(&app, guesser, ADMIN_TOKEN).await.status(), 429);
    app.advance_clock(Duration::from_secs(61)).await;
    assert_eq!(admin_call(&app, guesser, ADMIN_TOKEN).await.status(), 200);
}

#[tokio::test]
async fn wrong_console_logins_count_and_block_the_login() {
    let app = app().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let crate::console::LoginForm { pair, csrf, .. } = crate::console::login_form(&client, &app.address).await;
    let login = |token: String| {
        client
            .post(format!("{}/console/login", app.address))
            .header("Cookie", &pair)
            .header("X-Forwarded-For", "192.0.2.44")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&csrf={csrf}"))
            .send()
    };
    for attempt in 1..=10 {
        assert_eq!(
            login(format!("guess-{attempt}")).await.unwrap().status(),
            401,
            "attempt {attempt}"
        );
    }
    let blocked = login(ADMIN_TOKEN.to_owned()).await.unwrap();
    assert_eq!(blocked.status(), 429);
    assert_eq!(blocked.headers()["retry-after"], "900");
    assert_eq!(
        crate::console::session_cookie(&blocked),
        None,
        "no session while blocked"
    );
}
