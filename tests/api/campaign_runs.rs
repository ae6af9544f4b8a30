//! Campaigns that run whole surveys: each recipient's run (marker, open
//! question, reminder and expiry timers) recorded with the chunk LINE accepted,
//! answers naming the campaign, reminders for who did not answer, expiry for
//! who still has not, and a cancel that stops the timers too. Effects are
//! counted where they land: LINE's deliveries and Firestore's documents.

use crate::campaigns::{seed_users, start_campaign, wait_for_state};
use crate::helpers::events::{postback, text};
use crate::helpers::firestore_rest::{FirestoreRest, string_field};
use crate::helpers::line_stand_in::{Call, LineStandIn};
use crate::helpers::process::ServiceProcess;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app_with, wait_until};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);
/// Just past a due time (a step found later than `max_lateness` is skipped).
const A_LITTLE: Duration = Duration::from_secs(1);

/// The step fixtures (`remind`: a survey reminded after 1 h and closed after
/// 3 h; `nickname`: a typed question closed after 1 h) on a clock the test moves.
async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: |config| {
            config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/steps");
            config.campaign_calls_per_second = 200;
        },
        test_clock: true,
        ..TestOptions::default()
    })
    .await
}

/// Per user, the accepted pushes carrying `text`.
fn pushes_with(line: &LineStandIn, text: &str) -> HashMap<String, usize> {
    let mut per_user = HashMap::new();
    for call in line.accepted() {
        if call.texts().iter().any(|sent| sent == text)
            && let Some(to) = call.to()
        {
            *per_user.entry(to.to_owned()).or_default() += 1;
        }
    }
    per_user
}

/// The documents of `collection` whose `field` is `value`.
async fn where_field(firestore: &FirestoreRest, collection: &str, field: &str, value: &str) -> Vec<Value> {
    firestore
        .list(collection)
        .await
        .into_iter()
        .filter(|document| string_field(document, field).as_deref() == Some(value))
        .collect()
}

/// The first button's postback data of the campaign's multicast.
fn campaign_button(line: &LineStandIn) -> String {
    let multicast = line.accepted().into_iter().find(Call::is_multicast).expect("sent");
    multicast.messages()[0]["template"]["actions"][0]["data"]
        .as_str()
        .expect("a postback button")
        .to_owned()
}

/// The campaign's status once its results (counted at most every 5 s) say
/// what `ready` waits for, or after 30 s (the assertions then say what
/// differs).
async fn results_once(app: &TestApp, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = crate::helpers::admin_json(&app.address, &format!("/admin/campaigns/{id}")).await;
        if ready(&status["results"]) || std::time::Instant::now() > deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn cancel(app: &TestApp, id: &str, body: Option<Value>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{}/admin/campaigns/{id}/cancel", app.address))
        .bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.expect("service reachable")
}

#[tokio::test]
async fn each_recipient_gets_a_run_and_only_who_did_not_answer_is_reminded_then_closed() {
    const USERS: usize = 30;
    const ANSWERING: usize = 5;
    let app = app().await;
    let users = seed_users(&app.firestore, USERS, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &json!({"scenarioId": "remind"}), "remind-30").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    assert_eq!(status["delivery"], "multicast");
    assert_eq!(status["sent"], json!(USERS));
    let deliveries = app.line.multicast_deliveries();
    assert_eq!(deliveries.len(), USERS);
    assert!(deliveries.values().all(|times| *times == 1));

    // Every recipient's marker names the campaign's run and the campaign.
    let markers = where_field(&app.firestore, "scenario_answers", "campaignId", &id).await;
    assert_eq!(markers.len(), USERS);
    let run = string_field(&markers[0], "run").expect("a run");
    assert!(run.starts_with('k'), "a campaign's run: {run}");
    assert!(
        markers
            .iter()
            .all(|marker| string_field(marker, "run").as_deref() == Some(run.as_str()))
    );
    // Each has a reminder and an expiry in that run, and the button carries it.
    let timers = where_field(&app.firestore, "timers", "run", &run).await;
    assert_eq!(timers.len(), 2 * USERS);
    let button = campaign_button(&app.line);
    assert!(button.contains(&format!("r={run}")), "{button}");

    // Some answer, each with a double tap: one answer each, naming the campaign.
    let (answering, silent) = users.split_at(ANSWERING);
    for user in answering {
        let (tap, again) = (postback(user, &button), postback(user, &button));
        tokio::join!(app.deliver(&tap), app.deliver(&again));
    }
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), ANSWERING);
    assert!(
        answers
            .iter()
            .all(|answer| string_field(answer, "campaignId").as_deref() == Some(id.as_str())),
        "{answers:?}"
    );
    assert_eq!(app.line.accepted_with_text("Thanks!"), ANSWERING);
    // One of the silent unfollows; someone outside the campaign answers the
    // same survey, started by its keyword.
    let (leaving, silent) = silent.split_first().expect("silent users");
    app.deliver(&app.sent_now(&crate::helpers::events::unfollow(leaving)))
        .await;
    let outsider = crate::helpers::events::new_user();
    app.deliver(&app.sent_now(&text(&outsider, "remind"))).await;
    let theirs = where_field(&app.firestore, "scenario_answers", "lineUserId", &outsider).await;
    let their_run = string_field(&theirs[0], "run").expect("a run");
    let their_button = app
        .line
        .accepted()
        .iter()
        .flat_map(Call::messages)
        .filter_map(|message| message["template"]["actions"][0]["data"].as_str().map(str::to_owned))
        .find(|data| data.contains(&format!("r={their_run}")))
        .expect("the keyword's question");
    app.deliver(&postback(&outsider, &their_button)).await;
    assert_eq!(app.firestore.count("survey_responses").await, ANSWERING + 1);

    // An hour later, exactly the others are reminded; three hours, closed.
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(60), || {
        pushes_with(&app.line, "Reminder: one tap answers it.").len() == silent.len()
    })
    .await;
    app.advance_clock(2 * HOUR).await;
    wait_until(Duration::from_secs(60), || {
        pushes_with(&app.line, "This question is closed.").len() == silent.len()
    })
    .await;
    app.settled().await;

    // The campaign's results, counted exactly, of its run only.
    // Counted at most every 5 s: polled until the reminders are in.
    let status = results_once(&app, &id, |results| {
        results["reminded"] == json!(silent.len()) && results["expired"] == json!(silent.len())
    })
    .await;
    let results = &status["results"];
    assert_eq!(results["recipients"], json!(USERS), "{status}");
    assert_eq!(results["delivered"], json!(USERS));
    assert_eq!(results["answered"], json!(ANSWERING));
    assert_eq!(results["reminded"], json!(silent.len()));
    assert_eq!(results["expired"], json!(silent.len()));
    assert_eq!(results["unfollowed"], json!(1));
    assert_eq!(results["questions"][0]["nodeId"], "ask");
    assert_eq!(results["questions"][0]["answered"], json!(ANSWERING));
    assert_eq!(
        results["questions"][0]["choices"],
        json!([
            {"value": "yes", "label": "Yes", "count": ANSWERING},
            {"value": "no", "label": "No", "count": 0}
        ])
    );
    // The CSV of the campaign's answers only, beside the scenario's all.
    let rows = |path: String| {
        let app = &app;
        async move {
            let csv = app.get_admin(&path).await.text().await.unwrap();
            csv.lines().count() - 1
        }
    };
    assert_eq!(rows("/admin/scenarios/remind/answers.csv".into()).await, ANSWERING + 1);
    assert_eq!(
        rows(format!("/admin/scenarios/remind/answers.csv?campaign={id}")).await,
        ANSWERING
    );
    let bad = app.get_admin("/admin/scenarios/remind/answers.csv?campaign=nope").await;
    assert_eq!(bad.status(), 400);
    let silent: HashSet<&String> = silent.iter().collect();
    for text in ["Reminder: one tap answers it.", "This question is closed."] {
        let got = pushes_with(&app.line, text);
        assert!(
            got.keys().all(|user| silent.contains(user)),
            "{text} to someone who answered"
        );
        assert!(got.values().all(|times| *times == 1), "{text} twice: {got:?}");
    }
    // The campaign's answerers and the outsider, each thanked once.
    assert_eq!(app.line.accepted_with_text("Thanks!"), ANSWERING + 1, "nothing twice");
}

#[tokio::test]
async fn reminded_and_expired_count_each_recipient_once_however_many_of_their_questions_were() {
    const USERS: usize = 6;
    let app = spawn_app_with(TestOptions {
        adjust: |config| {
            config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/remind_twice");
            config.campaign_calls_per_second = 200;
        },
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    let users = seed_users(&app.firestore, USERS, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &json!({"scenarioId": "remind_twice"}), "twice").await;
    wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    let (answering, silent) = users.split_first().expect("users");
    app.deliver(&app.sent_now(&postback(answering, &campaign_button(&app.line))))
        .await;

    // Each silent user: reminded of the first question, which then closes and
    // asks the second, reminded of that, which closes too.
    for (after, text) in [
        (HOUR + A_LITTLE, "Reminder: the first question."),
        (HOUR, "The first question is closed."),
        (HOUR, "Reminder: the second question."),
        (HOUR, "Both questions are closed."),
    ] {
        app.advance_clock(after).await;
        wait_until(Duration::from_secs(60), || {
            pushes_with(&app.line, text).len() == silent.len()
        })
        .await;
    }
    app.settled().await;
    let pushed_twice = |texts: [&str; 2]| {
        silent.iter().all(|user| {
            texts
                .iter()
                .all(|text| pushes_with(&app.line, text).get(user.as_str()) == Some(&1))
        })
    };
    assert!(pushed_twice([
        "Reminder: the first question.",
        "Reminder: the second question."
    ]));

    let status = results_once(&app, &id, |results| {
        results["reminded"] == json!(silent.len()) && results["expired"] == json!(silent.len())
    })
    .await;
    let results = &status["results"];
    assert_eq!(results["answered"], json!(1), "{status}");
    assert_eq!(results["reminded"], json!(silent.len()), "{status}");
    assert_eq!(results["expired"], json!(silent.len()), "{status}");
}

#[tokio::test]
async fn a_typed_first_question_opens_for_each_recipient_and_the_typed_answer_names_the_campaign() {
    const USERS: usize = 12;
    let app = app().await;
    let users = seed_users(&app.firestore, USERS, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &json!({"scenarioId": "nickname"}), "nickname-12").await;
    wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    let open = app.firestore.list("open_questions").await;
    assert_eq!(open.len(), USERS, "the question is open for each recipient");
    assert!(
        open.iter()
            .all(|question| string_field(question, "nodeId").as_deref() == Some("ask"))
    );

    app.deliver(&app.sent_now(&text(&users[0], "Bob"))).await;
    let answers = app.firestore.list("survey_responses").await;
    assert_eq!(answers.len(), 1);
    assert_eq!(string_field(&answers[0], "campaignId").as_deref(), Some(id.as_str()));
    assert_eq!(app.line.accepted_with_text("Nice name!"), 1);

    // The others' question closes after its hour; the one who answered hears nothing.
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(60), || {
        pushes_with(&app.line, "Too late for a nickname.").len() == USERS - 1
    })
    .await;
    assert!(!pushes_with(&app.line, "Too late for a nickname.").contains_key(&users[0]));
}

#[tokio::test]
async fn chunks_hold_as_many_recipients_as_their_settle_can_write_in_one_commit() {
    // A reminder and an expiry each: marker + 2 timers + the user's record = 4
    // writes a recipient, so 124 a chunk (496 writes and the chunk's own two).
    const USERS: usize = 400;
    let app = app().await;
    seed_users(&app.firestore, USERS, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &json!({"scenarioId": "remind"}), "remind-400").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(60)).await;
    assert_eq!(status["chunkSize"], json!(124));
    let multicasts: Vec<Call> = app.line.accepted().into_iter().filter(Call::is_multicast).collect();
    let sizes: Vec<usize> = multicasts.iter().map(|call| call.recipients().len()).collect();
    assert_eq!(multicasts.len(), USERS.div_ceil(124), "{sizes:?}");
    assert!(sizes.iter().all(|size| *size <= 124), "{sizes:?}");
    assert_eq!(app.firestore.list("timers").await.len(), 2 * USERS);
    assert_eq!(
        where_field(&app.firestore, "scenario_answers", "campaignId", &id)
            .await
            .len(),
        USERS
    );
}

#[tokio::test]
async fn a_cancel_with_cancel_timers_stops_the_reminders_of_a_campaign_already_sent() {
    const USERS: usize = 10;
    let app = app().await;
    seed_users(&app.firestore, USERS, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &json!({"scenarioId": "remind"}), "remind-cancel").await;
    wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;

    // Without a body a cancel of a sent campaign is refused, as before.
    let refused = cancel(&app, &id, None).await;
    assert_eq!(refused.status(), 409);
    let bad = cancel(&app, &id, Some(json!({"cancelTimers": "yes"}))).await;
    assert_eq!(bad.status(), 400);
    let accepted = cancel(&app, &id, Some(json!({"cancelTimers": true}))).await;
    assert_eq!(accepted.status(), 200);
    let status = wait_for_state(&app.address, &id, "cancelled", Duration::from_secs(30)).await;
    assert_eq!(status["sent"], json!(USERS), "what went out stays counted");
    assert_eq!(status["cancelTimers"], json!(true));

    let timers = app.firestore.list("timers").await;
    assert_eq!(timers.len(), 2 * USERS);
    assert!(
        timers
            .iter()
            .all(|timer| string_field(timer, "state").as_deref() == Some("cancelled")
                && string_field(timer, "outcome").as_deref() == Some("campaign_cancelled")),
        "{timers:?}"
    );
    app.advance_clock(4 * HOUR).await;
    // Give a due timer time to be swept and fire, if one were left.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(pushes_with(&app.line, "Reminder: one tap answers it.").is_empty());
    assert!(pushes_with(&app.line, "This question is closed.").is_empty());
}

#[tokio::test]
async fn a_user_who_starts_the_scenario_again_leaves_the_campaign_run() {
    let app = app().await;
    let users = seed_users(&app.firestore, 2, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &json!({"scenarioId": "remind"}), "remind-restart").await;
    wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    // A keyword starts a run of its own: the marker names no campaign any more.
    app.deliver(&app.sent_now(&text(&users[0], "remind"))).await;
    let markers = where_field(&app.firestore, "scenario_answers", "lineUserId", &users[0]).await;
    assert_eq!(markers.len(), 1);
    assert_eq!(string_field(&markers[0], "campaignId"), None);
    assert_eq!(
        where_field(&app.firestore, "scenario_answers", "campaignId", &id)
            .await
            .len(),
        1,
        "the other recipient is still in the campaign's run"
    );
}

/// Per user, the accepted multicasts and pushes carrying `text`.
fn received(line: &LineStandIn, text: &str) -> HashMap<String, usize> {
    let mut per_user: HashMap<String, usize> = HashMap::new();
    for call in line.accepted() {
        if call.texts().iter().any(|sent| sent == text) {
            let users = match call.to() {
                Some(user) => vec![user.to_owned()],
                None => call.recipients(),
            };
            for user in users {
                *per_user.entry(user).or_default() += 1;
            }
        }
    }
    per_user
}

/// The whole-run test: a typed question first, reminded after an hour
/// and closed after three (the clock moved by the test), sent to 2,000 users by
/// the first of two instances, which is SIGKILLed mid-campaign; one user in ten
/// answers as soon as the question reaches them. Every recipient gets the
/// question once, exactly the users without a recorded answer get one reminder
/// and one closing message, and nobody gets anything twice.
#[tokio::test]
async fn two_thousand_recipients_through_a_sigkill_get_the_question_once_and_only_the_silent_are_reminded_and_closed() {
    const USERS: usize = 2000;
    let project = crate::helpers::new_project_id();
    let line = std::sync::Arc::new(LineStandIn::start().await);
    // Slow answers: when the process dies a chunk is on its way.
    line.set_latency(Duration::from_millis(300));
    let firestore = FirestoreRest::new(&crate::helpers::emulator_host(), &project);
    let users = seed_users(&firestore, USERS, |_| true, |_| false).await;
    let scenarios = crate::helpers::repo_path("tests/fixtures/campaign");
    let scenarios = scenarios.to_str().expect("a UTF-8 path");
    let settings = [
        ("SCENARIOS_DIR", scenarios),
        ("CAMPAIGN_CALLS_PER_SECOND", "4"),
        ("CLOCK", "test"),
    ];
    let mut first = ServiceProcess::start(&project, &line.uri(), &settings).await;
    let second = ServiceProcess::start(&project, &line.uri(), &settings).await;
    // Created on the first instance, which drives it at once.
    let id = start_campaign(&first.address, &json!({"scenarioId": "quick"}), "quick-2000").await;

    // One user in ten answers a second and a half after the question reached
    // them, as a quick person would (through the instance that lives).
    let answering: HashSet<String> = users.iter().step_by(10).cloned().collect();
    let answerer = {
        let (line, answering, address) = (line.clone(), answering.clone(), second.address.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut answered: HashSet<String> = HashSet::new();
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while answered.len() < answering.len() && std::time::Instant::now() < deadline {
                let reached: Vec<String> = received(&line, "How was your visit?")
                    .into_keys()
                    .filter(|user| answering.contains(user) && !answered.contains(user))
                    .collect();
                if reached.is_empty() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let posts = reached.iter().map(|user| {
                    let event = text(user, "It was lovely");
                    let (client, address) = (&client, &address);
                    async move { crate::helpers::storm::post_event(client, address, &event).await }
                });
                futures::future::join_all(posts).await;
                answered.extend(reached);
            }
            answered
        })
    };
    wait_until(Duration::from_secs(60), || {
        line.calls().iter().filter(|call| call.is_multicast()).count() >= 5
    })
    .await;
    first.kill();
    let before = line.multicast_deliveries().len();
    let status = wait_for_state(&second.address, &id, "done", Duration::from_secs(180)).await;
    assert!(before < USERS, "killed mid-way: {before} had it");
    let answered = answerer.await.expect("the answering task");
    assert_eq!(
        answered.len(),
        answering.len(),
        "every chosen user was reached and answered"
    );
    firestore.settled(Duration::from_secs(30)).await;

    // Every recipient got the question once.
    let questions = received(&line, "How was your visit?");
    let everyone: HashSet<&String> = users.iter().collect();
    assert_eq!(questions.len(), USERS);
    assert!(
        questions
            .iter()
            .all(|(user, times)| *times == 1 && everyone.contains(user))
    );
    assert_eq!(status["sent"], json!(USERS));
    let answers: HashSet<String> = firestore
        .list("survey_responses")
        .await
        .iter()
        .filter_map(|answer| string_field(answer, "lineUserId"))
        .collect();
    // The killed instance drove it; the other took it over.
    let campaign = firestore.get("campaigns", &id).await.expect("stored");
    assert!(
        campaign["fields"]["attempts"]["integerValue"].as_str().unwrap_or("0") >= "2",
        "not taken over: {campaign}"
    );
    // An answer typed while its chunk's settle was lost with the process (the
    // question not yet open for the service) is not one: only users of a chunk
    // sent again after the kill can lose theirs.
    assert!(answers.is_subset(&answering), "only the answering users answered");
    let resent: HashSet<String> = line
        .calls_by_retry_key()
        .into_values()
        .filter(|calls| calls.len() > 1)
        .flat_map(|calls| calls[0].recipients())
        .collect();
    let lost: Vec<&String> = answering.difference(&answers).collect();
    assert!(
        lost.iter().all(|user| resent.contains(*user)),
        "answers lost outside the chunks sent again: {lost:?}"
    );
    let silent = USERS - answers.len();
    // The crash is over: LINE answers at once again, so the timers go quickly.
    line.set_latency(Duration::ZERO);

    // An hour on, the silent are reminded; three hours on, their question closes.
    crate::helpers::advance_clock_at(&second.address, HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(120), || {
        received(&line, "Still there? One line is enough.").len() >= silent
    })
    .await;
    crate::helpers::advance_clock_at(&second.address, 2 * HOUR).await;
    wait_until(Duration::from_secs(120), || {
        received(&line, "This survey is closed.").len() >= silent
    })
    .await;
    firestore.settled(Duration::from_secs(30)).await;
    let reminded = received(&line, "Still there? One line is enough.");
    let closed = received(&line, "This survey is closed.");
    for user in &users {
        let got = (
            reminded.get(user).copied().unwrap_or(0),
            closed.get(user).copied().unwrap_or(0),
        );
        let expected = if answers.contains(user) { (0, 0) } else { (1, 1) };
        assert_eq!(got, expected, "{user}: answered {}", answers.contains(user));
    }
    assert_eq!(
        line.accepted_with_text("Thank you!"),
        answers.len(),
        "one thanks per answer"
    );
    // No chunk was accepted twice: one accepted call per retry key.
    let per_key: HashMap<String, usize> = line
        .calls_by_retry_key()
        .into_iter()
        .map(|(key, calls)| (key, calls.iter().filter(|call| call.accepted).count()))
        .collect();
    assert!(per_key.values().all(|accepted| *accepted == 1), "{per_key:?}");
    println!(
        "{before} users had the question when the process was killed; {} of {} answers recorded; {} users in chunks sent again",
        answers.len(),
        answering.len(),
        resent.len()
    );
}

#[tokio::test]
async fn the_opt_out_tag_keeps_users_out_of_campaigns_and_stops_what_a_campaign_sends_them_later() {
    const USERS: usize = 12;
    let app = app().await;
    // Users 0 to 3 opted out before the campaign.
    let users = seed_users(&app.firestore, USERS, |_| true, |_| false).await;
    let opted = |i: usize| i < 4;
    for (i, user) in users.iter().enumerate().filter(|(i, _)| opted(*i)) {
        let tags = json!({"arrayValue": {"values": [{"stringValue": "配信停止"}, {"stringValue": format!("u{i}")}]}});
        app.firestore.patch("users", user, &[("tags", tags)]).await;
    }
    let dry: Value = reqwest::Client::new()
        .post(format!("{}/admin/campaigns", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"scenarioId": "remind", "dryRun": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(dry["count"], json!(USERS - 4), "{dry}");
    let id = start_campaign(&app.address, &json!({"scenarioId": "remind"}), "remind-opt-out").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    assert_eq!(status["sent"], json!(USERS - 4));
    let got = app.line.multicast_deliveries();
    assert!(
        users
            .iter()
            .enumerate()
            .all(|(i, user)| got.contains_key(user) != opted(i))
    );

    // User 4 takes the tag after the question reached them (an "unsubscribe"
    // answer elsewhere): no reminder, and the question closes silently.
    let later = &users[4];
    let tags = json!({"arrayValue": {"values": [{"stringValue": "配信停止"}]}});
    app.firestore.patch("users", later, &[("tags", tags)]).await;
    app.advance_clock(HOUR + A_LITTLE).await;
    wait_until(Duration::from_secs(60), || {
        pushes_with(&app.line, "Reminder: one tap answers it.").len() == USERS - 5
    })
    .await;
    app.advance_clock(2 * HOUR).await;
    wait_until(Duration::from_secs(60), || {
        pushes_with(&app.line, "This question is closed.").len() == USERS - 5
    })
    .await;
    app.settled().await;
    assert!(!pushes_with(&app.line, "Reminder: one tap answers it.").contains_key(later));
    assert!(!pushes_with(&app.line, "This question is closed.").contains_key(later));
    let theirs: Vec<(String, String)> = where_field(&app.firestore, "timers", "lineUserId", later)
        .await
        .iter()
        .map(|timer| {
            (
                string_field(timer, "kind").unwrap_or_default(),
                string_field(timer, "outcome").unwrap_or_default(),
            )
        })
        .collect();
    let mut theirs = theirs;
    theirs.sort();
    assert_eq!(
        theirs,
        vec![
            ("expire".to_owned(), "expired_opted_out".to_owned()),
            ("remind".to_owned(), "opted_out".to_owned())
        ]
    );
}
