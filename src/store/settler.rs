//! Batching the writes that only settle a record's state ("this event is done",
//! "this action was sent"). They are independent, idempotent and off the
//! critical path, so they are queued and sent together in one `BatchWrite` RPC
//! (not atomic, one status per write: exactly what independent writes want)
//! instead of one round trip each.
//!
//! Found by profiling the benchmark (BENCHMARKS.md): the service's CPU went to
//! the gRPC/HTTP-2 transport and system calls, not to its own code, so the lever
//! was fewer requests. Under load a batch carries many settles.
//!
//! If the process dies before a batch is sent, the records stay pending and the
//! sweeper settles them again: an event re-runs without effect (its answer or
//! ledger entry exists), a push is re-sent under its retry key (LINE answers 409),
//! and a reply becomes `uncertain`.

use super::writes::{batch_write, code};
use firestore::FirestoreDb;
use firestore::gcloud_sdk::google::firestore::v1::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Firestore's limit of writes per `BatchWrite`.
const MAX_BATCH: usize = 500;

enum Settle {
    Write(Box<Write>),
    Flush(oneshot::Sender<()>),
}

#[derive(Debug, Default)]
pub struct SettleCounts {
    pub batches: AtomicU64,
    pub writes: AtomicU64,
}

#[derive(Clone)]
pub struct Settler {
    queue: mpsc::UnboundedSender<Settle>,
    counts: Arc<SettleCounts>,
}

impl Settler {
    pub fn start(db: FirestoreDb, timeout: Duration) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let counts = Arc::new(SettleCounts::default());
        tokio::spawn(run(db, receiver, timeout, counts.clone()));
        Self { queue, counts }
    }

    pub fn submit(&self, write: Write) {
        // Fails only once the runtime is gone; the sweeper settles it then.
        let _ = self.queue.send(Settle::Write(Box::new(write)));
    }

    /// Waits until everything submitted so far was sent (at shutdown).
    pub async fn flush(&self) {
        let (done, flushed) = oneshot::channel();
        if self.queue.send(Settle::Flush(done)).is_ok() {
            let _ = flushed.await;
        }
    }

    pub fn counts(&self) -> (u64, u64) {
        (
            self.counts.batches.load(Ordering::Relaxed),
            self.counts.writes.load(Ordering::Relaxed),
        )
    }
}

async fn run(
    db: FirestoreDb,
    mut receiver: mpsc::UnboundedReceiver<Settle>,
    timeout: Duration,
    counts: Arc<SettleCounts>,
) {
    while let Some(first) = receiver.recv().await {
        let mut writes = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        // Whatever queued up while the previous batch was in flight goes together.
        while let Some(settle) = next.take() {
            match settle {
                Settle::Write(write) => writes.push(*write),
                Settle::Flush(done) => flushes.push(done),
            }
            if writes.len() < MAX_BATCH {
                next = receiver.try_recv().ok();
            }
        }
        if !writes.is_empty() {
            counts.batches.fetch_add(1, Ordering::Relaxed);
            counts.writes.fetch_add(writes.len() as u64, Ordering::Relaxed);
            send(&db, writes, timeout).await;
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

async fn send(db: &FirestoreDb, writes: Vec<Write>, timeout: Duration) {
    let count = writes.len();
    match batch_write(db, writes, timeout).await {
        Ok(codes) => {
            // NOT_FOUND: the record vanished (TTL); nothing to settle.
            let failed = codes
                .iter()
                .filter(|code| !matches!(**code, code::OK | code::NOT_FOUND))
                .count();
            if failed > 0 {
                tracing::warn!(
                    failed,
                    of = count,
                    "some settles failed; the sweeper will settle them again"
                );
            }
        }
        Err(error) => {
            tracing::warn!(error = %error, writes = count, "settle batch failed; the sweeper will settle what did not land")
        }
    }
}
