//! Bad input gets a clear answer and changes nothing.

use crate::helpers::events::{self, envelope, fixture, postback, text};
use crate::helpers::tcp_proxy::TcpProxy;
use crate::helpers::{CHANNEL_SECRET, TestOptions, spawn_app, spawn_app_with};
use line_survey::line::signature;

async fn assert_nothing_stored(app: &crate::helpers::TestApp) {
    for (collection, count) in app.firestore.counts().await {
        assert_eq!(count, 0, "{collection} should be empty");
    }
}

#[tokio::test]
async fn bad_missing_and_empty_signatures_are_rejected_before_anything_is_stored() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&envelope(vec![text(&events::new_user(), "news")])).unwrap();
    let wrong_secret = signature::sign(b"another-secret", &body);

    for signature in [Some(wrong_secret.as_str()), None, Some(""), Some("not base64")] {
        let response = app.post_webhook_raw(body.clone(), signature).await;
        assert_eq!(response.status(), 401, "signature {signature:?}");
    }
    assert_nothing_stored(&app).await;
    assert!(app.line.calls().is_empty());
}

#[tokio::test]
async fn a_signature_over_other_bytes_is_rejected() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&envelope(vec![text(&events::new_user(), "news")])).unwrap();
    let signature = signature::sign(CHANNEL_SECRET.as_bytes(), &body);
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");

    let response = app.post_webhook_raw(tampered, Some(&signature)).await;

    assert_eq!(response.status(), 401);
    assert_nothing_stored(&app).await;
}

#[tokio::test]
async fn malformed_json_with_a_valid_signature_gets_400() {
    let app = spawn_app().await;
    for body in [&b"{not json"[..], br#"{"events": "nope"}"#, br#"[]"#] {
        let signature = signature::sign(CHANNEL_SECRET.as_bytes(), body);
        let response = app.post_webhook_raw(body.to_vec(), Some(&signature)).await;
        assert_eq!(response.status(), 400);
    }
    assert_nothing_stored(&app).await;
}

#[tokio::test]
async fn the_verify_request_gets_200() {
    let app = spawn_app().await;
    let response = app.post_webhook(&fixture("verify.json")).await;
    assert_eq!(response.status(), 200);
    assert_nothing_stored(&app).await;
}

#[tokio::test]
async fn unknown_event_types_and_group_events_without_a_user_are_acknowledged_without_effect() {
    // (An unfollow is recorded on the user and cancels their timers: see steps.rs.)
    let app = spawn_app().await;
    for name in ["beacon.json", "group_text_without_user.json"] {
        let response = app.post_webhook(&fixture(name)).await;
        assert_eq!(response.status(), 200, "{name}");
    }
    assert_nothing_stored(&app).await;
    assert!(app.line.calls().is_empty());
}

#[tokio::test]
async fn events_from_groups_and_rooms_get_no_survey_even_with_a_user_id() {
    let app = spawn_app().await;
    let user = events::new_user();
    let sources = [
        serde_json::json!({"type": "group", "groupId": "Ca56f94637cc4347f90a25382909b24b9", "userId": user}),
        serde_json::json!({"type": "room", "roomId": "Ra8dbf4673c4c812cd491258042226c99", "userId": user}),
    ];
    for source in sources {
        for mut event in [
            text(&user, "lunch"),
            postback(&user, &events::card_tap_data("welcome", "card")),
        ] {
            event["source"] = source.clone();
            app.deliver(&event).await;
        }
    }

    assert!(app.line.calls().is_empty(), "nothing is replied into a group or room");
    assert_nothing_stored(&app).await;
}

#[tokio::test]
async fn standby_mode_events_cause_no_sends_and_no_writes() {
    let app = spawn_app().await;
    let mut event = text(&events::new_user(), "news");
    event["mode"] = "standby".into();

    app.deliver(&event).await;

    assert!(app.line.calls().is_empty());
    assert_nothing_stored(&app).await;
}

#[tokio::test]
async fn postbacks_naming_unknown_scenarios_nodes_or_choices_are_ignored() {
    let app = spawn_app().await;
    let user = events::new_user();
    let data = [
        events::answer_data("nope", "ask_food", "good"),
        events::answer_data("lunch", "nope", "good"),
        events::answer_data("lunch", "ask_food", "nope"),
        events::answer_data("lunch", "intro", "good"),
        events::card_tap_data("welcome", "nope"),
        "v=1&k=a&s=lunch%00x&n=ask_food&c=good".to_owned(),
        "action=buy&itemid=111".to_owned(),
        String::new(),
    ];
    for data in &data {
        app.deliver(&postback(&user, data)).await;
    }
    assert_nothing_stored(&app).await;
    assert!(app.line.calls().is_empty());
}

#[tokio::test]
async fn a_malformed_event_does_not_poison_the_rest_of_the_batch() {
    let app = spawn_app().await;
    let user = events::new_user();
    let mut broken = text(&user, "news");
    broken.as_object_mut().unwrap().remove("timestamp");

    let response = app.post_webhook(&envelope(vec![broken, text(&user, "news")])).await;
    app.settled().await;

    assert_eq!(response.status(), 200);
    assert_eq!(app.line.accepted().len(), 1, "the good event was handled");
}

#[tokio::test]
async fn an_over_long_body_is_refused_with_413() {
    let app = spawn_app_with(TestOptions {
        max_body_bytes: 2048,
        ..TestOptions::default()
    })
    .await;
    let long_text = "x".repeat(4096);
    let response = app
        .post_webhook(&envelope(vec![text(&events::new_user(), &long_text)]))
        .await;
    assert_eq!(response.status(), 413);
    assert_nothing_stored(&app).await;
}

#[tokio::test]
async fn an_unreachable_firestore_gets_5xx_so_line_redelivers_and_the_redelivery_then_works() {
    let proxy = TcpProxy::start(crate::helpers::emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        ..TestOptions::default()
    })
    .await;
    let user = events::new_user();
    let tap = postback(&user, &events::answer_data("lunch", "ask_food", "good"));

    proxy.cut();
    let response = app.post_webhook(&envelope(vec![tap.clone()])).await;
    assert_eq!(response.status(), 503);
    assert!(app.line.calls().is_empty(), "no survey step ran without its guard");

    proxy.restore();
    app.deliver(&events::redelivered(&tap)).await;
    assert_eq!(app.firestore.count("survey_responses").await, 1);
    assert_eq!(app.line.accepted_of_kind("template"), 1);
}

#[tokio::test]
async fn a_firestore_stalled_at_start_up_delays_the_start_and_records_each_version_once() {
    // Answers held 2.5 s: longer than a request's timeout (1.5 s), so the
    // first attempt at recording the scenario versions gives up.
    let proxy = TcpProxy::start(crate::helpers::emulator_host()).await;
    proxy.stall_answers(std::time::Duration::from_millis(2_500));
    let release = async {
        tokio::time::sleep(std::time::Duration::from_millis(2_600)).await;
        proxy.stop_stalling();
    };
    let (app, ()) = tokio::join!(
        spawn_app_with(TestOptions {
            firestore_host: Some(proxy.address.clone()),
            ..TestOptions::default()
        }),
        release
    );

    let loaded = line_survey::scenario::load_dir(&crate::helpers::fixture_scenarios()).expect("the fixtures load");
    assert_eq!(
        app.firestore.count("scenario_versions").await,
        loaded.len(),
        "each version recorded once"
    );
    let user = events::new_user();
    app.deliver(&text(&user, "lunch")).await;
    assert_eq!(app.line.accepted().len(), 1, "the service works once started");
}

/// Only LINE's user id shape (`U` + 32 lower-case hex) becomes part of a
/// document path: any other source `userId` gets 200, no effect and no
/// document, and the admin routes taking a user id answer 400.
#[tokio::test]
async fn user_ids_that_are_not_lines_get_no_effect_and_no_document() {
    let app = spawn_app().await;
    let strangers = [
        "U0123456789ABCDEF0123456789ABCDEF",
        "U0123456789abcdef0123456789abcd/f",
        "__users__",
        "U1",
        "U0123456789abcdef0123456789abcdef0",
    ];
    for stranger in strangers {
        app.deliver(&text(stranger, "lunch")).await;
        app.deliver(&postback(stranger, &events::answer_data("lunch", "ask_food", "good")))
            .await;
    }
    assert_nothing_stored(&app).await;
    assert!(app.line.calls().is_empty());
    for path in [
        "/admin/users/U0123456789ABCDEF0123456789ABCDEF/timers",
        "/admin/users/__users__/timers",
        "/admin/users/U1",
        "/admin/users/U1/timeline",
    ] {
        let response = app.get_admin(path).await;
        assert_eq!(response.status(), 400, "{path}");
    }
}
