//! `--decisions [N]` (default 500 users per round): what deciding costs. One
//! release binary, scenarios from `benches/load/scenarios`: `plain` (intro and
//! a question, then a follow-up question) and `decide` (the same messages
//! through a split, a branch on the user's `vip` tag and the user's display
//! name in every text). Users are seeded with a cached display name (half of
//! them tagged `vip`), as a follow would leave them, so no profile call is
//! made. Rounds alternate plain, decide, plain, decide, each with fresh users:
//! every user starts the scenario with a text, then taps the first choice three
//! times plus one redelivery, all shuffled, at 32 in flight.
//!
//! Reported per kind over its rounds: acknowledgement p50/p99, CPU per event
//! (the service process's user + system time over the round), and Firestore
//! round trips per start and per answer (the service's own counters, diffed
//! around each round). The targets of the scenarios issue: CPU per event and
//! ack p99 of `decide` within 1.2x of `plain`'s, and at most one extra round
//! trip per decision. It fails (exit 1) when any user misses or doubles an
//! effect, or a `decide` user's follow-up does not carry their name.

use crate::driver::{ms, quantile, send_all};
use crate::events;
use crate::service::{CHANNEL_SECRET, Service};
use crate::stand_in::StandIn;
use crate::timers::{now_ms, string, write_all};
use firestore::FirestoreDb;
use firestore::gcloud_sdk::google::firestore::v1::{ArrayValue, Value, value::ValueType};
use serde_json::Value as Json;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const IN_FLIGHT: usize = 32;
const ROUNDS: usize = 2;
const RATIO_TARGET: f64 = 1.2;
const EXTRA_ROUND_TRIPS_TARGET: f64 = 1.0;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Decide,
}

impl Kind {
    fn scenario(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Decide => "decide",
        }
    }
}

#[derive(Default)]
struct Totals {
    latencies: Vec<Duration>,
    cpu: Duration,
    events: usize,
    /// Round trips and events of starts and of answers, from the service's counters.
    start_trips: f64,
    starts: f64,
    answer_trips: f64,
    answers: f64,
    problems: Vec<String>,
}

fn name_of(user: &str) -> String {
    format!("利用者{}", &user[user.len() - 6..])
}

/// `users/{id}` as a follow leaves them, with the display name cached now;
/// every other one tagged `vip`.
async fn seed(db: &FirestoreDb, users: &[String]) {
    let documents = users
        .iter()
        .enumerate()
        .map(|(index, user)| {
            let tags: Vec<Value> = if index % 2 == 0 {
                vec![string("vip")]
            } else {
                Vec::new()
            };
            let fields = vec![
                ("lineUserId", string(user)),
                (
                    "following",
                    Value {
                        value_type: Some(ValueType::BooleanValue(true)),
                    },
                ),
                (
                    "tags",
                    Value {
                        value_type: Some(ValueType::ArrayValue(ArrayValue { values: tags })),
                    },
                ),
                ("displayName", string(&name_of(user))),
                (
                    "profileFetchedMs",
                    Value {
                        value_type: Some(ValueType::IntegerValue(now_ms())),
                    },
                ),
            ];
            (format!("{}/users/{user}", db.get_documents_path()), fields)
        })
        .collect();
    write_all(db, documents).await;
}

/// The round trips and events the service counted for each kind so far.
fn counted(metrics: &Json) -> (f64, f64, f64, f64) {
    let kinds = &metrics["kinds"];
    let sum = |names: &[&str], field: &str| -> f64 {
        names
            .iter()
            .map(|name| kinds[*name][field].as_f64().unwrap_or(0.0))
            .sum()
    };
    let starts = ["text_trigger_unanswered_survey"];
    let answers = ["first_answer"];
    (
        sum(&starts, "firestoreRoundTrips"),
        sum(&starts, "events"),
        sum(&answers, "firestoreRoundTrips"),
        sum(&answers, "events"),
    )
}

async fn round(service: &Service, db: &FirestoreDb, stand_in: &StandIn, kind: Kind, users: usize, totals: &mut Totals) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(IN_FLIGHT)
        .build()
        .unwrap();
    let user_ids: Vec<String> = (0..users).map(|_| events::new_user()).collect();
    seed(db, &user_ids).await;
    let scenario = kind.scenario();
    let starts: Vec<Json> = user_ids.iter().map(|user| events::text(user, scenario)).collect();
    let mut taps = Vec::new();
    for (index, user) in user_ids.iter().enumerate() {
        let node = if kind == Kind::Decide && index % 2 == 0 {
            "ask_food_vip"
        } else {
            "ask_food"
        };
        let first = events::answer_in(user, scenario, node, "good");
        taps.push(events::redelivered(&first));
        taps.push(first);
        taps.push(events::answer_in(user, scenario, node, "good"));
        taps.push(events::answer_in(user, scenario, node, "good"));
    }
    events::shuffle(&mut taps);
    for event in starts.iter().chain(&taps) {
        stand_in.register_token(
            event["replyToken"].as_str().unwrap(),
            event["source"]["userId"].as_str().unwrap(),
        );
    }
    let before = counted(&service.metrics().await);
    let base_calls = stand_in.accepted_calls();
    let cpu_before = service.cpu_time();
    let started = send_all(&client, &service.address, CHANNEL_SECRET, &starts, IN_FLIGHT).await;
    wait_for(stand_in, base_calls + users as u64).await;
    let stormed = send_all(&client, &service.address, CHANNEL_SECRET, &taps, IN_FLIGHT).await;
    wait_for(stand_in, base_calls + 2 * users as u64).await;
    // Anything sent twice would show up now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    totals.cpu += service.cpu_time() - cpu_before;
    totals.events += starts.len() + taps.len();
    totals
        .latencies
        .extend(started.latencies.iter().chain(&stormed.latencies));
    let after = counted(&service.metrics().await);
    totals.start_trips += after.0 - before.0;
    totals.starts += after.1 - before.1;
    totals.answer_trips += after.2 - before.2;
    totals.answers += after.3 - before.3;
    if started.failures + stormed.failures > 0 {
        totals.problems.push(format!(
            "{scenario}: {} webhook requests were not acknowledged",
            started.failures + stormed.failures
        ));
    }
    let (mut wrong, mut unnamed) = (0, 0);
    for user in &user_ids {
        let received = stand_in.received(user);
        if received.starts != 1 || received.follow_ups != 1 {
            wrong += 1;
        }
        if kind == Kind::Decide
            && stand_in
                .personal_follow_up(user)
                .is_none_or(|text| !text.starts_with(&name_of(user)))
        {
            unnamed += 1;
        }
    }
    if wrong > 0 {
        totals
            .problems
            .push(format!("{scenario}: {wrong} users missed or doubled an effect"));
    }
    if unnamed > 0 {
        totals
            .problems
            .push(format!("{scenario}: {unnamed} users' follow-ups lack their name"));
    }
}

async fn wait_for(stand_in: &StandIn, calls: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while stand_in.accepted_calls() < calls && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn run(
    emulator: &str,
    stand_in: &StandIn,
    line_url: &str,
    settings: &[(String, String)],
    users: usize,
) -> ExitCode {
    let project = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut settings = settings.to_vec();
    settings.push((
        "SCENARIOS_DIR".to_owned(),
        crate::repo_path("benches/load/scenarios").display().to_string(),
    ));
    let service = Service::start(&project, emulator, line_url, &settings).await;
    let db = crate::driver::emulator_db(emulator, &project).await;
    let (mut plain, mut decide) = (Totals::default(), Totals::default());
    for _ in 0..ROUNDS {
        for kind in [Kind::Plain, Kind::Decide] {
            let totals = if kind == Kind::Plain { &mut plain } else { &mut decide };
            round(&service, &db, stand_in, kind, users, totals).await;
        }
    }
    println!("\n| scenario | events | ack p50 | ack p99 | CPU ms/event | round trips per start | per answer |");
    println!("|---|---|---|---|---|---|---|");
    for (name, totals) in [("plain", &mut plain), ("decide", &mut decide)] {
        totals.latencies.sort();
        println!(
            "| {name} | {} | {:.1} ms | {:.1} ms | {:.3} | {:.2} | {:.2} |",
            totals.events,
            ms(quantile(&totals.latencies, 0.50)),
            ms(quantile(&totals.latencies, 0.99)),
            cpu_per_event(totals),
            totals.start_trips / totals.starts.max(1.0),
            totals.answer_trips / totals.answers.max(1.0),
        );
    }
    let cpu_ratio = cpu_per_event(&decide) / cpu_per_event(&plain).max(f64::MIN_POSITIVE);
    let p99_ratio = ms(quantile(&decide.latencies, 0.99)) / ms(quantile(&plain.latencies, 0.99)).max(f64::MIN_POSITIVE);
    let extra_start = decide.start_trips / decide.starts.max(1.0) - plain.start_trips / plain.starts.max(1.0);
    let extra_answer = decide.answer_trips / decide.answers.max(1.0) - plain.answer_trips / plain.answers.max(1.0);
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "CPU per event, decide ÷ plain: {cpu_ratio:.2}x, target at most {RATIO_TARGET}x: {}",
        verdict(cpu_ratio <= RATIO_TARGET)
    );
    println!(
        "ack p99, decide ÷ plain: {p99_ratio:.2}x, target at most {RATIO_TARGET}x: {}",
        verdict(p99_ratio <= RATIO_TARGET)
    );
    println!(
        "extra round trips per decision: start {extra_start:+.2}, answer {extra_answer:+.2}, target at most {EXTRA_ROUND_TRIPS_TARGET}: {}",
        verdict(extra_start <= EXTRA_ROUND_TRIPS_TARGET && extra_answer <= EXTRA_ROUND_TRIPS_TARGET)
    );
    println!("profile calls: {} (the names were cached)", stand_in.profile_calls());
    let problems: Vec<&String> = plain.problems.iter().chain(&decide.problems).collect();
    if problems.is_empty() {
        println!("\ncorrectness: 0 duplicate and 0 missing effects; every decide follow-up named its user");
        ExitCode::SUCCESS
    } else {
        println!("\ncorrectness FAILED:");
        for problem in problems {
            println!("  {problem}");
        }
        ExitCode::FAILURE
    }
}

fn cpu_per_event(totals: &Totals) -> f64 {
    totals.cpu.as_secs_f64() * 1000.0 / totals.events.max(1) as f64
}
