//! Friend-add source links (`/r/{source}` through LINE Login): the redirect,
//! every failure (a clear page, nothing stored), a source recorded once per
//! user with its tags, its scenario started exactly once whichever of the
//! follow and the login comes first, on two instances, with redeliveries; the
//! counts, the QR code and the console's page.

use crate::helpers::events;
use crate::helpers::firestore_rest::{FirestoreRest, string_array, string_field};
use crate::helpers::line_login::{LOGIN_CHANNEL_ID, LoginMode, LoginStandIn};
use crate::helpers::{FRIEND_URL, SOURCE_WAIT, SourcesSetup, TestApp, TestOptions, spawn_app_with};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

/// The source's scenario is `news` (no survey, so no guard of its own: only
/// the source's queuing keeps it to one start), its text counted below.
const SOURCES: &str = r#"
[[sources]]
id = "instagram_dec"
label = "Instagram 12月広告"
tags = ["src_instagram", "広告"]
scenario = "news"

[[sources]]
id = "poster"
label = "店頭ポスター"
tags = ["src_poster"]
"#;
const NEWS: &str = "Today's news: the cafeteria has a new menu.";
/// The follow trigger's welcome (tests/fixtures/scenarios/welcome.toml).
const WELCOME: &str = "Thanks for adding us!";

pub(crate) fn user(n: usize) -> String {
    format!("U{n:032x}")
}

/// A client that does not follow redirects and keeps no cookies: the test
/// follows each hop itself, as a browser switching to the LINE app would.
pub(crate) fn browser() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("a client")
        })
        .clone()
}

pub(crate) struct Links {
    pub(crate) app: TestApp,
    pub(crate) login: LoginStandIn,
}

async fn spawn_links() -> Links {
    spawn_links_with(TestOptions::default()).await
}

pub(crate) async fn spawn_links_with(options: TestOptions) -> Links {
    let login = LoginStandIn::start().await;
    let app = spawn_app_with(TestOptions {
        sources: Some(SourcesSetup::new(&login.uri(), SOURCES)),
        ..options
    })
    .await;
    Links { app, login }
}

pub(crate) fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("location")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// `GET /r/{source}` on `address`: LINE Login's authorize URL.
pub(crate) async fn open_link(address: &str, source: &str) -> String {
    let response = browser()
        .get(format!("{address}/r/{source}"))
        .send()
        .await
        .expect("service reachable");
    assert_eq!(response.status(), 302, "the link redirects to LINE Login");
    location(&response)
}

/// Logs `user` in at the stand-in: the callback's path and query, as LINE's
/// redirect names it (on `PUBLIC_BASE_URL`).
pub(crate) async fn log_in_at_line(authorize: &str, user: &str) -> String {
    let response = browser()
        .get(format!("{authorize}&as={user}"))
        .send()
        .await
        .expect("stand-in reachable");
    assert_eq!(response.status(), 302, "the stand-in redirects back");
    let back = reqwest::Url::parse(&location(&response)).expect("a URL");
    assert_eq!(back.path(), "/r/callback");
    format!("{}?{}", back.path(), back.query().unwrap_or_default())
}

pub(crate) async fn call_back(address: &str, callback: &str) -> reqwest::Response {
    browser()
        .get(format!("{address}{callback}"))
        .send()
        .await
        .expect("service reachable")
}

/// The whole flow on `address` for `user`: the response of the callback.
pub(crate) async fn through_link(address: &str, source: &str, user: &str) -> reqwest::Response {
    let authorize = open_link(address, source).await;
    let callback = log_in_at_line(&authorize, user).await;
    call_back(address, &callback).await
}

/// The source scenario's message accepted for each user, by push or by the
/// reply to one of `follows`.
fn news_by_user(app: &TestApp, follows: &[Value]) -> HashMap<String, usize> {
    let mut by_user = HashMap::new();
    for (user, call) in app.line.accepted_by_user(follows) {
        if call.texts().iter().any(|text| text == NEWS) {
            *by_user.entry(user).or_default() += 1;
        }
    }
    by_user
}

/// The texts of the accepted reply to `follow`.
fn reply_to(app: &TestApp, follow: &Value) -> Vec<String> {
    let token = follow["replyToken"].as_str().expect("a reply token");
    app.line
        .accepted()
        .iter()
        .filter(|call| call.reply_token() == Some(token))
        .flat_map(crate::helpers::line_stand_in::Call::texts)
        .collect()
}

async fn source_rows(app: &TestApp) -> Value {
    let response = app.get_admin("/admin/sources").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("JSON");
    body["sources"].clone()
}

fn integer_field(document: &Value, field: &str) -> Option<i64> {
    document["fields"][field]["integerValue"]
        .as_str()
        .and_then(|value| value.parse().ok())
}

/// Until the user's record says the follow at `followed_ms` waits for a login.
async fn until_the_follow_waits(firestore: &FirestoreRest, user: &str, followed_ms: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let record = firestore.get("users", user).await;
        if record.is_some_and(|record| integer_field(&record, "sourceWaitOpenedMs") == Some(followed_ms)) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the follow never began its wait");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn row<'a>(rows: &'a Value, id: &str) -> &'a Value {
    rows.as_array()
        .and_then(|rows| rows.iter().find(|row| row["id"] == id))
        .expect("the source is listed")
}

#[tokio::test]
async fn a_link_sends_the_visitor_to_line_login_and_writes_nothing() {
    let Links { app, login } = spawn_links().await;
    let response = browser()
        .get(format!("{}/r/instagram_dec", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 302);
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(cookie.starts_with("lsv_link="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let authorize = reqwest::Url::parse(&location(&response)).expect("a URL");
    assert!(
        authorize
            .as_str()
            .starts_with(&format!("{}/oauth2/v2.1/authorize?", login.uri()))
    );
    let query: HashMap<String, String> = authorize.query_pairs().into_owned().collect();
    assert_eq!(query["response_type"], "code");
    assert_eq!(query["client_id"], LOGIN_CHANNEL_ID);
    assert_eq!(query["scope"], "openid");
    assert_eq!(query["bot_prompt"], "aggressive");
    assert_eq!(query["redirect_uri"], "http://survey.test/r/callback");
    assert!(query["state"].len() > 40 && query["nonce"].len() == 32, "{query:?}");
    // Every visit gets its own state and nonce.
    let again = reqwest::Url::parse(&open_link(&app.address, "instagram_dec").await).unwrap();
    let again: HashMap<String, String> = again.query_pairs().into_owned().collect();
    assert_ne!(again["nonce"], query["nonce"]);

    for unknown in ["unknown", "callback_x", "Instagram_dec", "poster%2F..", "%E6%97%A5"] {
        let response = browser()
            .get(format!("{}/r/{unknown}", app.address))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{unknown}");
        assert!(response.text().await.unwrap().contains("ページが見つかりません"));
    }
    // Visits are counted in /metrics, not written to Firestore.
    for collection in [
        "user_sources",
        "login_states",
        "users",
        "source_counters",
        "webhook_inbox",
    ] {
        assert_eq!(app.firestore.count(collection).await, 0, "{collection}");
    }
    let metrics = app.get_admin("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains("line_survey_source_link_visits_total{source=\"instagram_dec\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn links_are_off_without_their_settings() {
    let app = crate::helpers::spawn_app().await;
    for path in ["/r/instagram_dec", "/r/callback?code=a&state=b"] {
        let response = browser().get(format!("{}{path}", app.address)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    assert_eq!(app.get_admin("/admin/sources").await.status(), 404);
}

#[tokio::test]
async fn a_login_records_the_source_once_and_the_follow_starts_its_scenario_once() {
    let Links { app, login } = spawn_links().await;
    let alice = user(1);
    // Logged in, not a friend yet: on to the add-friend page.
    let response = through_link(&app.address, "instagram_dec", &alice).await;
    assert_eq!(response.status(), 302);
    assert_eq!(location(&response), FRIEND_URL);
    let record = app.firestore.get("users", &alice).await.expect("the user's record");
    assert_eq!(string_field(&record, "firstSource").as_deref(), Some("instagram_dec"));
    assert_eq!(
        crate::helpers::sorted(string_array(&record, "tags")),
        vec!["src_instagram".to_owned(), "広告".to_owned()]
    );
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(sources.len(), 1);
    assert_eq!(string_field(&sources[0], "standing").as_deref(), Some("waiting"));
    app.settled().await;
    assert!(news_by_user(&app, &[]).is_empty(), "nothing starts before the follow");

    // The follow (and its redelivery) start the scenario once, by its reply,
    // instead of the welcome.
    let follow = events::follow(&alice);
    app.deliver(&follow).await;
    app.deliver(&follow).await;
    app.settled().await;
    assert_eq!(news_by_user(&app, std::slice::from_ref(&follow)).get(&alice), Some(&1));
    let greeting = reply_to(&app, &follow);
    assert!(greeting.contains(&NEWS.to_owned()), "{greeting:?}");
    assert!(!greeting.contains(&WELCOME.to_owned()), "{greeting:?}");
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(string_field(&sources[0], "standing").as_deref(), Some("friend"));

    // A second visit through another source: a login and a source of its
    // own; the first source stays first. LINE says nothing changed, and the
    // service's record says she follows: the thanks page.
    login.set_friendship_changed(false);
    let response = through_link(&app.address, "poster", &alice).await;
    assert_eq!(response.status(), 200, "already a friend: the thanks page");
    assert!(response.text().await.unwrap().contains("すでに友だち追加されています"));
    // A second visit through the same source: counted as a login only.
    let response = through_link(&app.address, "instagram_dec", &alice).await;
    assert_eq!(response.status(), 200);
    app.settled().await;
    let record = app.firestore.get("users", &alice).await.unwrap();
    assert_eq!(string_field(&record, "firstSource").as_deref(), Some("instagram_dec"));
    assert_eq!(
        crate::helpers::sorted(string_array(&record, "sources")),
        vec!["instagram_dec".to_owned(), "poster".to_owned()]
    );
    assert_eq!(app.firestore.count("user_sources").await, 2);
    assert_eq!(
        news_by_user(&app, std::slice::from_ref(&follow)).get(&alice),
        Some(&1),
        "never started again"
    );

    let rows = source_rows(&app).await;
    let insta = row(&rows, "instagram_dec");
    assert_eq!(
        (insta["logins"].as_i64(), insta["newFriends"].as_i64()),
        (Some(2), Some(1))
    );
    assert_eq!(insta["link"], "http://survey.test/r/instagram_dec");
    let poster = row(&rows, "poster");
    // Alice was a friend before she opened the poster's link.
    assert_eq!(
        (poster["logins"].as_i64(), poster["newFriends"].as_i64()),
        (Some(1), Some(0))
    );

    // An unfollow is counted once for the source she came through.
    let unfollow = events::unfollow(&alice);
    app.deliver(&unfollow).await;
    app.deliver(&unfollow).await;
    let rows = source_rows(&app).await;
    assert_eq!(row(&rows, "instagram_dec")["unfollows"].as_i64(), Some(1));
    assert_eq!(row(&rows, "poster")["unfollows"].as_i64(), Some(0));
    // The day range follows the results report's rules.
    let response = app.get_admin("/admin/sources?from=2026-13-01").await;
    assert_eq!(response.status(), 400);
    let response = app.get_admin("/admin/sources?from=2000-01-01&to=2000-01-02").await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(row(&body["sources"], "instagram_dec")["logins"].as_i64(), Some(0));
}

#[tokio::test]
async fn a_friend_who_follows_first_gets_the_scenario_from_the_login() {
    let Links { app, login } = spawn_links_with(TestOptions {
        // The login below lands inside the wait however loaded the machine.
        adjust: |config| config.source_wait = Duration::from_secs(4),
        ..TestOptions::default()
    })
    .await;
    let bob = user(2);
    // bot_prompt=aggressive: the friend is added inside the login, so the
    // follow usually arrives before the callback.
    let authorize = open_link(&app.address, "instagram_dec").await;
    let callback = log_in_at_line(&authorize, &bob).await;
    let follow = events::follow(&bob);
    // Stored and acknowledged; its worker records it and waits for a login,
    // saying so on the user's record.
    let stored = app.post_webhook(&events::envelope(vec![follow.clone()])).await;
    assert_eq!(stored.status(), 200);
    let followed_ms = follow["timestamp"].as_i64().expect("a timestamp");
    until_the_follow_waits(&app.firestore, &bob, followed_ms).await;
    let response = call_back(&app.address, &callback).await;
    assert_eq!(response.status(), 302, "LINE says the friendship changed");
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(
        integer_field(&sources[0], "deferredTo"),
        Some(followed_ms),
        "the login left the start to the waiting follow"
    );
    app.settled().await;
    // The follow waited for the login: the source's scenario by its reply,
    // instead of the welcome.
    assert_eq!(news_by_user(&app, std::slice::from_ref(&follow)).get(&bob), Some(&1));
    let greeting = reply_to(&app, &follow);
    assert!(greeting.contains(&NEWS.to_owned()), "{greeting:?}");
    assert!(!greeting.contains(&WELCOME.to_owned()), "{greeting:?}");
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(
        string_field(&sources[0], "takenBy").as_deref(),
        follow["webhookEventId"].as_str()
    );
    let rows = source_rows(&app).await;
    assert_eq!(row(&rows, "instagram_dec")["newFriends"].as_i64(), Some(1));
    // Replaying the callback (a reload, a captured URL) records nothing more:
    // LINE refuses the used code, and even where it would not, the state is
    // used once.
    let replay = call_back(&app.address, &callback).await;
    assert_eq!(replay.status(), 400);
    login.set_mode(LoginMode::ReuseCodes);
    let replay = call_back(&app.address, &callback).await;
    assert_eq!(replay.status(), 400);
    assert!(
        replay
            .text()
            .await
            .unwrap()
            .contains("このログインはすでに使われています")
    );
    app.settled().await;
    assert_eq!(news_by_user(&app, &[follow]).get(&bob), Some(&1));
    assert_eq!(
        row(&source_rows(&app).await, "instagram_dec")["logins"].as_i64(),
        Some(1)
    );
}

/// A follow with no login in its wait gets the welcome; a login after that
/// wait has its scenario pushed (the follow's reply was the welcome).
#[tokio::test]
async fn a_login_after_the_follows_wait_is_pushed_after_the_welcome() {
    let Links { app, login: _login } = spawn_links().await;
    let carol = user(3);
    let follow = events::follow(&carol);
    let delivered = std::time::Instant::now();
    app.deliver(&follow).await;
    app.settled().await;
    assert!(
        delivered.elapsed() >= SOURCE_WAIT,
        "the welcome waited for a login: {:?}",
        delivered.elapsed()
    );
    assert_eq!(reply_to(&app, &follow), vec![WELCOME.to_owned()]);
    let response = through_link(&app.address, "instagram_dec", &carol).await;
    assert_eq!(response.status(), 302);
    app.settled().await;
    assert_eq!(news_by_user(&app, std::slice::from_ref(&follow)).get(&carol), Some(&1));
    let pushed = app
        .line
        .accepted()
        .into_iter()
        .filter(|call| call.to() == Some(carol.as_str()) && call.texts().contains(&NEWS.to_owned()))
        .count();
    assert_eq!(pushed, 1, "by push: the reply was the welcome");
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(string_field(&sources[0], "takenBy").as_deref(), Some("queue"));
}

/// Two instances of one account with the links on; the first's settings
/// changed by `adjust`.
async fn two_instances(login: &LoginStandIn, adjust: fn(&mut line_survey::config::Config)) -> (TestApp, TestApp) {
    let setup = SourcesSetup::new(&login.uri(), SOURCES);
    let first = spawn_app_with(TestOptions {
        sources: Some(setup.clone()),
        adjust,
        ..TestOptions::default()
    })
    .await;
    let second = spawn_app_with(TestOptions {
        sources: Some(setup),
        ..first.beside()
    })
    .await;
    (first, second)
}

/// A follow handled where no wait is kept (an instance without the link
/// settings, or an older version, during a rolling deploy) never says it
/// waits: a login on an instance that waits leaves it nothing and pushes the
/// start itself, so the scenario is not stranded.
#[tokio::test]
async fn a_login_leaves_nothing_to_a_follow_that_never_waited() {
    let login = LoginStandIn::start().await;
    let (links_off, waits) = two_instances(&login, |config| config.source_links = None).await;
    let erin = user(5);
    let authorize = open_link(&waits.address, "instagram_dec").await;
    let callback = log_in_at_line(&authorize, &erin).await;
    let follow = events::follow(&erin);
    links_off.deliver(&follow).await;
    assert_eq!(reply_to(&links_off, &follow), vec![WELCOME.to_owned()]);
    assert_eq!(call_back(&waits.address, &callback).await.status(), 302);
    links_off.settled().await;
    let sources = links_off.firestore.list("user_sources").await;
    assert_eq!(integer_field(&sources[0], "deferredTo"), None, "{}", sources[0]);
    assert_eq!(string_field(&sources[0], "takenBy").as_deref(), Some("queue"));
    assert_eq!(news_by_user(&links_off, &[follow]).get(&erin), Some(&1));
}

/// A follow, its login, an unfollow and a new follow, all inside the first
/// follow's wait.
struct Superseded {
    app: TestApp,
    _login: LoginStandIn,
    user: String,
    first: Value,
}

async fn a_login_left_to_a_follow_then_an_unfollow() -> Superseded {
    let Links { app, login } = spawn_links_with(TestOptions {
        // Long enough for the login, the unfollow and the new follow.
        adjust: |config| config.source_wait = Duration::from_secs(4),
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    let fay = user(6);
    let authorize = open_link(&app.address, "instagram_dec").await;
    let callback = log_in_at_line(&authorize, &fay).await;
    let first = events::follow(&fay);
    let first_ms = first["timestamp"].as_i64().expect("a timestamp");
    post(&app, first.clone()).await;
    until_the_follow_waits(&app.firestore, &fay, first_ms).await;
    assert_eq!(call_back(&app.address, &callback).await.status(), 302);
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(integer_field(&sources[0], "deferredTo"), Some(first_ms));
    post(&app, events::unfollow(&fay)).await;
    Superseded {
        app,
        _login: login,
        user: fay,
        first,
    }
}

/// Acknowledged, not settled: the event's worker goes on meanwhile.
async fn post(app: &TestApp, event: Value) {
    let response = app.post_webhook(&events::envelope(vec![event])).await;
    assert_eq!(response.status(), 200);
}

/// The user follows again during the first follow's wait: the first, no
/// longer the newest, greets no one and pushes the source it was left; the
/// new follow greets with the welcome. The scenario once, the welcome once.
#[tokio::test]
async fn a_login_left_to_a_follow_superseded_by_a_new_follow_is_pushed_once() {
    let Superseded { app, user, first, .. } = a_login_left_to_a_follow_then_an_unfollow().await;
    // Well after the first, so the first follow comes back before the new one.
    app.advance_clock(Duration::from_millis(1_500)).await;
    let again = events::with_timestamp(&events::follow(&user), app.now_ms());
    post(&app, again.clone()).await;
    app.settled().await;
    let follows = [first.clone(), again.clone()];
    assert_eq!(news_by_user(&app, &follows).get(&user), Some(&1));
    assert!(reply_to(&app, &first).is_empty(), "the superseded follow greets no one");
    assert_eq!(reply_to(&app, &again), vec![WELCOME.to_owned()]);
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(string_field(&sources[0], "takenBy").as_deref(), Some("queue"));
}

/// The user unfollows during the follow's wait: nothing is pushed to someone
/// who left, and the source waits for their next follow, which greets with it.
#[tokio::test]
async fn a_login_left_to_a_follow_superseded_by_an_unfollow_waits_for_the_next_follow() {
    let Superseded { app, user, first, .. } = a_login_left_to_a_follow_then_an_unfollow().await;
    app.settled().await;
    assert!(reply_to(&app, &first).is_empty(), "the superseded follow greets no one");
    assert_eq!(news_by_user(&app, std::slice::from_ref(&first)).get(&user), None);
    let again = events::follow(&user);
    app.deliver(&again).await;
    assert_eq!(reply_to(&app, &again), vec![NEWS.to_owned()]);
    assert_eq!(news_by_user(&app, &[first, again.clone()]).get(&user), Some(&1));
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(
        string_field(&sources[0], "takenBy").as_deref(),
        again["webhookEventId"].as_str()
    );
}

/// A source whose scenario is a survey.
const LUNCH_SOURCES: &str = r#"
[[sources]]
id = "lunch_poster"
label = "ランチの掲示"
scenario = "lunch"
"#;
/// The lunch survey's first message (tests/fixtures/scenarios/lunch.toml).
const LUNCH_INTRO: &str = "A quick survey about today's lunch.";

/// A source's survey that guard 3 does not start again (here: it started
/// seconds ago) still leaves the new friend a greeting: the welcome.
#[tokio::test]
async fn a_follow_whose_source_survey_may_not_restart_greets_with_the_welcome() {
    let login = LoginStandIn::start().await;
    let app = spawn_app_with(TestOptions {
        sources: Some(SourcesSetup::new(&login.uri(), LUNCH_SOURCES)),
        ..TestOptions::default()
    })
    .await;
    let gus = user(7);
    app.deliver(&events::text(&gus, "lunch")).await;
    app.settled().await;
    assert_eq!(app.line.accepted_with_text(LUNCH_INTRO), 1);
    assert_eq!(through_link(&app.address, "lunch_poster", &gus).await.status(), 302);
    let follow = events::follow(&gus);
    app.deliver(&follow).await;
    app.settled().await;
    assert_eq!(reply_to(&app, &follow), vec![WELCOME.to_owned()]);
    assert_eq!(app.line.accepted_with_text(LUNCH_INTRO), 1, "the survey started once");
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(
        string_field(&sources[0], "takenBy").as_deref(),
        follow["webhookEventId"].as_str()
    );
}

/// Nothing a failed callback could have written.
async fn assert_nothing_stored(app: &TestApp, case: &str) {
    for collection in [
        "user_sources",
        "login_states",
        "users",
        "source_counters",
        "webhook_inbox",
    ] {
        assert_eq!(app.firestore.count(collection).await, 0, "{case}: {collection}");
    }
}

#[tokio::test]
async fn every_failed_login_gets_a_clear_page_and_stores_nothing() {
    let Links { app, login } = spawn_links_with(TestOptions {
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    let carol = user(3);
    let modes = [
        (LoginMode::Cancel, 200, "ログインがキャンセルされました"),
        (LoginMode::RefuseCode, 400, "LINEログインを確認できませんでした"),
        (LoginMode::WrongAudience, 400, "LINEログインを確認できませんでした"),
        (LoginMode::WrongNonce, 400, "LINEログインを確認できませんでした"),
        (LoginMode::WrongSignature, 400, "LINEログインを確認できませんでした"),
        (LoginMode::Expired, 400, "LINEログインを確認できませんでした"),
        (LoginMode::WrongIssuer, 400, "LINEログインを確認できませんでした"),
    ];
    for (mode, status, title) in modes {
        login.set_mode(mode);
        let response = through_link(&app.address, "instagram_dec", &carol).await;
        assert_eq!(response.status(), status, "{mode:?}");
        let page = response.text().await.unwrap();
        assert!(page.contains(title), "{mode:?}: {page}");
        assert_nothing_stored(&app, &format!("{mode:?}")).await;
    }
    login.set_mode(LoginMode::Normal);

    // A state changed on the way, or none, or a code without one.
    let authorize = open_link(&app.address, "instagram_dec").await;
    let callback = log_in_at_line(&authorize, &carol).await;
    let tampered = callback.replacen("state=", "state=x", 1);
    let bad_state = [
        tampered.as_str(),
        "/r/callback?code=code-1",
        "/r/callback?state=abc.def",
        "/r/callback",
    ];
    for path in bad_state {
        let response = call_back(&app.address, path).await;
        assert_eq!(response.status(), 400, "{path}");
        assert!(
            response.text().await.unwrap().contains("リンクの有効期限が切れたか"),
            "{path}"
        );
    }
    assert_nothing_stored(&app, "bad state").await;

    // The browser that started the visit sends its cookie: another visit's
    // cookie is refused.
    let response = browser()
        .get(format!("{}{callback}", app.address))
        .header("cookie", "lsv_link=0123456789abcdef0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert_nothing_stored(&app, "another browser's cookie").await;

    // A link opened more than 15 minutes ago.
    app.advance_clock(Duration::from_secs(16 * 60)).await;
    let response = call_back(&app.address, &callback).await;
    assert_eq!(response.status(), 400);
    assert!(response.text().await.unwrap().contains("リンクの有効期限が切れたか"));
    assert_nothing_stored(&app, "expired state").await;

    // A fresh visit still works after all of that.
    let response = through_link(&app.address, "instagram_dec", &carol).await;
    assert_eq!(response.status(), 302);
    assert_eq!(app.firestore.count("user_sources").await, 1);
}

#[tokio::test]
async fn the_qr_code_is_a_png_of_the_link() {
    let Links { app, login: _login } = spawn_links().await;
    let response = app.get_admin("/admin/sources/instagram_dec/qr.png").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/png");
    let png = response.bytes().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(app.get_admin("/admin/sources/nope/qr.png").await.status(), 404);
    let response = reqwest::Client::new()
        .get(format!("{}/admin/sources/instagram_dec/qr.png", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}

/// 300 users through the link on two instances: for a third the follow
/// arrives before the callback, for a third after it, for a third at the
/// same time; every follow is delivered twice, to both instances. Each user's
/// source is recorded once, and its scenario started exactly once.
#[tokio::test]
async fn three_hundred_friends_in_any_order_start_the_scenario_once_each() {
    const USERS: usize = 300;
    let login = LoginStandIn::start().await;
    let (first, second) = two_instances(&login, |_| {}).await;
    let addresses = [first.address.clone(), second.address.clone()];
    let app = &first;
    let runs = (0..USERS).map(|n| {
        let addresses = addresses.clone();
        async move {
            let id = user(1000 + n);
            let (one, other) = (&addresses[n % 2], &addresses[(n + 1) % 2]);
            let authorize = open_link(one, "instagram_dec").await;
            let callback = log_in_at_line(&authorize, &id).await;
            let follow = events::follow(&id);
            let body = events::envelope(vec![follow.clone()]);
            let deliver_twice = async {
                let (a, b) = tokio::join!(post_to(one, &body), post_to(other, &body));
                assert_eq!((a, b), (200, 200));
            };
            match n % 3 {
                0 => {
                    deliver_twice.await;
                    assert!([200, 302].contains(&call_back(other, &callback).await.status().as_u16()));
                }
                1 => {
                    assert_eq!(call_back(other, &callback).await.status(), 302);
                    deliver_twice.await;
                }
                _ => {
                    let (status, ()) = tokio::join!(call_back(other, &callback), deliver_twice);
                    assert!([200, 302].contains(&status.status().as_u16()));
                }
            }
            follow
        }
    });
    // Fifty users at a time, each with its own order of follow and callback.
    use futures::StreamExt;
    let follows = futures::stream::iter(runs)
        .buffer_unordered(50)
        .collect::<Vec<Value>>()
        .await;
    app.firestore.settled(Duration::from_secs(90)).await;

    let news = news_by_user(app, &follows);
    // One greeting each: the follow's reply is the source's scenario or the
    // welcome (a login after the follow's wait), never both.
    let mut by_reply = 0;
    for follow in &follows {
        let greeting = reply_to(app, follow);
        let (news, welcome) = (
            greeting.contains(&NEWS.to_owned()),
            greeting.contains(&WELCOME.to_owned()),
        );
        assert!(news != welcome, "{greeting:?}");
        by_reply += usize::from(news);
    }
    eprintln!("{by_reply} of {USERS} greeted by the source's scenario in the follow's reply");
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(sources.len(), USERS, "one record per user");
    for n in 0..USERS {
        let id = user(1000 + n);
        assert_eq!(news.get(&id), Some(&1), "{id} (order {}): the scenario once", n % 3);
    }
    for document in &sources {
        assert_eq!(string_field(document, "standing").as_deref(), Some("friend"));
    }
    // How many logins came inside their follow's wait (timing decides; the
    // tests above take that path on purpose).
    let deferred = sources
        .iter()
        .filter(|document| integer_field(document, "deferredTo").is_some())
        .count();
    eprintln!("{deferred} of {USERS} logins left their start to a waiting follow");
    let users = app.firestore.list("users").await;
    for record in &users {
        assert_eq!(string_field(record, "firstSource").as_deref(), Some("instagram_dec"));
        assert!(string_array(record, "tags").contains(&"src_instagram".to_owned()));
    }
    let rows = source_rows(app).await;
    let insta = row(&rows, "instagram_dec");
    assert_eq!(insta["logins"].as_i64(), Some(USERS as i64));
    assert_eq!(insta["newFriends"].as_i64(), Some(USERS as i64));
    let (calls, refused) = login.token_calls();
    assert_eq!((calls, refused), (USERS, 0));
}

async fn post_to(address: &str, body: &Value) -> u16 {
    let bytes = serde_json::to_vec(body).unwrap();
    let signature = line_survey::line::signature::sign(crate::helpers::CHANNEL_SECRET.as_bytes(), &bytes);
    browser()
        .post(format!("{address}/webhook"))
        .header("content-type", "application/json")
        .header("x-line-signature", signature)
        .body(bytes)
        .send()
        .await
        .expect("service reachable")
        .status()
        .as_u16()
}

/// A follow that happened before the link was opened, delivered late: the
/// scenario still starts (the user follows), but the source did not bring
/// this friend.
#[tokio::test]
async fn a_late_follow_from_before_the_link_is_no_new_friend() {
    let Links { app, login: _login } = spawn_links().await;
    let dave = user(4);
    assert_eq!(through_link(&app.address, "instagram_dec", &dave).await.status(), 302);
    let follow = events::with_timestamp(&events::follow(&dave), events::now_ms() - 5 * 60 * 1000);
    app.deliver(&follow).await;
    app.settled().await;
    assert_eq!(
        news_by_user(&app, std::slice::from_ref(&follow)).get(&dave),
        Some(&1),
        "{:?} {}",
        app.line
            .calls()
            .iter()
            .map(|call| (call.to(), call.texts()))
            .collect::<Vec<_>>(),
        app.firestore.dump().await
    );
    let sources = app.firestore.list("user_sources").await;
    assert_eq!(string_field(&sources[0], "standing").as_deref(), Some("wasFriend"));
    let rows = source_rows(&app).await;
    assert_eq!(row(&rows, "instagram_dec")["newFriends"].as_i64(), Some(0));
}

/// A follow's instance SIGKILLed inside the greeting: the follow took or was
/// left the source, committed its start, and its reply reached LINE, but the
/// outcome was never recorded (`FAULT_PAUSE=after_reply_call` stops every
/// send there). The other instance takes each reply over once its lease runs
/// out, and LINE's "invalid reply token" to the retry says the first went
/// out. Half the logins come before the follows (taken at once), half in
/// their wait (left to them). Each user gets the source's scenario once,
/// never the welcome.
#[tokio::test]
async fn a_follow_whose_instance_dies_inside_its_greeting_is_greeted_once_by_the_source() {
    const USERS: usize = 20;
    let project = crate::helpers::new_project_id();
    let line = crate::helpers::line_stand_in::LineStandIn::start().await;
    let login = LoginStandIn::start().await;
    let sources_file = std::env::temp_dir().join(format!("sources-{project}.toml"));
    std::fs::write(&sources_file, SOURCES).expect("the sources file is written");
    let login_uri = login.uri();
    let settings = [
        ("SOURCES_FILE", sources_file.to_str().expect("a UTF-8 path")),
        ("LINE_LOGIN_CHANNEL_ID", LOGIN_CHANNEL_ID),
        (
            "LINE_LOGIN_CHANNEL_SECRET",
            crate::helpers::line_login::LOGIN_CHANNEL_SECRET,
        ),
        ("LINE_LOGIN_BASE_URL", login_uri.as_str()),
        ("LINE_LOGIN_API_BASE_URL", login_uri.as_str()),
        ("PUBLIC_BASE_URL", "http://survey.test"),
        ("FRIEND_URL", FRIEND_URL),
        // Long enough for the logins below to land inside it.
        ("SOURCE_WAIT_SECS", "8"),
    ];
    let paused: Vec<(&str, &str)> = settings
        .iter()
        .copied()
        .chain([("FAULT_PAUSE", "after_reply_call")])
        .collect();
    let mut doomed = crate::helpers::process::ServiceProcess::start(&project, &line.uri(), &paused).await;
    let living = crate::helpers::process::ServiceProcess::start(&project, &line.uri(), &settings).await;
    let firestore = FirestoreRest::new(&crate::helpers::emulator_host(), &project);
    let users: Vec<String> = (0..USERS).map(|n| user(2000 + n)).collect();
    let mut callbacks = Vec::new();
    for id in &users {
        let authorize = open_link(&living.address, "instagram_dec").await;
        callbacks.push(log_in_at_line(&authorize, id).await);
    }
    let (before, during) = callbacks.split_at(USERS / 2);
    for callback in before {
        assert_eq!(call_back(&living.address, callback).await.status(), 302);
    }
    let follows: Vec<Value> = users.iter().map(|id| events::follow(id)).collect();
    for follow in &follows {
        assert_eq!(
            post_to(&doomed.address, &events::envelope(vec![follow.clone()])).await,
            200
        );
    }
    // The other half while their follows wait for them.
    for (id, follow) in users.iter().zip(&follows).skip(USERS / 2) {
        let followed_ms = follow["timestamp"].as_i64().expect("a timestamp");
        until_the_follow_waits(&firestore, id, followed_ms).await;
    }
    let logins = during.iter().map(|callback| call_back(&living.address, callback));
    for response in futures::future::join_all(logins).await {
        assert_eq!(response.status(), 302);
    }
    let deferred = firestore
        .list("user_sources")
        .await
        .iter()
        .filter(|record| integer_field(record, "deferredTo").is_some())
        .count();
    assert_eq!(deferred, USERS / 2, "the logins in the wait were left to their follows");
    // Every follow's reply reached LINE; the doomed instance stopped after
    // each of its own, before recording it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while line
        .accepted()
        .iter()
        .filter(|call| call.reply_token().is_some())
        .count()
        < USERS
    {
        assert!(std::time::Instant::now() < deadline, "not every follow replied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    doomed.kill();
    firestore.settled(Duration::from_secs(60)).await;

    let mut news: HashMap<String, usize> = HashMap::new();
    for (user, call) in line.accepted_by_user(&follows) {
        if call.texts().contains(&NEWS.to_owned()) {
            *news.entry(user).or_default() += 1;
        }
        assert!(
            !call.texts().contains(&WELCOME.to_owned()),
            "a login before or within the wait replaces the welcome: {:?}",
            call.texts()
        );
    }
    for id in &users {
        assert_eq!(
            news.get(id),
            Some(&1),
            "{id}: the source's scenario once; log: {}",
            living.log.display()
        );
    }
    // The follows whose login came first were all greeted by the doomed
    // instance: the living one retried each of those replies and LINE
    // refused the used token.
    let calls = line.calls_by_reply_token();
    for follow in &follows[..USERS / 2] {
        let token = follow["replyToken"].as_str().expect("a reply token");
        let calls = calls.get(token).map(Vec::len).unwrap_or_default();
        assert!(calls >= 2, "{token}: {calls} calls; the reply was taken over");
    }
    let records = firestore.list("user_sources").await;
    assert_eq!(records.len(), USERS);
    for record in &records {
        assert_eq!(string_field(record, "standing").as_deref(), Some("friend"));
        assert!(
            string_field(record, "takenBy").is_some_and(|by| by != "queue"),
            "{record}"
        );
    }
}
