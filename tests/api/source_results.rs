//! Results cut by where friends came from: `?by=source|tag:|variant|field:`
//! cross-tabs counted from the stored answers and users, the CSV's
//! `first_source`, campaign audiences by source, and the console's cross-tab.
//! Users come in through the link flow (LINE Login stand-in), follow, take
//! the A/B scenario of tests/fixtures/split and answer it.

use crate::export::admin_csv_rows;
use crate::helpers::events::{self, answer_data, postback, text};
use crate::helpers::line_login::LoginStandIn;
use crate::helpers::{ADMIN_TOKEN, FRIEND_URL, SourcesSetup, TestApp, TestOptions, spawn_app_with};
use crate::sources::{location, through_link, user};
use serde_json::{Value, json};
use std::collections::HashMap;

const SOURCES: &str = r#"
[[sources]]
id = "instagram_dec"
label = "Instagram 12月広告"
tags = ["src_instagram"]

[[sources]]
id = "poster"
label = "店頭ポスター"
tags = ["src_poster"]
"#;

/// (user number, the link they came through, their answer, their `plan` field)
const PEOPLE: [(usize, Option<&str>, &str, Option<&str>); 6] = [
    (11, Some("instagram_dec"), "good", Some("gold")),
    (12, Some("instagram_dec"), "good", Some("silver")),
    (13, Some("instagram_dec"), "bad", None),
    (14, Some("poster"), "bad", Some("gold")),
    (15, None, "good", None),
    // Came through the poster, then Instagram: the poster stays first.
    (16, Some("poster"), "good", Some("gold")),
];

async fn spawn() -> (TestApp, LoginStandIn) {
    let login = LoginStandIn::start().await;
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/split"),
        sources: Some(SourcesSetup::new(&login.uri(), SOURCES)),
        ..TestOptions::default()
    })
    .await;
    (app, login)
}

async fn results(app: &TestApp, query: &str) -> reqwest::Response {
    app.get_admin(&format!("/admin/scenarios/ab/results{query}")).await
}

async fn cross_tab(app: &TestApp, by: &str) -> Value {
    let response = results(app, &format!("?by={by}")).await;
    assert_eq!(response.status(), 200, "by={by}");
    let body: Value = response.json().await.expect("JSON");
    body["crossTab"].clone()
}

/// The `rating` question's answers and `good` counts, by column key.
fn rating(tab: &Value) -> (HashMap<String, u64>, HashMap<String, u64>) {
    let node = tab["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["nodeId"] == "rating"))
        .expect("the rating question");
    let counts = |value: &Value| -> HashMap<String, u64> {
        value
            .as_object()
            .expect("counts by column")
            .iter()
            .map(|(key, count)| (key.clone(), count.as_u64().expect("a count")))
            .collect()
    };
    let good = node["choices"]
        .as_array()
        .and_then(|choices| choices.iter().find(|choice| choice["value"] == "good"))
        .expect("the good choice");
    (counts(&node["answered"]), counts(&good["counts"]))
}

fn map(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(key, count)| ((*key).to_owned(), *count)).collect()
}

#[tokio::test]
async fn answers_are_cut_by_source_tag_arm_and_field_and_audiences_by_source() {
    let (app, login) = spawn().await;
    for (n, source, _, _) in PEOPLE {
        let id = user(n);
        if let Some(source) = source {
            let response = through_link(&app.address, source, &id).await;
            assert_eq!(location(&response), FRIEND_URL);
        }
        app.deliver(&events::follow(&id)).await;
    }
    // User 16 opens Instagram's link too, once a friend: a second source.
    login.set_friendship_changed(false);
    let response = through_link(&app.address, "instagram_dec", &user(16)).await;
    assert_eq!(response.status(), 200, "already a friend");
    for (n, _, _, _) in PEOPLE {
        app.deliver(&text(&user(n), "ab")).await;
    }
    app.settled().await;
    for (n, _, choice, _) in PEOPLE {
        let tap = postback(&user(n), &answer_data("ab", "rating", choice));
        app.deliver(&tap).await;
        // A double tap: still one answer.
        app.deliver(&postback(&user(n), &answer_data("ab", "rating", choice)))
            .await;
    }
    app.settled().await;
    for (n, _, _, plan) in PEOPLE {
        if let Some(plan) = plan {
            let fields = json!({"mapValue": {"fields": {"plan": {"stringValue": plan}}}});
            app.firestore.patch("users", &user(n), &[("fields", fields)]).await;
        }
    }

    // By first source: Instagram's three, the poster's two (16 came through
    // the poster first), and one without a source.
    let tab = cross_tab(&app, "source").await;
    assert_eq!(tab["by"], "source");
    let columns: Vec<(&str, &str)> = tab["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|column| (column["key"].as_str().unwrap(), column["label"].as_str().unwrap()))
        .collect();
    assert_eq!(
        columns,
        [
            ("instagram_dec", "Instagram 12月広告"),
            ("poster", "店頭ポスター"),
            ("", "(経路なし)")
        ]
    );
    let (answered, good) = rating(&tab);
    assert_eq!(answered, map(&[("instagram_dec", 3), ("poster", 2), ("", 1)]));
    assert_eq!(good, map(&[("instagram_dec", 2), ("poster", 1), ("", 1)]));
    let node = &tab["nodes"][0];
    assert_eq!(node["total"], 6);
    let share = node["choices"][0]["shares"]["instagram_dec"].as_f64().unwrap();
    assert!((share - 2.0 / 3.0).abs() < 1e-9, "{share}");

    // By tag: the tag the source gave; 16 holds both sources' tags.
    let (answered, good) = rating(&cross_tab(&app, "tag:src_instagram").await);
    assert_eq!(answered, map(&[("with", 4), ("without", 2)]));
    assert_eq!(good, map(&[("with", 3), ("without", 1)]));

    // By field, as the users' records say now.
    let (answered, good) = rating(&cross_tab(&app, "field:plan").await);
    assert_eq!(answered, map(&[("gold", 3), ("silver", 1), ("", 2)]));
    assert_eq!(good, map(&[("gold", 2), ("silver", 1), ("", 1)]));

    // By arm, as answered: the CSV names each answer's arm and first source.
    let rows = admin_csv_rows(&app, "/admin/scenarios/ab/answers.csv").await;
    assert_eq!(rows.len(), PEOPLE.len(), "one answer a user");
    let mut arms: HashMap<String, u64> = HashMap::new();
    for (n, source, _, _) in PEOPLE {
        let row = rows.iter().find(|row| row[0] == user(n)).expect("the user's row");
        let first = if n == 16 { Some("poster") } else { source };
        assert_eq!(row[8], first.unwrap_or_default(), "first_source of user {n}");
        *arms.entry(row[7].clone()).or_default() += 1;
    }
    let (answered, _) = rating(&cross_tab(&app, "variant").await);
    assert_eq!(answered, arms);

    // A range with no answers counts none; bad dimensions get a 400.
    let response = results(&app, "?by=source&from=2000-01-01&to=2000-01-02").await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["crossTab"]["nodes"][0]["total"], 0);
    for (query, words) in [
        ("?by=sources", "is not a dimension"),
        ("?by=tag:", "needs a tag"),
        ("?by=field:Plan", "is not a field name"),
        ("?by=source&from=2026-13-01", "2026-13-01"),
    ] {
        let response = results(&app, query).await;
        assert_eq!(response.status(), 400, "{query}");
        let body: Value = response.json().await.unwrap();
        assert!(body.to_string().contains(words), "{query}: {body}");
    }
    let response = app.get_admin("/admin/scenarios/nope/results?by=source").await;
    assert_eq!(response.status(), 404);

    // Campaign audiences by source: any of the user's sources.
    for (sources, expected) in [
        (json!(["poster"]), 2),
        (json!(["instagram_dec"]), 4),
        (json!(["instagram_dec", "poster"]), 5),
        (json!(["gone_link"]), 0),
    ] {
        let body = json!({"scenarioId": "ab", "audience": {"sources": {"anyOf": sources}}, "dryRun": true});
        let response = app
            .http
            .post(format!("{}/admin/campaigns", app.address))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .expect("service reachable");
        assert_eq!(response.status(), 200, "{sources}");
        let found: Value = response.json().await.unwrap();
        assert_eq!(found["count"], json!(expected), "{sources}");
    }
    let body = json!({"scenarioId": "ab", "audience": {"sources": {"anyOf": ["Bad Id"]}}});
    let response = app
        .http
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .header("Idempotency-Key", "bad-source")
        .send()
        .await
        .expect("service reachable");
    assert_eq!(response.status(), 400);
    let refusal = response.text().await.unwrap();
    assert!(refusal.contains("is not a source id"), "{refusal}");
    assert_eq!(app.firestore.count("campaigns").await, 0, "nothing created");
}

/// §5: a visitor's browser clicks through the link, the stand-in's login and
/// the redirect to the add-friend page; the operator then sees them on the
/// console's sources page, and their answer in the cross-tab by source.
#[tokio::test]
async fn a_visitor_clicks_through_the_link_and_shows_on_the_console() {
    let Some(browser) = crate::helpers::browser::Browser::start().await else {
        return;
    };
    let login = LoginStandIn::start().await;
    let mut setup = SourcesSetup::new(&login.uri(), SOURCES);
    setup.on_own_address = true;
    setup.friend_url = login.friend_url();
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/split"),
        sources: Some(setup),
        ..TestOptions::default()
    })
    .await;

    // The stand-in logs the browser in as its default user.
    let visitor = "U00000000000000000000000000000001";
    browser.goto(&format!("{}/r/instagram_dec", app.address)).await;
    assert_eq!(
        browser.wait_for_path("/R/ti/p/@line-survey-test").await,
        "/R/ti/p/@line-survey-test"
    );
    assert_eq!(browser.text_of("#add-friend").await, "友だち追加");
    let record = app.firestore.get("users", visitor).await.expect("the visitor's record");
    assert_eq!(
        crate::helpers::firestore_rest::string_field(&record, "firstSource").as_deref(),
        Some("instagram_dec")
    );
    // They add the friend, take the A/B scenario and answer.
    app.deliver(&events::follow(visitor)).await;
    app.deliver(&text(visitor, "ab")).await;
    app.settled().await;
    app.deliver(&postback(visitor, &answer_data("ab", "rating", "good")))
        .await;
    app.settled().await;

    crate::console::log_in(&browser, &app.address, ADMIN_TOKEN).await;
    assert_eq!(browser.wait_for_path("/console").await, "/console");
    browser.goto(&format!("{}/console/sources", app.address)).await;
    browser.screenshot("sources").await;
    assert!(browser.fits_width().await, "the sources page fits a phone");
    let card = "#source-instagram_dec";
    assert_eq!(browser.text_of(&format!("{card} .logins")).await, "1");
    assert_eq!(browser.text_of(&format!("{card} .new-friends")).await, "1");
    assert!(browser.text_of(&format!("{card} table.users")).await.contains(visitor));
    assert_eq!(browser.count(&format!("{card} img.qr")).await, 1);
    let qr_loaded = browser
        .run(&format!(
            "return document.querySelector('{card} img.qr').naturalWidth > 0"
        ))
        .await;
    assert_eq!(qr_loaded, json!(true), "the QR code image loads");

    // The cross-tab by source, reached from the scenarios page.
    browser.goto(&format!("{}/console", app.address)).await;
    browser.click("[data-scenario=ab] a[href$='/crosstab']").await;
    assert_eq!(
        browser.wait_for_path("/console/scenarios/ab/crosstab").await,
        "/console/scenarios/ab/crosstab"
    );
    browser.screenshot("crosstab").await;
    assert!(browser.fits_width().await, "the cross-tab fits a phone");
    let cell = "[data-node=rating] tr[data-choice=good] td[data-column=instagram_dec]";
    let shown = browser.text_of(cell).await;
    assert!(shown.starts_with('1') && shown.contains("100.0%"), "{shown}");
    // Another dimension from the form; a bad one is named.
    browser.fill("#by input[name=by]", "tag:src_poster").await;
    browser.click("#by button").await;
    browser.wait_for("td[data-column=without]").await;
    let cell = "[data-node=rating] tr[data-row=answered] td[data-column=without]";
    assert_eq!(browser.text_of(cell).await, "1");
    browser
        .goto(&format!("{}/console/scenarios/ab/crosstab?by=nope", app.address))
        .await;
    assert!(browser.text_of("#problem").await.contains("is not a dimension"));
}
