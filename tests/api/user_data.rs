//! One user's data exported and erased by an owner (issue 27 §3, 個人情報の
//! 開示・削除): the export holds what the user left (answers with their
//! values, tags, fields, name, timeline); after the erasure no document of
//! that user holds a typed answer, a field or the name, while counts stay;
//! both are owners' only and audited.

use crate::export::export_scenarios;
use crate::helpers::events::{self, postback, text};
use crate::helpers::{TestOptions, spawn_app_with};
use crate::operator_access::{EDITOR, OWNER, add_staff, csrf_of, get, post, session};
use serde_json::{Value, json};

#[tokio::test]
async fn an_owner_exports_a_users_data_and_erases_it_leaving_no_typed_answer_field_or_name() {
    let app = spawn_app_with(TestOptions {
        adjust: export_scenarios,
        ..TestOptions::default()
    })
    .await;
    add_staff(&app);
    let user = events::new_user();
    let other = events::new_user();
    let typed = "駐車場が狭いです、田中より";
    for who in [&user, &other] {
        app.deliver(&events::follow(who)).await;
        app.deliver(&text(who, "export")).await;
        app.deliver(&postback(who, &events::answer_data("export", "rating", "good")))
            .await;
        app.deliver(&text(who, typed)).await;
    }
    // An answer an old bot stored under a random id, in a shape this service
    // cannot read: it must not stop the export or the erasure.
    app.firestore
        .create_with_random_id(
            "survey_responses",
            &[("lineUserId", user.as_str()), ("value", "旧ボットの回答 田中")],
        )
        .await;
    // A field set by hand and a cached display name.
    let owner = session(&app.address, OWNER).await;
    let csrf = csrf_of(&app.address, &owner).await;
    let set = post(
        &app.address,
        "/console/users/edit",
        &owner,
        &[
            ("csrf", &csrf),
            ("user", &user),
            ("op", "set_field"),
            ("field", "phone"),
            ("value", "090-1234-5678"),
            ("kind", "text"),
            ("confirm", "yes"),
        ],
    )
    .await;
    assert_eq!(set.status(), 303);
    app.firestore
        .patch("users", &user, &[("displayName", json!({"stringValue": "田中 太郎"}))])
        .await;

    // The export: everything the user left.
    let editor = session(&app.address, EDITOR).await;
    let data_path = format!("/console/users/data?id={user}");
    assert_eq!(
        get(&app.address, &data_path, &editor).await.status(),
        403,
        "owners only"
    );
    let export = get(&app.address, &data_path, &owner).await;
    assert_eq!(export.status(), 200);
    assert!(
        export.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .contains("attachment")
    );
    let data: Value = export.json().await.unwrap();
    assert_eq!(data["userId"], user.as_str());
    assert_eq!(data["displayName"], "田中 太郎");
    assert_eq!(data["profile"]["fields"]["phone"], "090-1234-5678");
    assert!(data["profile"]["tags"].as_array().unwrap().contains(&json!("happy")));
    let values: Vec<&Value> = data["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|answer| &answer["value"])
        .collect();
    assert_eq!(values.len(), 3, "{data}");
    let unreadable = data["answers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|answer| answer["unreadable"] == true)
        .count();
    assert_eq!(unreadable, 1, "the old bot's answer is named, not hidden");
    assert!(values.contains(&&json!("good")) && values.contains(&&json!(typed)));
    assert!(!data["timeline"]["entries"].as_array().unwrap().is_empty());

    // The erasure, after a confirmation that says what goes and what stays.
    let erase = format!("/console/users/erase?id={user}");
    assert_eq!(get(&app.address, &erase, &editor).await.status(), 403);
    let confirm = get(&app.address, &erase, &owner).await.text().await.unwrap();
    assert!(confirm.contains("counts stay") && confirm.contains("cannot be undone"));
    let key = crate::console::hidden_value(&confirm, "key").expect("the confirmation's own key");
    let editor_csrf = csrf_of(&app.address, &editor).await;
    let refused = post(
        &app.address,
        "/console/users/erase",
        &editor,
        &[("csrf", &editor_csrf), ("user", &user)],
    )
    .await;
    assert_eq!(refused.status(), 403);
    let erased = post(
        &app.address,
        "/console/users/erase",
        &owner,
        &[("csrf", &csrf), ("user", &user), ("key", &key)],
    )
    .await;
    assert_eq!(erased.status(), 200);
    assert!(erased.text().await.unwrap().contains("Erased: 3 answers"));

    // No document of the user holds the typed answer, a field or the name.
    let dump = app.firestore.dump().await;
    let of_user: Vec<&str> = dump.lines().filter(|line| line.contains(user.as_str())).collect();
    for line in &of_user {
        for secret in [typed, "090-1234-5678", "田中 太郎", "旧ボットの回答"] {
            assert!(!line.contains(secret), "{secret} is still in {line}");
        }
    }
    let record = app.firestore.get("users", &user).await.unwrap();
    assert!(record["fields"]["fields"].is_null() && record["fields"]["displayName"].is_null());
    assert!(app.user_tags(&user).await.contains(&"happy".to_owned()), "tags stay");
    // The other user is untouched; the answers and counts stay.
    assert!(dump.contains(typed), "the other user's answer stays");
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), 5, "answers stay as records");
    let results = crate::helpers::admin_json(&app.address, "/admin/scenarios/export/results").await;
    assert_eq!(results["nodes"][0]["answered"], 2, "counts stay");

    // Audited, by the owner.
    let entries = app.firestore.list("audit_log").await;
    for action in ["user_data_export", "user_data_erase"] {
        let entry = entries
            .iter()
            .find(|entry| entry["fields"]["action"]["stringValue"] == action)
            .unwrap_or_else(|| panic!("an entry for {action}"));
        assert_eq!(entry["fields"]["operator"]["stringValue"], OWNER);
        assert_eq!(entry["fields"]["status"]["integerValue"], "200");
    }
    // The same form sent again (a reload) says it erased already: one more
    // entry, a repeat.
    let resent = post(
        &app.address,
        "/console/users/erase",
        &owner,
        &[("csrf", &csrf), ("user", &user), ("key", &key)],
    )
    .await;
    assert_eq!(resent.status(), 200);
    assert!(resent.text().await.unwrap().contains("This form erased the data"));
    let erasures: Vec<(String, String)> = app
        .firestore
        .list("audit_log")
        .await
        .iter()
        .filter(|entry| entry["fields"]["action"]["stringValue"] == "user_data_erase")
        .map(|entry| {
            (
                entry["fields"]["result"]["stringValue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                entry["fields"]["status"]["integerValue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    let mut erasures = erasures;
    erasures.sort();
    assert_eq!(
        erasures,
        [
            ("done".to_owned(), "200".to_owned()),
            ("repeat".to_owned(), "208".to_owned())
        ]
    );
    // A new confirmation (no key, or another) erases again and finds nothing left.
    let again = post(
        &app.address,
        "/console/users/erase",
        &owner,
        &[("csrf", &csrf), ("user", &user)],
    )
    .await;
    assert!(again.text().await.unwrap().contains("Erased: 0 answers"));
}

/// The same in Chromium, in Japanese, as an owner signed in with their
/// password: the download from the user's page holds the typed answer, the
/// field and the name; the erasure, confirmed on its page, leaves no
/// document of the user holding any of them.
#[tokio::test]
async fn an_owner_downloads_and_erases_a_users_data_in_a_real_browser() {
    let Some(browser) = crate::helpers::browser::Browser::start().await else {
        return;
    };
    let app = crate::console::japanese_app().await;
    add_staff(&app);
    let user = events::new_user();
    let typed = "予約の電話がつながりにくい";
    app.deliver(&events::follow(&user)).await;
    app.deliver(&text(&user, "export")).await;
    app.deliver(&postback(&user, &events::answer_data("export", "rating", "good")))
        .await;
    app.deliver(&text(&user, typed)).await;
    app.firestore
        .patch(
            "users",
            &user,
            &[
                ("displayName", json!({"stringValue": "佐藤 花子"})),
                (
                    "fields",
                    json!({"mapValue": {"fields": {"phone": {"stringValue": "080-1111-2222"}}}}),
                ),
            ],
        )
        .await;

    browser.goto(&format!("{}/console/login", app.address)).await;
    browser.fill("#email", OWNER).await;
    browser.fill("#password", crate::operator_access::PASSWORD).await;
    browser.click("#sign-in").await;
    browser.wait_for_path("/console").await;
    browser.goto(&format!("{}/console/users?id={user}", app.address)).await;
    browser.wait_for("#user-data").await;
    let script = "return fetch(document.querySelector('#user-data').getAttribute('href')).then(r => r.text())";
    let downloaded: Value = serde_json::from_str(browser.run(script).await.as_str().unwrap_or_default()).expect("JSON");
    assert_eq!(downloaded["displayName"], "佐藤 花子");
    assert_eq!(downloaded["profile"]["fields"]["phone"], "080-1111-2222");
    let values: Vec<&Value> = downloaded["answers"]
        .as_array()
        .map(|answers| answers.iter().map(|answer| &answer["value"]).collect())
        .unwrap_or_default();
    assert!(values.contains(&&json!(typed)), "{downloaded}");

    browser.click("#erase-user").await;
    browser.wait_for("#confirm-erase").await;
    browser.screenshot("ja-erase-confirm").await;
    browser.click("#confirm-erase").await;
    browser.wait_for("#flash").await;
    let done = browser.text_of("#flash").await;
    assert!(done.contains("消去しました"), "{done}");
    let dump = app.firestore.dump().await;
    for line in dump.lines().filter(|line| line.contains(user.as_str())) {
        for secret in [typed, "080-1111-2222", "佐藤 花子"] {
            assert!(!line.contains(secret), "{secret} is still in {line}");
        }
    }
}
