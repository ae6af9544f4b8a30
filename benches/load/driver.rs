//! Sends signed webhook requests at a fixed number in flight and records how
//! long each took to be acknowledged.

use futures::StreamExt;
use line_survey::line::signature;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub struct Sent {
    pub latencies: Vec<Duration>,
    pub failures: usize,
}

pub async fn send_all(
    client: &reqwest::Client,
    address: &str,
    secret: &str,
    events: &[Value],
    in_flight: usize,
) -> Sent {
    let results: Vec<Result<Duration, ()>> = futures::stream::iter(events)
        .map(|event| async move {
            let body =
                serde_json::to_vec(&json!({"destination": "Ud000000000000000000000000000000d", "events": [event]}))
                    .unwrap();
            let header = signature::sign(secret.as_bytes(), &body);
            let sent = Instant::now();
            let response = client
                .post(format!("{address}/webhook"))
                .header("content-type", "application/json")
                .header("x-line-signature", header)
                .body(body)
                .send()
                .await;
            match response {
                Ok(response) if response.status() == 200 => Ok(sent.elapsed()),
                _ => Err(()),
            }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let failures = results.iter().filter(|result| result.is_err()).count();
    Sent {
        latencies: results.into_iter().flatten().collect(),
        failures,
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
