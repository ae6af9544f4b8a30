//! Campaigns: a scenario sent to a segment of thousands of users by multicast,
//! each member exactly once, through crashes, LINE's 429s and lost answers,
//! concurrent creation and cancels. Effects are counted where they land: the
//! users LINE delivered to, and the documents in Firestore.

use crate::helpers::events::{self, postback};
use crate::helpers::firestore_rest::{FirestoreRest, string_field};
use crate::helpers::line_stand_in::Call;
use crate::helpers::line_stand_in::{Fault, LineStandIn};
use crate::helpers::process::ServiceProcess;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, emulator_host, new_project_id, spawn_app, spawn_app_with};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// User 0 was first seen at 2026-09-21T23:40 in Tokyo, each next one a minute
/// later: users 0 to 19 on the 21st, users 20 to 39 on the 22nd.
const FIRST_SEEN_MS: i64 = 1_790_001_600_000;

/// Seeds `count` users; `tagged(i)` gives user i the `unsatisfied` tag,
/// `unfollowed(i)` records an unfollow. Returns the ids, in seeding order.
pub(crate) async fn seed_users(
    firestore: &FirestoreRest,
    count: usize,
    tagged: impl Fn(usize) -> bool,
    unfollowed: impl Fn(usize) -> bool,
) -> Vec<String> {
    let users: Vec<String> = (0..count).map(|_| events::new_user()).collect();
    let documents: Vec<(String, String, Value)> = users
        .iter()
        .enumerate()
        .map(|(i, user)| {
            let tags: Vec<Value> = if tagged(i) {
                vec![json!({"stringValue": "unsatisfied"}), json!({"stringValue": "visited"})]
            } else {
                vec![json!({"stringValue": "visited"})]
            };
            let fields = json!({
                "lineUserId": {"stringValue": user},
                "following": {"booleanValue": !unfollowed(i)},
                "tags": {"arrayValue": {"values": tags}},
                "firstSeenMs": {"integerValue": (FIRST_SEEN_MS + i as i64 * 60_000).to_string()},
            });
            ("users".to_owned(), user.clone(), fields)
        })
        .collect();
    firestore.write_all(&documents).await;
    users
}

async fn post_campaign(address: &str, body: &Value, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{address}/admin/campaigns"))
        .bearer_auth(ADMIN_TOKEN)
        .json(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.send().await.expect("service reachable")
}

async fn campaign_status(address: &str, id: &str) -> Value {
    crate::helpers::admin_json(address, &format!("/admin/campaigns/{id}")).await
}

/// Starts a campaign and returns its id.
pub(crate) async fn start_campaign(address: &str, body: &Value, key: &str) -> String {
    let response = post_campaign(address, body, Some(key)).await;
    assert_eq!(response.status(), 202);
    let answer: Value = response.json().await.unwrap();
    answer["campaignId"].as_str().expect("an id").to_owned()
}

/// Polls the campaign until its state is `state`; returns its status.
pub(crate) async fn wait_for_state(address: &str, id: &str, state: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let status = campaign_status(address, id).await;
        if status["state"] == state {
            return status;
        }
        assert!(Instant::now() < deadline, "the campaign is not {state}: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Nothing of campaign `id` can reach LINE any more: no chunk of its plan
/// (the only chunks a driver sends) waits to be sent; each was sent, failed or
/// skipped. A campaign cancelled before its plan was recorded has none.
async fn assert_nothing_left_to_send(app: &TestApp, id: &str) {
    let campaign = app
        .firestore
        .get("campaigns", id)
        .await
        .expect("the campaign is stored");
    let Some(plan) = string_field(&campaign, "planId") else {
        return;
    };
    let pending: Vec<Value> = app
        .firestore
        .in_state("campaign_chunks", "pending")
        .await
        .into_iter()
        .filter(|chunk| string_field(chunk, "planId").as_deref() == Some(plan.as_str()))
        .collect();
    assert!(
        pending.is_empty(),
        "{} chunks of plan {plan} still pending",
        pending.len()
    );
}

fn count(status: &Value, field: &str) -> u64 {
    status[field].as_u64().unwrap_or_else(|| panic!("{field} in {status}"))
}

/// Every expected user received exactly one multicast, and nobody else any.
fn assert_each_exactly_once(line: &LineStandIn, expected: &HashSet<String>) {
    let received = line.multicast_deliveries();
    let twice: Vec<(&String, &usize)> = received.iter().filter(|(_, times)| **times > 1).collect();
    assert!(
        twice.is_empty(),
        "{} users got the campaign twice: {twice:?}",
        twice.len()
    );
    let outside: Vec<&String> = received.keys().filter(|user| !expected.contains(*user)).collect();
    assert!(
        outside.is_empty(),
        "{} users outside the audience got it",
        outside.len()
    );
    let missed = expected.iter().filter(|user| !received.contains_key(*user)).count();
    assert_eq!(missed, 0, "{missed} members did not get it");
}

fn segment(users: &[String], member: impl Fn(usize) -> bool) -> HashSet<String> {
    users
        .iter()
        .enumerate()
        .filter(|(i, _)| member(*i))
        .map(|(_, user)| user.clone())
        .collect()
}

fn unsatisfied() -> Value {
    json!({"scenarioId": "lunch", "audience": {"tags": {"anyOf": ["unsatisfied"]}}})
}

#[tokio::test]
async fn a_tag_segment_of_20000_users_gets_the_campaign_exactly_once() {
    const USERS: usize = 20_000;
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.campaign_calls_per_second = 200,
        ..TestOptions::default()
    })
    .await;
    // About half are tagged; one in 40 of them unfollowed.
    let tagged = |i: usize| i.is_multiple_of(2);
    let unfollowed = |i: usize| i.is_multiple_of(80);
    let users = seed_users(&app.firestore, USERS, tagged, unfollowed).await;
    let expected = segment(&users, |i| tagged(i) && !unfollowed(i));

    let mut dry = unsatisfied();
    dry["dryRun"] = json!(true);
    let response = post_campaign(&app.address, &dry, None).await;
    assert_eq!(response.status(), 200);
    let preview: Value = response.json().await.unwrap();
    assert_eq!(preview["count"], json!(expected.len()));
    let sample = preview["sample"].as_array().unwrap();
    assert_eq!(sample.len(), 20);
    assert!(sample.iter().all(|user| expected.contains(user.as_str().unwrap())));
    assert!(app.line.calls().is_empty(), "a dry run sends nothing");
    assert_eq!(app.firestore.count("campaigns").await, 0, "a dry run stores nothing");

    let started = Instant::now();
    let id = start_campaign(&app.address, &unsatisfied(), "segment-20000").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(240)).await;
    println!("{} users sent in {:?}", expected.len(), started.elapsed());

    assert_each_exactly_once(&app.line, &expected);
    assert_eq!(count(&status, "planned"), expected.len() as u64);
    assert_eq!(count(&status, "sent"), expected.len() as u64);
    assert_eq!(
        count(&status, "failed") + count(&status, "skipped") + count(&status, "pending"),
        0
    );
    // Each recipient's run is two writes of their chunk's settle (the marker,
    // and their record naming the campaign), so a chunk holds 249 of them
    // beside its own two writes.
    let chunk = count(&status, "chunkSize") as usize;
    assert_eq!(chunk, 249);
    let multicasts: Vec<_> = app.line.calls().into_iter().filter(Call::is_multicast).collect();
    assert_eq!(multicasts.len(), expected.len().div_ceil(chunk), "one call per chunk");
    let unit = status["aggregationUnit"].as_str().unwrap();
    assert!(
        multicasts
            .iter()
            .all(|call| call.body["customAggregationUnits"] == json!([unit]) && call.recipients().len() <= chunk)
    );
    // Chunks are written per chunk of users, not per user.
    assert_eq!(
        app.firestore.count("campaign_chunks").await,
        expected.len().div_ceil(chunk)
    );
}

#[tokio::test]
async fn dry_runs_filter_by_tags_answers_dates_and_leave_out_unfollowed_users() {
    let app = spawn_app().await;
    let users = seed_users(&app.firestore, 40, |i| i % 2 == 0, |i| i == 0).await;
    // Users 0..10 answered lunch (their marker, at its id, names an answer).
    let lunch = line_survey::ids::ScenarioId::parse("lunch").unwrap();
    let markers: Vec<(String, String, Value)> = users[..10]
        .iter()
        .map(|user| {
            let fields = json!({
                "scenarioId": {"stringValue": "lunch"},
                "lineUserId": {"stringValue": user},
                "lastAnswerId": {"stringValue": "a"},
            });
            let id = line_survey::ids::LineUserId::parse(user.clone()).unwrap();
            (
                "scenario_answers".to_owned(),
                line_survey::ids::scenario_marker_id(&lunch, &id),
                fields,
            )
        })
        .collect();
    app.firestore.write_all(&markers).await;
    // User 0 (tagged, answered, first seen on the 21st) unfollowed.
    let cases = [
        (json!({}), 39),
        (json!({"tags": {"anyOf": ["unsatisfied"]}}), 19),
        (json!({"tags": {"anyOf": ["unsatisfied", "visited"]}}), 39),
        (json!({"tags": {"allOf": ["unsatisfied", "visited"]}}), 19),
        (json!({"tags": {"noneOf": ["unsatisfied"]}}), 20),
        (json!({"answered": ["lunch"]}), 9),
        (json!({"notAnswered": ["lunch"]}), 30),
        (json!({"firstSeenTo": "2026-09-21"}), 19),
        (json!({"firstSeenFrom": "2026-09-22"}), 20),
        (json!({"firstSeenFrom": "2026-09-22", "firstSeenTo": "2026-09-22"}), 20),
        (json!({"firstSeenFrom": "2026-09-23"}), 0),
        (
            json!({"tags": {"noneOf": ["unsatisfied"]}, "notAnswered": ["lunch"], "firstSeenTo": "2026-09-21"}),
            5,
        ),
    ];
    for (audience, expected) in cases {
        let body = json!({"scenarioId": "lunch", "audience": audience, "dryRun": true});
        let response = post_campaign(&app.address, &body, None).await;
        assert_eq!(response.status(), 200, "{audience}");
        let found: Value = response.json().await.unwrap();
        assert_eq!(found["count"], json!(expected), "{audience}");
    }
    let body = json!({"scenarioId": "lunch", "skipAnswered": true, "dryRun": true});
    let found: Value = post_campaign(&app.address, &body, None).await.json().await.unwrap();
    assert_eq!(found["count"], json!(30), "skipAnswered leaves out who answered lunch");
    assert!(app.line.calls().is_empty());
}

#[tokio::test]
async fn bad_campaign_requests_get_400_with_a_clear_message_and_change_nothing() {
    let app = spawn_app().await;
    let too_many: Vec<String> = (0..31).map(|n| format!("tag{n}")).collect();
    let cases = [
        (json!({"scenarioId": "nope"}), "no scenario with id \"nope\""),
        (
            json!({"scenarioId": "lunch", "audience": {"answered": ["nope"]}}),
            "no scenario with id \"nope\"",
        ),
        (
            json!({"scenarioId": "lunch", "audience": {"tags": {"anyOf": []}}}),
            "tags.anyOf is an empty list",
        ),
        (
            json!({"scenarioId": "lunch", "audience": {"tags": {"anyOf": too_many}}}),
            "31 tags; at most 30",
        ),
        (
            json!({"scenarioId": "lunch", "audience": {"firstSeenFrom": "2026-12-01", "firstSeenTo": "2026-11-01"}}),
            "firstSeenFrom 2026-12-01 is after firstSeenTo 2026-11-01",
        ),
        (
            json!({"scenarioId": "lunch", "audience": {"firstSeenFrom": "1 Dec"}}),
            "is not a date (YYYY-MM-DD)",
        ),
        (
            json!({"scenarioId": "lunch", "callsPerSecond": 500}),
            "callsPerSecond must be 1 to 200",
        ),
        (
            json!({"scenarioId": "lunch", "audience": {"tag": ["a"]}}),
            "unknown field",
        ),
        (json!({"userIds": []}), "body must be"),
    ];
    for (body, expected) in cases {
        for dry_run in [false, true] {
            let mut body = body.clone();
            if body.get("scenarioId").is_some() {
                body["dryRun"] = json!(dry_run);
            }
            let response = post_campaign(&app.address, &body, Some("bad")).await;
            assert_eq!(response.status(), 400, "{body}");
            let error: Value = response.json().await.unwrap();
            let message = error["error"].as_str().unwrap();
            assert!(message.contains(expected), "{body}: {message}");
        }
    }
    let unkeyed = post_campaign(&app.address, &json!({"scenarioId": "lunch"}), None).await;
    assert_eq!(unkeyed.status(), 400, "a campaign needs an Idempotency-Key");
    assert_eq!(app.firestore.count("campaigns").await, 0);
    assert!(app.line.calls().is_empty());
    let missing = app
        .get_admin("/admin/campaigns/0123456789012345678901234567890123456789")
        .await;
    assert_eq!(missing.status(), 404);
    let garbage = app.get_admin("/admin/campaigns/..%2Fusers").await;
    assert_eq!(garbage.status(), 404);
}

#[tokio::test]
async fn two_concurrent_posts_with_one_key_make_one_campaign() {
    let app = spawn_app().await;
    let users = seed_users(&app.firestore, 1200, |i| i % 3 != 0, |_| false).await;
    let expected = segment(&users, |i| i % 3 != 0);
    let body = unsatisfied();
    let (first, second) = tokio::join!(
        post_campaign(&app.address, &body, Some("one-key")),
        post_campaign(&app.address, &body, Some("one-key")),
    );
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (202, 202));
    let first: Value = first.json().await.unwrap();
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["campaignId"], second["campaignId"]);
    let id = first["campaignId"].as_str().unwrap();
    let other = json!({"scenarioId": "news"});
    let reused = post_campaign(&app.address, &other, Some("one-key")).await;
    assert_eq!(reused.status(), 422);

    wait_for_state(&app.address, id, "done", Duration::from_secs(60)).await;
    // A retry after it ended is still the same campaign, and sends nothing.
    let again = post_campaign(&app.address, &body, Some("one-key")).await;
    assert_eq!(again.status(), 202);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["campaignId"], json!(id), "the same campaign");
    // Created (or found) before the answer, and a campaign that is done
    // sends nothing more: no wait proves more than its state.
    assert_eq!(campaign_status(&app.address, id).await["state"], "done");
    assert_nothing_left_to_send(&app, id).await;
    assert_eq!(app.firestore.count("campaigns").await, 1);
    assert_each_exactly_once(&app.line, &expected);
    let listed: Value = app.get_admin("/admin/campaigns").await.json().await.unwrap();
    assert_eq!(listed["campaigns"].as_array().unwrap().len(), 1);
    assert_eq!(listed["campaigns"][0]["sent"], json!(expected.len()));
}

#[tokio::test]
async fn line_429s_and_lost_answers_change_nothing_for_the_users() {
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.campaign_calls_per_second = 50,
        ..TestOptions::default()
    })
    .await;
    let users = seed_users(&app.firestore, 10_000, |_| true, |i| i % 100 == 7).await;
    let expected = segment(&users, |i| i % 100 != 7);
    // At least one of each for sure, then 30% 429s and 20% 500s after accepting.
    app.line
        .fail_next_multicasts([Fault::RateLimit { retry_after_secs: 1 }, Fault::AcceptThenFail]);
    app.line.fail_multicasts_randomly(0.3, 0.2);
    let id = start_campaign(&app.address, &unsatisfied(), "faulty-line").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(180)).await;

    assert_each_exactly_once(&app.line, &expected);
    assert_eq!(count(&status, "sent"), expected.len() as u64);
    assert_eq!(count(&status, "failed"), 0);
    let statuses: Vec<u16> = app.line.calls().iter().map(|call| call.status).collect();
    let rate_limited = statuses.iter().filter(|status| **status == 429).count();
    let repeats = statuses.iter().filter(|status| **status == 409).count();
    assert!(
        rate_limited >= 1 && repeats >= 1,
        "429s: {rate_limited}, 409s: {repeats}"
    );
    // Each chunk's calls carried one retry key, and it was accepted once.
    for (key, calls) in app.line.calls_by_retry_key() {
        assert_eq!(calls.iter().filter(|call| call.accepted).count(), 1, "{key}");
    }
}

#[tokio::test]
async fn a_chunk_line_refuses_is_parked_with_its_error_and_user_count() {
    let app = spawn_app().await;
    let users = seed_users(&app.firestore, 700, |_| true, |_| false).await;
    app.line.fail_next_multicasts([Fault::Refuse(400)]);
    let id = start_campaign(&app.address, &unsatisfied(), "refused").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(60)).await;
    let letters: Value = app.get_admin("/admin/dead-letters").await.json().await.unwrap();
    let letters = letters["deadLetters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter["kind"], "campaign_chunk");
    assert_eq!(letter["campaignId"], json!(id));
    let refused = letter["userCount"].as_u64().unwrap();
    assert!(letter["reason"].as_str().unwrap().contains("400"), "{letter}");
    assert_eq!(count(&status, "failed"), refused);
    assert_eq!(count(&status, "sent") + refused, users.len() as u64);
    assert_eq!(
        app.line.multicast_deliveries().len() as u64,
        users.len() as u64 - refused
    );
    let replay = app
        .post_admin(&format!(
            "/admin/dead-letters/{}/replay",
            letter["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(replay.status(), 409);
}

#[tokio::test]
async fn a_monthly_limit_429_parks_the_chunk_instead_of_retrying_for_ever() {
    let app = spawn_app().await;
    seed_users(&app.firestore, 10, |_| true, |_| false).await;
    app.line.fail_next_multicasts([Fault::MonthlyLimit]);
    let id = start_campaign(&app.address, &unsatisfied(), "monthly").await;
    let status = wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    assert_eq!(count(&status, "failed"), 10, "{status}");
    assert_eq!(app.line.calls().len(), 1, "not retried");
    let letters: Value = app.get_admin("/admin/dead-letters").await.json().await.unwrap();
    let reason = letters["deadLetters"][0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("monthly limit"), "{reason}");
}

#[tokio::test]
async fn a_cancel_while_the_audience_is_read_sends_nothing() {
    let app = spawn_app_with(TestOptions {
        // A short lease: the heartbeat renews (and reads the campaign) every 2.3 s
        // while 12,000 users are read.
        adjust: |config| config.lease = Duration::from_millis(7000),
        ..TestOptions::default()
    })
    .await;
    seed_users(&app.firestore, 12_000, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &unsatisfied(), "cancel-planning").await;
    let seen = campaign_status(&app.address, &id).await;
    let cancelled = app.post_admin(&format!("/admin/campaigns/{id}/cancel")).await;
    assert_eq!(cancelled.status(), 200);
    let status = wait_for_state(&app.address, &id, "cancelled", Duration::from_secs(120)).await;
    // Cancelled is the driver's last word: no chunk is left that a plan which
    // ignored the cancel could still send.
    assert_nothing_left_to_send(&app, &id).await;
    assert!(
        app.line.calls().is_empty(),
        "nothing is sent (it was {} when cancelled)",
        seen["state"]
    );
    assert_eq!(count(&status, "sent"), 0);
    assert_eq!(campaign_status(&app.address, &id).await["state"], "cancelled");
}

#[tokio::test]
async fn cancel_mid_way_stops_sending_and_the_counts_add_up() {
    let app = spawn_app().await;
    let users = seed_users(&app.firestore, 6000, |_| true, |_| false).await;
    let mut body = unsatisfied();
    body["callsPerSecond"] = json!(2);
    let id = start_campaign(&app.address, &body, "cancel-me").await;
    crate::helpers::wait_until(Duration::from_secs(30), || !app.line.multicast_deliveries().is_empty()).await;
    let cancelled = app.post_admin(&format!("/admin/campaigns/{id}/cancel")).await;
    assert_eq!(cancelled.status(), 200);
    let status = wait_for_state(&app.address, &id, "cancelled", Duration::from_secs(60)).await;
    let calls_then = app.line.calls().len();
    // Every chunk has ended (sent or skipped): none is left to send.
    assert_eq!(count(&status, "pending"), 0, "{status}");
    assert_nothing_left_to_send(&app, &id).await;
    assert_eq!(
        app.line.calls().len(),
        calls_then,
        "nothing is sent after the cancel settled"
    );

    let received = app.line.multicast_deliveries();
    assert!(received.values().all(|times| *times == 1));
    let (sent, skipped) = (count(&status, "sent"), count(&status, "skipped"));
    assert_eq!(sent, received.len() as u64, "sent counts what users received");
    assert!(skipped > 0, "{status}");
    assert_eq!(count(&status, "planned"), users.len() as u64);
    assert_eq!(
        sent + skipped + count(&status, "failed"),
        users.len() as u64,
        "{status}"
    );
    let again = app.post_admin(&format!("/admin/campaigns/{id}/cancel")).await;
    assert_eq!(again.status(), 200, "a cancel repeated is fine");
}

#[tokio::test]
async fn answers_to_a_campaign_go_through_guard_1() {
    let app = spawn_app().await;
    let users = seed_users(&app.firestore, 3, |_| true, |_| false).await;
    let id = start_campaign(&app.address, &unsatisfied(), "answers").await;
    wait_for_state(&app.address, &id, "done", Duration::from_secs(30)).await;
    let multicast = app.line.accepted().into_iter().find(Call::is_multicast).expect("sent");
    // The survey's first button, as the users got it.
    let data = find_postback_data(&multicast.body).expect("a button");
    for user in &users {
        // A double tap: two events, delivered at once.
        let (first, second) = (postback(user, &data), postback(user, &data));
        tokio::join!(app.deliver(&first), app.deliver(&second));
    }
    app.firestore.settled(Duration::from_secs(20)).await;
    assert_eq!(app.firestore.count("survey_responses").await, users.len());
}

/// The first postback `data` in a message body.
fn find_postback_data(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => {
            if map.get("type") == Some(&json!("postback"))
                && let Some(data) = map.get("data").and_then(Value::as_str)
            {
                return Some(data.to_owned());
            }
            map.values().find_map(find_postback_data)
        }
        Value::Array(items) => items.iter().find_map(find_postback_data),
        _ => None,
    }
}

#[tokio::test]
async fn sigkill_mid_campaign_then_restart_sends_to_nobody_twice_and_misses_nobody() {
    const USERS: usize = 8000;
    let project = new_project_id();
    let line = LineStandIn::start().await;
    // Slow answers: when the process dies some calls are on their way.
    line.set_latency(Duration::from_millis(400));
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let users = seed_users(&firestore, USERS, |_| true, |_| false).await;
    let expected: HashSet<String> = users.into_iter().collect();
    let settings = [("CAMPAIGN_CALLS_PER_SECOND", "4")];
    let mut first = ServiceProcess::start(&project, &line.uri(), &settings).await;
    let id = start_campaign(&first.address, &unsatisfied(), "killed").await;
    crate::helpers::wait_until(Duration::from_secs(60), || line.calls().len() >= 3).await;
    first.kill();
    let before = line.multicast_deliveries().len();
    let restarted = ServiceProcess::start(&project, &line.uri(), &settings).await;
    let status = wait_for_state(&restarted.address, &id, "done", Duration::from_secs(120)).await;

    assert!(before < expected.len(), "killed mid-way: {before} had it");
    assert_each_exactly_once(&line, &expected);
    assert_eq!(count(&status, "sent"), expected.len() as u64);
    let per_key: HashMap<String, usize> = line
        .calls_by_retry_key()
        .into_iter()
        .map(|(key, calls)| (key, calls.iter().filter(|call| call.accepted).count()))
        .collect();
    assert!(per_key.values().all(|accepted| *accepted == 1), "{per_key:?}");
    println!("{before} users had it when the process was killed");
}
