//! No silent dead ends: `answered_text` for a tap on an answered question and
//! `hint_text` for text typed at a date picker, each at most once per user,
//! question and interval however many duplicates arrive together.
//! Scenario: tests/fixtures/notices/notices.toml.

use crate::helpers::events::{self, answer_data, date_pick, postback, redelivered, text};
use crate::helpers::storm::send_all;
use crate::helpers::{TestApp, TestOptions, spawn_app_with};
use line_survey::config::Config;
use serde_json::{Value, json};
use std::time::Duration;

const ANSWERED: &str = "ご回答済みです。ありがとうございました。";
const HINT: &str = "下のボタンから日付を選んでください。";
const PICKED: &str = "日付は登録済みです。";

fn notice_scenarios(config: &mut Config) {
    config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/notices");
}

async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: notice_scenarios,
        test_clock: true,
        ..TestOptions::default()
    })
    .await
}

/// Sends `events` at once (16 in flight), each stamped now by the service's
/// clock, and waits until nothing is pending.
async fn all_at_once(app: &TestApp, events: &[Value]) {
    let stamped: Vec<Value> = events.iter().map(|event| app.sent_now(event)).collect();
    assert!(send_all(&stamped, |_| app.address.clone()).await.is_empty());
    app.settled().await;
}

fn tap(user: &str) -> Value {
    postback(user, &answer_data("notices", "rating", "good"))
}

#[tokio::test]
async fn twenty_taps_after_answering_get_one_already_answered_message_per_interval() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&app.sent_now(&text(&user, "notice"))).await;
    app.deliver(&app.sent_now(&tap(&user))).await;
    assert_eq!(app.line.accepted_with_text(ANSWERED), 0, "the first tap answers");

    // 20 duplicate taps in one second, and LINE redelivering some of them.
    let mut taps: Vec<Value> = (0..20).map(|_| tap(&user)).collect();
    taps.extend(taps.clone().iter().take(5).map(redelivered));
    all_at_once(&app, &taps).await;
    assert_eq!(app.line.accepted_with_text(ANSWERED), 1, "one notice for the burst");
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), 1, "nothing was recorded again");
    assert_eq!(app.firestore.count("notices").await, 1);

    // Within the interval (10 minutes by default) nothing more; after it, one more.
    app.advance_clock(Duration::from_secs(9 * 60)).await;
    all_at_once(&app, &[tap(&user), tap(&user)]).await;
    assert_eq!(app.line.accepted_with_text(ANSWERED), 1);
    app.advance_clock(Duration::from_secs(2 * 60)).await;
    all_at_once(&app, &[tap(&user), tap(&user), tap(&user)]).await;
    assert_eq!(
        app.line.accepted_with_text(ANSWERED),
        2,
        "a new interval, one more notice"
    );

    // Every notice went as a free reply, to this user's token.
    let notices: Vec<_> = app
        .line
        .accepted()
        .into_iter()
        .filter(|call| call.texts().iter().any(|text| text == ANSWERED))
        .collect();
    assert!(notices.iter().all(|call| call.reply_token().is_some()), "{notices:?}");
}

#[tokio::test]
async fn text_at_a_date_picker_gets_one_hint_and_a_picker_tapped_again_the_answered_text() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&app.sent_now(&text(&user, "notice"))).await;
    app.deliver(&app.sent_now(&tap(&user))).await;
    assert_eq!(app.line.accepted_of_kind("template"), 1, "the date picker was sent");

    // Five texts at once while the picker waits: one hint (they were dropped before).
    let texts: Vec<Value> = (0..5).map(|i| text(&user, &format!("来週の{i}日かな"))).collect();
    all_at_once(&app, &texts).await;
    assert_eq!(app.line.accepted_with_text(HINT), 1);
    app.advance_clock(Duration::from_secs(6 * 60)).await;
    all_at_once(&app, &[text(&user, "まだ決めてない")]).await;
    assert_eq!(app.line.accepted_with_text(HINT), 2, "hint_text_every = 5m");
    assert_eq!(app.firestore.count("message_texts").await, 0, "no typed text is kept");

    let pick = |day: &str| date_pick(&user, "notices", "visit", json!({ "date": day }));
    app.deliver(&app.sent_now(&pick("2027-03-14"))).await;
    assert_eq!(app.line.accepted_with_text("Thanks!"), 1);
    // The picker tapped again, twice at once: the question is closed and
    // answered, so one answered_text and nothing recorded.
    all_at_once(&app, &[pick("2027-03-15"), pick("2027-03-16")]).await;
    assert_eq!(app.line.accepted_with_text(PICKED), 1);
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), 2, "rating and visit, once each");
    // Text after the question closed is an ordinary text again: no hint.
    all_at_once(&app, &[text(&user, "ありがとう")]).await;
    assert_eq!(app.line.accepted_with_text(HINT), 2);
}

/// A tap on the button LINE shows (its data carries the run) after the
/// question's `expire_after`: the user answered before it expired, so the
/// answer's commit closed it, and the tap is a repeat that gets
/// `answered_text`, not an expired question's silence.
#[tokio::test]
async fn a_tap_after_the_expiry_of_an_answered_question_gets_answered_text() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&app.sent_now(&text(&user, "notice"))).await;
    let data = app
        .line
        .accepted()
        .iter()
        .flat_map(crate::helpers::line_stand_in::Call::messages)
        .find_map(|message| {
            message["quickReply"]["items"][0]["action"]["data"]
                .as_str()
                .map(str::to_owned)
        })
        .expect("the question's first button");
    app.deliver(&app.sent_now(&postback(&user, &data))).await;
    assert_eq!(app.line.accepted_with_text(ANSWERED), 0, "the first tap answers");
    // Past the question's expire_after (5 minutes).
    app.advance_clock(Duration::from_secs(6 * 60)).await;
    app.deliver(&app.sent_now(&postback(&user, &data))).await;
    assert_eq!(app.line.accepted_with_text(ANSWERED), 1);
    assert_eq!(app.firestore.list("survey_responses").await.len(), 1);
}
