//! Crash recovery, several instances and graceful shutdown, with the real binary
//! as separate processes against one emulator and one LINE stand-in.

use crate::helpers::firestore_rest::FirestoreRest;
use crate::helpers::line_stand_in::LineStandIn;
use crate::helpers::process::ServiceProcess;
use crate::helpers::storm::{IN_FLIGHT, Storm, effects, exactly_once, post_event, send_all};
use crate::helpers::{emulator_host, events, new_project_id};
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// Three instances of `project` with `settings`, and the storm's starts sent
/// to them and settled.
async fn three_started(
    project: &str,
    line: &LineStandIn,
    firestore: &FirestoreRest,
    storm: &Storm,
    settings: &[(&str, &str)],
) -> [ServiceProcess; 3] {
    let instances = [
        ServiceProcess::start(project, &line.uri(), settings).await,
        ServiceProcess::start(project, &line.uri(), settings).await,
        ServiceProcess::start(project, &line.uri(), settings).await,
    ];
    let addresses: Vec<String> = instances.iter().map(|instance| instance.address.clone()).collect();
    assert!(
        send_all(&storm.starts, |index| addresses[index % 3].clone())
            .await
            .is_empty()
    );
    firestore.settled(Duration::from_secs(60)).await;
    instances
}

/// What a storm with a kill left.
struct Killed {
    /// The taps no instance acknowledged (LINE redelivers them).
    unacknowledged: Vec<serde_json::Value>,
    /// The users whose taps the killed instance acknowledged: their work was
    /// its own, and only a takeover can finish what it had not.
    held_by_the_killed: HashSet<String>,
    at: Option<Instant>,
}

/// The storm's taps, spread over the instances, [`IN_FLIGHT`] at once; the
/// first instance is SIGKILLed when `kill_now(acknowledged, elapsed)` first
/// holds.
async fn taps_with_a_kill(
    storm: &Storm,
    instances: &mut [ServiceProcess; 3],
    kill_now: impl Fn(usize, Duration) -> bool,
) -> Killed {
    let addresses: Vec<String> = instances.iter().map(|instance| instance.address.clone()).collect();
    let client = reqwest::Client::new();
    let mut pending = storm.taps.iter().enumerate();
    let mut running = FuturesUnordered::new();
    let mut unacknowledged = Vec::new();
    let mut held_by_the_killed = HashSet::new();
    let mut acknowledged = 0;
    let began = Instant::now();
    let mut killed_at = None;
    loop {
        while running.len() < IN_FLIGHT
            && let Some((index, event)) = pending.next()
        {
            let (client, address) = (client.clone(), addresses[index % 3].clone());
            running.push(async move { (index, event.clone(), post_event(&client, &address, event).await) });
        }
        let Some((index, event, result)) = running.next().await else {
            break;
        };
        match result {
            Ok(200) => {
                acknowledged += 1;
                if index % 3 == 0
                    && let Some(user) = event["source"]["userId"].as_str()
                {
                    held_by_the_killed.insert(user.to_owned());
                }
            }
            _ => unacknowledged.push(event),
        }
        if killed_at.is_none() && kill_now(acknowledged, began.elapsed()) {
            instances[0].kill();
            killed_at = Some(Instant::now());
        }
    }
    Killed {
        unacknowledged,
        held_by_the_killed,
        at: killed_at,
    }
}

#[tokio::test]
async fn one_of_three_instances_killed_mid_storm_and_restarted_loses_nothing_and_doubles_nothing() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    // Slow LINE answers keep replies in flight when the process dies.
    line.set_latency(Duration::from_millis(30));
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let storm = Storm::new(120);
    let mut instances = three_started(&project, &line, &firestore, &storm, &[]).await;
    let addresses: Vec<String> = instances.iter().map(|instance| instance.address.clone()).collect();
    // The first is killed with SIGKILL once a third of the taps are acknowledged.
    let third = storm.taps.len() / 3;
    let Killed { unacknowledged, at, .. } =
        taps_with_a_kill(&storm, &mut instances, |acknowledged, _| acknowledged >= third).await;
    let killed = at.is_some();
    assert!(killed && !unacknowledged.is_empty(), "the kill happened mid-storm");

    // LINE redelivers what was not acknowledged, to the live instances; the killed
    // one comes back.
    let redeliveries: Vec<_> = unacknowledged.iter().map(events::redelivered).collect();
    assert!(
        send_all(&redeliveries, |index| addresses[1 + index % 2].clone())
            .await
            .is_empty()
    );
    instances[0] = ServiceProcess::start(&project, &line.uri(), &[]).await;
    firestore.settled(Duration::from_secs(60)).await;
    assert!(
        instances
            .iter()
            .any(|instance| instance.log_text().contains("taking over")),
        "the kill left work to recover"
    );

    // A reply that was due when its process died is retried with its own token
    // (LINE refuses a used one): every user got the next question exactly once.
    for (user, got) in effects(&storm, &firestore, &line).await {
        assert_eq!(got, exactly_once(), "{user}");
    }
    assert_eq!(firestore.count("dead_letters").await, 0);
    println!(
        "{} taps, {} unacknowledged at the kill",
        storm.taps.len(),
        unacknowledged.len()
    );
}

#[tokio::test]
async fn with_pushes_a_killed_process_is_recovered_exactly_once() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    // LINE answers slowly, so work is surely still queued when the process dies.
    line.set_latency(Duration::from_millis(200));
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let storm = Storm::new(40);
    // Reply tokens are never used: every send is a push with a retry key.
    let push_only = [("REPLY_TOKEN_MAX_AGE_SECS", "0")];
    let mut first = ServiceProcess::start(&project, &line.uri(), &push_only).await;
    assert!(send_all(&storm.starts, |_| first.address.clone()).await.is_empty());
    firestore.settled(Duration::from_secs(30)).await;

    let half = storm.taps.len() / 2;
    let mut unacknowledged = send_all(&storm.taps[..half], |_| first.address.clone()).await;
    // Killed right after acknowledging: its queue and its sends are cut short.
    first.kill();
    unacknowledged.extend(storm.taps[half..].iter().cloned());

    let second = ServiceProcess::start(&project, &line.uri(), &push_only).await;
    let redeliveries: Vec<_> = unacknowledged.iter().map(events::redelivered).collect();
    assert!(send_all(&redeliveries, |_| second.address.clone()).await.is_empty());
    firestore.settled(Duration::from_secs(60)).await;
    assert!(
        second.log_text().contains("taking over an expired event"),
        "the kill left work to recover"
    );

    for (user, got) in effects(&storm, &firestore, &line).await {
        assert_eq!(got, exactly_once(), "{user}");
    }
}

#[tokio::test]
async fn three_instances_sharing_a_duplicate_storm_act_exactly_once() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let storm = Storm::new(60);
    let settings = [("LEASE_MS", "10000")];
    let instances = [
        ServiceProcess::start(&project, &line.uri(), &settings).await,
        ServiceProcess::start(&project, &line.uri(), &settings).await,
        ServiceProcess::start(&project, &line.uri(), &settings).await,
    ];
    let spread = |index: usize| instances[index % 3].address.clone();

    assert!(send_all(&storm.starts, spread).await.is_empty());
    firestore.settled(Duration::from_secs(30)).await;
    // The taps shuffled, each to the next instance: duplicates of one user's tap
    // (and the redelivery) land on different instances at the same time.
    assert!(send_all(&storm.taps, spread).await.is_empty());
    firestore.settled(Duration::from_secs(30)).await;

    for (user, got) in effects(&storm, &firestore, &line).await {
        assert_eq!(got, exactly_once(), "{user}");
    }
    assert_eq!(firestore.count("webhook_inbox").await, storm.users.len() * 4);
}

#[tokio::test]
async fn sigterm_hands_queued_work_back_and_another_instance_finishes_it() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    line.set_latency(Duration::from_millis(300));
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    // A lease far longer than the test: only handing work back lets it finish.
    let settings = [
        ("LEASE_MS", "120000"),
        ("WORKER_COUNT", "2"),
        ("SHUTDOWN_GRACE_MS", "4000"),
    ];
    let mut first = ServiceProcess::start(&project, &line.uri(), &settings).await;
    let users: Vec<String> = (0..20).map(|_| events::new_user()).collect();
    let news: Vec<_> = users.iter().map(|user| events::text(user, "news")).collect();
    assert!(send_all(&news, |_| first.address.clone()).await.is_empty());

    let stopping = Instant::now();
    first.terminate();
    let status = first
        .wait_exit(Duration::from_secs(8))
        .await
        .expect("the process exits within its grace period");
    assert!(status.success(), "clean exit: {status}; log: {}", first.log_text());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "stopped in {:?}",
        stopping.elapsed()
    );
    let sent_before_stop = line.accepted().len();
    assert!(sent_before_stop < users.len(), "some work was still queued at SIGTERM");

    let second = ServiceProcess::start(&project, &line.uri(), &settings).await;
    firestore.settled(Duration::from_secs(30)).await;
    drop(second);

    let news_text = "Today's news: the cafeteria has a new menu.";
    assert_eq!(
        line.accepted_with_text(news_text),
        users.len(),
        "every user got the news once"
    );
    assert!(first.log_text().contains("handed back"), "log: {}", first.log_text());
}

/// With the default lease (30 s) and sweep interval, one of three instances is
/// SIGKILLed 1 s into a storm of taps: every user whose next question it held
/// gets it within 15 s of the kill (the others take it for dead when its
/// heartbeat stops, without waiting for its leases), exactly once, and each
/// still as a reply (its token is fresh), never a push.
#[tokio::test]
async fn a_killed_instances_users_get_their_next_question_within_15_s_with_default_settings() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    // Slow LINE answers keep work in the killed instance's hands.
    line.set_latency(Duration::from_millis(300));
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let storm = Storm::new(200);
    let defaults = [
        ("LEASE_MS", "30000"),
        ("SWEEP_INTERVAL_MS", "2000"),
        ("LINE_TIMEOUT_MS", "5000"),
    ];
    let mut instances = three_started(&project, &line, &firestore, &storm, &defaults).await;
    let addresses: Vec<String> = instances.iter().map(|instance| instance.address.clone()).collect();
    // 1 s in, or once a quarter of the taps are acknowledged if that comes first
    // (a fast machine).
    let quarter = storm.taps.len() / 4;
    let Killed {
        unacknowledged,
        held_by_the_killed,
        at,
    } = taps_with_a_kill(&storm, &mut instances, |acknowledged, elapsed| {
        elapsed >= Duration::from_secs(1) || acknowledged >= quarter
    })
    .await;
    let killed_at = at.expect("the kill happened mid-storm");
    // LINE redelivers what was not acknowledged, to the live instances.
    let redeliveries: Vec<_> = unacknowledged.iter().map(events::redelivered).collect();
    assert!(
        send_all(&redeliveries, |index| addresses[1 + index % 2].clone())
            .await
            .is_empty()
    );
    firestore.settled(Duration::from_secs(40)).await;

    for (user, got) in effects(&storm, &firestore, &line).await {
        assert_eq!(got, exactly_once(), "{user}");
    }
    // Each user's next question: when LINE took it, and by which route.
    let tokens = storm.reply_tokens();
    // The users whose work the killed instance held and had not finished:
    // their follow-ups came after the kill, so a takeover sent them.
    let mut latest = Duration::ZERO;
    let mut after_kill = 0;
    for call in line.accepted() {
        if !call
            .messages()
            .iter()
            .any(|message| message["template"]["text"] == crate::helpers::storm::FOLLOW_UP)
        {
            continue;
        }
        let user = call
            .reply_token()
            .and_then(|token| tokens.get(token))
            .cloned()
            .or_else(|| call.to().map(str::to_owned));
        assert!(
            call.reply_token().is_some(),
            "{user:?}: a fresh token's follow-up is a reply, not a push"
        );
        if !user.is_some_and(|user| held_by_the_killed.contains(&user)) {
            continue;
        }
        if let Some(late) = call.answered_at().checked_duration_since(killed_at) {
            after_kill += 1;
            latest = latest.max(late);
        }
    }
    println!(
        "{after_kill} follow-ups of the killed instance's users after the kill, the last {:.1} s after it; {} unacknowledged",
        latest.as_secs_f64(),
        unacknowledged.len()
    );
    assert!(after_kill > 0, "the killed instance left its users' follow-ups unsent");
    assert!(
        instances[1..]
            .iter()
            .any(|instance| instance.log_text().contains("taken_for_dead")),
        "the dead instance was noticed"
    );
    assert!(
        latest <= Duration::from_secs(15),
        "the last follow-up came {:.1} s after the kill",
        latest.as_secs_f64()
    );
}

/// The one ledger entry of `project` once `ready` holds for it (polled, up to
/// 30 s).
async fn the_entry_once(firestore: &FirestoreRest, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let entries = firestore.list("outbound_ledger").await;
        assert!(entries.len() <= 1, "one action, one entry: {entries:?}");
        if let Some(entry) = entries.into_iter().next().filter(|entry| ready(entry)) {
            return entry;
        }
        assert!(Instant::now() < deadline, "the ledger entry never got there");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process paused by `FAULT_PAUSE=pause` in the send of a start's opening,
/// its event `age_ms` old; the stand-in keeps reply tokens `token_lifetime`.
struct Paused {
    project: String,
    line: LineStandIn,
    firestore: FirestoreRest,
    user: String,
    first: ServiceProcess,
}

async fn paused_after_a_start(pause: &str, token_lifetime: Option<Duration>, age_ms: i64) -> Paused {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    if let Some(lifetime) = token_lifetime {
        line.set_reply_token_lifetime(lifetime);
    }
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let user = events::new_user();
    let first = ServiceProcess::start(&project, &line.uri(), &[("FAULT_PAUSE", pause)]).await;
    // Aged from now: the process's start-up takes none of the token's life.
    let start = events::with_timestamp(&events::text(&user, "lunch"), events::now_ms() - age_ms);
    let status = post_event(&reqwest::Client::new(), &first.address, &start)
        .await
        .unwrap();
    assert_eq!(status, 200);
    Paused {
        project,
        line,
        firestore,
        user,
        first,
    }
}

/// Each call LINE got, in order: whether it was a reply, and its status.
fn replies_and_statuses(line: &LineStandIn) -> Vec<(bool, u16)> {
    line.calls()
        .iter()
        .map(|call| (call.reply_token().is_some(), call.status))
        .collect()
}

async fn until_line_accepted_one(line: &LineStandIn) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while line.accepted().is_empty() {
        assert!(Instant::now() < deadline, "the first process never replied");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn reply_call_pending(entry: &serde_json::Value) -> Option<bool> {
    entry["fields"]["replyCallPending"]["booleanValue"].as_bool()
}

fn state(entry: &serde_json::Value) -> String {
    crate::helpers::firestore_rest::string_field(entry, "state").unwrap_or_default()
}

/// A process SIGKILLed after the commit that recorded a start's opening and
/// before its reply call: the entry says no call was made, so the instance that
/// takes it over reads LINE's 400 "Invalid reply token" as "refused", not "used
/// by the dead one" (the stand-in keeps tokens 30 s; the service allows 50 s, so
/// the 35 s old token still looks fresh to it), and pushes the opening: the
/// user gets it once instead of never.
#[tokio::test]
async fn a_reply_the_dead_process_never_made_is_pushed_when_line_refuses_its_token() {
    let Paused {
        project,
        line,
        firestore,
        user,
        mut first,
    } = paused_after_a_start("before_reply_call", Some(Duration::from_secs(30)), 35_000).await;
    let entry = the_entry_once(&firestore, |_| true).await;
    assert_eq!(state(&entry), "pending");
    assert_eq!(reply_call_pending(&entry), Some(false), "{entry}");
    first.kill();
    assert!(line.calls().is_empty(), "the killed process made no call");

    let second = ServiceProcess::start(&project, &line.uri(), &[]).await;
    let entry = the_entry_once(&firestore, |entry| state(entry) != "pending").await;
    assert_eq!(state(&entry), "sent", "{entry}");
    let calls = replies_and_statuses(&line);
    assert_eq!(calls, [(true, 400), (false, 200)], "a refused reply, then one push");
    let received: Vec<String> = line
        .accepted()
        .iter()
        .flat_map(crate::helpers::line_stand_in::Call::texts)
        .collect();
    assert_eq!(line.accepted().len(), 1, "the opening arrived once: {received:?}");
    assert_eq!(line.accepted()[0].to(), Some(user.as_str()));
    assert!(second.log_text().contains("pushing instead"), "{}", second.log_text());
}

/// A process SIGKILLed after LINE accepted its reply and before it recorded
/// that: the entry says a call was about to be made, so the successor's retry
/// with the same token, answered 400 while the token is fresh, is "sent", and
/// nothing is pushed.
#[tokio::test]
async fn a_reply_made_before_the_kill_is_recorded_sent_and_never_pushed() {
    let Paused {
        project,
        line,
        firestore,
        user: _,
        mut first,
    } = paused_after_a_start("after_reply_call", None, 0).await;
    let entry = the_entry_once(&firestore, |entry| reply_call_pending(entry) == Some(true)).await;
    assert_eq!(state(&entry), "pending");
    until_line_accepted_one(&line).await;
    first.kill();

    let _second = ServiceProcess::start(&project, &line.uri(), &[]).await;
    let entry = the_entry_once(&firestore, |entry| state(entry) != "pending").await;
    assert_eq!(state(&entry), "sent", "{entry}");
    let calls = replies_and_statuses(&line);
    assert_eq!(calls, [(true, 200), (true, 400)], "the same token twice, no push");
    assert_eq!(line.accepted().len(), 1);
}

/// The same kill, but the successor allows tokens only 10 s and this one is
/// 20 s old: a call may have used it and it may have expired, so the entry is
/// uncertain (a dead letter an operator can replay), never pushed.
#[tokio::test]
async fn a_reply_made_before_the_kill_whose_token_may_have_expired_is_uncertain() {
    let Paused {
        project,
        line,
        firestore,
        user: _,
        mut first,
    } = paused_after_a_start("after_reply_call", None, 20_000).await;
    until_line_accepted_one(&line).await;
    first.kill();

    let _second = ServiceProcess::start(&project, &line.uri(), &[("REPLY_TOKEN_MAX_AGE_SECS", "10")]).await;
    let entry = the_entry_once(&firestore, |entry| state(entry) != "pending").await;
    assert_eq!(state(&entry), "uncertain", "{entry}");
    assert_eq!(
        entry["fields"]["replyOutcomeUnknown"]["booleanValue"].as_bool(),
        Some(true),
        "a replay names the risk: {entry}"
    );
    assert_eq!(line.calls().len(), 1, "no second call, no push");
    assert_eq!(firestore.list("dead_letters").await.len(), 1);
}
