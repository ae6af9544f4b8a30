//! The load benchmark. Run it with `./scripts/bench.sh` (which starts a fresh
//! Firestore emulator); options: `--users N` (default 500), `--in-flight 32,64`,
//! `--set NAME=VALUE` (a service setting), `--soak [SECONDS]` and `--rate N`.
//!
//! Per level of requests in flight it measures the emulator's raw capacity, then
//! starts the release binary and drives: every user starts the lunch survey with
//! a text message; then every user taps the first choice three times plus one
//! redelivery of the first tap, all shuffled. It reports events per second,
//! acknowledgement latency (and its p99 over the raw create p99 of the same
//! level, target at most 3x), the time from each user's first tap request to
//! the stand-in receiving that user's follow-up (p50 and p99 over users), CPU
//! per event, peak RSS, start-up time and Firestore round trips per kind of
//! event, and fails when any effect is missing or doubled.
//!
//! `--soak [SECONDS]` (default 300) runs the soak instead (`soak.rs`): one
//! release binary, mixed traffic of every webhook event kind at `--rate N`
//! requests per second (default 400, 16 in flight at most), reported per
//! 30-second window with three PASS/FAIL checks (p99 drift, no 5xx, RSS growth);
//! it exits with 1 when a check fails. No raw-capacity or storm levels run.
//!
//! `--timers N` seeds N step timers due in the same second and reports the time
//! until all are pushed beside the raw creates per second of the same run, the
//! peak memory above idle and the Firestore round trips per timer (`timers.rs`).
//!
//! `--campaign N` seeds N following users tagged `bench` (and N/10 untagged),
//! sends one campaign of the lunch survey to the tag at 200 calls per second and
//! reports recipients per second from the POST until `done` (planning and
//! sending apart), Firestore documents read and written per recipient (counted
//! on the wire by a proxy), the peak memory above idle, and fails unless every
//! tagged user got exactly one multicast (`campaign.rs`).
//!
//! `--export N` seeds N answers and downloads them as CSV from one release
//! binary, reporting rows per second and the service's memory while it streams;
//! it fails unless every answer is in the file exactly once (`export.rs`).
//!
//! `--overflow [N]` (default 4,000) sends a burst of N survey starts to one
//! binary whose queue holds 16 jobs (`QUEUE_CAPACITY`, unless `--set`), and
//! reports the drain of what overflowed (`overflow.rs`).
//!
//! `--decisions [N]` compares a plain survey with the same messages through a
//! split, a branch and `{name}` (`decisions.rs`): CPU per event, ack p99 and
//! round trips per decision, in one run.
//!
//! `--chaos [SECONDS]` (default 1800) runs three release instances behind one
//! webhook address while instances are killed, Firestore's connection is cut
//! and stalled and LINE fails, with new users at `--rate N` a second (default
//! 2) taking a survey the way people do, and a campaign now and then; after
//! the chaos it counts every stored answer, tag and received message against
//! what each user did and exits with 1 on one lost or doubled (`chaos/`).
// Test and benchmark code may panic on what it set up itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod campaign;
mod catalogue;
mod chaos;
mod decisions;
mod driver;
mod events;
mod export;
mod overflow;
mod raw;
mod service;
mod soak;
mod stand_in;
// The suite's TCP fault proxy, shared so the chaos run cuts and stalls
// Firestore's connection the way the tests do.
#[allow(dead_code)]
#[path = "../../tests/api/helpers/tcp_proxy.rs"]
mod tcp_proxy;
mod timers;

use driver::{ms, quantile, send_all};
use serde_json::Value;
use service::{CHANNEL_SECRET, Service};
use stand_in::{Received, StandIn};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A path inside the checkout. Read from the environment at run time (`cargo
/// bench` sets `CARGO_MANIFEST_DIR` for what it runs), not baked in at compile
/// time: the release target directory outlives the clone that built it.
fn repo_path(relative: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        )
        .join(relative)
}

const RAW_CREATES: usize = 4000;
/// Target: the acknowledgement p99 at most this many times the raw create p99.
const ACK_OVER_RAW_TARGET: f64 = 3.0;

struct Args {
    users: usize,
    levels: Vec<usize>,
    /// Extra settings for the service, `--set NAME=VALUE` (e.g. WORKER_COUNT=8).
    settings: Vec<(String, String)>,
    /// `--soak [SECONDS]`: run the soak for that long instead of the levels.
    soak: Option<Duration>,
    /// `--rate N`: the soak's requests per second, or the chaos run's new users per second.
    rate: Option<u32>,
    /// `--chaos [SECONDS]`: three instances under faults for that long.
    chaos: Option<u64>,
    /// `--timers N`: fire N timers due at once instead of the levels.
    timers: Option<usize>,
    /// `--campaign N`: send one campaign to N tagged users instead of the levels.
    campaign: Option<usize>,
    /// With `--campaign`: `--reminder` (a survey with a reminder, so each
    /// recipient's run has a timer) and `--not-answered` (half the tagged users
    /// answered another survey, which the audience leaves out).
    campaign_options: campaign::Options,
    /// `--export N`: download N seeded answers as CSV instead of the levels.
    export: Option<usize>,
    /// `--decisions [N]`: plain against deciding scenarios, N users a round.
    decisions: Option<usize>,
    /// `--overflow [N]`: a burst of N starts into a 16-job queue, and its drain.
    overflow: Option<usize>,
}

const USAGE: &str = "use --users N --in-flight 32,64 --set NAME=VALUE, or --soak [SECONDS] --rate N, or --timers N, or --campaign N [--reminder] [--not-answered], or --export N, or --decisions [N], or --overflow [N], or --chaos [SECONDS] --rate N";

fn args() -> Args {
    let mut args = Args {
        users: 500,
        levels: vec![32, 64],
        settings: Vec::new(),
        soak: None,
        rate: None,
        chaos: None,
        timers: None,
        campaign: None,
        campaign_options: campaign::Options::default(),
        export: None,
        decisions: None,
        overflow: None,
    };
    let mut raw = std::env::args().skip(1).peekable();
    while let Some(arg) = raw.next() {
        match arg.as_str() {
            "--users" => args.users = raw.next().and_then(|n| n.parse().ok()).expect("--users N"),
            "--in-flight" => {
                args.levels = raw
                    .next()
                    .map(|list| list.split(',').map(|n| n.parse().expect("--in-flight 32,64")).collect())
                    .expect("--in-flight 32,64");
            }
            "--set" => {
                let setting = raw.next().expect("--set NAME=VALUE");
                let (name, value) = setting.split_once('=').expect("--set NAME=VALUE");
                args.settings.push((name.to_owned(), value.to_owned()));
            }
            "--soak" => {
                let seconds = raw.next_if(|n| n.parse::<u64>().is_ok()).map(|n| n.parse().unwrap());
                let seconds = seconds.unwrap_or(soak::DEFAULT_SECONDS);
                assert!(seconds > 0, "--soak SECONDS must be above 0");
                args.soak = Some(Duration::from_secs(seconds));
            }
            "--chaos" => {
                let seconds = raw.next_if(|n| n.parse::<u64>().is_ok()).map(|n| n.parse().unwrap());
                let seconds = seconds.unwrap_or(chaos::DEFAULT_SECONDS);
                assert!(seconds > 0, "--chaos SECONDS must be above 0");
                args.chaos = Some(seconds);
            }
            "--rate" => {
                args.rate = raw
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|&n: &u32| n > 0)
                    .expect("--rate N (requests or new users per second, above 0)")
                    .into();
            }
            "--timers" => {
                let count = raw.next().and_then(|n| n.parse().ok()).filter(|&n: &usize| n > 0);
                args.timers = Some(count.expect("--timers N (above 0)"));
            }
            "--campaign" => {
                let count = raw.next().and_then(|n| n.parse().ok()).filter(|&n: &usize| n > 0);
                args.campaign = Some(count.expect("--campaign N (recipients, above 0)"));
            }
            "--reminder" => args.campaign_options.reminder = true,
            "--not-answered" => args.campaign_options.not_answered = true,
            "--export" => {
                let count = raw.next().and_then(|n| n.parse().ok()).filter(|&n: &usize| n > 0);
                args.export = Some(count.expect("--export N (answers, above 0)"));
            }
            "--decisions" => {
                let users = raw.next_if(|n| n.parse::<usize>().is_ok()).map(|n| n.parse().unwrap());
                args.decisions = Some(users.unwrap_or(500).max(1));
            }
            "--overflow" => {
                let count = raw.next_if(|n| n.parse::<usize>().is_ok()).map(|n| n.parse().unwrap());
                args.overflow = Some(count.unwrap_or(4000).max(1));
            }
            // `cargo bench` passes `--bench` to every benchmark.
            "--bench" => {}
            other => panic!("unknown argument {other}; {USAGE}"),
        }
    }
    args
}

/// Waits until the stand-in accepted `expected` calls in all; false on timeout.
async fn wait_for_calls(stand_in: &StandIn, expected: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while stand_in.accepted_calls() < expected {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

fn register(stand_in: &StandIn, events: &[Value]) {
    for event in events {
        stand_in.register_token(
            event["replyToken"].as_str().unwrap(),
            event["source"]["userId"].as_str().unwrap(),
        );
    }
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!("{} cores, {}", cores, model.unwrap_or_else(|| "unknown CPU".into()))
}

struct LevelReport {
    in_flight: usize,
    raw_creates_per_s: f64,
    raw_p50: Duration,
    raw_p99: Duration,
    events_per_s: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    /// From each user's first tap request to the stand-in receiving the user's
    /// follow-up, over users.
    tap_follow_up_p50: Duration,
    tap_follow_up_p99: Duration,
    cpu_ms_per_event: f64,
    /// During the storm: share of the machine's CPU in use, and the emulator's
    /// CPU in cores.
    machine_busy: f64,
    emulator_cores: Option<f64>,
    peak_rss_mib: f64,
    startup: Duration,
    problems: Vec<String>,
    round_trips: Value,
    settles: Value,
    claims: Value,
}

async fn run_level(emulator: &str, stand_in: &StandIn, line_url: &str, args: &Args, in_flight: usize) -> LevelReport {
    let users = args.users;
    let raw = raw::creates(emulator, in_flight, RAW_CREATES).await;
    let project = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let service = Service::start(&project, emulator, line_url, &args.settings).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(in_flight)
        .build()
        .unwrap();
    let base_calls = stand_in.accepted_calls();
    let mut problems = Vec::new();

    let user_ids: Vec<String> = (0..users).map(|_| events::new_user()).collect();
    let starts: Vec<Value> = user_ids.iter().map(|user| events::text(user, "lunch")).collect();
    let mut taps = Vec::new();
    for user in &user_ids {
        let first = events::answer(user);
        taps.push(events::redelivered(&first));
        taps.push(first);
        taps.push(events::answer(user));
        taps.push(events::answer(user));
    }
    events::shuffle(&mut taps);
    register(stand_in, &starts);
    register(stand_in, &taps);

    let cpu_before = service.cpu_time();
    let started = send_all(&client, &service.address, CHANNEL_SECRET, &starts, in_flight).await;
    if !wait_for_calls(stand_in, base_calls + users as u64, Duration::from_secs(120)).await {
        problems.push("not every survey start was sent".into());
    }
    let storm_began = Instant::now();
    let machine_before = service::machine_cpu();
    let emulator_pid: Option<u32> = std::env::var("EMULATOR_PID").ok().and_then(|pid| pid.parse().ok());
    let emulator_before = emulator_pid.and_then(service::process_cpu_time);
    let stormed = send_all(&client, &service.address, CHANNEL_SECRET, &taps, in_flight).await;
    if !wait_for_calls(stand_in, base_calls + 2 * users as u64, Duration::from_secs(120)).await {
        problems.push("not every follow-up was sent".into());
    }
    let storm_elapsed = storm_began.elapsed();
    let tap_follow_up = tap_to_follow_up(stand_in, &taps, &stormed.sent_at);
    let machine_after = service::machine_cpu();
    let machine_busy = (machine_after.0 - machine_before.0) as f64 / (machine_after.1 - machine_before.1).max(1) as f64;
    let emulator_cpu = match (emulator_pid.and_then(service::process_cpu_time), emulator_before) {
        (Some(after), Some(before)) => Some((after - before).as_secs_f64() / storm_elapsed.as_secs_f64()),
        _ => None,
    };
    // Anything sent twice would show up now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu_used = service.cpu_time() - cpu_before;
    let events_sent = starts.len() + taps.len();
    if started.failures + stormed.failures > 0 {
        problems.push(format!(
            "{} webhook requests were not acknowledged",
            started.failures + stormed.failures
        ));
    }
    problems.extend(check_effects(emulator, &project, stand_in, &user_ids).await);

    // A few events of each remaining kind, for the round-trip table.
    let probes = users.min(50);
    let fresh: Vec<String> = (0..probes).map(|_| events::new_user()).collect();
    let mut probe_events = Vec::new();
    for user in &user_ids[..probes] {
        probe_events.push(events::text(user, "lunch"));
        probe_events.push(events::text(user, "news"));
        probe_events.push(events::card_tap(user));
    }
    for user in &fresh {
        probe_events.push(events::card_tap(user));
    }
    register(stand_in, &probe_events);
    let before_probes = stand_in.accepted_calls();
    send_all(&client, &service.address, CHANNEL_SECRET, &probe_events, in_flight).await;
    // News for the answered users, the survey for the fresh ones.
    if !wait_for_calls(stand_in, before_probes + 2 * probes as u64, Duration::from_secs(60)).await {
        problems.push("not every probe was answered".into());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let metrics = service.metrics().await;
    let mut latencies: Vec<Duration> = started.latencies.iter().chain(&stormed.latencies).copied().collect();
    latencies.sort();
    LevelReport {
        in_flight,
        raw_creates_per_s: raw.per_second,
        raw_p50: quantile(&raw.latencies, 0.50),
        raw_p99: quantile(&raw.latencies, 0.99),
        events_per_s: taps.len() as f64 / storm_elapsed.as_secs_f64(),
        p50: quantile(&latencies, 0.50),
        p99: quantile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or_default(),
        tap_follow_up_p50: quantile(&tap_follow_up, 0.50),
        tap_follow_up_p99: quantile(&tap_follow_up, 0.99),
        cpu_ms_per_event: cpu_used.as_secs_f64() * 1000.0 / events_sent as f64,
        machine_busy,
        emulator_cores: emulator_cpu,
        peak_rss_mib: service.peak_rss_kib() as f64 / 1024.0,
        startup: service.startup,
        problems,
        round_trips: metrics["kinds"].clone(),
        settles: metrics["batchedSettles"].clone(),
        claims: metrics["batchedClaims"].clone(),
    }
}

/// Per user (sorted): from the moment the driver sent the user's first tap request
/// of the storm to the moment the stand-in received the user's follow-up. Users
/// without a follow-up are left out (the correctness check reports them).
fn tap_to_follow_up(stand_in: &StandIn, taps: &[Value], sent_at: &[Instant]) -> Vec<Duration> {
    let mut first_tap: std::collections::HashMap<&str, Instant> = std::collections::HashMap::new();
    for (tap, &at) in taps.iter().zip(sent_at) {
        let user = tap["source"]["userId"].as_str().unwrap();
        first_tap
            .entry(user)
            .and_modify(|first| *first = (*first).min(at))
            .or_insert(at);
    }
    let mut durations: Vec<Duration> = first_tap
        .into_iter()
        .filter_map(|(user, tapped)| Some(stand_in.first_follow_up(user)?.saturating_duration_since(tapped)))
        .collect();
    durations.sort();
    durations
}

/// Every user: one answer with its tags (the choice's two and the scenario's
/// answer tag), one start and one follow-up received.
async fn check_effects(emulator: &str, project: &str, stand_in: &StandIn, users: &[String]) -> Vec<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct UserDoc {
        line_user_id: String,
        #[serde(default)]
        tags: Vec<String>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct AnswerDoc {
        line_user_id: String,
    }
    let db = driver::emulator_db(emulator, project).await;
    let answers: Vec<AnswerDoc> = db
        .fluent()
        .select()
        .from("survey_responses")
        .obj()
        .query()
        .await
        .unwrap();
    let user_docs: Vec<UserDoc> = db.fluent().select().from("users").obj().query().await.unwrap();
    let mut answer_counts = std::collections::HashMap::new();
    for answer in &answers {
        *answer_counts.entry(answer.line_user_id.as_str()).or_insert(0) += 1;
    }
    let tags: std::collections::HashMap<&str, Vec<String>> = user_docs
        .iter()
        .map(|doc| {
            let mut tags = doc.tags.clone();
            tags.sort();
            (doc.line_user_id.as_str(), tags)
        })
        .collect();
    let expected = Received {
        starts: 1,
        follow_ups: 1,
        news: 0,
        cards: 0,
        steps: 0,
    };
    let (mut duplicated, mut missing) = (0, 0);
    for user in users {
        let received = stand_in.received(user);
        let answers = answer_counts.get(user.as_str()).copied().unwrap_or(0);
        let tags_ok = tags
            .get(user.as_str())
            .is_some_and(|tags| tags == &["answered:lunch", "foodie", "lunch_good"]);
        if received.starts > 1 || received.follow_ups > 1 || answers > 1 {
            duplicated += 1;
        } else if received != expected || answers != 1 || !tags_ok {
            missing += 1;
        }
    }
    let mut problems = Vec::new();
    if duplicated > 0 {
        problems.push(format!("{duplicated} users got a duplicate effect"));
    }
    if missing > 0 {
        problems.push(format!("{missing} users are missing an effect"));
    }
    problems
}

impl LevelReport {
    /// The acknowledgement p99 over the raw create p99 of the same level.
    fn ack_over_raw(&self) -> f64 {
        ms(self.p99) / ms(self.raw_p99).max(f64::MIN_POSITIVE)
    }
}

fn print_report(reports: &[LevelReport]) {
    println!(
        "\n| in flight | raw creates/s | raw create p50 / p99 | events/s | events/s ÷ raw | ack p50 | ack p99 | ack max | ack p99 ÷ raw create p99 | tap→follow-up p50 / p99 | CPU ms/event | peak RSS | start-up |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in reports {
        println!(
            "| {} | {:.0} | {:.1} / {:.1} ms | {:.0} | {:.0}% | {:.1} ms | {:.1} ms | {:.1} ms | {:.1}x | {:.1} / {:.1} ms | {:.3} | {:.1} MiB | {} ms |",
            r.in_flight,
            r.raw_creates_per_s,
            ms(r.raw_p50),
            ms(r.raw_p99),
            r.events_per_s,
            100.0 * r.events_per_s / r.raw_creates_per_s,
            ms(r.p50),
            ms(r.p99),
            ms(r.max),
            r.ack_over_raw(),
            ms(r.tap_follow_up_p50),
            ms(r.tap_follow_up_p99),
            r.cpu_ms_per_event,
            r.peak_rss_mib,
            r.startup.as_millis(),
        );
    }
    for r in reports {
        let met = r.ack_over_raw() <= ACK_OVER_RAW_TARGET;
        println!(
            "{} in flight: ack p99 ÷ raw create p99 = {:.1} / {:.1} ms = {:.2}x, target at most {ACK_OVER_RAW_TARGET}x: {}",
            r.in_flight,
            ms(r.p99),
            ms(r.raw_p99),
            r.ack_over_raw(),
            if met { "met" } else { "MISSED" }
        );
    }
    println!(
        "\nFirestore round trips per event (counted by the service, {} in flight):",
        reports[0].in_flight
    );
    println!("| kind | events | round trips per event |");
    println!("|---|---|---|");
    if let Some(kinds) = reports[0].round_trips.as_object() {
        for (kind, counters) in kinds {
            let events = counters["events"].as_f64().unwrap_or(0.0);
            let trips = counters["firestoreRoundTrips"].as_f64().unwrap_or(0.0);
            println!(
                "| {kind} | {events} | {:.2} |",
                if events > 0.0 { trips / events } else { 0.0 }
            );
        }
    }
    for r in reports {
        println!(
            "{} in flight, during the storm: machine CPU {:.0}% busy, emulator {} cores",
            r.in_flight,
            100.0 * r.machine_busy,
            r.emulator_cores.map_or("?".to_owned(), |cores| format!("{cores:.2}"))
        );
    }
    for r in reports {
        for (what, counts) in [("inbox claims", &r.claims), ("settles ('done', 'sent')", &r.settles)] {
            let batches = counts["batches"].as_f64().unwrap_or(0.0);
            let writes = counts["writes"].as_f64().unwrap_or(0.0);
            println!(
                "{} in flight: {what} went out batched: {writes} writes in {batches} BatchWrite RPCs, {:.1} per RPC",
                r.in_flight,
                if batches > 0.0 { writes / batches } else { 0.0 }
            );
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = args();
    let Ok(emulator) = std::env::var("FIRESTORE_EMULATOR_HOST") else {
        eprintln!("FIRESTORE_EMULATOR_HOST is not set: run ./scripts/bench.sh, which starts the emulator");
        return ExitCode::from(2);
    };
    let stand_in = StandIn::default();
    let line_url = stand_in.serve();
    match args.soak {
        Some(duration) => println!(
            "line-survey soak, {} s at {} requests/s, {} in flight at most, machine: {}",
            duration.as_secs(),
            args.rate.unwrap_or(soak::DEFAULT_RATE),
            soak::IN_FLIGHT,
            machine()
        ),
        None => println!("line-survey benchmark, {} users, machine: {}", args.users, machine()),
    }
    // The emulator's JIT warms up per code path: the REST warm-up of bench.sh is
    // not enough for gRPC commits, so a first raw run is thrown away (in the
    // soak too, or its first window would be measured on a cold emulator).
    let warm = raw::creates(&emulator, 64, 3 * RAW_CREATES).await;
    println!("warm-up: {:.0} creates/s (not reported)", warm.per_second);
    if let Some(seconds) = args.chaos {
        println!("chaos run, machine: {}", machine());
        let rate = args.rate.unwrap_or(chaos::DEFAULT_RATE);
        return chaos::run(&emulator, &args.settings, seconds, rate).await;
    }
    if let Some(count) = args.timers {
        println!("{count} timers due at once, machine: {}", machine());
        return timers::run(&emulator, &stand_in, &line_url, &args.settings, count).await;
    }
    if let Some(count) = args.campaign {
        println!("one campaign to {count} tagged users, machine: {}", machine());
        return campaign::run(
            &emulator,
            &stand_in,
            &line_url,
            &args.settings,
            count,
            args.campaign_options,
        )
        .await;
    }
    if let Some(users) = args.decisions {
        println!(
            "plain against deciding scenarios, {users} users a round, machine: {}",
            machine()
        );
        return decisions::run(&emulator, &stand_in, &line_url, &args.settings, users).await;
    }
    if let Some(count) = args.overflow {
        println!("a burst of {count} starts into a small queue, machine: {}", machine());
        return overflow::run(&emulator, &stand_in, &line_url, &args.settings, count).await;
    }
    if let Some(count) = args.export {
        println!("CSV export of {count} answers, machine: {}", machine());
        return export::run(&emulator, &line_url, &args.settings, count).await;
    }
    if let Some(duration) = args.soak {
        let options = soak::Options {
            duration,
            rate: args.rate.unwrap_or(soak::DEFAULT_RATE),
        };
        return soak::run(&emulator, &stand_in, &line_url, &args.settings, &options).await;
    }
    let mut reports = Vec::new();
    for &in_flight in &args.levels {
        println!("running at {in_flight} in flight ...");
        reports.push(run_level(&emulator, &stand_in, &line_url, &args, in_flight).await);
    }
    print_report(&reports);
    let problems: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.problems
                .iter()
                .map(move |p| format!("{} in flight: {p}", r.in_flight))
        })
        .collect();
    if problems.is_empty() {
        println!("\ncorrectness: 0 duplicate and 0 missing effects");
        ExitCode::SUCCESS
    } else {
        println!("\ncorrectness FAILED:");
        for problem in problems {
            println!("  {problem}");
        }
        ExitCode::FAILURE
    }
}
