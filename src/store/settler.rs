//! Batching the writes that only settle a record's state ("this event is done",
//! "this action was sent"). They are independent and off the critical path, so
//! they are queued and sent together in `BatchWrite` RPCs (not atomic, one status
//! per write: exactly what independent writes want) instead of one round trip
//! each. Found by profiling the benchmark (BENCHMARKS.md): the lever was fewer
//! requests.
//!
//! Each settle names the version its writer holds. The settler:
//! - never puts two writes to one document in one batch (Firestore refuses that):
//!   the later one waits for the next batch;
//! - caps a batch at 500 writes and about 9 MiB (Firestore's limits are 500 writes
//!   and 10 MiB per request); sends a second (up to a fourth) batch beside one in
//!   flight only when at least 32 settles are due;
//! - retries a write whose batch got no answer, or that failed for a passing
//!   reason, with backoff, for as long as the process lives;
//! - checks a write whose precondition failed by reading the document: already in
//!   the target state (an earlier try landed) is success. A settle that states a
//!   fact ("LINE accepted this message") is applied again over a record another
//!   instance moved on meanwhile (pending again, or even parked as uncertain),
//!   with that record's dead letters removed in the same commit: a delivered
//!   message never ends up a dead letter while this process lives. Any other
//!   settle then changes nothing: a newer writer moved the record on.
//!
//! If the process dies before a mark is stored, the sweeper settles the record
//! again: an event re-runs without effect, a push is answered 409, a reply's retry
//! is answered "Invalid reply token".

use super::Version;
use super::reads::get_documents;
use super::writes::{
    CommitOutcome, Expect, batch_write, code, commit_writes, delete, document_name, expecting, transient,
};
use firestore::FirestoreDb;
use gcloud_sdk::google::firestore::v1::{Write, value::ValueType};
use gcloud_sdk::prost::Message;
use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Firestore's limit of writes per request.
const MAX_WRITES: usize = 500;
/// Below Firestore's 10 MiB per request, with room for the request's envelope.
const MAX_BYTES: usize = 9 * 1024 * 1024;
const MAX_IN_FLIGHT: usize = 4;
/// Settles due that justify a batch beside one in flight.
const EXTRA_BATCH: usize = 32;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One settling write and the `state` it moves its document to.
pub(super) struct Settle {
    write: Write,
    target_state: &'static str,
    fact: Option<Fact>,
}

/// A settle that must hold whatever happened to the record meanwhile.
pub(super) struct Fact {
    /// The states it is applied over.
    pub(super) overrides: &'static [&'static str],
    /// Documents removed with it when it is applied again (dead letters).
    pub(super) cleanup: Vec<String>,
}

impl Settle {
    pub(super) fn new(write: Write, target_state: &'static str) -> Self {
        Self {
            write,
            target_state,
            fact: None,
        }
    }

    pub(super) fn fact(write: Write, target_state: &'static str, fact: Fact) -> Self {
        Self {
            write,
            target_state,
            fact: Some(fact),
        }
    }
}

enum Request {
    Settle(u64, Box<Settle>),
    /// Answered once every settle submitted up to this sequence number is done.
    Flush(u64, oneshot::Sender<()>),
}

#[derive(Debug, Default)]
struct Counts {
    batches: AtomicU64,
    writes: AtomicU64,
    submitted: AtomicU64,
}

#[derive(Clone)]
pub(super) struct Settler {
    queue: mpsc::UnboundedSender<Request>,
    counts: Arc<Counts>,
}

impl Settler {
    pub(super) fn start(db: FirestoreDb, timeout: Duration) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let counts = Arc::new(Counts::default());
        tokio::spawn(run(db, receiver, timeout, counts.clone()));
        Self { queue, counts }
    }

    pub(super) fn submit(&self, settle: Settle) {
        let sequence = self.counts.submitted.fetch_add(1, Ordering::Relaxed) + 1;
        // Fails only once the runtime is gone; the sweeper settles it then.
        let _ = self.queue.send(Request::Settle(sequence, Box::new(settle)));
    }

    /// Waits until everything submitted so far is settled, or `limit` passed.
    /// Later settles do not hold it up.
    pub(super) async fn flush(&self, limit: Duration) {
        let up_to = self.counts.submitted.load(Ordering::Relaxed);
        let (done, flushed) = oneshot::channel();
        if self.queue.send(Request::Flush(up_to, done)).is_ok() {
            let _ = tokio::time::timeout(limit, flushed).await;
        }
    }

    pub(super) fn counts(&self) -> (u64, u64) {
        (
            self.counts.batches.load(Ordering::Relaxed),
            self.counts.writes.load(Ordering::Relaxed),
        )
    }
}

struct Pending {
    sequence: u64,
    settle: Box<Settle>,
    tries: u32,
    not_before: Instant,
}

/// What became of one write of a batch.
enum Settled {
    Done(u64),
    Retry(Box<Pending>),
}

async fn run(db: FirestoreDb, mut receiver: mpsc::UnboundedReceiver<Request>, timeout: Duration, counts: Arc<Counts>) {
    let mut queue: VecDeque<Pending> = VecDeque::new();
    // Sequence numbers queued or in flight.
    let mut outstanding: BTreeSet<u64> = BTreeSet::new();
    let mut flushes: Vec<(u64, oneshot::Sender<()>)> = Vec::new();
    let mut in_flight: JoinSet<Vec<Settled>> = JoinSet::new();
    let mut open = true;
    loop {
        while in_flight.len() < MAX_IN_FLIGHT && another_batch(&queue, in_flight.len()) {
            let batch = take_batch(&mut queue, Instant::now());
            if batch.is_empty() {
                break;
            }
            counts.batches.fetch_add(1, Ordering::Relaxed);
            counts.writes.fetch_add(batch.len() as u64, Ordering::Relaxed);
            in_flight.spawn(send(db.clone(), batch, timeout));
        }
        // A flush is answered once nothing it waits for is outstanding.
        let oldest = outstanding.first().copied();
        let (kept, answered): (Vec<_>, Vec<_>) = std::mem::take(&mut flushes)
            .into_iter()
            .partition(|(up_to, _)| oldest.is_some_and(|oldest| oldest <= *up_to));
        flushes = kept;
        for (_, done) in answered {
            let _ = done.send(());
        }
        if !open && outstanding.is_empty() {
            return;
        }
        let next_retry = queue.iter().map(|pending| pending.not_before).min();
        tokio::select! {
            request = receiver.recv(), if open => match request {
                Some(Request::Settle(sequence, settle)) => {
                    outstanding.insert(sequence);
                    queue.push_back(Pending { sequence, settle, tries: 0, not_before: Instant::now() });
                }
                Some(Request::Flush(up_to, done)) => flushes.push((up_to, done)),
                None => open = false,
            },
            Some(joined) = in_flight.join_next(), if !in_flight.is_empty() => {
                for settled in joined.unwrap_or_default() {
                    match settled {
                        Settled::Done(sequence) => {
                            outstanding.remove(&sequence);
                        }
                        Settled::Retry(pending) => queue.push_back(*pending),
                    }
                }
            },
            _ = sleep_until(next_retry), if next_retry.is_some_and(|at| at > Instant::now()) => {}
        }
    }
}

/// Whether to send another batch now: always when none is in flight; beside one
/// only with a backlog worth a request of its own (fewer, fuller requests cost
/// less CPU on both sides).
fn another_batch(queue: &VecDeque<Pending>, in_flight: usize) -> bool {
    let now = Instant::now();
    let due = queue.iter().filter(|pending| pending.not_before <= now).count();
    due > 0 && (in_flight == 0 || due >= EXTRA_BATCH)
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// The next batch: writes that are due, at most one per document, within the
/// request limits. The rest stay queued in order.
fn take_batch(queue: &mut VecDeque<Pending>, now: Instant) -> Vec<Pending> {
    let mut batch = Vec::new();
    let mut documents = HashSet::new();
    let mut bytes = 0;
    let mut kept = VecDeque::with_capacity(queue.len());
    while let Some(pending) = queue.pop_front() {
        let size = pending.settle.write.encoded_len();
        let fits = batch.len() < MAX_WRITES && bytes + size <= MAX_BYTES;
        let name = document_name(&pending.settle.write).to_owned();
        if fits && pending.not_before <= now && !documents.contains(&name) {
            documents.insert(name);
            bytes += size;
            batch.push(pending);
        } else {
            kept.push_back(pending);
        }
    }
    *queue = kept;
    batch
}

async fn send(db: FirestoreDb, batch: Vec<Pending>, timeout: Duration) -> Vec<Settled> {
    let writes: Vec<Write> = batch.iter().map(|pending| pending.settle.write.clone()).collect();
    let statuses = match batch_write(&db, writes, timeout).await {
        Ok(statuses) => statuses,
        Err(error) => {
            tracing::warn!(error = %error, writes = batch.len(), "settle batch failed; retrying its writes");
            return batch.into_iter().map(retry).collect();
        }
    };
    let mut settled = Vec::with_capacity(batch.len());
    let mut moved = Vec::new();
    for (pending, status) in batch.into_iter().zip(statuses) {
        match status.code {
            // NOT_FOUND: the record vanished (TTL); nothing to settle.
            code::OK | code::NOT_FOUND => settled.push(Settled::Done(pending.sequence)),
            code::FAILED_PRECONDITION => moved.push(pending),
            other if transient(other) => settled.push(retry(pending)),
            other => {
                tracing::error!(
                    code = other,
                    settle.to = pending.settle.target_state,
                    "Firestore refused a settle; the sweeper settles the record again"
                );
                settled.push(Settled::Done(pending.sequence));
            }
        }
    }
    if !moved.is_empty() {
        settled.extend(moved_on(&db, moved, timeout).await);
    }
    settled
}

/// Records that were not at the version their settles named: one read for all
/// of them, then each settle is done, applied again (a fact) or dropped.
async fn moved_on(db: &FirestoreDb, moved: Vec<Pending>, timeout: Duration) -> Vec<Settled> {
    let names: Vec<String> = moved
        .iter()
        .map(|pending| document_name(&pending.settle.write).to_owned())
        .collect();
    let Ok(found) = get_documents(db, names, None, timeout).await else {
        return moved.into_iter().map(retry).collect();
    };
    let decisions = moved
        .into_iter()
        .zip(found)
        .map(|(pending, document)| decide(db, pending, document.map(state_of), timeout));
    futures::future::join_all(decisions).await
}

async fn decide(db: &FirestoreDb, pending: Pending, stored: Option<(String, Version)>, timeout: Duration) -> Settled {
    // Gone (TTL): nothing to settle.
    let Some((state, version)) = stored else {
        return Settled::Done(pending.sequence);
    };
    let settle = &pending.settle;
    if state == settle.target_state {
        return Settled::Done(pending.sequence);
    }
    match &settle.fact {
        Some(fact) if fact.overrides.contains(&state.as_str()) => {
            tracing::warn!(
                record.state = %state,
                settle.to = settle.target_state,
                "another instance moved the record on; what happened is applied over it"
            );
            let mut writes = vec![expecting(settle.write.clone(), Expect::At(version))];
            writes.extend(fact.cleanup.iter().cloned().map(delete));
            match commit_writes(db, writes, timeout).await {
                CommitOutcome::Committed(_) => Settled::Done(pending.sequence),
                // Moved again, or no answer: read and decide again.
                CommitOutcome::Changed | CommitOutcome::Unknown(_) | CommitOutcome::AlreadyExists => retry(pending),
                CommitOutcome::Failed(error) => {
                    tracing::error!(error = %error, "a settle could not be applied again");
                    Settled::Done(pending.sequence)
                }
            }
        }
        _ => {
            tracing::info!(
                record.state = %state,
                settle.to = settle.target_state,
                "a newer writer moved the record on; this settle changes nothing"
            );
            Settled::Done(pending.sequence)
        }
    }
}

fn retry(mut pending: Pending) -> Settled {
    pending.tries += 1;
    let factor = 2u32.saturating_pow(pending.tries.saturating_sub(1).min(16));
    pending.not_before = Instant::now() + FIRST_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF);
    Settled::Retry(Box::new(pending))
}

/// The `state` field and version of a document.
fn state_of(document: gcloud_sdk::google::firestore::v1::Document) -> (String, Version) {
    let state = match document.fields.get("state").and_then(|value| value.value_type.as_ref()) {
        Some(ValueType::StringValue(state)) => state.clone(),
        _ => String::new(),
    };
    (state, Version::new(document.update_time.unwrap_or_default()))
}
