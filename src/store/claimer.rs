//! Group commit of inbox claims. Claims that arrive while the previous batch is
//! in flight go out together in one `BatchWrite`: each is its own `create` with
//! its own status (`ALREADY_EXISTS` for a redelivery), so one claim never fails
//! another, yet a burst costs the emulator one request instead of dozens.
//!
//! Measured in BENCHMARKS.md: the acknowledgement waits for this one request, and
//! under load the emulator's per-request cost, not the writes, dominated it.

use super::StoreError;
use super::inbox::Claim;
use super::writes::{batch_write, code};
use firestore::FirestoreDb;
use firestore::gcloud_sdk::google::firestore::v1::{Write, write::Operation};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Firestore's limit of writes per `BatchWrite`.
const MAX_BATCH: usize = 500;

type Reply = oneshot::Sender<Result<Claim, StoreError>>;

struct Request {
    write: Write,
    reply: Reply,
}

#[derive(Clone)]
pub struct Claimer {
    queue: mpsc::UnboundedSender<Request>,
    counts: Arc<(AtomicU64, AtomicU64)>,
}

impl Claimer {
    pub fn start(db: FirestoreDb, timeout: Duration) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        tokio::spawn(run(db, receiver, timeout, counts.clone()));
        Self { queue, counts }
    }

    /// Sends `write` (a `create` of an inbox record) with the next batch.
    pub async fn claim(&self, write: Write) -> Result<Claim, StoreError> {
        let (reply, result) = oneshot::channel();
        self.queue
            .send(Request { write, reply })
            .map_err(|_| StoreError::Unavailable("the claim batcher stopped".into()))?;
        result
            .await
            .map_err(|_| StoreError::Unavailable("the claim batcher stopped".into()))?
    }

    /// Batches sent and the claims they carried.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counts.0.load(Ordering::Relaxed),
            self.counts.1.load(Ordering::Relaxed),
        )
    }
}

fn document_name(write: &Write) -> &str {
    match &write.operation {
        Some(Operation::Update(document)) => &document.name,
        _ => "",
    }
}

async fn run(
    db: FirestoreDb,
    mut receiver: mpsc::UnboundedReceiver<Request>,
    timeout: Duration,
    counts: Arc<(AtomicU64, AtomicU64)>,
) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        counts.0.fetch_add(1, Ordering::Relaxed);
        counts.1.fetch_add(batch.len() as u64, Ordering::Relaxed);
        // `BatchWrite` refuses two writes to one document: the same event
        // delivered twice at once. Only the first is sent; the others share
        // its outcome (a later copy is then a duplicate).
        let mut sent: Vec<(Write, Reply)> = Vec::with_capacity(batch.len());
        let mut copies: HashMap<String, Vec<Reply>> = HashMap::new();
        for request in batch {
            let name = document_name(&request.write).to_owned();
            if sent.iter().any(|(write, _)| document_name(write) == name) {
                copies.entry(name).or_default().push(request.reply);
            } else {
                sent.push((request.write, request.reply));
            }
        }
        let (writes, replies): (Vec<Write>, Vec<Reply>) = sent.into_iter().unzip();
        let names: Vec<String> = writes.iter().map(|write| document_name(write).to_owned()).collect();
        let outcomes = send(&db, writes, timeout).await;
        for ((name, reply), outcome) in names.into_iter().zip(replies).zip(outcomes) {
            for copy in copies.remove(&name).unwrap_or_default() {
                let shared = match &outcome {
                    Ok(_) => Ok(Claim::Duplicate),
                    Err(error) => Err(StoreError::Unavailable(error.to_string())),
                };
                let _ = copy.send(shared);
            }
            let _ = reply.send(outcome);
        }
    }
}

/// One outcome per write, in order.
async fn send(db: &FirestoreDb, writes: Vec<Write>, timeout: Duration) -> Vec<Result<Claim, StoreError>> {
    let count = writes.len();
    match batch_write(db, writes, timeout).await {
        Err(error) => (0..count)
            .map(|_| Err(StoreError::Unavailable(error.to_string())))
            .collect(),
        Ok(codes) => codes
            .into_iter()
            .map(|status| match status {
                code::OK => Ok(Claim::Claimed),
                code::ALREADY_EXISTS => Ok(Claim::Duplicate),
                other => Err(StoreError::Unavailable(format!("claim refused with status {other}"))),
            })
            .collect(),
    }
}
