//! Actions on the user's record (`tags`, `untag`, `set`, a question's `field`):
//! they land in the commit that records the step, once, and never in part.

use crate::helpers::firestore_rest::string_array;
use crate::helpers::storm::deliver_like_line;
use crate::helpers::tcp_proxy::TcpProxy;
use crate::helpers::{TestApp, TestOptions, emulator_host, events, sorted, spawn_app_with};
use line_survey::config::Config;
use serde_json::{Value, json};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn actions_scenarios(config: &mut Config) {
    config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/actions");
}

fn options() -> TestOptions {
    TestOptions {
        adjust: actions_scenarios,
        ..TestOptions::default()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    sorted(items.iter().map(|item| (*item).to_owned()).collect())
}

/// `users/{id}.fields`, as plain JSON values.
async fn fields(app: &TestApp, user: &str) -> serde_json::Map<String, Value> {
    let Some(document) = app.firestore.get("users", user).await else {
        return serde_json::Map::new();
    };
    document["fields"]["fields"]["mapValue"]["fields"]
        .as_object()
        .map(|fields| {
            fields
                .iter()
                .map(|(name, value)| {
                    let plain = if let Some(text) = value["stringValue"].as_str() {
                        json!(text)
                    } else if let Some(number) = value["integerValue"].as_str() {
                        json!(number.parse::<i64>().unwrap())
                    } else if let Some(flag) = value["booleanValue"].as_bool() {
                        json!(flag)
                    } else {
                        value["doubleValue"].clone()
                    };
                    (name.clone(), plain)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Gives `user` tags as another scenario or an operator would have.
async fn give_tags(app: &TestApp, user: &str, tags: &[&str]) {
    let values: Vec<Value> = tags.iter().map(|tag| json!({ "stringValue": tag })).collect();
    app.firestore
        .patch(
            "users",
            user,
            &[
                ("lineUserId", json!({ "stringValue": user })),
                ("tags", json!({ "arrayValue": { "values": values } })),
            ],
        )
        .await;
}

/// An operator's edit of the user's fields (the whole map: only `plan` is left).
async fn set_plan_by_hand(app: &TestApp, user: &str, plan: &str) {
    let map = json!({ "mapValue": { "fields": { "plan": { "stringValue": plan } } } });
    app.firestore.patch("users", user, &[("fields", map)]).await;
}

fn tap_gold(user: &str) -> Value {
    events::postback(user, &events::answer_data("profile", "ask_plan", "gold"))
}

#[tokio::test]
async fn each_step_adds_removes_and_sets_in_its_own_commit_and_a_duplicate_changes_nothing() {
    let app = spawn_app_with(options()).await;
    let user = events::new_user();
    give_tags(&app, &user, &["reminder_sent", "kept"]).await;

    app.deliver(&app.sent_now(&events::text(&user, "プロフィール"))).await;
    assert_eq!(
        sorted(app.user_tags(&user).await),
        strings(&["kept", "profile_started", "reminder_sent", "unanswered"])
    );
    assert_eq!(
        fields(&app, &user).await,
        json!({ "last_survey": "profile" }).as_object().cloned().unwrap()
    );

    let tap = app.sent_now(&tap_gold(&user));
    app.deliver(&tap).await;
    assert_eq!(
        sorted(app.user_tags(&user).await),
        strings(&["answered:profile", "kept", "profile_started", "vip"]),
        "the question's untag, the choice's tags and untag, and the answer tag"
    );
    assert_eq!(
        fields(&app, &user).await,
        json!({ "last_survey": "profile", "plan": "gold", "discount": 10 })
            .as_object()
            .cloned()
            .unwrap()
    );

    // Another scenario gives the tag back and an operator changes the plan; a
    // redelivery and a double tap of the answered question change nothing.
    give_tags(
        &app,
        &user,
        &["answered:profile", "kept", "profile_started", "vip", "unanswered"],
    )
    .await;
    set_plan_by_hand(&app, &user, "silver").await;
    app.deliver(&events::redelivered(&tap)).await;
    app.deliver(&app.sent_now(&tap_gold(&user))).await;
    assert!(app.user_tags(&user).await.contains(&"unanswered".to_owned()));
    assert_eq!(fields(&app, &user).await["plan"], json!("silver"));

    // The typed answer lands in `age` as a number; the end node's actions with it.
    app.deliver(&app.sent_now(&events::text(&user, "３０"))).await;
    assert_eq!(
        sorted(app.user_tags(&user).await),
        strings(&["answered:profile", "kept", "profile_done", "unanswered", "vip"])
    );
    let fields = fields(&app, &user).await;
    assert_eq!(fields["age"], json!(30));
    assert_eq!(fields["profile_complete"], json!(true));

    let profile: Value = app
        .get_admin(&format!("/admin/users/{user}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(profile["userId"], json!(user));
    assert_eq!(
        sorted(
            profile["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|tag| tag.as_str().unwrap().to_owned())
                .collect()
        ),
        strings(&["answered:profile", "kept", "profile_done", "unanswered", "vip"])
    );
    assert_eq!(profile["fields"]["age"], json!(30));
    assert_eq!(profile["fields"]["plan"], json!("silver"));
    assert_eq!(profile["answered"][0]["scenarioId"], json!("profile"));
    assert!(
        profile["firstSeenAt"].is_string() && profile["lastSeenAt"].is_string(),
        "{profile}"
    );
}

#[tokio::test]
async fn the_user_route_answers_404_for_a_stranger_and_400_for_a_bad_id() {
    let app = spawn_app_with(options()).await;
    let stranger = events::new_user();
    let response = app.get_admin(&format!("/admin/users/{stranger}")).await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap_or_default().contains("never saw"),
        "{body}"
    );
    assert_eq!(app.get_admin("/admin/users/not-a-user").await.status(), 400);
    let unauthorized = reqwest::get(format!("{}/admin/users/{stranger}", app.address))
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
}

/// 60 users tap "gold" twice at once while Firestore's answers stall past the
/// timeout: every commit whose outcome was unknown is found out, and each user
/// ends with the whole of the answer's actions. Then every tap comes again,
/// after the tags and the plan were changed by hand: nothing is applied twice.
#[tokio::test]
async fn an_answers_tags_untags_and_fields_land_whole_through_stalls_and_never_twice() {
    let proxy = TcpProxy::start(emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        ..options()
    })
    .await;
    let users: Vec<String> = (0..60).map(|_| events::new_user()).collect();
    for user in &users {
        give_tags(&app, user, &["reminder_sent"]).await;
    }
    let starts: Vec<Value> = users.iter().map(|user| events::text(user, "プロフィール")).collect();
    let address = app.address.clone();
    deliver_like_line(&starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    let taps: Vec<Value> = users.iter().flat_map(|user| [tap_gold(user), tap_gold(user)]).collect();
    // The first stall begins with the taps: 120 taps can all be answered in
    // less time than any head start would give them.
    let stalls = async {
        for round in 0..2 {
            if round > 0 {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            proxy.stall_answers(Duration::from_secs(3));
            tokio::time::sleep(Duration::from_secs(2)).await;
            proxy.stop_stalling();
        }
    };
    let (redeliveries, ()) = tokio::join!(deliver_like_line(&taps, |_| address.clone(), LIMIT), stalls);
    app.firestore.settled(LIMIT).await;
    assert!(redeliveries > 0, "the stall was felt: some requests got 503");

    let whole = strings(&["answered:profile", "profile_started", "vip"]);
    for user in &users {
        assert_eq!(sorted(app.user_tags(user).await), whole, "{user}");
        let fields = fields(&app, user).await;
        assert_eq!(
            (fields["plan"].clone(), fields["discount"].clone()),
            (json!("gold"), json!(10)),
            "{user}"
        );
    }
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), users.len(), "one answer per user");

    for user in &users {
        give_tags(
            &app,
            user,
            &[
                "answered:profile",
                "profile_started",
                "vip",
                "unanswered",
                "reminder_sent",
            ],
        )
        .await;
        set_plan_by_hand(&app, user, "silver").await;
    }
    let again: Vec<Value> = taps.iter().map(events::redelivered).collect();
    deliver_like_line(&again, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;
    for user in &users {
        let tags = string_array(&app.firestore.get("users", user).await.unwrap(), "tags");
        assert!(
            tags.contains(&"unanswered".to_owned()) && tags.contains(&"reminder_sent".to_owned()),
            "{user}: {tags:?}"
        );
        assert_eq!(fields(&app, user).await["plan"], json!("silver"), "{user}");
    }
}
