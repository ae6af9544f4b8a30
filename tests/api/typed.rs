//! Question kinds beyond buttons: quick replies, typed answers, date pickers,
//! and where a user is (the open question). Scenarios: tests/fixtures/typed.

use crate::helpers::events::{self, date_pick, envelope, postback, text, unsend};
use crate::helpers::firestore_rest::string_field;
use crate::helpers::line_stand_in::Call;
use crate::helpers::storm::post_event;
use crate::helpers::{TestApp, TestOptions, spawn_app_with};
use line_survey::config::Config;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const AGE: &str = "How old are you?";
const ZIP: &str = "Your postal code?";
const INVALID: &str = "Please send a number from 0 to 120.";
const GAVE_UP: &str = "Let's skip that.";
const HI: &str = "Hi there!";
const COMMENT: &str = "Anything else?";
const DEFAULT_INVALID: &str =
    "入力内容を確認して、もう一度送ってください。(Please check your answer and send it again.)";

fn typed_scenarios(config: &mut Config) {
    config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/typed");
}

/// The typed scenarios, on a clock the test can move (answer windows).
async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: typed_scenarios,
        test_clock: true,
        ..TestOptions::default()
    })
    .await
}

/// The user's answers: (node, value as Firestore stores it, valueType).
async fn answers(app: &TestApp, user: &str) -> Vec<(String, Value, String)> {
    let mut found: Vec<(String, Value, String)> = app
        .firestore
        .list("survey_responses")
        .await
        .into_iter()
        .filter(|document| string_field(document, "lineUserId").as_deref() == Some(user))
        .map(|document| {
            (
                string_field(&document, "nodeId").unwrap_or_default(),
                document["fields"]["value"].clone(),
                string_field(&document, "valueType").unwrap_or_default(),
            )
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Everything stored, for "no document holds the text" checks.
async fn stored_anywhere(app: &TestApp, needle: &str) -> bool {
    app.firestore.dump().await.contains(needle)
}

#[tokio::test]
async fn each_question_kind_end_to_end() {
    let app = app().await;
    let user = events::new_user();

    app.deliver(&text(&user, "ＰＲＯＦＩＬＥ")).await;
    assert_eq!(app.line.accepted_with_text(AGE), 1, "NFKC: full-width letters start it");
    assert!(app.firestore.get("open_questions", &user).await.is_some());

    app.deliver(&text(&user, "３５")).await;
    assert_eq!(app.line.accepted_with_text(ZIP), 1);
    app.deliver(&text(&user, "100-0001")).await;
    let picker = app
        .line
        .accepted()
        .into_iter()
        .flat_map(|call| call.messages())
        .find(|message| message["type"] == "template")
        .expect("the date question is sent");
    let action = &picker["template"]["actions"][0];
    assert_eq!(action["type"], "datetimepicker");
    assert_eq!(action["mode"], "date");
    assert_eq!(action["min"], "2026-01-01");

    app.deliver(&date_pick(&user, "profile", "visit", json!({"date": "2027-03-14"})))
        .await;
    assert_eq!(app.line.accepted_with_text("Profile saved."), 1);
    assert_eq!(
        answers(&app, &user).await,
        vec![
            ("age".to_owned(), json!({"integerValue": "35"}), "number".to_owned()),
            (
                "visit".to_owned(),
                json!({"stringValue": "2027-03-14"}),
                "date".to_owned()
            ),
            ("zip".to_owned(), json!({"stringValue": "100-0001"}), "text".to_owned()),
        ],
        "values keep their types"
    );
    let tags = app.user_tags(&user).await;
    assert!(
        tags.contains(&"age_given".to_owned()) && tags.contains(&"answered:profile".to_owned()),
        "{tags:?}"
    );
    assert!(
        app.firestore.get("open_questions", &user).await.is_none(),
        "answering closed it"
    );
    assert_eq!(
        app.firestore.count("message_texts").await,
        0,
        "no text kept once processed"
    );

    // The picker tapped again, now that the question is closed: nothing.
    let sent = app.line.accepted().len();
    app.deliver(&date_pick(&user, "profile", "visit", json!({"date": "2028-01-01"})))
        .await;
    assert_eq!(app.line.accepted().len(), sent);
    assert_eq!(answers(&app, &user).await.len(), 3);
}

#[tokio::test]
async fn invalid_answers_are_retried_then_given_up() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "profile")).await;

    app.deliver(&text(&user, "thirty")).await;
    assert_eq!(app.line.accepted_with_text(INVALID), 1);
    app.deliver(&text(&user, "１２１")).await;
    assert_eq!(
        app.line.accepted_with_text(GAVE_UP),
        1,
        "max_attempts = 2, then on_give_up"
    );
    assert_eq!(app.line.accepted_with_text(INVALID), 1);
    assert!(answers(&app, &user).await.is_empty(), "no invalid answer is recorded");
    assert!(app.firestore.get("open_questions", &user).await.is_none());

    // The question is closed: a valid number now is an ordinary text.
    let sent = app.line.accepted().len();
    app.deliver(&text(&user, "35")).await;
    assert_eq!(app.line.accepted().len(), sent);
    assert!(answers(&app, &user).await.is_empty());
    assert!(!stored_anywhere(&app, "thirty").await, "invalid texts are not kept");
}

#[tokio::test]
async fn a_text_answers_the_open_question_instead_of_firing_a_keyword() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "profile")).await;

    app.deliver(&text(&user, "hello")).await;

    assert_eq!(app.line.accepted_with_text(HI), 0, "the keyword did not fire");
    assert_eq!(app.line.accepted_with_text(INVALID), 1, "it was an (invalid) answer");

    // Without an open question the keyword fires.
    let other = events::new_user();
    app.deliver(&text(&other, "Ｈｅｌｌｏ　")).await;
    assert_eq!(app.line.accepted_with_text(HI), 1);
}

#[tokio::test]
async fn an_open_question_lapses_after_its_answer_window() {
    let app = app().await;
    let user = events::new_user();
    let asked = text(&user, "profile");
    app.deliver(&asked).await;

    // Sent more than the scenario's one-hour window after the question.
    app.advance_clock(Duration::from_secs(61 * 60)).await;
    let late = app.sent_now(&text(&user, "hello"));
    app.deliver(&late).await;

    assert!(answers(&app, &user).await.is_empty());
    assert_eq!(app.line.accepted_with_text(INVALID), 0);
    assert_eq!(
        app.line.accepted_with_text(HI),
        1,
        "a lapsed question lets the keyword fire"
    );
}

#[tokio::test]
async fn events_of_one_user_in_one_request_are_processed_in_order() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "profile")).await;

    // The age, then a keyword, in one request. In LINE's order the first answers
    // the age; the second was sent before the next question was asked, so it is
    // an ordinary text and its keyword fires. The other way round "hello" would
    // have been an invalid age.
    let response = app
        .post_webhook(&envelope(vec![text(&user, "35"), text(&user, "hello")]))
        .await;
    assert_eq!(response.status(), 200);
    app.settled().await;

    assert_eq!(
        answers(&app, &user).await,
        vec![("age".to_owned(), json!({"integerValue": "35"}), "number".to_owned())]
    );
    assert_eq!(app.line.accepted_with_text(INVALID), 0);
    assert_eq!(app.line.accepted_with_text(HI), 1);

    // Two taps of one quick reply question in one request: the first counts.
    let other = events::new_user();
    app.deliver(&text(&other, "feedback")).await;
    let taps = vec![
        postback(&other, &events::answer_data("feedback", "scale", "1")),
        postback(&other, &events::answer_data("feedback", "scale", "5")),
    ];
    assert_eq!(app.post_webhook(&envelope(taps)).await.status(), 200);
    app.settled().await;
    assert_eq!(
        answers(&app, &other).await,
        vec![("scale".to_owned(), json!({"stringValue": "1"}), "choice".to_owned())]
    );
}

#[tokio::test]
async fn a_question_asked_again_after_it_was_answered_closes_on_the_next_text() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "profile")).await;
    app.deliver(&text(&user, "35")).await;
    app.deliver(&text(&user, "100-0001")).await;
    // An operator sends the scenario again: the age is asked, but answered.
    let sent = app
        .admin_send("profile", &[&user], Some("again"), Some(crate::helpers::ADMIN_TOKEN))
        .await;
    assert_eq!(sent.status(), 200);
    app.settled().await;

    app.deliver(&text(&user, "40")).await;
    assert!(app.firestore.get("open_questions", &user).await.is_none(), "closed");
    app.deliver(&text(&user, "hello")).await;

    assert_eq!(app.line.accepted_with_text(HI), 1, "texts are ordinary again");
    let age = answers(&app, &user).await.into_iter().find(|(node, ..)| node == "age");
    assert_eq!(age.map(|(_, value, _)| value), Some(json!({"integerValue": "35"})));
}

#[tokio::test]
async fn quick_replies_carry_their_display_texts() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "feedback")).await;

    let question = app
        .line
        .accepted()
        .into_iter()
        .flat_map(|call| call.messages())
        .find(|message| message["quickReply"].is_object())
        .expect("a quick reply question");
    let items = question["quickReply"]["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 5);
    assert_eq!(items[0]["action"]["displayText"], "Bad");
    assert_eq!(items[1]["action"]["displayText"], "2", "the label by default");

    app.deliver(&postback(&user, &events::answer_data("feedback", "scale", "5")))
        .await;
    assert_eq!(app.line.accepted_with_text(COMMENT), 1);
    assert!(app.user_tags(&user).await.contains(&"fan".to_owned()));
}

#[tokio::test]
async fn fifty_racing_texts_record_one_answer_and_one_follow_up() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "profile")).await;

    // 49 valid ages and one invalid text, all at once, each its own request.
    // (Two invalid ones could both land first: with max_attempts = 2 the
    // question would rightly give up.)
    let texts: Vec<Value> = (0..50)
        .map(|n| match n {
            25 => text(&user, "not a number"),
            _ => text(&user, &format!("{}", 20 + n)),
        })
        .collect();
    let client = reqwest::Client::new();
    let posts = texts.iter().map(|event| post_event(&client, &app.address, event));
    for status in futures::future::join_all(posts).await {
        assert_eq!(status.expect("service reachable"), 200);
    }
    app.settled().await;

    let recorded = answers(&app, &user).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    // The losers were sent before the postal code was asked: none of them is
    // taken as (an invalid) postal code.
    let open = app
        .firestore
        .get("open_questions", &user)
        .await
        .expect("the postal code is open");
    assert_eq!(string_field(&open, "nodeId").as_deref(), Some("zip"));
    assert_eq!(open["fields"]["attempts"], json!({"integerValue": "0"}));
    assert_eq!(app.line.accepted_with_text(DEFAULT_INVALID), 0);
    let value = recorded[0].1["integerValue"].as_str().unwrap_or_default().to_owned();
    assert!(
        value
            .parse::<i64>()
            .is_ok_and(|age| (20..70).contains(&age) && age != 45),
        "a valid answer was recorded: {value}"
    );
    assert_eq!(app.line.accepted_with_text(ZIP), 1, "one follow-up");
    assert_eq!(app.firestore.count("message_texts").await, 0);
}

#[tokio::test]
async fn an_unsent_typed_answer_leaves_no_text_stored() {
    let app = app().await;
    // Before: the unsend arrives first, then its message.
    let before = events::new_user();
    app.deliver(&text(&before, "feedback")).await;
    app.deliver(&postback(&before, &events::answer_data("feedback", "scale", "3")))
        .await;
    let secret = text(&before, "secret before");
    let id = secret["message"]["id"].as_str().unwrap_or_default().to_owned();
    app.deliver(&unsend(&before, &id)).await;
    app.deliver(&secret).await;
    assert_eq!(answers(&app, &before).await.len(), 1, "only the scale");

    // With: message and unsend in one request.
    let with = events::new_user();
    app.deliver(&text(&with, "feedback")).await;
    app.deliver(&postback(&with, &events::answer_data("feedback", "scale", "3")))
        .await;
    let secret = text(&with, "secret with");
    let id = secret["message"]["id"].as_str().unwrap_or_default().to_owned();
    let response = app.post_webhook(&envelope(vec![secret, unsend(&with, &id)])).await;
    assert_eq!(response.status(), 200);
    app.settled().await;

    // After: the answer was recorded; the unsend removes its text.
    let after = events::new_user();
    app.deliver(&text(&after, "feedback")).await;
    app.deliver(&postback(&after, &events::answer_data("feedback", "scale", "3")))
        .await;
    let secret = text(&after, "secret after");
    let id = secret["message"]["id"].as_str().unwrap_or_default().to_owned();
    app.deliver(&secret).await;
    assert_eq!(answers(&app, &after).await.len(), 2);
    app.deliver(&unsend(&after, &id)).await;
    let comment = answers(&app, &after)
        .await
        .into_iter()
        .find(|(node, ..)| node == "comment");
    assert_eq!(
        comment.map(|(_, value, _)| value),
        Some(Value::Null),
        "the answer keeps no text"
    );
    assert!(
        app.firestore
            .list("survey_responses")
            .await
            .iter()
            .any(|answer| answer["fields"]["redacted"] == json!({"booleanValue": true})),
        "and says why"
    );

    for needle in ["secret before", "secret with", "secret after"] {
        assert!(!stored_anywhere(&app, needle).await, "{needle:?} is stored somewhere");
    }
}

#[tokio::test]
async fn long_odd_and_hostile_answers_are_handled_once() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "feedback")).await;
    app.deliver(&postback(&user, &events::answer_data("feedback", "scale", "4")))
        .await;
    let long = format!("{}\u{0}\u{7}👨‍👩‍👧‍👦", "あ".repeat(4990));
    let event = text(&user, &long);

    app.deliver(&event).await;
    app.deliver(&events::redelivered(&event)).await;

    let comment = answers(&app, &user)
        .await
        .into_iter()
        .find(|(node, ..)| node == "comment");
    let stored = comment
        .and_then(|(_, value, _)| value["stringValue"].as_str().map(str::to_owned))
        .unwrap_or_default();
    assert_eq!(stored, format!("{}👨‍👩‍👧‍👦", "あ".repeat(4990)), "control characters removed");
    assert_eq!(app.line.accepted_with_text("Thanks for the comment."), 1);

    // A date outside the question's range, and a date for a question never
    // asked: acknowledged, nothing recorded.
    let other = events::new_user();
    app.deliver(&date_pick(&other, "profile", "visit", json!({"date": "2099-01-01"})))
        .await;
    app.deliver(&date_pick(&other, "profile", "visit", json!({"date": "2027-01-01"})))
        .await;
    assert!(answers(&app, &other).await.is_empty());
    assert!(app.line.accepted().iter().all(|call| call.to() != Some(other.as_str())));
}

#[tokio::test]
async fn content_at_line_limits_is_accepted_by_line() {
    let app = app().await;
    let user = events::new_user();

    app.deliver(&text(&user, "edges")).await;

    let calls = app.line.calls();
    assert!(!calls.is_empty());
    for call in &calls {
        assert!(call.is_accepted(), "LINE refused: {} {}", call.status, call.body);
    }
    assert_eq!(app.line.accepted_of_kind("template"), 1);
    // The edges were really sent: the text is 5,000 UTF-16 units.
    let longest = app
        .line
        .accepted()
        .iter()
        .flat_map(Call::texts)
        .map(|text| text.encode_utf16().count())
        .max();
    assert_eq!(longest, Some(5000));
}

/// The stand-in's limits, which make the test above mean something: content at
/// each limit passes, one more unit is refused.
#[test]
fn the_line_stand_in_refuses_content_over_lines_limits() {
    use crate::helpers::line_limits::problem;
    let text = |text: String| json!([{"type": "text", "text": text}]);
    let buttons = |label: String, text: String| {
        json!([{"type": "template", "altText": "a", "template": {"type": "buttons", "text": text,
            "actions": [{"type": "postback", "label": label, "data": "d"}]}}])
    };
    let picker = |min: &str, max: &str| {
        json!([{"type": "template", "altText": "a", "template": {"type": "buttons", "text": "t",
            "actions": [{"type": "datetimepicker", "label": "l", "data": "d", "mode": "date", "min": min, "max": max}]}}])
    };
    let cases = [
        (text("🍎".repeat(2500)), true),
        (text(format!("{}a", "🍎".repeat(2500))), false),
        (buttons("👨‍👩‍👧‍👦".repeat(20), "𠮷".repeat(160)), true),
        (buttons("👍".repeat(21), "t".into()), false),
        (buttons("l".into(), "𠮷".repeat(161)), false),
        (picker("2026-01-01", "2026-01-02"), true),
        (picker("2026-01-02", "2026-01-02"), false),
        (picker("1899-12-31", "2026-01-02"), false),
    ];
    for (messages, accepted) in cases {
        assert_eq!(problem(&messages).is_none(), accepted, "{messages}");
    }
}

/// Which user each accepted call reached: pushes name them, replies through
/// the reply tokens of `events`.
fn texts_received(app: &TestApp, events: &[Value]) -> std::collections::HashMap<String, Vec<String>> {
    let mut received: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    for (user, call) in app.line.accepted_by_user(events) {
        received.entry(user).or_default().extend(call.texts());
    }
    received
}

#[tokio::test]
async fn typed_answers_stay_exactly_once_while_firestore_answers_stall() {
    use crate::helpers::storm::deliver_like_line;
    use crate::helpers::tcp_proxy::TcpProxy;
    const LIMIT: Duration = Duration::from_secs(180);

    let proxy = TcpProxy::start(crate::helpers::emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        firestore_host: Some(proxy.address.clone()),
        adjust: typed_scenarios,
        ..TestOptions::default()
    })
    .await;
    let users: Vec<String> = (0..100).map(|_| events::new_user()).collect();
    let address = app.address.clone();
    let starts: Vec<Value> = users.iter().map(|user| text(user, "profile")).collect();
    deliver_like_line(&starts, |_| address.clone(), LIMIT).await;
    app.firestore.settled(LIMIT).await;

    // Each user sends two ages (a double send), and LINE redelivers one.
    let mut answers_sent = Vec::new();
    for user in &users {
        let first = text(user, "35");
        answers_sent.push(events::redelivered(&first));
        answers_sent.push(first);
        answers_sent.push(text(user, "36"));
    }
    // Twice, Firestore's answers are held past FIRESTORE_TIMEOUT_MS while the
    // requests pass and the writes land: commits time out although they landed.
    let stalls = async {
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            proxy.stall_answers(Duration::from_secs(3));
            tokio::time::sleep(Duration::from_secs(2)).await;
            proxy.stop_stalling();
        }
    };
    let sending = deliver_like_line(&answers_sent, |_| address.clone(), LIMIT);
    let (redeliveries, ()) = tokio::join!(sending, stalls);
    app.firestore.settled(LIMIT).await;
    println!("{redeliveries} redeliveries");

    let all_events: Vec<Value> = starts.iter().chain(&answers_sent).cloned().collect();
    let received = texts_received(&app, &all_events);
    let recorded = app.firestore.list("survey_responses").await;
    for user in &users {
        let ages: Vec<&Value> = recorded
            .iter()
            .filter(|answer| string_field(answer, "lineUserId").as_deref() == Some(user.as_str()))
            .collect();
        assert_eq!(ages.len(), 1, "{user}: one answer");
        let texts = received.get(user).cloned().unwrap_or_default();
        assert_eq!(texts.iter().filter(|text| *text == ZIP).count(), 1, "{user}: {texts:?}");
        assert!(
            !texts.iter().any(|text| text == INVALID || text == DEFAULT_INVALID),
            "{user}: {texts:?}"
        );
    }
    assert!(app.firestore.list("dead_letters").await.is_empty(), "nothing is parked");
    assert_eq!(app.firestore.count("message_texts").await, 0, "no text kept");
}

#[tokio::test]
async fn an_event_waits_for_the_users_previous_event_of_its_request_across_retries() {
    let app = app().await;
    let user = events::new_user();
    let first = text(&user, "hello");
    let second = text(&user, "feedback");
    // The first event is stored already (a redelivery will find it), pending and
    // held by another instance whose lease has long to run: as if its attempt
    // failed there and waits for a retry.
    let first_id = line_survey::ids::deterministic_id(&[
        events::DESTINATION,
        first["webhookEventId"].as_str().unwrap_or_default(),
    ]);
    app.firestore
        .patch(
            "webhook_inbox",
            &first_id,
            &[
                ("destination", json!({"stringValue": events::DESTINATION})),
                ("webhookEventId", json!({"stringValue": first["webhookEventId"]})),
                ("eventType", json!({"stringValue": "message"})),
                ("state", json!({"stringValue": "pending"})),
                ("leaseOwner", json!({"stringValue": "another-instance"})),
                ("leaseUntil", json!({"timestampValue": "2099-01-01T00:00:00Z"})),
                ("attempts", json!({"integerValue": "1"})),
                ("receivedAt", json!({"timestampValue": "2026-01-01T00:00:00Z"})),
                ("expireAt", json!({"timestampValue": "2099-01-01T00:00:00Z"})),
            ],
        )
        .await;

    let response = app.post_webhook(&envelope(vec![first, second.clone()])).await;
    assert_eq!(response.status(), 200);
    let second_id = line_survey::ids::deterministic_id(&[
        events::DESTINATION,
        second["webhookEventId"].as_str().unwrap_or_default(),
    ]);
    // More turns than MAX_EVENT_ATTEMPTS (5) would allow if waiting counted:
    // each turn takes the second up and puts it back (a new version of its
    // record each time), and it still waits, not parked.
    const TURNS_SEEN: usize = 2 * 5 + 2;
    let mut versions = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let waiting = loop {
        let waiting = app.firestore.get("webhook_inbox", &second_id).await.expect("stored");
        versions.insert(waiting["updateTime"].as_str().unwrap_or_default().to_owned());
        if versions.len() >= TURNS_SEEN {
            break waiting;
        }
        assert!(
            Instant::now() < deadline,
            "the waiting event was taken up only {} times: {waiting}",
            versions.len()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(string_field(&waiting, "state").as_deref(), Some("pending"));
    let attempts = waiting["fields"]["attempts"]["integerValue"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        ["0", "1"].contains(&attempts.as_str()),
        "waiting is no attempt: {attempts}"
    );
    assert!(
        app.line.accepted().is_empty(),
        "nothing was sent before the first was done"
    );

    app.firestore
        .patch("webhook_inbox", &first_id, &[("state", json!({"stringValue": "done"}))])
        .await;
    crate::helpers::wait_until(std::time::Duration::from_secs(20), || {
        app.line.accepted_with_text("How was it, from 1 to 5?") == 1
    })
    .await;
    app.settled().await;
    assert!(app.firestore.list("dead_letters").await.is_empty());
}

/// `scripts/send-event.py postback DATA date=...` sends a date picker's
/// answer as LINE does (the picked value in `postback.params`), signed with
/// the channel secret: the service records it.
#[tokio::test]
async fn send_event_py_sends_a_date_pickers_answer() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "profile")).await;
    app.deliver(&text(&user, "35")).await;
    app.deliver(&text(&user, "100-0001")).await;
    let data = date_pick(&user, "profile", "visit", json!({}))["postback"]["data"]
        .as_str()
        .expect("postback data")
        .to_owned();
    let script = crate::helpers::repo_path("scripts/send-event.py");
    let (address, who) = (app.address.clone(), user.clone());
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .args(["postback", &data, "date=2027-03-14"])
            .env("SERVICE_URL", address)
            .env("LINE_CHANNEL_SECRET", crate::helpers::CHANNEL_SECRET)
            .env("LINE_USER_ID", who)
            .output()
            .expect("python3 runs")
    })
    .await
    .expect("the script ran");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "200", "{output:?}");
    app.settled().await;
    let visit = answers(&app, &user)
        .await
        .into_iter()
        .find(|(node, _, _)| node == "visit")
        .expect("the picked date is recorded");
    assert_eq!(visit.1, json!({"stringValue": "2027-03-14"}));
    assert_eq!(app.line.accepted_with_text("Profile saved."), 1);
}
