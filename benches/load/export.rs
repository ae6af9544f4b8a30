//! `--export N`: N answers of the lunch survey seeded straight into the
//! emulator (`BatchWrite`s of 500), then one `GET /admin/scenarios/lunch/answers.csv`
//! read to the end by the benchmark. Reports the service's memory while it
//! streams (idle RSS before the request, the largest `VmRSS` seen by polling
//! every 20 ms, and `VmHWM`), the rows per second and the size of the file. It
//! fails unless the file holds exactly one row per seeded answer, with the
//! seeded user, value and label, and the BOM.
//!
//! Some answers carry commas, quotes, newlines and Japanese text, so the rows
//! are not all of one shape; every tenth answer is a typed one (no label).

use crate::service::{ADMIN_TOKEN, Service};
use crate::timers::{now_ms, string, write_all};
use firestore::FirestoreDb;
use firestore::gcloud_sdk::google::firestore::v1::{ArrayValue, Value, value::ValueType};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The target for 100,000 answers.
const MEMORY_TARGET_MIB: f64 = 60.0;
const RSS_POLL: Duration = Duration::from_millis(20);
const TYPED: [&str; 4] = [
    "駐車場が狭い、でも美味しい",
    "He said \"great\", twice",
    "line one\nline two",
    "plain",
];

/// What one seeded answer should export as: (user, value, label).
type Expected = (String, String, String);

fn seeded_answer(i: usize) -> (Expected, &'static str) {
    let user = format!("U{i:032x}");
    if i % 10 == 9 {
        let text = TYPED[(i / 10) % TYPED.len()];
        ((user, text.to_owned(), String::new()), "text")
    } else if i.is_multiple_of(2) {
        ((user, "good".to_owned(), "Good".to_owned()), "choice")
    } else {
        ((user, "bad".to_owned(), "Bad".to_owned()), "choice")
    }
}

async fn seed_answers(db: &FirestoreDb, count: usize) -> HashMap<String, Expected> {
    let answered_ms = now_ms() - 3_600_000;
    let mut expected = HashMap::with_capacity(count);
    let mut documents = Vec::with_capacity(count);
    for i in 0..count {
        let ((user, value, label), value_type) = seeded_answer(i);
        let id = format!("{:040x}", uuid::Uuid::new_v4().as_u128());
        let fields = vec![
            ("scenarioId", string("lunch")),
            ("nodeId", string("ask_food")),
            ("lineUserId", string(&user)),
            ("value", string(&value)),
            ("valueType", string(value_type)),
            (
                "tags",
                Value {
                    value_type: Some(ValueType::ArrayValue(ArrayValue {
                        values: vec![string("foodie"), string("lunch_good")],
                    })),
                },
            ),
            (
                "scenarioVersion",
                Value {
                    value_type: Some(ValueType::IntegerValue(1)),
                },
            ),
            (
                "answeredAt",
                Value {
                    value_type: Some(ValueType::TimestampValue(
                        firestore::gcloud_sdk::prost_types::Timestamp {
                            seconds: (answered_ms + i as i64) / 1000,
                            nanos: 0,
                        },
                    )),
                },
            ),
        ];
        documents.push((format!("{}/survey_responses/{id}", db.get_documents_path()), fields));
        expected.insert(user.clone(), (user, value, label));
    }
    write_all(db, documents).await;
    expected
}

pub async fn run(emulator: &str, line_url: &str, settings: &[(String, String)], count: usize) -> ExitCode {
    let project = format!("bench-export-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let service = Service::start(&project, emulator, line_url, settings).await;
    let db = crate::driver::emulator_db(emulator, &project).await;
    let seeding = Instant::now();
    let expected = seed_answers(&db, count).await;
    println!("{count} answers seeded in {:.1} s", seeding.elapsed().as_secs_f64());

    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = service.rss_kib();
    let cpu_before = service.cpu_time();

    // The largest VmRSS while the download runs, polled beside it.
    let peak = Arc::new(AtomicU64::new(idle_kib));
    let downloading = Arc::new(AtomicBool::new(true));
    let pid = service.pid();
    let poller = {
        let (peak, downloading) = (peak.clone(), downloading.clone());
        tokio::spawn(async move {
            while downloading.load(Ordering::Relaxed) {
                peak.fetch_max(crate::service::rss_kib_of(pid), Ordering::Relaxed);
                tokio::time::sleep(RSS_POLL).await;
            }
        })
    };
    let started = Instant::now();
    let mut response = match reqwest::Client::new()
        .get(format!("{}/admin/scenarios/lunch/answers.csv", service.address))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
    {
        Ok(response) if response.status() == 200 => response,
        Ok(response) => {
            println!("\ncorrectness FAILED: the export answered {}", response.status());
            return ExitCode::FAILURE;
        }
        Err(error) => {
            println!("\ncorrectness FAILED: {error}");
            return ExitCode::FAILURE;
        }
    };
    let first_byte = started.elapsed();
    let mut body = Vec::new();
    let mut chunks = 0u64;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                chunks += 1;
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(error) => {
                println!("\ncorrectness FAILED: the download broke off: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    let took = started.elapsed();
    downloading.store(false, Ordering::Relaxed);
    let _ = poller.await;
    let cpu_used = service.cpu_time() - cpu_before;
    let peak_kib = peak.load(Ordering::Relaxed).max(service.rss_kib());
    let hwm_kib = service.peak_rss_kib();

    let problems = check(&body, &expected);
    let rows = count as f64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("\n| figure | value | target |");
    println!("|---|---|---|");
    println!(
        "| rows exported | {} answers, {:.1} MiB of CSV in {chunks} chunks | one row per answer: {} |",
        count,
        body.len() as f64 / 1_048_576.0,
        if problems.is_empty() { "**met**" } else { "NOT met" }
    );
    println!(
        "| request → last byte | {:.2} s: **{:.0} rows/s** (first byte after {:.0} ms) | |",
        took.as_secs_f64(),
        rows / took.as_secs_f64(),
        first_byte.as_secs_f64() * 1000.0
    );
    println!(
        "| service RSS idle → largest seen while streaming (every {} ms) | {:.1} → {:.1} MiB (+{:.1}) | under {MEMORY_TARGET_MIB:.0} MiB: {} |",
        RSS_POLL.as_millis(),
        mib(idle_kib),
        mib(peak_kib),
        mib(peak_kib.saturating_sub(idle_kib)),
        if mib(peak_kib) < MEMORY_TARGET_MIB {
            "**met**"
        } else {
            "NOT met"
        }
    );
    println!(
        "| service VmHWM (whole life, seeding included) | {:.1} MiB | |",
        mib(hwm_kib)
    );
    println!(
        "| service CPU during the download | {:.2} s | |",
        cpu_used.as_secs_f64()
    );
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        for problem in problems.iter().take(10) {
            println!("correctness FAILED: {problem}");
        }
        ExitCode::FAILURE
    }
}

/// What is wrong with the file, compared with the seeded answers.
fn check(body: &[u8], expected: &HashMap<String, Expected>) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(csv_text) = body.strip_prefix(&[0xEF, 0xBB, 0xBF]) else {
        return vec!["the file does not start with the UTF-8 BOM".into()];
    };
    let mut reader = csv::Reader::from_reader(csv_text);
    let mut seen: HashMap<String, u32> = HashMap::with_capacity(expected.len());
    for record in reader.records() {
        let record = match record {
            Ok(record) => record,
            Err(error) => {
                problems.push(format!("unreadable row: {error}"));
                continue;
            }
        };
        let user = record.get(0).unwrap_or_default().to_owned();
        match expected.get(&user) {
            None => problems.push(format!("a row for a user never seeded: {user}")),
            Some((_, value, label)) => {
                if record.get(2) != Some(value.as_str()) || record.get(3) != Some(label.as_str()) {
                    problems.push(format!("{user}: value/label {:?}/{:?}", record.get(2), record.get(3)));
                }
            }
        }
        *seen.entry(user).or_default() += 1;
    }
    let missing = expected.keys().filter(|user| !seen.contains_key(*user)).count();
    let doubled = seen.values().filter(|&&n| n > 1).count();
    if missing > 0 {
        problems.push(format!("{missing} answers missing from the file"));
    }
    if doubled > 0 {
        problems.push(format!("{doubled} answers exported more than once"));
    }
    problems
}
