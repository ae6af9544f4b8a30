//! Group commit of claims: the inbox's (a `create` per delivered event) and the
//! ledger's reply-call marks (a conditional update per reply, the write that
//! leases an entry for its call). Claims that arrive while earlier batches are in
//! flight go out together in one `BatchWrite`: each is its own write with its
//! own status (`ALREADY_EXISTS` for a redelivery, `FAILED_PRECONDITION` for an
//! entry that moved on), so one claim never fails another, yet a burst costs the
//! emulator one request instead of dozens.
//!
//! A second (up to a fourth) batch goes out beside one in flight when at least 32
//! claims wait, or when the last batch went out 100 ms ago; each batch holds at
//! most 500 writes and about 9 MiB (Firestore's limits per request are 500 writes
//! and 10 MiB).
//!
//! Measured in BENCHMARKS.md: the acknowledgement waits for this one request, and
//! under load the emulator's per-request cost, not the writes, dominated it.

use super::inbox::Claim;
use super::writes::{batch_write, code, document_name};
use super::{StoreError, Version};
use firestore::FirestoreDb;
use gcloud_sdk::google::firestore::v1::Write;
use gcloud_sdk::prost::Message;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;

const MAX_WRITES: usize = 500;
const MAX_BYTES: usize = 9 * 1024 * 1024;
const MAX_IN_FLIGHT: usize = 4;
/// Claims waiting that justify a batch beside one in flight.
const EXTRA_BATCH: usize = 32;
/// A batch in flight for this long is slow: the claims waiting go out beside it.
const SLOW_BATCH: Duration = Duration::from_millis(100);

/// A write's own status in its batch: its code and, when written, its version.
type Status = (i32, Option<Version>);

type Reply = oneshot::Sender<Result<Status, StoreError>>;

struct Request {
    write: Write,
    kind: Kind,
    reply: Reply,
}

/// What a claim writes, which decides how a copy of it in the same batch ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A `create`: a copy behind one that was stored finds it there.
    Create,
    /// An update conditional on a version: a copy from the same version, behind
    /// one that landed, finds the document moved on.
    Update,
}

impl Kind {
    /// The status a copy sent right after a write that got `first` would get.
    fn copy_status(self, first: i32) -> i32 {
        match (self, first) {
            (Kind::Create, code::OK | code::ALREADY_EXISTS) => code::ALREADY_EXISTS,
            (Kind::Update, code::OK | code::FAILED_PRECONDITION) => code::FAILED_PRECONDITION,
            // Refused for another reason: so would the copy be.
            (_, other) => other,
        }
    }
}

#[derive(Clone)]
pub(super) struct Claimer {
    queue: mpsc::UnboundedSender<Request>,
    counts: Arc<(AtomicU64, AtomicU64)>,
}

impl Claimer {
    pub(super) fn start(db: FirestoreDb, timeout: Duration) -> Self {
        let (queue, receiver) = mpsc::unbounded_channel();
        let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        tokio::spawn(run(db, receiver, timeout, counts.clone()));
        Self { queue, counts }
    }

    /// Sends `write` (a `create` of an inbox record) with the next batch.
    pub(super) async fn claim(&self, write: Write) -> Result<Claim, StoreError> {
        match self.send(write, Kind::Create).await? {
            (code::OK, Some(version)) => Ok(Claim::Claimed { version }),
            // Never seen: a create always has an update time. Without one the
            // claim cannot be held; LINE redelivers and the sweeper recovers it.
            (code::OK, None) => Err(StoreError::Unavailable("claim answered without a version".into())),
            (code::ALREADY_EXISTS, _) => Ok(Claim::Duplicate),
            (other, _) => Err(StoreError::Unavailable(format!("claim refused with status {other}"))),
        }
    }

    /// Sends `write` (an update conditional on the version its writer holds)
    /// with the next batch: `Some(version)` when it landed, `None` when the
    /// document had moved on. An error leaves the outcome unknown.
    pub(super) async fn update(&self, write: Write) -> Result<Option<Version>, StoreError> {
        match self.send(write, Kind::Update).await? {
            (code::OK, Some(version)) => Ok(Some(version)),
            (code::OK, None) => Err(StoreError::Unavailable("update answered without a version".into())),
            (code::FAILED_PRECONDITION | code::NOT_FOUND, _) => Ok(None),
            (other, _) => Err(StoreError::Unavailable(format!("update refused with status {other}"))),
        }
    }

    async fn send(&self, write: Write, kind: Kind) -> Result<Status, StoreError> {
        let (reply, result) = oneshot::channel();
        self.queue
            .send(Request { write, kind, reply })
            .map_err(|_| StoreError::Unavailable("the claim batcher stopped".into()))?;
        result
            .await
            .map_err(|_| StoreError::Unavailable("the claim batcher stopped".into()))?
    }

    /// Batches sent and the claims they carried.
    pub(super) fn counts(&self) -> (u64, u64) {
        (
            self.counts.0.load(Ordering::Relaxed),
            self.counts.1.load(Ordering::Relaxed),
        )
    }
}

async fn run(
    db: FirestoreDb,
    mut receiver: mpsc::UnboundedReceiver<Request>,
    timeout: Duration,
    counts: Arc<(AtomicU64, AtomicU64)>,
) {
    let mut pending: VecDeque<Request> = VecDeque::new();
    let mut in_flight = JoinSet::new();
    let mut last_sent = Instant::now();
    let mut open = true;
    loop {
        while in_flight.len() < MAX_IN_FLIGHT && another_batch(pending.len(), in_flight.len(), last_sent.elapsed()) {
            last_sent = Instant::now();
            let batch = take_batch(&mut pending);
            counts.0.fetch_add(1, Ordering::Relaxed);
            counts.1.fetch_add(batch.len() as u64, Ordering::Relaxed);
            let db = db.clone();
            in_flight.spawn(async move { send_batch(&db, batch, timeout).await });
        }
        if !open && pending.is_empty() && in_flight.is_empty() {
            return;
        }
        // Claims waiting beside a batch in flight go out once it is slow.
        let overdue = !pending.is_empty() && in_flight.len() < MAX_IN_FLIGHT;
        tokio::select! {
            _ = tokio::time::sleep_until(last_sent + SLOW_BATCH), if overdue => {}
            request = receiver.recv(), if open => match request {
                Some(request) => {
                    pending.push_back(request);
                    while let Ok(request) = receiver.try_recv() {
                        pending.push_back(request);
                    }
                }
                None => open = false,
            },
            Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
        }
    }
}

/// Whether to send another batch now: always when none is in flight; beside one
/// only with a backlog worth a request of its own, or once the last batch went
/// out `SLOW_BATCH` ago (Firestore is slow: the claims should not wait for it).
/// Fewer, fuller requests cost the emulator (and the service) less CPU.
fn another_batch(waiting: usize, in_flight: usize, since_last: Duration) -> bool {
    waiting > 0 && (in_flight == 0 || waiting >= EXTRA_BATCH || since_last >= SLOW_BATCH)
}

/// The next batch: at most 500 writes and about 9 MiB.
fn take_batch(pending: &mut VecDeque<Request>) -> Vec<Request> {
    let mut batch = Vec::new();
    let mut bytes = 0;
    while let Some(request) = pending.front() {
        let size = request.write.encoded_len();
        if batch.len() >= MAX_WRITES || (!batch.is_empty() && bytes + size > MAX_BYTES) {
            break;
        }
        bytes += size;
        if let Some(request) = pending.pop_front() {
            batch.push(request);
        }
    }
    batch
}

async fn send_batch(db: &FirestoreDb, batch: Vec<Request>, timeout: Duration) {
    // `BatchWrite` refuses two writes to one document: the same event delivered
    // twice at once. Only the first is sent; the others share its outcome (a
    // later copy is then a duplicate, as if it had come second).
    let mut sent: Vec<(Write, Reply)> = Vec::with_capacity(batch.len());
    let mut copies: HashMap<String, Vec<(Kind, Reply)>> = HashMap::new();
    for request in batch {
        let name = document_name(&request.write).to_owned();
        if sent.iter().any(|(write, _)| document_name(write) == name) {
            copies.entry(name).or_default().push((request.kind, request.reply));
        } else {
            sent.push((request.write, request.reply));
        }
    }
    let (writes, replies): (Vec<Write>, Vec<Reply>) = sent.into_iter().unzip();
    let names: Vec<String> = writes.iter().map(|write| document_name(write).to_owned()).collect();
    let outcomes = outcomes(db, writes, timeout).await;
    for ((name, reply), outcome) in names.into_iter().zip(replies).zip(outcomes) {
        for (kind, copy) in copies.remove(&name).unwrap_or_default() {
            let shared = match &outcome {
                Ok((first, _)) => Ok((kind.copy_status(*first), None)),
                Err(error) => Err(StoreError::Unavailable(error.to_string())),
            };
            let _ = copy.send(shared);
        }
        let _ = reply.send(outcome);
    }
}

/// One outcome per write, in order.
async fn outcomes(db: &FirestoreDb, writes: Vec<Write>, timeout: Duration) -> Vec<Result<Status, StoreError>> {
    let count = writes.len();
    match batch_write(db, writes, timeout).await {
        Err(error) => (0..count)
            .map(|_| Err(StoreError::Unavailable(error.to_string())))
            .collect(),
        Ok(statuses) => statuses
            .into_iter()
            .map(|status| Ok((status.code, status.version)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, code};

    #[test]
    fn a_copy_in_the_same_batch_ends_as_if_sent_right_after_the_first() {
        let cases = [
            (Kind::Create, code::OK, code::ALREADY_EXISTS),
            (Kind::Create, code::ALREADY_EXISTS, code::ALREADY_EXISTS),
            // The first was refused (not stored): the copy is no duplicate.
            (Kind::Create, 10, 10),
            (Kind::Update, code::OK, code::FAILED_PRECONDITION),
            (Kind::Update, code::FAILED_PRECONDITION, code::FAILED_PRECONDITION),
            (Kind::Update, 10, 10),
        ];
        for (kind, first, copy) in cases {
            assert_eq!(kind.copy_status(first), copy, "{kind:?} after {first}");
        }
    }
}
