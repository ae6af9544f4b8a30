//! Duplicate storms under the faults production brings, counting effects per
//! user: an unreliable LINE, a slow LINE with a deep queue, and Firestore whose
//! answers stall, whose connections reset, or that answers slowly (a TCP fault
//! proxy between the service and the emulator). Whatever the fault: every user
//! one answer, one set of tags, one start and one next question; nothing parked.

use crate::helpers::firestore_rest::{FirestoreRest, string_field};
use crate::helpers::storm::{Storm, deliver_like_line, effects, exactly_once};
use crate::helpers::tcp_proxy::TcpProxy;
use crate::helpers::{TestApp, TestOptions, emulator_host, events, spawn_app, spawn_app_with};
use std::collections::HashMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(180);

/// Plays the storm against `app` as LINE would (redelivering what got no 200),
/// the starts first, then the taps, and waits until everything settled.
async fn play(storm: &Storm, app: &TestApp) {
    let address = app.address.clone();
    deliver_like_line(&storm.starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;
    deliver_like_line(&storm.taps, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;
}

async fn assert_exactly_once(storm: &Storm, app: &TestApp) {
    for (user, got) in effects(storm, &app.firestore, &app.line).await {
        assert_eq!(got, exactly_once(), "{user}");
    }
    let letters = app.firestore.list("dead_letters").await;
    assert!(letters.is_empty(), "nothing is parked: {letters:?}");
}

#[tokio::test]
async fn with_line_failing_30_percent_of_calls_every_user_gets_the_next_question_exactly_once() {
    let app = spawn_app().await;
    // 500 without delivering anything, to replies and pushes alike.
    app.line.fail_randomly(0.3);
    let storm = Storm::new(200);

    play(&storm, &app).await;

    assert_exactly_once(&storm, &app).await;
    // Retried with their own token or retry key, and accepted once each.
    for calls in app
        .line
        .calls_by_reply_token()
        .values()
        .chain(app.line.calls_by_retry_key().values())
    {
        assert!(calls.iter().filter(|call| call.is_accepted()).count() <= 1, "{calls:?}");
    }
    let failed = app.line.calls().iter().filter(|call| call.status == 500).count();
    assert!(failed >= 100, "LINE failed {failed} calls");
    println!("{failed} LINE calls answered 500");
}

#[tokio::test]
async fn with_firestore_answers_stalled_past_the_timeout_every_user_gets_one_answer_and_one_next_question() {
    let proxy = TcpProxy::start(emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        ..TestOptions::default()
    })
    .await;
    let storm = Storm::new(500);
    let address = app.address.clone();
    deliver_like_line(&storm.starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    // Twice during the taps, Firestore's answers are held for 3 s (longer than
    // FIRESTORE_TIMEOUT_MS, 1.5 s) while requests pass and writes land: commits
    // time out although they landed.
    let stalls = async {
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(700)).await;
            proxy.stall_answers(Duration::from_secs(3));
            tokio::time::sleep(Duration::from_secs(2)).await;
            proxy.stop_stalling();
        }
    };
    let (redeliveries, ()) = tokio::join!(deliver_like_line(&storm.taps, |_| address.clone(), LIMIT), stalls);
    app.firestore.settled(LIMIT).await;

    assert_exactly_once(&storm, &app).await;
    assert!(redeliveries > 0, "the stall was felt: some requests got 503");
    println!("{redeliveries} redeliveries");
}

#[tokio::test]
async fn with_firestore_connections_reset_and_slow_every_user_gets_one_answer_and_one_next_question() {
    let proxy = TcpProxy::start(emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        ..TestOptions::default()
    })
    .await;
    proxy.set_latency(Duration::from_millis(20));
    let storm = Storm::new(100);
    let address = app.address.clone();
    deliver_like_line(&storm.starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    let resets = async {
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            proxy.reset_connections();
        }
    };
    tokio::join!(deliver_like_line(&storm.taps, |_| address.clone(), LIMIT), resets);
    app.firestore.settled(LIMIT).await;

    assert_exactly_once(&storm, &app).await;
    assert!(
        proxy.connections_opened() > 1,
        "the service reconnected after the resets"
    );
}

#[tokio::test]
async fn with_line_answering_in_3_s_a_deep_queue_parks_nothing_untried_runs_nothing_twice_and_sends_once() {
    let options = |beside: Option<&TestApp>| TestOptions {
        adjust: |config| {
            config.lease = Duration::from_millis(5000);
            config.line_timeout = Duration::from_millis(3400);
            config.worker_count = 100;
            // Most events wait in Firestore, not in memory: a full queue stores
            // them free for any sweeper.
            config.queue_capacity = 200;
            config.sweep_interval = Duration::from_millis(200);
        },
        ..beside.map(TestApp::beside).unwrap_or_default()
    };
    let first = spawn_app_with(options(None)).await;
    let second = spawn_app_with(options(Some(&first))).await;
    first.line.set_latency(Duration::from_secs(3));
    let users: Vec<String> = (0..2000).map(|_| events::new_user()).collect();
    let news: Vec<_> = users.iter().map(|user| events::text(user, "news")).collect();
    let addresses = [first.address.clone(), second.address.clone()];

    deliver_like_line(&news, |index| addresses[index % 2].clone(), LIMIT).await;
    first.firestore.settled(Duration::from_secs(300)).await;

    let firestore: &FirestoreRest = &first.firestore;
    let letters = firestore.list("dead_letters").await;
    assert!(letters.is_empty(), "nothing was parked: {letters:?}");
    // A run of an event that another instance took over while it ran would have
    // counted a second attempt.
    let inbox = firestore.list("webhook_inbox").await;
    assert_eq!(inbox.len(), users.len());
    let attempts: Vec<i64> = inbox
        .iter()
        .map(|record| {
            record["fields"]["attempts"]["integerValue"]
                .as_str()
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1)
        })
        .collect();
    assert!(
        attempts.iter().all(|&n| (0..=1).contains(&n)),
        "no event ran twice: attempts {:?}",
        attempts.iter().filter(|&&n| n > 1).collect::<Vec<_>>()
    );
    assert!(
        inbox
            .iter()
            .all(|record| string_field(record, "state").as_deref() == Some("done"))
    );
    // Sends nothing twice: LINE accepted one message per event. A call LINE did
    // not accept may only be the repeat of an accepted one (a reply whose answer
    // came after the 3.4 s timeout, tried again with its used token: 400), never
    // a second message.
    let calls = first.line.calls();
    assert_eq!(calls.iter().filter(|call| call.is_accepted()).count(), users.len());
    let accepted_tokens: std::collections::HashSet<&str> = calls
        .iter()
        .filter(|call| call.is_accepted())
        .filter_map(|call| call.reply_token())
        .collect();
    let repeats: Vec<(String, u16)> = calls
        .iter()
        .filter(|call| !call.is_accepted())
        .map(|call| (call.path.clone(), call.status))
        .collect();
    assert!(
        calls
            .iter()
            .filter(|call| !call.is_accepted())
            .all(|call| call.status == 400 && call.reply_token().is_some_and(|token| accepted_tokens.contains(token))),
        "only repeats of accepted replies were refused: {repeats:?}"
    );
    println!("{} calls repeated an accepted reply", repeats.len());
    let mut per_user: HashMap<String, usize> = HashMap::new();
    let tokens: HashMap<&str, &str> = news
        .iter()
        .map(|event| {
            (
                event["replyToken"].as_str().unwrap_or_default(),
                event["source"]["userId"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    for call in calls.iter().filter(|call| call.is_accepted()) {
        let user = call
            .to()
            .or_else(|| call.reply_token().and_then(|token| tokens.get(token).copied()))
            .unwrap_or_default();
        *per_user.entry(user.to_owned()).or_default() += 1;
    }
    assert_eq!(per_user.len(), users.len());
    assert!(per_user.values().all(|&count| count == 1));
    println!("LINE calls in flight at most: {}", first.line.in_flight_max());
}
