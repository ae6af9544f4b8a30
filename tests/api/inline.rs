//! `WEBHOOK_PROCESSING=inline`: events decided and committed before the 200,
//! with no inbox record. The effect commit's own records (the answer, the ledger
//! entry keyed by the event, the message mark, the marker) are what stop a
//! redelivery; a request cut off by `INLINE_BUDGET_MS` gets 503 and LINE's
//! redelivery finds what landed. The rest of the suite runs in this mode with
//! `TEST_WEBHOOK_PROCESSING=inline` (README, "Webhook processing").

use crate::helpers::events::{self, answer_data, envelope, postback, redelivered, text};
use crate::helpers::storm::{Storm, deliver_like_line, effects, exactly_once};
use crate::helpers::tcp_proxy::TcpProxy;
use crate::helpers::{TestApp, TestOptions, emulator_host, sorted, spawn_app_with};
use futures::future::join_all;
use line_survey::config::{Config, WebhookProcessing};
use std::path::PathBuf;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);
const NEWS: &str = "Today's news: the cafeteria has a new menu.";

fn inline(config: &mut Config) {
    config.webhook_processing = WebhookProcessing::Inline;
}

async fn inline_app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: inline,
        ..TestOptions::default()
    })
    .await
}

#[tokio::test]
async fn an_inline_event_is_committed_before_its_200_and_leaves_no_inbox_record() {
    let app = inline_app().await;
    let user = events::new_user();

    let response = app.post_webhook(&envelope(vec![text(&user, "lunch")])).await;
    assert_eq!(response.status(), 200);
    // No waiting: the start was committed before the answer.
    assert_eq!(app.firestore.count("scenario_answers").await, 1);
    let response = app
        .post_webhook(&envelope(vec![postback(
            &user,
            &answer_data("lunch", "ask_food", "good"),
        )]))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(app.firestore.count("survey_responses").await, 1);
    assert_eq!(
        sorted(app.user_tags(&user).await),
        ["answered:lunch", "foodie", "lunch_good"]
    );
    app.settled().await;

    assert_eq!(app.line.accepted().len(), 2, "the survey, then the next question");
    assert_eq!(app.firestore.count("webhook_inbox").await, 0, "no inbox record");
}

#[tokio::test]
async fn redeliveries_of_inline_events_change_nothing_even_after_the_start_dedup_window() {
    // No start dedup window: only the events' own records can stop a redelivery.
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            inline(config);
            config.start_dedup = Duration::ZERO;
        },
        ..TestOptions::default()
    })
    .await;
    let user = events::new_user();
    let start = text(&user, "lunch");
    let tap = postback(&user, &answer_data("lunch", "ask_food", "good"));
    let news = text(&user, "news");
    let card = postback(&user, &events::card_tap_data("welcome", "card"));
    for event in [&start, &tap, &news] {
        app.deliver(event).await;
    }
    let fresh = events::new_user();
    let fresh_card = postback(&fresh, &events::card_tap_data("welcome", "card"));
    app.deliver(&fresh_card).await;
    let sent = app.line.accepted().len();
    assert_eq!(sent, 4, "the survey, the next question, the news, the card's survey");

    // Each redelivered three times at once, all of them together.
    let again: Vec<_> = [&start, &tap, &news, &fresh_card]
        .into_iter()
        .flat_map(|event| std::iter::repeat_n(envelope(vec![redelivered(event)]), 3))
        .collect();
    let responses = join_all(again.iter().map(|body| app.post_webhook(body))).await;
    for response in responses {
        assert_eq!(response.status(), 200);
    }
    app.settled().await;

    assert_eq!(app.line.accepted().len(), sent, "nothing was sent again");
    assert_eq!(app.line.accepted_with_text(NEWS), 1);
    assert_eq!(app.firestore.count("survey_responses").await, 1);
    assert_eq!(app.firestore.count("scenario_answers").await, 2, "one marker per user");
    assert_eq!(
        sorted(app.user_tags(&user).await),
        ["answered:lunch", "foodie", "lunch_good"]
    );
    // A card tap of the answered user still only tags.
    app.deliver(&card).await;
    assert_eq!(app.line.accepted().len(), sent);

    let metrics = app
        .http
        .get(format!("{}/metrics", app.address))
        .bearer_auth(crate::helpers::ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"line_survey_webhook_events_total{kind="message",outcome="processed"} 2"#,
        r#"line_survey_webhook_events_total{kind="message",outcome="duplicate"} 6"#,
        r#"line_survey_webhook_events_total{kind="postback",outcome="duplicate"} 3"#,
        r#"line_survey_duplicates_stopped_total{guard="answer",reason="already_answered"} 3"#,
        r#"line_survey_duplicates_stopped_total{guard="inbox",reason="redelivered"} 9"#,
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
}

#[tokio::test]
async fn a_redelivered_typed_answer_does_not_answer_the_next_question_inline() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            inline(config);
            config.scenarios_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/typed");
        },
        ..TestOptions::default()
    })
    .await;
    let user = events::new_user();
    app.deliver(&text(&user, "PROFILE")).await;
    let age = text(&user, "35");
    app.deliver(&age).await;
    assert_eq!(app.line.accepted_with_text("Your postal code?"), 1);
    let sent = app.line.accepted().len();

    let again: Vec<_> = std::iter::repeat_n(redelivered(&age), 3).collect();
    join_all(again.iter().map(|event| app.deliver(event))).await;

    assert_eq!(app.line.accepted().len(), sent, "no reaction to the redelivered text");
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), 1, "only the age: {answers:?}");
    assert!(
        app.firestore.get("open_questions", &user).await.is_some(),
        "the postal code question is still open"
    );
    assert_eq!(
        app.firestore.count("message_texts").await,
        0,
        "no text is stored inline"
    );
}

#[tokio::test]
async fn with_firestore_stalled_past_the_budget_inline_requests_get_503_and_every_user_gets_one_of_each() {
    let proxy = TcpProxy::start(emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        adjust: inline,
        ..TestOptions::default()
    })
    .await;
    let storm = Storm::new(200);
    let address = app.address.clone();
    deliver_like_line(&storm.starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    // Answers held for 3 s: past the 1.2 s budget and the 1.5 s Firestore timeout.
    let stalls = async {
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            proxy.stall_answers(Duration::from_secs(3));
            tokio::time::sleep(Duration::from_secs(2)).await;
            proxy.stop_stalling();
        }
    };
    let (redeliveries, ()) = tokio::join!(deliver_like_line(&storm.taps, |_| address.clone(), LIMIT), stalls);
    app.firestore.settled(LIMIT).await;

    for (user, got) in effects(&storm, &app.firestore, &app.line).await {
        assert_eq!(got, exactly_once(), "{user}");
    }
    assert!(redeliveries > 0, "the stall was felt: some requests got 503");
    let letters = app.firestore.list("dead_letters").await;
    assert!(letters.is_empty(), "nothing is parked: {letters:?}");
    println!("{redeliveries} redeliveries");
}

#[tokio::test]
async fn a_users_events_not_started_while_half_the_budget_was_left_are_stored_for_the_workers_in_order() {
    // Every Firestore round trip takes at least 340 ms: the start and the first
    // tap spend more than half of a 1.5 s budget, so what follows them is
    // stored for the workers, not started.
    let proxy = TcpProxy::start(emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        adjust: |config| {
            inline(config);
            config.inline_budget = Duration::from_millis(1_500);
            config.firestore_timeout = Duration::from_secs(3);
            config.lease = Duration::from_secs(30);
        },
        ..TestOptions::default()
    })
    .await;
    let user = events::new_user();
    proxy.set_latency(Duration::from_millis(170));
    let start = text(&user, "lunch");
    let food = postback(&user, &answer_data("lunch", "ask_food", "good"));
    let drink = postback(&user, &answer_data("lunch", "ask_drink", "tea"));
    let response = app
        .post_webhook(&envelope(vec![start.clone(), food.clone(), drink.clone()]))
        .await;
    assert_eq!(response.status(), 200);
    let stored: Vec<String> = app
        .firestore
        .list("webhook_inbox")
        .await
        .iter()
        .filter_map(|record| crate::helpers::firestore_rest::string_field(record, "webhookEventId"))
        .collect();
    let id = |event: &serde_json::Value| event["webhookEventId"].as_str().unwrap_or_default().to_owned();
    assert!(
        stored == [id(&drink)] || sorted(stored.clone()) == sorted(vec![id(&food), id(&drink)]),
        "the last events were stored, the start was not: {stored:?}"
    );
    proxy.set_latency(Duration::ZERO);
    app.settled().await;

    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), 2, "{answers:?}");
    let accepted = app.line.accepted();
    assert_eq!(accepted.len(), 3, "the survey, the drink question, the thanks");
    assert_eq!(
        accepted[1].messages()[0]["type"],
        "template",
        "the drink question second"
    );
    assert_eq!(
        accepted[2].texts(),
        ["Thank you for answering!"],
        "the thanks last: the stored tap waited for the one before it"
    );
    assert_eq!(app.firestore.count("dead_letters").await, 0);
}
