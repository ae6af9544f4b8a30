//! Tags and fields of one user changed by hand in the console (issue 27 §3):
//! editors add and remove tags and set and remove fields from the user's
//! page; each change lands with its audit entry (the field's name, never its
//! value); viewers cannot; bad input and unknown users change nothing; many
//! tags added at once all stay.

use crate::helpers::{events, spawn_app};
use crate::operator_access::{EDITOR, VIEWER, add_staff, csrf_of, get, post, session};

fn field<'a>(user: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    &user["fields"]["fields"]["mapValue"]["fields"][name]
}

#[tokio::test]
async fn an_editor_changes_a_users_tags_and_fields_by_hand_and_each_change_is_audited() {
    let app = spawn_app().await;
    add_staff(&app);
    let user = events::new_user();
    app.deliver(&events::follow(&user)).await;
    assert!(
        app.firestore.get("users", &user).await.is_some(),
        "the follow records the user"
    );
    let editor = session(&app.address, EDITOR).await;
    let page = get(&app.address, &format!("/console/users?id={user}"), &editor)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("id=\"add-tag\"") && page.contains("id=\"set-field\""));
    let csrf = csrf_of(&app.address, &editor).await;
    // The page's form first says what will happen, and changes nothing.
    let asked = post(
        &app.address,
        "/console/users/edit",
        &editor,
        &[("csrf", &csrf), ("user", &user), ("op", "add_tag"), ("tag", "常連さん")],
    )
    .await;
    assert_eq!(asked.status(), 200);
    let confirmation = asked.text().await.unwrap();
    assert!(
        confirmation.contains("This adds the tag “常連さん”.") && confirmation.contains("id=\"confirm-edit\""),
        "{confirmation}"
    );
    assert!(app.user_tags(&user).await.is_empty(), "nothing before the confirmation");
    let edit = |fields: Vec<(&'static str, String)>| {
        let (csrf, editor, address, user) = (csrf.clone(), editor.clone(), app.address.clone(), user.clone());
        async move {
            // As the confirmation page sends it.
            let mut form: Vec<(&str, String)> = vec![("csrf", csrf), ("user", user), ("confirm", "yes".to_owned())];
            form.extend(fields);
            let form: Vec<(&str, &str)> = form.iter().map(|(key, value)| (*key, value.as_str())).collect();
            post(&address, "/console/users/edit", &editor, &form).await
        }
    };
    for change in [
        vec![("op", "add_tag".to_owned()), ("tag", " 常連さん ".to_owned())],
        vec![
            ("op", "set_field".to_owned()),
            ("field", "plan".to_owned()),
            ("value", "gold".to_owned()),
            ("kind", "text".to_owned()),
        ],
        vec![
            ("op", "set_field".to_owned()),
            ("field", "age".to_owned()),
            ("value", "30".to_owned()),
            ("kind", "number".to_owned()),
        ],
    ] {
        let response = edit(change).await;
        assert_eq!(response.status(), 303);
        assert_eq!(
            response.headers()["location"],
            format!("/console/users?id={user}").as_str()
        );
    }
    assert!(app.user_tags(&user).await.contains(&"常連さん".to_owned()));
    let record = app.firestore.get("users", &user).await.unwrap();
    assert_eq!(
        record["fields"]["fields"]["mapValue"]["fields"]["plan"]["stringValue"],
        "gold"
    );
    assert_eq!(
        record["fields"]["fields"]["mapValue"]["fields"]["age"]["integerValue"],
        "30"
    );
    let page = get(&app.address, &format!("/console/users?id={user}"), &editor)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("data-tag=\"常連さん\"") && page.contains("data-field=\"plan\""));

    // Removed again.
    assert_eq!(
        edit(vec![("op", "remove_tag".to_owned()), ("tag", "常連さん".to_owned())])
            .await
            .status(),
        303
    );
    assert_eq!(
        edit(vec![("op", "remove_field".to_owned()), ("field", "plan".to_owned())])
            .await
            .status(),
        303
    );
    assert!(!app.user_tags(&user).await.contains(&"常連さん".to_owned()));
    let record = app.firestore.get("users", &user).await.unwrap();
    assert!(field(&record, "plan").is_null(), "{record}");
    assert_eq!(field(&record, "age")["integerValue"], "30", "the other field stays");

    // Bad input, an unknown user and a viewer change nothing.
    let before = app.firestore.get("users", &user).await.unwrap()["fields"].clone();
    for (change, status) in [
        (
            vec![
                ("op", "set_field".to_owned()),
                ("field", "Bad Name".to_owned()),
                ("value", "x".to_owned()),
                ("kind", "text".to_owned()),
            ],
            400,
        ),
        (
            vec![
                ("op", "set_field".to_owned()),
                ("field", "age".to_owned()),
                ("value", "many".to_owned()),
                ("kind", "number".to_owned()),
            ],
            400,
        ),
        (vec![("op", "add_tag".to_owned()), ("tag", "   ".to_owned())], 400),
        (vec![("op", "drop".to_owned())], 400),
    ] {
        assert_eq!(edit(change).await.status(), status);
    }
    let stranger = events::new_user();
    let csrf_now = csrf_of(&app.address, &editor).await;
    let unknown = post(
        &app.address,
        "/console/users/edit",
        &editor,
        &[
            ("csrf", &csrf_now),
            ("user", &stranger),
            ("op", "add_tag"),
            ("tag", "x"),
            ("confirm", "yes"),
        ],
    )
    .await;
    assert_eq!(unknown.status(), 404);
    assert!(
        app.firestore.get("users", &stranger).await.is_none(),
        "no record made up"
    );
    let viewer = session(&app.address, VIEWER).await;
    let viewer_csrf = csrf_of(&app.address, &viewer).await;
    let refused = post(
        &app.address,
        "/console/users/edit",
        &viewer,
        &[("csrf", &viewer_csrf), ("user", &user), ("op", "add_tag"), ("tag", "x")],
    )
    .await;
    assert_eq!(refused.status(), 403);
    let viewer_page = get(&app.address, &format!("/console/users?id={user}"), &viewer)
        .await
        .text()
        .await
        .unwrap();
    assert!(!viewer_page.contains("id=\"add-tag\""), "no forms for a viewer");
    let after = app.firestore.get("users", &user).await.unwrap()["fields"].clone();
    assert_eq!((&after["tags"], &after["fields"]), (&before["tags"], &before["fields"]));

    // Ten tags added at once, with the user's own events going on: all stay.
    let tags: Vec<String> = (0..10).map(|i| format!("tag{i}")).collect();
    let adds = tags
        .iter()
        .map(|tag| edit(vec![("op", "add_tag".to_owned()), ("tag", tag.clone())]));
    let event = events::text(&user, "news");
    let (responses, _) = tokio::join!(futures::future::join_all(adds), app.deliver(&event));
    assert!(responses.iter().all(|response| response.status() == 303));
    let now = app.user_tags(&user).await;
    assert!(tags.iter().all(|tag| now.contains(tag)), "{now:?}");

    // Audited as the editor's, by name, never by value.
    let entries = app.firestore.list("audit_log").await;
    let of = |action: &str| {
        entries
            .iter()
            .filter(|entry| entry["fields"]["action"]["stringValue"] == action)
            .count()
    };
    // One per change tried: 1 + 10 tags and the unknown user's (refused,
    // 404); bad input and the viewer were refused before any action.
    assert_eq!(
        (of("tag_add"), of("tag_remove"), of("field_set"), of("field_remove")),
        (12, 1, 2, 1)
    );
    let unknown_entry = entries
        .iter()
        .find(|entry| entry["fields"]["touched"]["arrayValue"]["values"][0]["stringValue"] == stranger.as_str())
        .expect("the unknown user's entry");
    assert_eq!(unknown_entry["fields"]["status"]["integerValue"], "404");
    let stored = serde_json::to_string(&entries).unwrap();
    assert!(!stored.contains("gold"), "a field's value is not in the audit log");
    assert!(
        entries
            .iter()
            .filter(|entry| entry["fields"]["action"]["stringValue"] == "tag_add")
            .all(|entry| entry["fields"]["operator"]["stringValue"] == EDITOR)
    );
}

/// A form of the user's page lands once: the same form sent three times at
/// once (a double click) changes the user once and leaves one receipt; sent
/// again after another operator changed the same field (a reload of the old
/// page), it changes nothing, so the newer value stays. A new page's form
/// changes it again.
#[tokio::test]
async fn a_reloaded_or_double_clicked_form_changes_the_user_once() {
    use crate::operator_access::OWNER;
    let app = spawn_app().await;
    add_staff(&app);
    let user = events::new_user();
    app.deliver(&events::follow(&user)).await;
    let editor = session(&app.address, EDITOR).await;
    let owner = session(&app.address, OWNER).await;
    let key_of = |page: &str| {
        page.split("name=\"key\" value=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("the page's form key")
            .to_owned()
    };
    let page_of = |cookie: String| {
        let (address, user) = (app.address.clone(), user.clone());
        async move {
            get(&address, &format!("/console/users?id={user}"), &cookie)
                .await
                .text()
                .await
                .unwrap()
        }
    };
    let set_plan = |cookie: String, key: String, plan: &'static str| {
        let (address, user) = (app.address.clone(), user.clone());
        async move {
            let csrf = csrf_of(&address, &cookie).await;
            let form = [
                ("csrf", csrf.as_str()),
                ("user", user.as_str()),
                ("key", key.as_str()),
                ("op", "set_field"),
                ("field", "plan"),
                ("value", plan),
                ("kind", "text"),
                ("confirm", "yes"),
            ];
            post(&address, "/console/users/edit", &cookie, &form).await.status()
        }
    };
    let plan = |record: serde_json::Value| field(&record, "plan")["stringValue"].as_str().map(str::to_owned);
    let receipts = || async {
        app.firestore
            .list("admin_requests")
            .await
            .iter()
            .filter(|doc| doc["fields"]["operation"]["stringValue"] == "hand_edit")
            .count()
    };

    let old_page = key_of(&page_of(editor.clone()).await);
    let clicks = (0..3).map(|_| set_plan(editor.clone(), old_page.clone(), "gold"));
    for status in futures::future::join_all(clicks).await {
        assert_eq!(status, 303);
    }
    assert_eq!(
        plan(app.firestore.get("users", &user).await.unwrap()).as_deref(),
        Some("gold")
    );
    assert_eq!(receipts().await, 1, "one form, one change");
    let results = |entries: Vec<serde_json::Value>| -> Vec<String> {
        let mut results: Vec<String> = entries
            .iter()
            .filter(|entry| entry["fields"]["action"]["stringValue"] == "field_set")
            .filter_map(|entry| entry["fields"]["result"]["stringValue"].as_str().map(str::to_owned))
            .collect();
        results.sort();
        results
    };
    assert_eq!(
        results(app.firestore.list("audit_log").await),
        ["done", "repeat", "repeat"],
        "one change, two repeats in the audit log"
    );

    let owners_page = key_of(&page_of(owner.clone()).await);
    assert_ne!(owners_page, old_page, "each page has its own key");
    assert_eq!(set_plan(owner.clone(), owners_page, "silver").await, 303);
    // The editor's old page, reloaded and sent again: nothing changes.
    assert_eq!(set_plan(editor.clone(), old_page, "gold").await, 303);
    assert_eq!(
        plan(app.firestore.get("users", &user).await.unwrap()).as_deref(),
        Some("silver"),
        "a resent form does not undo a newer change"
    );
    // A new page of the editor's changes it again.
    let new_page = key_of(&page_of(editor.clone()).await);
    assert_eq!(set_plan(editor.clone(), new_page, "gold").await, 303);
    assert_eq!(
        plan(app.firestore.get("users", &user).await.unwrap()).as_deref(),
        Some("gold")
    );
    assert_eq!(receipts().await, 3);

    // A box the operation does not use may hold anything, a NUL too: the
    // form still lands once (its receipt is made of what was asked).
    let page = key_of(&page_of(editor.clone()).await);
    let csrf = csrf_of(&app.address, &editor).await;
    let form = [
        ("csrf", csrf.as_str()),
        ("user", user.as_str()),
        ("key", page.as_str()),
        ("op", "add_tag"),
        ("tag", "常連"),
        ("field", "\u{0}"),
        ("confirm", "yes"),
    ];
    for _ in 0..2 {
        let sent = post(&app.address, "/console/users/edit", &editor, &form).await;
        assert_eq!(sent.status(), 303);
    }
    assert!(app.user_tags(&user).await.contains(&"常連".to_owned()));
    assert_eq!(receipts().await, 4);
}

/// The confirmation carries the form exactly: a value with quotes, `&`,
/// `<`, Japanese and spaces comes back from its hidden fields as typed, and
/// its form sent twice changes the user once.
#[tokio::test]
async fn the_confirmation_carries_the_form_as_typed_and_lands_once() {
    let app = spawn_app().await;
    add_staff(&app);
    let user = events::new_user();
    app.deliver(&events::follow(&user)).await;
    let editor = session(&app.address, EDITOR).await;
    let page = get(&app.address, &format!("/console/users?id={user}"), &editor)
        .await
        .text()
        .await
        .unwrap();
    let hidden = |html: &str, name: &str| -> String {
        html.split(&format!("name=\"{name}\" value=\""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default()
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&")
    };
    let key = hidden(&page, "key");
    let csrf = csrf_of(&app.address, &editor).await;
    let typed = " 「特上」 & <梅> \"松\" ";
    let asked = post(
        &app.address,
        "/console/users/edit",
        &editor,
        &[
            ("csrf", &csrf),
            ("user", &user),
            ("key", &key),
            ("op", "set_field"),
            ("field", "course"),
            ("value", typed),
            ("kind", "text"),
        ],
    )
    .await;
    assert_eq!(asked.status(), 200);
    let confirmation = asked.text().await.unwrap();
    assert!(
        app.firestore
            .get("users", &user)
            .await
            .is_some_and(|record| field(&record, "course").is_null())
    );
    let fields: Vec<(String, String)> = ["csrf", "user", "op", "tag", "field", "value", "kind", "key", "confirm"]
        .into_iter()
        .map(|name| (name.to_owned(), hidden(&confirmation, name)))
        .collect();
    assert!(fields.contains(&("value".to_owned(), typed.to_owned())), "{fields:?}");
    let form: Vec<(&str, &str)> = fields
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    for _ in 0..2 {
        assert_eq!(
            post(&app.address, "/console/users/edit", &editor, &form).await.status(),
            303
        );
    }
    let record = app.firestore.get("users", &user).await.unwrap();
    assert_eq!(field(&record, "course")["stringValue"], typed.trim());
    let receipts = app
        .firestore
        .list("admin_requests")
        .await
        .iter()
        .filter(|doc| doc["fields"]["operation"]["stringValue"] == "hand_edit")
        .count();
    assert_eq!(receipts, 1);
}
