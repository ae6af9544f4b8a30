//! The emulator's raw capacity: single-document creates per second from one
//! client, each a `Commit` with one `create`, the same request the webhook's
//! inbox claim sends.

use firestore::gcloud_sdk::google::firestore::v1::{
    CommitRequest, Document, Precondition, Value, Write, precondition::ConditionType, value::ValueType, write,
};
use firestore::{FirestoreDb, FirestoreDbOptions};
use futures::StreamExt;
use std::time::{Duration, Instant};

/// Creates per second, and each create's latency (sorted).
pub struct Raw {
    pub per_second: f64,
    pub latencies: Vec<Duration>,
}

pub async fn creates(emulator: &str, in_flight: usize, creates: usize) -> Raw {
    let project = format!("bench-raw-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let db =
        FirestoreDb::with_options(FirestoreDbOptions::new(project).with_firebase_api_url(format!("http://{emulator}")))
            .await
            .expect("emulator reachable");
    let started = Instant::now();
    let mut latencies: Vec<Duration> = futures::stream::iter(0..creates)
        .map(|i| {
            let db = db.clone();
            async move {
                let document = Document {
                    name: format!("{}/raw/{i}", db.get_documents_path()),
                    fields: [(
                        "n".to_owned(),
                        Value {
                            value_type: Some(ValueType::IntegerValue(i as i64)),
                        },
                    )]
                    .into(),
                    ..Document::default()
                };
                let request = CommitRequest {
                    database: db.get_database_path().clone(),
                    writes: vec![Write {
                        operation: Some(write::Operation::Update(document)),
                        current_document: Some(Precondition {
                            condition_type: Some(ConditionType::Exists(false)),
                        }),
                        ..Write::default()
                    }],
                    ..CommitRequest::default()
                };
                let sent = Instant::now();
                db.client().get().commit(request).await.expect("create succeeds");
                sent.elapsed()
            }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    latencies.sort();
    Raw {
        per_second: creates as f64 / started.elapsed().as_secs_f64(),
        latencies,
    }
}
