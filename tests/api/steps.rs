//! Step delivery: waits, reminders and expiry as Firestore timers that fire
//! once, follow and unfollow, the operators' view of a user's timers, and
//! timers shared by several instances. Scenarios: tests/fixtures/steps.

use crate::helpers::events::{self, envelope, follow, postback, text};
use crate::helpers::firestore_rest::{FirestoreRest, document_id, string_field};
use crate::helpers::line_stand_in::{Call, LineStandIn};
use crate::helpers::process::ServiceProcess;
use crate::helpers::{
    TestApp, TestOptions, advance_clock_at, emulator_host, new_project_id, spawn_app_with, wait_until,
};
use futures::StreamExt;
use line_survey::config::Config;
use line_survey::ids::{LineUserId, NodeId, RunId, ScenarioId, TimerKind, scenario_marker_id, timer_id};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn steps_dir() -> PathBuf {
    crate::helpers::repo_path("tests/fixtures/steps")
}

fn step_scenarios(config: &mut Config) {
    config.scenarios_dir = steps_dir();
}

/// The step scenarios, on a clock the test moves: their waits, reminders and
/// expiries are hours long.
async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: step_scenarios,
        test_clock: true,
        ..TestOptions::default()
    })
    .await
}

const HOUR: Duration = Duration::from_secs(3600);

/// Just past a due time: a step found later than `max_lateness` (6 h) would be
/// skipped, so moves go a little past what they wait for, never far.
const A_LITTLE: Duration = Duration::from_secs(1);

/// How long after it was scheduled the timer of `user` at `node` is due, as stored.
async fn scheduled_delay(firestore: &FirestoreRest, user: &str, node: &str) -> chrono::TimeDelta {
    let timer = firestore
        .list("timers")
        .await
        .into_iter()
        .find(|timer| {
            string_field(timer, "lineUserId").as_deref() == Some(user)
                && string_field(timer, "nodeId").as_deref() == Some(node)
        })
        .unwrap_or_else(|| panic!("no timer of {user} at {node}"));
    let at = |field: &str| {
        let value = timer["fields"][field]["timestampValue"]
            .as_str()
            .unwrap_or_else(|| panic!("{field} of {timer}"));
        chrono::DateTime::parse_from_rfc3339(value).expect("RFC 3339")
    };
    at("dueAt") - at("scheduledAt")
}

/// Whether `delay` is `expected`, give or take the moment between the two reads
/// of the clock that stamp a timer.
fn is_about(delay: chrono::TimeDelta, expected: Duration) -> bool {
    let expected = chrono::TimeDelta::from_std(expected).expect("in range");
    (delay - expected).abs() < chrono::TimeDelta::seconds(1)
}

/// Accepted pushes to `user` carrying `text`.
fn pushes_with(line: &LineStandIn, user: &str, text: &str) -> Vec<Call> {
    line.accepted()
        .into_iter()
        .filter(|call| call.to() == Some(user) && call.texts().iter().any(|t| t == text))
        .collect()
}

/// Everything accepted for `user` (replies are matched by their texts' order
/// only, so this is pushes), as texts in order.
fn pushed_texts(line: &LineStandIn, user: &str) -> Vec<String> {
    line.accepted()
        .into_iter()
        .filter(|call| call.to() == Some(user))
        .flat_map(|call| call.texts())
        .collect()
}

/// The user's timers as stored: (kind, node, state, outcome).
async fn timers_of(firestore: &FirestoreRest, user: &str) -> Vec<(String, String, String, String)> {
    let mut found: Vec<_> = firestore
        .list("timers")
        .await
        .into_iter()
        .filter(|timer| string_field(timer, "lineUserId").as_deref() == Some(user))
        .map(|timer| {
            (
                string_field(&timer, "kind").unwrap_or_default(),
                string_field(&timer, "nodeId").unwrap_or_default(),
                string_field(&timer, "state").unwrap_or_default(),
                string_field(&timer, "outcome").unwrap_or_default(),
            )
        })
        .collect();
    found.sort();
    found
}

async fn wait_for_timers(
    firestore: &FirestoreRest,
    user: &str,
    limit: Duration,
    done: impl Fn(&[(String, String, String, String)]) -> bool,
) -> Vec<(String, String, String, String)> {
    let deadline = Instant::now() + limit;
    loop {
        let timers = timers_of(firestore, user).await;
        if done(&timers) {
            return timers;
        }
        assert!(
            Instant::now() < deadline,
            "timers of {user} after {limit:?}: {timers:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn timer(kind: &str, node: &str, state: &str, outcome: &str) -> (String, String, String, String) {
    (kind.to_owned(), node.to_owned(), state.to_owned(), outcome.to_owned())
}

#[tokio::test]
async fn a_three_step_sequence_arrives_in_order_at_its_times() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "steps")).await;
    assert_eq!(app.line.accepted_with_text("Step 1"), 1, "the first step is the reply");

    // Each wait is an hour from the commit that scheduled it, which comes
    // before its own message is sent: never early.
    assert!(is_about(scheduled_delay(&app.firestore, &user, "wait1").await, HOUR));
    assert!(pushed_texts(&app.line, &user).is_empty(), "nothing before the hour");
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(30), || {
        pushes_with(&app.line, &user, "Step 2").len() == 1
    })
    .await;
    assert!(is_about(scheduled_delay(&app.firestore, &user, "wait2").await, HOUR));
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(30), || {
        pushes_with(&app.line, &user, "Step 3").len() == 1
    })
    .await;
    assert_eq!(
        pushed_texts(&app.line, &user),
        ["Step 2", "Step 3"],
        "in order, once each"
    );
    let timers = wait_for_timers(&app.firestore, &user, Duration::from_secs(10), |timers| {
        timers.iter().all(|t| t.2 == "done")
    })
    .await;
    assert_eq!(
        timers,
        [
            timer("step", "wait1", "done", "sent"),
            timer("step", "wait2", "done", "sent")
        ]
    );
    // The pushes carry retry keys; nothing was sent twice.
    assert!(app.line.calls().iter().all(Call::is_accepted));
}

#[tokio::test]
async fn a_reminder_reaches_who_did_not_answer_and_expiry_closes_the_question() {
    let app = app().await;
    let (answering, silent) = (events::new_user(), events::new_user());
    app.post_webhook(&envelope(vec![text(&answering, "remind"), text(&silent, "remind")]))
        .await;
    app.settled().await;
    // Tapped from the button as sent, so the answer names the run it was asked in.
    let answer = button_data(&app, &answering).await;
    app.deliver(&postback(&answering, &answer)).await;
    assert_eq!(app.line.accepted_with_text("Thanks!"), 1);

    // The silent user gets the reminder after an hour, the question again,
    // then the expiry at three hours.
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(30), || {
        pushes_with(&app.line, &silent, "Reminder: one tap answers it.").len() == 1
    })
    .await;
    assert!(pushes_with(&app.line, &silent, "This question is closed.").is_empty());
    app.advance_clock(2 * HOUR).await;
    wait_until(Duration::from_secs(30), || {
        pushes_with(&app.line, &silent, "This question is closed.").len() == 1
    })
    .await;
    assert_eq!(
        pushed_texts(&app.line, &silent),
        ["Reminder: one tap answers it.", "This question is closed."],
        "one reminder (with the buttons again), then the expiry message"
    );
    assert!(
        pushed_texts(&app.line, &answering).is_empty(),
        "no reminder, no expiry for who answered"
    );

    let answered = wait_for_timers(&app.firestore, &answering, Duration::from_secs(5), |timers| {
        timers.iter().all(|t| t.2 != "pending")
    })
    .await;
    assert_eq!(
        answered,
        [
            timer("expire", "ask", "cancelled", "answered"),
            timer("remind", "ask", "cancelled", "answered")
        ]
    );
    let silent_timers = wait_for_timers(&app.firestore, &silent, Duration::from_secs(5), |timers| {
        timers.iter().all(|t| t.2 != "pending")
    })
    .await;
    assert_eq!(
        silent_timers,
        [
            timer("expire", "ask", "done", "expired"),
            timer("remind", "ask", "done", "reminded")
        ]
    );

    // A tap on the expired question's button records nothing and sends nothing.
    let late = button_data(&app, &silent).await;
    app.deliver(&app.sent_now(&postback(&silent, &late))).await;
    let answers: Vec<Value> = app.firestore.list("survey_responses").await;
    let users: Vec<String> = answers
        .iter()
        .filter_map(|answer| string_field(answer, "lineUserId"))
        .collect();
    assert_eq!(users, std::slice::from_ref(&answering), "only the answer given in time");
    assert_eq!(app.line.accepted_with_text("Thanks!"), 1);
}

/// The data of the first button of the "Coming back?" question sent to `user`
/// (as a reply: matched by the reply token LINE gave the user's event).
async fn button_data(app: &TestApp, user: &str) -> String {
    let markers = app.firestore.list("scenario_answers").await;
    let run = markers
        .iter()
        .find(|marker| string_field(marker, "lineUserId").as_deref() == Some(user))
        .and_then(|marker| string_field(marker, "run"))
        .expect("the start recorded its run");
    app.line
        .accepted()
        .into_iter()
        .flat_map(|call| call.messages())
        .filter_map(|message| message["template"]["actions"][0]["data"].as_str().map(str::to_owned))
        .find(|data| data.contains(&format!("r={run}")))
        .expect("the question's button names the run")
}

#[tokio::test]
async fn a_typed_question_expires_and_a_late_text_is_not_its_answer() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "nickname")).await;
    assert!(is_about(scheduled_delay(&app.firestore, &user, "ask").await, HOUR));
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(20), || {
        pushes_with(&app.line, &user, "Too late for a nickname.").len() == 1
    })
    .await;
    assert!(
        app.firestore.get("open_questions", &user).await.is_none(),
        "expiry closed it"
    );
    app.deliver(&app.sent_now(&text(&user, "Taro"))).await;
    assert_eq!(app.firestore.count("survey_responses").await, 0);
    assert_eq!(app.line.accepted_with_text("Nice name!"), 0);
}

#[tokio::test]
async fn a_text_sent_after_the_expiry_is_due_records_nothing_even_before_the_expiry_fires() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "nickname")).await;
    assert!(is_about(scheduled_delay(&app.firestore, &user, "ask").await, HOUR));
    // LINE's timestamp says the text came after the expiry was due; the service's
    // clock has not reached it, so the expiry has not fired yet.
    let late = i64::try_from((HOUR + A_LITTLE).as_millis()).unwrap();
    app.deliver(&events::with_timestamp(&text(&user, "Taro"), app.now_ms() + late))
        .await;
    app.firestore.settled(Duration::from_secs(20)).await;
    assert_eq!(
        app.firestore.count("survey_responses").await,
        0,
        "no answer after expiry"
    );
    assert_eq!(app.line.accepted_with_text("Nice name!"), 0);
    // The expiry still fires once, with its own message.
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(20), || {
        pushes_with(&app.line, &user, "Too late for a nickname.").len() == 1
    })
    .await;
    assert_eq!(app.firestore.count("survey_responses").await, 0);
}

/// LINE's clock is 20 s apart from the service's: `ahead_ms` is how far LINE's
/// timestamps run ahead of the service's clock (negative: the service's clock is
/// ahead). The stand-in's reply tokens live by LINE's clock.
const SKEW_MS: i64 = 20_000;

/// A text from `user` as LINE stamps it, `ahead_ms` ahead of the service's clock.
fn text_at(app: &TestApp, user: &str, words: &str, ahead_ms: i64) -> Value {
    events::with_timestamp(&text(user, words), app.now_ms() + ahead_ms)
}

/// The reply calls LINE accepted that used `event`'s token.
fn replies_to(app: &TestApp, event: &Value) -> usize {
    let token = event["replyToken"].as_str().unwrap_or_default();
    app.line
        .accepted()
        .into_iter()
        .filter(|call| call.reply_token() == Some(token))
        .count()
}

#[tokio::test]
async fn a_service_clock_20_s_ahead_of_line_still_takes_a_prompt_typed_answer_and_replies() {
    let app = app().await;
    // The service's clock runs 20 s ahead of LINE's (the test's real clock).
    app.advance_clock(Duration::from_millis(SKEW_MS as u64)).await;
    let user = events::new_user();
    let ask = text_at(&app, &user, "nickname", -SKEW_MS);
    app.deliver(&ask).await;
    assert_eq!(replies_to(&app, &ask), 1, "the question is a reply");
    // Typed a moment after the question arrived, by LINE's clock: 20 s before
    // the service's clock says the question was asked.
    let answer = text_at(&app, &user, "Taro", -SKEW_MS);
    app.deliver(&answer).await;
    assert_eq!(app.firestore.count("survey_responses").await, 1, "the answer counts");
    assert_eq!(replies_to(&app, &answer), 1, "its follow-up is a reply, not a push");
    assert_eq!(app.line.accepted_with_text("Nice name!"), 1);
}

#[tokio::test]
async fn a_service_clock_20_s_behind_line_still_refuses_a_text_sent_before_the_question() {
    let app = app().await;
    let user = events::new_user();
    // LINE's timestamps run 20 s ahead of the service's clock.
    let ask = text_at(&app, &user, "nickname", SKEW_MS);
    app.deliver(&ask).await;
    assert_eq!(replies_to(&app, &ask), 1, "the question is a reply");
    // Sent together with the keyword (the same LINE time), before the question
    // was asked: not its answer, though it is 20 s after the service's clock
    // stamped the question.
    let early = events::with_timestamp(&text(&user, "Too early"), ask["timestamp"].as_i64().unwrap());
    app.deliver(&early).await;
    assert_eq!(
        app.firestore.count("survey_responses").await,
        0,
        "sent before the question: no answer"
    );
    // A prompt answer counts, and its follow-up is a reply.
    let answer = text_at(&app, &user, "Taro", SKEW_MS);
    app.deliver(&answer).await;
    assert_eq!(app.firestore.count("survey_responses").await, 1);
    assert_eq!(replies_to(&app, &answer), 1, "its follow-up is a reply, not a push");
}

#[tokio::test]
async fn a_keyword_sent_after_the_expiry_is_due_still_fires() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "nickname")).await;
    // Sent when the question had expired by LINE's clock; the expiry has not
    // fired yet: the text is an ordinary one, and its keyword starts again.
    let late = i64::try_from((HOUR + A_LITTLE).as_millis()).unwrap();
    app.deliver(&events::with_timestamp(&text(&user, "nickname"), app.now_ms() + late))
        .await;
    assert_eq!(app.firestore.count("survey_responses").await, 0, "not an answer");
    assert_eq!(app.line.accepted_with_text("Your nickname?"), 2, "asked again");
}

#[tokio::test]
async fn unfollow_cancels_the_users_steps_and_follow_is_tracked() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&follow(&user)).await;
    let followed = app.firestore.get("users", &user).await.expect("the follow is recorded");
    assert_eq!(followed["fields"]["following"]["booleanValue"], json!(true));
    assert!(followed["fields"]["followedAt"]["timestampValue"].is_string());

    app.deliver(&text(&user, "steps")).await;
    // Another user's step, due at the same time: once it arrives, the sweep
    // that would have fired the cancelled step has run.
    let still_following = events::new_user();
    app.deliver(&text(&still_following, "steps")).await;
    let unfollow = events::unfollow(&user);
    app.deliver(&unfollow).await;
    let user_doc = app.firestore.get("users", &user).await.unwrap();
    assert_eq!(user_doc["fields"]["following"]["booleanValue"], json!(false));
    assert!(user_doc["fields"]["unfollowedAt"]["timestampValue"].is_string());
    let timers = timers_of(&app.firestore, &user).await;
    assert_eq!(timers, [timer("step", "wait1", "cancelled", "unfollowed")]);

    // Past the time the step was due: nothing was pushed.
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(30), || {
        pushes_with(&app.line, &still_following, "Step 2").len() == 1
    })
    .await;
    assert!(pushed_texts(&app.line, &user).is_empty());

    // An older follow delivered late does not undo the unfollow.
    let stale = events::with_timestamp(&follow(&user), events::now_ms() - 60_000);
    app.deliver(&stale).await;
    let user_doc = app.firestore.get("users", &user).await.unwrap();
    assert_eq!(user_doc["fields"]["following"]["booleanValue"], json!(false));
    // A newer one does.
    app.deliver(&follow(&user)).await;
    let user_doc = app.firestore.get("users", &user).await.unwrap();
    assert_eq!(user_doc["fields"]["following"]["booleanValue"], json!(true));
}

#[tokio::test]
async fn a_step_found_seven_hours_late_is_skipped_and_recorded() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "slow")).await;
    let timers = app.firestore.list("timers").await;
    let id = timers.iter().map(document_id).next().expect("the step is scheduled");
    let now = events::now_ms();
    let seven_hours_ago = chrono::DateTime::from_timestamp_millis(now - 7 * 3600 * 1000)
        .unwrap()
        .to_rfc3339();
    app.firestore
        .patch(
            "timers",
            &id,
            &[
                ("dueAt", json!({ "timestampValue": seven_hours_ago })),
                ("wakeAtMs", json!({ "integerValue": now.to_string() })),
            ],
        )
        .await;
    let timers = wait_for_timers(&app.firestore, &user, Duration::from_secs(10), |timers| {
        timers.iter().all(|t| t.2 != "pending")
    })
    .await;
    assert_eq!(timers, [timer("step", "hour", "skipped", "late")]);
    assert!(pushed_texts(&app.line, &user).is_empty(), "not sent late");
}

#[tokio::test]
async fn operators_list_and_cancel_a_users_timers() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "slow")).await;
    let listed: Value = app
        .get_admin(&format!("/admin/users/{user}/timers"))
        .await
        .json()
        .await
        .unwrap();
    let timers = listed["timers"].as_array().unwrap();
    assert_eq!(timers.len(), 1, "{listed}");
    assert_eq!(timers[0]["kind"], "step");
    assert_eq!(timers[0]["nodeId"], "hour");
    assert_eq!(timers[0]["state"], "pending");
    let id = timers[0]["timerId"].as_str().unwrap().to_owned();
    // The user's timeline shows the same timer, due in the future: first.
    let story: Value = app
        .get_admin(&format!("/admin/users/{user}/timeline"))
        .await
        .json()
        .await
        .unwrap();
    let first = &story["entries"][0];
    assert_eq!(first["type"], "timer", "{story}");
    assert_eq!(first["id"], timers[0]["timerId"]);
    assert_eq!(
        (&first["kind"], &first["nodeId"], &first["state"]),
        (&json!("step"), &json!("hour"), &json!("pending"))
    );

    let cancel = |path: String| {
        let app = &app;
        async move {
            app.http
                .delete(format!("{}{path}", app.address))
                .bearer_auth(crate::helpers::ADMIN_TOKEN)
                .send()
                .await
                .unwrap()
        }
    };
    let response = cancel(format!("/admin/users/{user}/timers/{id}")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap()["state"], "cancelled");
    let listed: Value = app
        .get_admin(&format!("/admin/users/{user}/timers"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["timers"], json!([]));
    let all: Value = app
        .get_admin(&format!("/admin/users/{user}/timers?all=true"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(all["timers"][0]["state"], "cancelled");

    let again = cancel(format!("/admin/users/{user}/timers/{id}")).await;
    assert_eq!(again.status(), 409);
    assert_eq!(again.json::<Value>().await.unwrap()["state"], "cancelled");
    let other_user = events::new_user();
    assert_eq!(
        cancel(format!("/admin/users/{other_user}/timers/{id}")).await.status(),
        404
    );
    assert_eq!(cancel(format!("/admin/users/{user}/timers/nope")).await.status(), 404);
    let too_long = "U".repeat(101);
    assert_eq!(
        app.get_admin(&format!("/admin/users/{too_long}/timers")).await.status(),
        400
    );
    let unauthorized = app
        .http
        .get(format!("{}/admin/users/{user}/timers", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
}

/// A due "slow" step for each of `users`, as the start would have scheduled it,
/// with the marker naming its run.
async fn seed_due_steps(firestore: &FirestoreRest, users: &[String]) {
    let now = events::now_ms();
    seed_steps_due_at(firestore, users, now, now).await;
}

/// One `slow`/`hour` step timer per user (and the marker of its run), due at
/// `due_ms` and free to claim from `wake_ms` (milliseconds since the epoch; a
/// timer given back after a claim has a wake time later than its due time).
async fn seed_steps_due_at(firestore: &FirestoreRest, users: &[String], due_ms: i64, wake_ms: i64) {
    let scenario = ScenarioId::parse("slow").unwrap();
    let node = NodeId::parse("hour").unwrap();
    let due = chrono::DateTime::from_timestamp_millis(due_ms).unwrap().to_rfc3339();
    let mut documents = Vec::new();
    for user in users {
        let line_user = LineUserId::parse(user.clone()).unwrap();
        let run = RunId::begun_by(&format!("seed-{user}"));
        let id = timer_id(&scenario, &node, &line_user, &run, TimerKind::Step);
        let string = |value: &str| json!({ "stringValue": value });
        documents.push((
            "timers".to_owned(),
            id,
            json!({
                "lineUserId": string(user),
                "scenarioId": string("slow"),
                "scenarioVersion": { "integerValue": "1" },
                "run": string(run.as_str()),
                "nodeId": string("hour"),
                "kind": string("step"),
                "dueAt": { "timestampValue": due },
                "wakeAtMs": { "integerValue": wake_ms.to_string() },
                "state": string("pending"),
                "reminders": { "integerValue": "0" },
                "attempts": { "integerValue": "0" },
                "scheduledAt": { "timestampValue": due },
            }),
        ));
        documents.push((
            "scenario_answers".to_owned(),
            scenario_marker_id(&scenario, &line_user),
            json!({
                "scenarioId": string("slow"),
                "lineUserId": string(user),
                "run": string(run.as_str()),
            }),
        ));
    }
    firestore.write_all(&documents).await;
}

/// Accepted "An hour later" pushes per user.
fn hour_later_per_user(line: &LineStandIn) -> HashMap<String, usize> {
    let mut per_user = HashMap::new();
    for call in line.accepted() {
        if call.texts().iter().any(|text| text == "An hour later")
            && let Some(to) = call.to()
        {
            *per_user.entry(to.to_owned()).or_default() += 1;
        }
    }
    per_user
}

#[tokio::test]
async fn three_instances_sharing_5000_due_timers_fire_each_once() {
    const USERS: usize = 5000;
    let first = app().await;
    let beside = || TestOptions {
        adjust: step_scenarios,
        ..first.beside()
    };
    let _second = spawn_app_with(beside()).await;
    let _third = spawn_app_with(beside()).await;
    let users: Vec<String> = (0..USERS).map(|_| events::new_user()).collect();
    seed_due_steps(&first.firestore, &users).await;

    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let sent: usize = hour_later_per_user(&first.line).values().sum();
        if sent >= USERS {
            break;
        }
        assert!(Instant::now() < deadline, "{sent} of {USERS} sent");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    first.settled().await;
    let per_user = hour_later_per_user(&first.line);
    assert_eq!(per_user.len(), USERS);
    assert!(per_user.values().all(|&count| count == 1), "someone got it twice");
    let timers = first.firestore.list("timers").await;
    let done = timers
        .iter()
        .filter(|timer| string_field(timer, "state").as_deref() == Some("done"))
        .count();
    assert_eq!(done, USERS, "every timer ended as fired");
    // No push was even attempted twice (a retry key repeated would show as 409).
    assert_eq!(first.line.calls().len(), USERS);
}

/// Due timers wait in a queue of their own: texts sent while 500 timers fire
/// find room in the events' queue (16 here) and are worked at once, none stored
/// for a later sweep as an event that found the queue full would be.
#[tokio::test]
async fn texts_during_a_storm_of_due_timers_are_queued_not_left_for_a_sweep() {
    const DUE: usize = 500;
    const SENDERS: usize = 20;
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            step_scenarios(config);
            config.queue_capacity = 16;
        },
        ..TestOptions::default()
    })
    .await;
    // Each push takes 20 ms: the storm lasts well beyond the texts, however
    // fast the machine.
    app.line.set_latency(Duration::from_millis(20));
    let users: Vec<String> = (0..DUE).map(|_| events::new_user()).collect();
    seed_due_steps(&app.firestore, &users).await;
    wait_until(Duration::from_secs(60), || !hour_later_per_user(&app.line).is_empty()).await;

    // The storm has begun: new users start the step scenario, two at a time.
    let senders: Vec<String> = (0..SENDERS).map(|_| events::new_user()).collect();
    futures::stream::iter(&senders)
        .for_each_concurrent(2, |user| {
            let app = &app;
            async move {
                let response = app.post_webhook(&envelope(vec![text(user, "steps")])).await;
                assert_eq!(response.status(), 200, "a text during the storm was not acknowledged");
            }
        })
        .await;
    let fired_meanwhile: usize = hour_later_per_user(&app.line).values().sum();
    assert!(
        fired_meanwhile < DUE,
        "the storm was over before the texts were acknowledged: this run shows nothing"
    );
    let metrics = app.get_admin("/metrics").await.text().await.unwrap();
    let unqueued = crate::metrics::sample(&metrics, "line_survey_events_unqueued_total", &[("kind", "message")]);
    if crate::metrics::own_process() {
        assert_eq!(
            unqueued, None,
            "texts found the events' queue full of timers:\n{metrics}"
        );
    }
    wait_until(Duration::from_secs(30), || {
        app.line.accepted_with_text("Step 1") == SENDERS
    })
    .await;
    wait_until(Duration::from_secs(120), || {
        hour_later_per_user(&app.line).values().sum::<usize>() >= DUE
    })
    .await;
    app.settled().await;
    let per_user = hour_later_per_user(&app.line);
    assert_eq!(per_user.len(), DUE);
    assert!(per_user.values().all(|&count| count == 1), "a timer fired twice");
    assert_eq!(app.line.accepted_with_text("Step 1"), SENDERS, "a start answered twice");
}

/// While users talk to the bot, due timers keep to their floor: 2 of the 16
/// workers, so 2 pushes at a time. Timers due a minute ago or more get their
/// whole share back, traffic or not, so steady traffic cannot keep a backlog
/// of reminders crawling: counted by their due time, not by when they were
/// last free to claim (here just now, as for timers given back after a claim).
#[tokio::test]
async fn live_traffic_holds_timers_to_their_floor_unless_they_waited_a_minute() {
    let just_due = pushes_at_once_during_traffic(0).await;
    assert!(
        (1..=2).contains(&just_due),
        "{just_due} pushes at once while users talked to the bot (the floor is 2)"
    );
    let overdue = pushes_at_once_during_traffic(5 * 60 * 1000).await;
    println!("LINE pushes at once: {just_due} for timers just due, {overdue} for timers due 5 minutes ago");
    assert!(
        overdue > 2,
        "timers due 5 minutes ago still kept to their floor: {overdue} pushes at once"
    );
}

/// Unfollow events (stored, no LINE call) every 100 ms, each sent without
/// waiting for the one before, from before 40 step timers fall due (`waited_ms`
/// before they were seeded, free to claim at once) until each was pushed once
/// (LINE answering in 200 ms): the most pushes LINE had at once.
async fn pushes_at_once_during_traffic(waited_ms: i64) -> usize {
    const DUE: usize = 40;
    let app = spawn_app_with(TestOptions {
        adjust: step_scenarios,
        ..TestOptions::default()
    })
    .await;
    app.line.set_latency(Duration::from_millis(200));
    let pushed = std::sync::atomic::AtomicBool::new(false);
    let app = &app;
    let traffic = async {
        let mut ticks = tokio::time::interval(Duration::from_millis(100));
        let mut posts = futures::stream::FuturesUnordered::new();
        while !pushed.load(std::sync::atomic::Ordering::Relaxed) {
            tokio::select! {
                _ = ticks.tick() => {
                    let unfollow = envelope(vec![events::unfollow(&events::new_user())]);
                    posts.push(async move { app.post_webhook(&unfollow).await.status() });
                }
                Some(status) = posts.next(), if !posts.is_empty() => assert_eq!(status, 200),
            }
        }
        while let Some(status) = posts.next().await {
            assert_eq!(status, 200);
        }
    };
    let storm = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let users: Vec<String> = (0..DUE).map(|_| events::new_user()).collect();
        let now = events::now_ms();
        seed_steps_due_at(&app.firestore, &users, now - waited_ms, now).await;
        wait_until(Duration::from_secs(60), || {
            hour_later_per_user(&app.line).values().sum::<usize>() >= DUE
        })
        .await;
        pushed.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    tokio::join!(traffic, storm);
    let per_user = hour_later_per_user(&app.line);
    assert_eq!(per_user.len(), DUE);
    assert!(per_user.values().all(|&count| count == 1), "a timer fired twice");
    app.line.in_flight_max()
}

#[tokio::test]
async fn three_instances_killed_between_claim_and_send_fire_each_timer_once() {
    const USERS: usize = 30;
    let project = new_project_id();
    let line = LineStandIn::start().await;
    // LINE answers slowly: when the process dies some timers are claimed and
    // not committed, some committed and being pushed.
    line.set_latency(Duration::from_millis(1500));
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let users: Vec<String> = (0..USERS).map(|_| events::new_user()).collect();
    let dir = steps_dir().display().to_string();
    let settings = [
        ("SCENARIOS_DIR", dir.as_str()),
        ("LEASE_MS", "8000"),
        ("LINE_TIMEOUT_MS", "5000"),
        ("WORKER_COUNT", "8"),
    ];
    let mut first = ServiceProcess::start(&project, &line.uri(), &settings).await;
    seed_due_steps(&firestore, &users).await;
    // Killed once the first push reached LINE.
    wait_until(Duration::from_secs(30), || !line.calls().is_empty()).await;
    first.kill();
    let claimed = firestore
        .list("timers")
        .await
        .iter()
        .filter(|timer| timer["fields"]["attempts"]["integerValue"] != json!("0"))
        .count();
    let _restarted = ServiceProcess::start(&project, &line.uri(), &settings).await;

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let sent: usize = hour_later_per_user(&line).values().sum();
        if sent >= USERS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{sent} of {USERS} sent; log: {}",
            first.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    firestore.settled(Duration::from_secs(30)).await;
    let per_user = hour_later_per_user(&line);
    assert_eq!(per_user.len(), USERS);
    assert!(per_user.values().all(|&count| count == 1), "{per_user:?}");
    let done = firestore.in_state("timers", "done").await.len();
    assert_eq!(done, USERS);
    println!("{claimed} timers were claimed when the process was killed");
}

/// A one-question scenario whose texts name `version`, with a reminder after
/// `remind_after`.
fn deploy_scenario(version: u32, remind_after: &str) -> String {
    format!(
        r#"
id = "deploy"
version = {version}

[[nodes]]
id = "go"
kind = "trigger"
on = "text"
keywords = ["deploy"]
next = "ask"

[[nodes]]
id = "ask"
kind = "survey"
text = "V{version} question?"
choices = [{{ label = "A", value = "a", next = "thanks" }}, {{ label = "B", value = "b", next = "thanks" }}]
remind_after = "{remind_after}"
remind_text = "V{version} reminder"

[[nodes]]
id = "thanks"
kind = "end"
text = "V{version} thanks"
"#
    )
}

fn scenario_dir(files: &[(&str, String)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scenarios-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

/// The data of the first button sent to `user` whose message says `question`.
fn first_button(line: &LineStandIn, question: &str, run: &str) -> String {
    line.accepted()
        .into_iter()
        .flat_map(|call| call.messages())
        .filter(|message| message["template"]["text"] == question)
        .filter_map(|message| message["template"]["actions"][0]["data"].as_str().map(str::to_owned))
        .find(|data| data.contains(&format!("r={run}")))
        .unwrap_or_else(|| panic!("no {question:?} button of run {run}"))
}

async fn run_of(firestore: &FirestoreRest, user: &str) -> String {
    firestore
        .list("scenario_answers")
        .await
        .iter()
        .find(|marker| string_field(marker, "lineUserId").as_deref() == Some(user))
        .and_then(|marker| string_field(marker, "run"))
        .expect("the start recorded its run")
}

#[tokio::test]
async fn a_run_started_on_v1_finishes_on_v1_after_v2_is_deployed() {
    use crate::helpers::storm::post_event;
    let project = new_project_id();
    let line = LineStandIn::start().await;
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let client = reqwest::Client::new();
    let (midway, newcomer) = (events::new_user(), events::new_user());

    let v1 = scenario_dir(&[("deploy.toml", deploy_scenario(1, "1h"))]);
    let v1_dir = v1.display().to_string();
    let mut old = ServiceProcess::start(&project, &line.uri(), &[("SCENARIOS_DIR", v1_dir.as_str())]).await;
    assert_eq!(
        post_event(&client, &old.address, &text(&midway, "deploy"))
            .await
            .unwrap(),
        200
    );
    firestore.settled(Duration::from_secs(20)).await;
    old.terminate();
    old.wait_exit(Duration::from_secs(20)).await.expect("v1 stops");

    // v2 replaces the file; the directory holds only the newest version.
    let v2 = scenario_dir(&[("deploy.toml", deploy_scenario(2, "1h"))]);
    let v2_dir = v2.display().to_string();
    let new = ServiceProcess::start(
        &project,
        &line.uri(),
        &[("SCENARIOS_DIR", v2_dir.as_str()), ("CLOCK", "test")],
    )
    .await;
    assert_eq!(
        post_event(&client, &new.address, &text(&newcomer, "deploy"))
            .await
            .unwrap(),
        200
    );
    firestore.settled(Duration::from_secs(20)).await;

    // The v1 user's reminder, fired by the v2 process an hour later, is v1's.
    let moved_to = advance_clock_at(&new.address, HOUR + A_LITTLE).await;
    let offset_ms = moved_to - events::now_ms();
    let sent_now = |event: &Value| events::with_timestamp(event, events::now_ms() + offset_ms);
    wait_until(Duration::from_secs(30), || {
        pushes_with(&line, &midway, "V1 reminder").len() == 1
    })
    .await;
    assert!(pushes_with(&line, &midway, "V2 reminder").is_empty());
    // Their tap on the v1 button records v1 and gets v1's follow-up.
    let midway_run = run_of(&firestore, &midway).await;
    let tap = first_button(&line, "V1 question?", &midway_run);
    assert_eq!(
        post_event(&client, &new.address, &sent_now(&postback(&midway, &tap)))
            .await
            .unwrap(),
        200
    );
    // The newcomer runs v2.
    let newcomer_run = run_of(&firestore, &newcomer).await;
    let tap = first_button(&line, "V2 question?", &newcomer_run);
    assert_eq!(
        post_event(&client, &new.address, &sent_now(&postback(&newcomer, &tap)))
            .await
            .unwrap(),
        200
    );
    firestore.settled(Duration::from_secs(20)).await;

    let versions: HashMap<String, String> = firestore
        .list("survey_responses")
        .await
        .iter()
        .map(|answer| {
            (
                string_field(answer, "lineUserId").unwrap_or_default(),
                answer["fields"]["scenarioVersion"]["integerValue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(versions.get(&midway).map(String::as_str), Some("1"), "{versions:?}");
    assert_eq!(versions.get(&newcomer).map(String::as_str), Some("2"), "{versions:?}");
    assert_eq!(line.accepted_with_text("V1 thanks"), 1);
    assert_eq!(line.accepted_with_text("V2 thanks"), 1);
    let timers = timers_of(&firestore, &midway).await;
    assert_eq!(timers, [timer("remind", "ask", "done", "reminded")]);
    assert!(new.log_text().contains("an older scenario version was loaded"));
    std::fs::remove_dir_all(v1).ok();
    std::fs::remove_dir_all(v2).ok();
}

#[tokio::test]
async fn a_tap_after_the_expiry_time_records_nothing_even_before_the_expiry_fired() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "remind")).await;
    // The expiry is overdue but not fired yet (a sweeper far behind): its due
    // time is past, its wake time far away.
    let expiry = app
        .firestore
        .list("timers")
        .await
        .into_iter()
        .find(|timer| string_field(timer, "kind").as_deref() == Some("expire"))
        .expect("the question's expiry is scheduled");
    let past = chrono::DateTime::from_timestamp_millis(events::now_ms() - 1000)
        .unwrap()
        .to_rfc3339();
    let far = (events::now_ms() + 3_600_000).to_string();
    app.firestore
        .patch(
            "timers",
            &document_id(&expiry),
            &[
                ("dueAt", json!({ "timestampValue": past })),
                ("wakeAtMs", json!({ "integerValue": far })),
            ],
        )
        .await;
    let tap = button_data(&app, &user).await;
    app.deliver(&postback(&user, &tap)).await;
    assert_eq!(
        app.firestore.count("survey_responses").await,
        0,
        "expired: nothing recorded"
    );
    assert_eq!(app.line.accepted_with_text("Thanks!"), 0);
}

#[tokio::test]
async fn a_late_unfollow_does_not_cancel_what_a_newer_follow_scheduled() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&follow(&user)).await;
    app.deliver(&text(&user, "slow")).await;
    // An unfollow from before the follow, delivered late (or redelivered).
    let stale = events::with_timestamp(&events::unfollow(&user), events::now_ms() - 60_000);
    app.deliver(&stale).await;
    let user_doc = app.firestore.get("users", &user).await.unwrap();
    assert_eq!(user_doc["fields"]["following"]["booleanValue"], json!(true));
    assert_eq!(
        timers_of(&app.firestore, &user).await,
        [timer("step", "hour", "pending", "")]
    );
}

#[tokio::test]
async fn a_reminder_asks_a_typed_question_again_and_the_reply_answers_it() {
    let app = app().await;
    let user = events::new_user();
    app.deliver(&text(&user, "petname")).await;
    let asked = app.firestore.get("open_questions", &user).await.expect("asked");
    assert!(is_about(scheduled_delay(&app.firestore, &user, "ask").await, HOUR));
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(20), || {
        pushes_with(&app.line, &user, "Still there?").len() == 1
    })
    .await;
    assert_eq!(pushed_texts(&app.line, &user), ["Still there?", "Your pet's name?"]);
    wait_for_timers(&app.firestore, &user, Duration::from_secs(5), |timers| {
        timers.iter().all(|t| t.2 != "pending")
    })
    .await;
    let reasked = app.firestore.get("open_questions", &user).await.expect("still open");
    // The same asking (a text typed before the reminder still answers it),
    // its answer window renewed from the reminder.
    assert_eq!(asked["fields"]["openedAt"], reasked["fields"]["openedAt"]);
    assert!(
        reasked["fields"]["remindedAt"]["timestampValue"].is_string(),
        "the reminder asked it again: {reasked}"
    );
    app.deliver(&app.sent_now(&text(&user, "Pochi"))).await;
    assert_eq!(app.line.accepted_with_text("Nice pet!"), 1);
    assert_eq!(app.firestore.count("survey_responses").await, 1);
}

/// The console's timeline tells a pending timer in words and an editor
/// cancels it there; a viewer sees no button and a forged POST of theirs is
/// refused; a second cancel changes nothing. The step never fires.
#[tokio::test]
async fn an_editor_cancels_a_timer_from_the_users_timeline() {
    use crate::operator_access::{EDITOR, VIEWER, add_staff, csrf_of, get, post, session};
    let app = app().await;
    add_staff(&app);
    let user = events::new_user();
    app.deliver(&text(&user, "slow")).await;
    let listed: Value = app
        .get_admin(&format!("/admin/users/{user}/timers"))
        .await
        .json()
        .await
        .unwrap();
    let id = listed["timers"][0]["timerId"].as_str().unwrap().to_owned();
    let path = format!("/console/users/timers/{id}/cancel");

    let viewer = session(&app.address, VIEWER).await;
    let page = get(&app.address, &format!("/console/users?id={user}"), &viewer)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("Step "), "the timer in words: {page}");
    assert!(page.contains("(pending): slow / hour"), "{page}");
    assert!(!page.contains("cancel-timer"), "no button for a viewer");
    let csrf = csrf_of(&app.address, &viewer).await;
    let forged = post(&app.address, &path, &viewer, &[("csrf", &csrf), ("user", &user)]).await;
    assert_eq!(forged.status(), 403);
    assert_eq!(timers_of(&app.firestore, &user).await[0].2, "pending");

    let editor = session(&app.address, EDITOR).await;
    let page = get(&app.address, &format!("/console/users?id={user}"), &editor)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains(&format!("action=\"{path}\"")), "a Cancel button: {page}");
    let csrf = csrf_of(&app.address, &editor).await;
    let cancelled = post(&app.address, &path, &editor, &[("csrf", &csrf), ("user", &user)]).await;
    assert_eq!(cancelled.status(), 200);
    assert!(cancelled.text().await.unwrap().contains("The timer is cancelled."));
    assert_eq!(timers_of(&app.firestore, &user).await[0].2, "cancelled");
    let again = post(&app.address, &path, &editor, &[("csrf", &csrf), ("user", &user)]).await;
    assert_eq!(again.status(), 409, "already cancelled");
    let other = events::new_user();
    let elsewhere = post(&app.address, &path, &editor, &[("csrf", &csrf), ("user", &other)]).await;
    assert_eq!(elsewhere.status(), 404, "another user's timer");
    let audit: Value = app
        .get_admin("/admin/audit?action=timer_cancel")
        .await
        .json()
        .await
        .unwrap();
    let entries = audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 3, "each cancel is audited: {audit}");
    assert!(entries.iter().all(|entry| entry["operator"] == EDITOR), "{audit}");

    app.advance_clock(HOUR + A_LITTLE).await;
    app.settled().await;
    assert!(
        pushed_texts(&app.line, &user)
            .iter()
            .all(|text| text != "An hour later"),
        "the step never fired"
    );
    assert_eq!(timers_of(&app.firestore, &user).await[0].2, "cancelled");
}
