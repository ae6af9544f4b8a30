//! The one place that orchestrates decide -> commit -> send.
//!
//! - [`ingest`]: the request path. The engine decides once per event; what has
//!   an effect is stored in the inbox with its plan, then handed to a worker.
//! - The workers (bounded, off the request path) run the guards, commit each
//!   effect with its ledger entry in one atomic commit, then send.
//! - [`sweeper`]: recovers work whose lease ran out, on any instance.
//! - [`manual_send`] and [`replay`]: the operators' sends and dead-letter replays,
//!   with typed outcomes for the admin routes.
//!
//! If the queue is full or the process dies, nothing is lost: the stored event's
//! lease runs out and the sweeper of some instance picks it up.

mod answer;
mod hold;
pub(crate) mod ingest;
pub(crate) mod manual_send;
mod processed;
pub(crate) mod replay;
mod start;
mod sweeper;
mod work;
mod worker;

pub(crate) use worker::{Processor, ProcessorSettings};

use crate::store::{InboxKey, LedgerDoc, Version};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use work::Work;

/// One unit of work.
pub(crate) enum Job {
    Event(EventJob),
    /// A recorded outbound action to send (recovered, or a retry that is due).
    Outbound(OutboundJob),
}

impl Job {
    fn id(&self) -> &str {
        match self {
            Job::Event(job) => job.key.as_str(),
            Job::Outbound(job) => &job.id,
        }
    }
}

/// A stored event this instance holds the lease of.
pub(crate) struct EventJob {
    pub(crate) key: InboxKey,
    /// The inbox record's version as this instance last wrote or read it.
    pub(crate) version: Version,
    pub(crate) work: Work,
    /// When the lease in `version` runs out.
    pub(crate) lease_until: Instant,
    /// Which processing attempt this is (1 for a fresh event).
    pub(crate) attempt: u32,
    /// Firestore round trips spent storing it, for the metrics; `None` when this
    /// instance did not store it (a recovery).
    pub(crate) claim_round_trips: Option<u32>,
}

pub(crate) struct OutboundJob {
    pub(crate) id: String,
    pub(crate) doc: LedgerDoc,
    pub(crate) version: Version,
}

#[derive(Debug, Clone)]
pub(crate) struct PipelineSettings {
    /// Jobs processed at once. 0: this instance only stores events (ingest only).
    pub(crate) workers: usize,
    pub(crate) queue_capacity: usize,
    pub(crate) sweep_interval: Duration,
    /// Processing attempts of one event before it is parked as a dead letter.
    pub(crate) max_event_attempts: u32,
}

/// Ids of the records queued or running on this instance: the sweeper never takes
/// over what this instance already holds, even when its lease ran out in the queue.
#[derive(Default)]
pub(crate) struct InHand(Mutex<HashSet<String>>);

impl InHand {
    fn insert(&self, id: &str) {
        if let Ok(mut ids) = self.0.lock() {
            ids.insert(id.to_owned());
        }
    }

    fn remove(&self, id: &str) {
        if let Ok(mut ids) = self.0.lock() {
            ids.remove(id);
        }
    }

    fn contains(&self, id: &str) -> bool {
        self.0.lock().map(|ids| ids.contains(id)).unwrap_or(false)
    }

    fn len(&self) -> usize {
        self.0.lock().map(|ids| ids.len()).unwrap_or(0)
    }
}

pub(crate) struct Pipeline {
    jobs: mpsc::Sender<Job>,
    shutdown: CancellationToken,
    tasks: tokio::sync::Mutex<Vec<JoinHandle<()>>>,
    processor: Arc<Processor>,
    in_hand: Arc<InHand>,
    /// Free worker slots; `None` on an ingest-only instance.
    slots: Option<Arc<Semaphore>>,
}

/// Room in the queue, reserved before a lease is taken.
pub(crate) struct QueueSlot<'a> {
    permit: mpsc::Permit<'a, Job>,
    in_hand: &'a InHand,
}

impl QueueSlot<'_> {
    pub(crate) fn send(self, job: Job) {
        self.in_hand.insert(job.id());
        self.permit.send(job);
    }
}

impl Pipeline {
    pub(crate) fn start(
        processor: Arc<Processor>,
        settings: PipelineSettings,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let (jobs, queue) = mpsc::channel(settings.queue_capacity.max(1));
        let in_hand = Arc::new(InHand::default());
        let slots = (settings.workers > 0).then(|| Arc::new(Semaphore::new(settings.workers)));
        let pipeline = Arc::new(Self {
            jobs,
            shutdown: shutdown.clone(),
            tasks: tokio::sync::Mutex::new(Vec::new()),
            processor: processor.clone(),
            in_hand: in_hand.clone(),
            slots: slots.clone(),
        });
        if let Some(slots) = slots {
            let workers = tokio::spawn(run_workers(processor, queue, slots, in_hand, shutdown.clone()));
            let sweeper = tokio::spawn(sweeper::run(pipeline.clone(), settings, shutdown));
            if let Ok(mut tasks) = pipeline.tasks.try_lock() {
                tasks.push(workers);
                tasks.push(sweeper);
            }
        }
        pipeline
    }

    /// Reserves room for one job, unless the queue is full, the instance stops,
    /// or it has no workers: then the record is left for any sweeper.
    pub(crate) fn try_reserve(&self) -> Option<QueueSlot<'_>> {
        if self.shutdown.is_cancelled() || self.slots.is_none() {
            return None;
        }
        let permit = self.jobs.try_reserve().ok()?;
        Some(QueueSlot {
            permit,
            in_hand: &self.in_hand,
        })
    }

    /// Workers free right now: the sweeper takes over no more than can start at once.
    fn idle_workers(&self) -> usize {
        self.slots.as_ref().map_or(0, |slots| slots.available_permits())
    }

    /// Stops taking work, hands queued work back, and waits up to `grace` for the
    /// work in progress and the settles still queued. What is still running then
    /// is abandoned; its lease runs out and another instance finishes it.
    pub(crate) async fn shutdown(&self, grace: Duration) {
        let started = Instant::now();
        self.shutdown.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().await);
        if tokio::time::timeout(grace, futures::future::join_all(tasks))
            .await
            .is_err()
        {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "work still running at the end of the grace period; its leases will run out"
            );
        }
        let left = grace.saturating_sub(started.elapsed());
        self.processor.store().flush_settles(left).await;
    }
}

/// Takes jobs off the queue and runs each in its own task, at most `workers` at
/// once. On shutdown, queued jobs are handed back and running ones finish.
async fn run_workers(
    processor: Arc<Processor>,
    mut queue: mpsc::Receiver<Job>,
    slots: Arc<Semaphore>,
    in_hand: Arc<InHand>,
    shutdown: CancellationToken,
) {
    let mut running = JoinSet::new();
    loop {
        let job = tokio::select! {
            _ = shutdown.cancelled() => break,
            job = queue.recv() => match job { Some(job) => job, None => break },
        };
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            _ = shutdown.cancelled() => {
                processor.hand_back(&job).await;
                in_hand.remove(job.id());
                break;
            }
        };
        let Ok(slot) = slot else {
            break;
        };
        let (processor, in_hand) = (processor.clone(), in_hand.clone());
        running.spawn(async move {
            let id = job.id().to_owned();
            processor.run(job).await;
            in_hand.remove(&id);
            drop(slot);
        });
        // Reap finished tasks so the set does not grow without bound.
        while running.try_join_next().is_some() {}
    }
    queue.close();
    let mut handed_back = 0;
    while let Ok(job) = queue.try_recv() {
        processor.hand_back(&job).await;
        in_hand.remove(job.id());
        handed_back += 1;
    }
    if handed_back > 0 {
        tracing::info!(jobs = handed_back, "queued work handed back at shutdown");
    }
    while running.join_next().await.is_some() {}
}
