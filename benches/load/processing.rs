//! `--compare-processing`: the same storm levels, the document writes per event
//! kind and the soak, once per `WEBHOOK_PROCESSING` mode (queued, then inline),
//! in one run, then the comparison and the checks that decide between them
//! (issue 21): inline's events/s at least 1.3x queued's, its ack p99 at most
//! 1.2x, at most 5 writes per first answer, and a redelivery or a repeated tap
//! writing no more than queued apart from the inbox.

use crate::campaign::wire;
use crate::service::Service;
use crate::stand_in::StandIn;
use crate::{Args, LevelReport, driver, events, register, run_level, soak, wait_for_calls};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

pub const MODES: [&str; 2] = ["queued", "inline"];

/// Users per kind in the writes run.
const WRITE_PROBES: usize = 50;
/// Quiet after each phase: the batched "done" and "sent" marks go out within it.
const QUIET: Duration = Duration::from_millis(1500);

pub struct ModeReport {
    pub levels: Vec<LevelReport>,
    /// Documents written per event, by kind of event, counted on the wire.
    pub writes: BTreeMap<&'static str, f64>,
    pub soak_passed: bool,
}

pub async fn run(emulator: &str, stand_in: &StandIn, line_url: &str, args: &Args) -> ExitCode {
    let mut reports = Vec::new();
    for mode in MODES {
        let mut settings = args.settings.clone();
        settings.push(("WEBHOOK_PROCESSING".to_owned(), mode.to_owned()));
        let mode_args = Args {
            settings: settings.clone(),
            ..args.clone()
        };
        let mut levels = Vec::new();
        for &in_flight in &args.levels {
            println!("{mode}: running at {in_flight} in flight ...");
            levels.push(run_level(emulator, stand_in, line_url, &mode_args, in_flight).await);
        }
        println!("{mode}: counting writes per event kind ...");
        let writes = writes_per_kind(emulator, stand_in, line_url, &settings).await;
        let soak_passed = match args.soak {
            Some(duration) => {
                println!("\n{mode}: soak");
                let options = soak::Options {
                    duration,
                    rate: args.rate,
                };
                soak::run(emulator, stand_in, line_url, &settings, &options).await == ExitCode::SUCCESS
            }
            None => true,
        };
        println!("\n{mode}:");
        crate::print_report(&levels);
        reports.push(ModeReport {
            levels,
            writes,
            soak_passed,
        });
    }
    print_comparison(&reports)
}

/// Per kind, the documents written per event: each phase's writes (counted by
/// a proxy that decodes the gRPC traffic) minus what the idle service writes in
/// as long, over the events of the phase.
async fn writes_per_kind(
    emulator: &str,
    stand_in: &StandIn,
    line_url: &str,
    settings: &[(String, String)],
) -> BTreeMap<&'static str, f64> {
    let project = format!("bench-writes-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let proxy = wire::Proxy::start(emulator).await;
    let service = Service::start(&project, &proxy.address, line_url, settings).await;
    let client = reqwest::Client::new();
    tokio::time::sleep(QUIET).await;
    let idle_from = proxy.counts();
    tokio::time::sleep(QUIET).await;
    let idle = written(&proxy.counts().since(&idle_from));

    let users: Vec<String> = (0..WRITE_PROBES).map(|_| events::new_user()).collect();
    let fresh: Vec<String> = (0..WRITE_PROBES).map(|_| events::new_user()).collect();
    let first_taps: Vec<_> = users.iter().map(|user| events::answer(user)).collect();
    let phases: Vec<(&'static str, Vec<serde_json::Value>, u64)> = vec![
        (
            "text_trigger_unanswered_survey",
            users.iter().map(|user| events::text(user, "lunch")).collect(),
            1,
        ),
        ("first_answer", first_taps.clone(), 1),
        (
            "repeated_tap",
            users.iter().map(|user| events::answer(user)).collect(),
            0,
        ),
        ("redelivery", first_taps.iter().map(events::redelivered).collect(), 0),
        (
            "text_trigger_answered_survey",
            users.iter().map(|user| events::text(user, "lunch")).collect(),
            0,
        ),
        (
            "text_trigger_without_survey",
            users.iter().map(|user| events::text(user, "news")).collect(),
            1,
        ),
        (
            "flex_tap_starting_survey",
            fresh.iter().map(|user| events::card_tap(user)).collect(),
            1,
        ),
    ];
    let mut per_kind = BTreeMap::new();
    for (kind, phase_events, calls_each) in phases {
        register(stand_in, &phase_events);
        let calls_before = stand_in.accepted_calls();
        let before = proxy.counts();
        driver::send_all(&client, &service.address, crate::CHANNEL_SECRET, &phase_events, 8).await;
        let expected = calls_before + calls_each * phase_events.len() as u64;
        if !wait_for_calls(stand_in, expected, Duration::from_secs(60)).await {
            println!("writes run: not every {kind} was answered");
        }
        tokio::time::sleep(QUIET).await;
        let phase = written(&proxy.counts().since(&before));
        // The idle writes of a quiet window, once per phase (each has one).
        let net = phase.saturating_sub(idle);
        per_kind.insert(kind, net as f64 / phase_events.len() as f64);
    }
    per_kind
}

fn written(counts: &wire::Counts) -> u64 {
    counts.written.values().sum()
}

fn ratio(a: f64, b: f64) -> f64 {
    a / b.max(f64::MIN_POSITIVE)
}

fn print_comparison(reports: &[ModeReport]) -> ExitCode {
    let [queued, inline] = reports else {
        return ExitCode::FAILURE;
    };
    println!("\n## queued vs inline, one run");
    println!(
        "\n| in flight | events/s queued | events/s inline | inline ÷ queued | ack p99 queued | ack p99 inline | inline ÷ queued | tap→follow-up p99 queued / inline |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut events_ok = true;
    let mut ack_ok = true;
    for (q, i) in queued.levels.iter().zip(&inline.levels) {
        let events = ratio(i.events_per_s, q.events_per_s);
        let ack = ratio(driver::ms(i.p99), driver::ms(q.p99));
        events_ok &= events >= 1.3;
        ack_ok &= ack <= 1.2;
        println!(
            "| {} | {:.0} | {:.0} | {events:.2}x | {:.1} ms | {:.1} ms | {ack:.2}x | {:.0} / {:.0} ms |",
            q.in_flight,
            q.events_per_s,
            i.events_per_s,
            driver::ms(q.p99),
            driver::ms(i.p99),
            driver::ms(q.tap_follow_up_p99),
            driver::ms(i.tap_follow_up_p99),
        );
    }
    println!("\n| kind | writes per event, queued | inline |");
    println!("|---|---|---|");
    for (kind, q) in &queued.writes {
        let i = inline.writes.get(kind).copied().unwrap_or_default();
        println!("| {kind} | {q:.2} | {i:.2} |");
    }
    let first_answer = inline.writes.get("first_answer").copied().unwrap_or(f64::MAX);
    // Apart from the inbox: queued writes one claim per event (and its "done",
    // which goes into the effect commit or the batched settles).
    let repeats_ok = ["repeated_tap", "redelivery"].iter().all(|kind| {
        let q = queued.writes.get(kind).copied().unwrap_or_default();
        let i = inline.writes.get(kind).copied().unwrap_or(f64::MAX);
        i <= q + 0.01
    });
    let correct = reports
        .iter()
        .all(|report| report.levels.iter().all(|level| level.problems.is_empty()));
    let soaks = reports.iter().all(|report| report.soak_passed);
    let checks = [
        ("events/s inline at least 1.3x queued, at every level", events_ok),
        ("ack p99 inline at most 1.2x queued, at every level", ack_ok),
        ("at most 5 writes per first answer inline", first_answer <= 5.0),
        (
            "a repeated tap and a redelivery write no more inline than queued",
            repeats_ok,
        ),
        ("0 duplicate and 0 missing effects in both modes", correct),
        ("both soaks pass (when run)", soaks),
    ];
    for (check, met) in checks {
        println!("check: {check}: {}", if met { "met" } else { "MISSED" });
    }
    if correct { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
