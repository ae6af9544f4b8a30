//! `--timers N`: N step timers fall due in the same second (seeded straight into
//! the emulator, as the starts would have scheduled them) and one release
//! binary fires them all. Reported beside the emulator's raw creates per second
//! measured in the same run: the time until every step was pushed, the peak
//! memory above idle, and the Firestore round trips per timer.

use crate::raw;
use crate::service::Service;
use crate::stand_in::StandIn;
use firestore::gcloud_sdk::google::firestore::v1::{
    BatchWriteRequest, Document, Value, Write, value::ValueType, write,
};
use firestore::{FirestoreDb, FirestoreDbOptions};
use line_survey::ids::{LineUserId, NodeId, RunId, ScenarioId, TimerKind, scenario_marker_id, timer_id};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Text of the step every seeded timer sends (tests/fixtures/steps/slow.toml).
pub const STEP_TEXT: &str = "An hour later";
const RAW_CREATES: usize = 4000;
/// Targets from the issue.
const OVER_RAW_TARGET: f64 = 0.25;
const MEMORY_TARGET_MIB: f64 = 10.0;

pub(crate) fn string(value: &str) -> Value {
    Value {
        value_type: Some(ValueType::StringValue(value.to_owned())),
    }
}

fn integer(value: i64) -> Value {
    Value {
        value_type: Some(ValueType::IntegerValue(value)),
    }
}

fn timestamp(ms: i64) -> Value {
    Value {
        value_type: Some(ValueType::TimestampValue(
            firestore::gcloud_sdk::prost_types::Timestamp {
                seconds: ms.div_euclid(1000),
                nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
            },
        )),
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Writes whole documents in `BatchWrite`s of 500.
pub(crate) async fn write_all(db: &FirestoreDb, documents: Vec<(String, Vec<(&'static str, Value)>)>) {
    for chunk in documents.chunks(500) {
        let writes = chunk
            .iter()
            .map(|(name, fields)| Write {
                operation: Some(write::Operation::Update(Document {
                    name: name.clone(),
                    fields: fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect(),
                    ..Document::default()
                })),
                ..Write::default()
            })
            .collect();
        let request = BatchWriteRequest {
            database: db.get_database_path().clone(),
            writes,
            ..BatchWriteRequest::default()
        };
        db.client().get().batch_write(request).await.expect("seeding succeeds");
    }
}

/// The users' markers, each naming the run its timer belongs to.
fn markers(db: &FirestoreDb, users: &[(LineUserId, RunId)]) -> Vec<(String, Vec<(&'static str, Value)>)> {
    let scenario = ScenarioId::parse("slow").unwrap();
    users
        .iter()
        .map(|(user, run)| {
            (
                format!(
                    "{}/scenario_answers/{}",
                    db.get_documents_path(),
                    scenario_marker_id(&scenario, user)
                ),
                vec![
                    ("scenarioId", string("slow")),
                    ("lineUserId", string(user.as_str())),
                    ("run", string(run.as_str())),
                ],
            )
        })
        .collect()
}

/// One due "slow" step per user, all due at `due_ms`.
fn timers(db: &FirestoreDb, users: &[(LineUserId, RunId)], due_ms: i64) -> Vec<(String, Vec<(&'static str, Value)>)> {
    let scenario = ScenarioId::parse("slow").unwrap();
    let node = NodeId::parse("hour").unwrap();
    users
        .iter()
        .map(|(user, run)| {
            (
                format!(
                    "{}/timers/{}",
                    db.get_documents_path(),
                    timer_id(&scenario, &node, user, run, TimerKind::Step)
                ),
                vec![
                    ("lineUserId", string(user.as_str())),
                    ("scenarioId", string("slow")),
                    ("scenarioVersion", integer(1)),
                    ("run", string(run.as_str())),
                    ("nodeId", string("hour")),
                    ("kind", string("step")),
                    ("dueAt", timestamp(due_ms)),
                    ("wakeAtMs", integer(due_ms)),
                    ("state", string("pending")),
                    ("reminders", integer(0)),
                    ("attempts", integer(0)),
                    ("scheduledAt", timestamp(now_ms())),
                ],
            )
        })
        .collect()
}

pub async fn run(
    emulator: &str,
    stand_in: &StandIn,
    line_url: &str,
    settings: &[(String, String)],
    count: usize,
) -> ExitCode {
    let raw = raw::creates(emulator, 64, RAW_CREATES).await;
    let project = format!("bench-timers-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut settings = settings.to_vec();
    settings.insert(
        0,
        (
            "SCENARIOS_DIR".to_owned(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/steps").to_owned(),
        ),
    );
    let service = Service::start(&project, emulator, line_url, &settings).await;
    let db = FirestoreDb::with_options(
        FirestoreDbOptions::new(project.clone()).with_firebase_api_url(format!("http://{emulator}")),
    )
    .await
    .expect("emulator reachable");
    let users: Vec<(LineUserId, RunId)> = (0..count)
        .map(|i| {
            let user = LineUserId::parse(format!("U{:032x}", uuid::Uuid::new_v4().as_u128() >> 4)).unwrap();
            (user, RunId::begun_by(&format!("bench-{i}")))
        })
        .collect();

    let seeding = Instant::now();
    write_all(&db, markers(&db, &users)).await;
    // The timers go in last, due a little after they are all written (the
    // markers took about as long as the timers will).
    let margin = seeding.elapsed() + Duration::from_secs(3);
    let due_ms = now_ms() + margin.as_millis() as i64;
    write_all(&db, timers(&db, &users, due_ms)).await;
    let seeded = seeding.elapsed();
    tokio::time::sleep(Duration::from_millis((due_ms - now_ms()).max(0) as u64)).await;
    let idle_kib = service.rss_kib();
    let due = Instant::now();
    println!(
        "{count} timers and markers seeded in {:.1} s; all due at once",
        seeded.as_secs_f64()
    );

    let mut peak_kib = idle_kib;
    let deadline = due + Duration::from_secs(900);
    let sent = loop {
        peak_kib = peak_kib.max(service.rss_kib());
        let sent = stand_in.steps();
        if sent >= count as u64 || Instant::now() > deadline {
            break sent;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = stand_in
        .last_step()
        .map_or(due.elapsed(), |last| last.saturating_duration_since(due));
    let per_second = sent as f64 / elapsed.as_secs_f64();
    let metrics = service.metrics().await;
    let kind = |name: &str| {
        let counters = &metrics["kinds"][name];
        (
            counters["events"].as_u64().unwrap_or(0),
            counters["firestoreRoundTrips"].as_u64().unwrap_or(0),
        )
    };
    let (fired, fired_trips) = kind("timer_fired");
    let (sweeps, sweep_trips) = kind("timer_sweep");
    let settles = &metrics["batchedSettles"];
    let extra_mib = peak_kib.saturating_sub(idle_kib) as f64 / 1024.0;
    let over_raw = per_second / raw.per_second;

    println!("\n| figure | value | target |");
    println!("|---|---|---|");
    println!(
        "| timers pushed | {sent} of {count} (each once: {}) | all, once |",
        stand_in.repeated_steps() == 0
    );
    println!(
        "| time from due to the last push | {:.1} s ({per_second:.0} timers/s) | |",
        elapsed.as_secs_f64()
    );
    println!(
        "| raw emulator creates/s, same run (64 in flight) | {:.0} | |",
        raw.per_second
    );
    println!(
        "| timers/s over raw creates/s | {:.0}% | at least {:.0}% |",
        over_raw * 100.0,
        OVER_RAW_TARGET * 100.0
    );
    println!(
        "| RSS idle / peak while firing | {:.1} / {:.1} MiB (+{extra_mib:.1}) | within {MEMORY_TARGET_MIB:.0} MiB of idle |",
        idle_kib as f64 / 1024.0,
        peak_kib as f64 / 1024.0
    );
    println!(
        "| Firestore round trips per timer, firing | {:.2} ({fired_trips} in {fired} firings: the commit, and a read again only after a conflict) | claim + one commit |",
        fired_trips as f64 / fired.max(1) as f64
    );
    println!(
        "| ... sweeps (due query, batched claims, batched state reads), per timer | {:.2} ({sweep_trips} in {sweeps} sweeps) | |",
        sweep_trips as f64 / fired.max(1) as f64
    );
    println!(
        "| ... batched \"sent\" marks | {} writes in {} BatchWrites | |",
        settles["writes"], settles["batches"]
    );
    let ok = sent == count as u64 && stand_in.repeated_steps() == 0;
    if ok {
        ExitCode::SUCCESS
    } else {
        println!(
            "\ncorrectness FAILED: {sent} of {count} pushed, {} repeated",
            stand_in.repeated_steps()
        );
        ExitCode::FAILURE
    }
}
