//! Sends signed webhook requests at a fixed number in flight and records how
//! long each took to be acknowledged.

use futures::StreamExt;
use line_survey::line::signature;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub struct Sent {
    /// Acknowledgement latencies of the requests answered 200, in the order
    /// they completed.
    pub latencies: Vec<Duration>,
    pub failures: usize,
    /// When each request was sent, by the index of its event.
    pub sent_at: Vec<Instant>,
}

/// One request: when it went out, how long until its answer, and the answer's
/// status (`None`: no answer, e.g. the connection failed).
pub struct Posted {
    pub sent: Instant,
    pub latency: Duration,
    pub status: Option<u16>,
}

/// Signs one event in an envelope of its own, as LINE does, and posts it.
pub async fn post(client: &reqwest::Client, address: &str, secret: &str, event: &Value) -> Posted {
    let body =
        serde_json::to_vec(&json!({"destination": "Ud000000000000000000000000000000d", "events": [event]})).unwrap();
    let header = signature::sign(secret.as_bytes(), &body);
    let sent = Instant::now();
    let response = client
        .post(format!("{address}/webhook"))
        .header("content-type", "application/json")
        .header("x-line-signature", header)
        .body(body)
        .send()
        .await;
    Posted {
        sent,
        latency: sent.elapsed(),
        status: response.ok().map(|response| response.status().as_u16()),
    }
}

pub async fn send_all(
    client: &reqwest::Client,
    address: &str,
    secret: &str,
    events: &[Value],
    in_flight: usize,
) -> Sent {
    let results: Vec<(usize, Posted)> = futures::stream::iter(events.iter().enumerate())
        .map(|(index, event)| async move { (index, post(client, address, secret, event).await) })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut sent_at = vec![None; events.len()];
    let mut latencies = Vec::with_capacity(results.len());
    let mut failures = 0;
    for (index, posted) in results {
        sent_at[index] = Some(posted.sent);
        match posted.status {
            Some(200) => latencies.push(posted.latency),
            _ => failures += 1,
        }
    }
    Sent {
        latencies,
        failures,
        sent_at: sent_at
            .into_iter()
            .map(|at| at.expect("every event was sent"))
            .collect(),
    }
}

/// The `q`-quantile (0..=1) of sorted latencies.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

/// Milliseconds, for the tables.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// A client of the emulator's `project`, as the benchmark reads and seeds it.
pub async fn emulator_db(emulator: &str, project: &str) -> firestore::FirestoreDb {
    let options =
        firestore::FirestoreDbOptions::new(project.to_owned()).with_firebase_api_url(format!("http://{emulator}"));
    firestore::FirestoreDb::with_options(options)
        .await
        .expect("emulator reachable")
}
