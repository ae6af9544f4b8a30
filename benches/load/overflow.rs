//! `--overflow N` (default 4,000): a burst of N survey starts (one text from each
//! of N users) against one release binary whose queue holds only
//! `QUEUE_CAPACITY` jobs (16 unless `--set` says otherwise), so most events are
//! stored for "any sweeper" instead of queued. Reported: how many overflowed,
//! the burst's length, and the time from the burst's last acknowledgement until
//! every user has their first message (the drain), against the 60 s.
//! Fails unless every user got exactly one start.

use crate::driver::{ms, send_all};
use crate::service::{CHANNEL_SECRET, Service};
use crate::stand_in::StandIn;
use crate::{events, register, wait_for_calls};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const IN_FLIGHT: usize = 64;
const DEFAULT_QUEUE: &str = "16";
/// The target for 4,000 overflowed events on one instance.
const DRAIN_TARGET: Duration = Duration::from_secs(60);

pub async fn run(
    emulator: &str,
    stand_in: &StandIn,
    line_url: &str,
    settings: &[(String, String)],
    count: usize,
) -> ExitCode {
    let mut settings = settings.to_vec();
    if !settings.iter().any(|(name, _)| name == "QUEUE_CAPACITY") {
        settings.push(("QUEUE_CAPACITY".to_owned(), DEFAULT_QUEUE.to_owned()));
    }
    let project = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let service = Service::start(&project, emulator, line_url, &settings).await;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(IN_FLIGHT)
        .build()
        .unwrap();
    let users: Vec<String> = (0..count).map(|_| events::new_user()).collect();
    let starts: Vec<serde_json::Value> = users.iter().map(|user| events::text(user, "lunch")).collect();
    register(stand_in, &starts);
    let base_calls = stand_in.accepted_calls();

    let began = Instant::now();
    let sent = send_all(&client, &service.address, CHANNEL_SECRET, &starts, IN_FLIGHT).await;
    let burst = began.elapsed();
    let acked_at = Instant::now();
    // Users still waiting for their start when the last request was answered:
    // what the sweeper has to drain.
    let waiting = (base_calls + count as u64).saturating_sub(stand_in.accepted_calls());
    let delivered = wait_for_calls(stand_in, base_calls + count as u64, Duration::from_secs(600)).await;
    let drain = acked_at.elapsed();
    // Anything sent twice would show up now.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut problems = Vec::new();
    if sent.failures > 0 {
        problems.push(format!("{} requests were not acknowledged", sent.failures));
    }
    if !delivered {
        problems.push("not every user got the survey's start within 600 s".to_owned());
    }
    let doubled = users.iter().filter(|user| stand_in.received(user).starts > 1).count();
    if doubled > 0 {
        problems.push(format!("{doubled} users got the start more than once"));
    }
    let queue = settings
        .iter()
        .find(|(name, _)| name == "QUEUE_CAPACITY")
        .map_or(DEFAULT_QUEUE, |(_, value)| value.as_str());
    println!("\nburst of {count} starts, QUEUE_CAPACITY={queue}, {IN_FLIGHT} in flight");
    println!("| burst (s) | acks/s | users waiting at the last ack | drain after the last ack (s) | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| {:.1} | {:.0} | {} | {:.1} | {} s: {} |",
        burst.as_secs_f64(),
        count as f64 / burst.as_secs_f64(),
        waiting,
        drain.as_secs_f64(),
        DRAIN_TARGET.as_secs(),
        if drain <= DRAIN_TARGET { "met" } else { "MISSED" }
    );
    let mut latencies = sent.latencies.clone();
    latencies.sort();
    println!(
        "ack p99 {:.1} ms; peak RSS {:.1} MiB",
        ms(crate::driver::quantile(&latencies, 0.99)),
        service.peak_rss_kib() as f64 / 1024.0
    );
    if problems.is_empty() {
        println!("correctness: every user got exactly one start");
        ExitCode::SUCCESS
    } else {
        for problem in problems {
            println!("FAILED: {problem}");
        }
        ExitCode::FAILURE
    }
}
