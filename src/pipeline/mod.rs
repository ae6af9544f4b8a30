//! Work off the request path: a bounded queue, a bounded pool of workers, and a
//! sweeper that recovers work whose lease ran out (a crash, a failed attempt, a
//! scheduled retry), on this instance or any other.
//!
//! The webhook only stores events and hands them over here. If the queue is full
//! or the process dies, nothing is lost: the stored event's lease runs out and
//! the sweeper of some instance picks it up.

mod cause;
mod processed;
mod sweeper;
mod worker;

pub use processed::Processed;
pub use sweeper::stored_event;
pub use worker::{Processor, event_span};

use crate::line::webhook::Event;
use crate::store::{InboxKey, Leased, LedgerDoc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// One unit of work.
pub enum Job {
    /// A stored event to process.
    Event {
        key: InboxKey,
        event: Box<Event>,
        /// Firestore round trips spent storing it, for the metrics; `None` when
        /// this instance did not store it (a recovery).
        claim_round_trips: Option<u32>,
        /// Which processing attempt this is (1 for a fresh event); the wait before
        /// a retry grows with it.
        attempt: u32,
    },
    /// A recorded outbound action to send (recovered or replayed).
    Outbound { record: Box<Leased<LedgerDoc>> },
}

#[derive(Debug, Clone)]
pub struct PipelineSettings {
    /// Jobs processed at once. 0: this instance only stores events (ingest only).
    pub workers: usize,
    pub queue_capacity: usize,
    pub sweep_interval: Duration,
    /// Processing attempts of one event before it is parked as a dead letter.
    pub max_event_attempts: u32,
}

pub struct Pipeline {
    jobs: mpsc::Sender<Job>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    processor: Arc<Processor>,
}

impl Pipeline {
    pub fn start(processor: Arc<Processor>, settings: PipelineSettings, shutdown: CancellationToken) -> Arc<Self> {
        let (jobs, queue) = mpsc::channel(settings.queue_capacity.max(1));
        let mut tasks = Vec::new();
        if settings.workers > 0 {
            tasks.push(tokio::spawn(run_workers(
                processor.clone(),
                queue,
                settings.workers,
                shutdown.clone(),
            )));
            tasks.push(tokio::spawn(sweeper::run(
                processor.clone(),
                jobs.clone(),
                settings.clone(),
                shutdown.clone(),
            )));
        }
        Arc::new(Self {
            jobs,
            shutdown,
            tasks: Mutex::new(tasks),
            processor,
        })
    }

    pub fn processor(&self) -> &Arc<Processor> {
        &self.processor
    }

    /// Queues a job without waiting. `false` when the queue is full or closed:
    /// the job's lease then runs out and the sweeper takes it.
    pub fn submit(&self, job: Job) -> bool {
        !self.shutdown.is_cancelled() && self.jobs.try_send(job).is_ok()
    }

    /// Stops taking work, hands queued work back, and waits up to `grace` for the
    /// work in progress. What is still running then is abandoned; its lease runs
    /// out and another instance finishes it.
    pub async fn shutdown(&self, grace: Duration) {
        self.shutdown.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().await);
        let all = futures::future::join_all(tasks);
        let flushed = async {
            all.await;
            self.processor.store().flush_settles().await;
        };
        if tokio::time::timeout(grace, flushed).await.is_err() {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "work still running at the end of the grace period; its leases will run out"
            );
        }
    }
}

/// Takes jobs off the queue and runs each in its own task, at most `workers` at
/// once. On shutdown, queued jobs are handed back and running ones finish.
async fn run_workers(
    processor: Arc<Processor>,
    mut queue: mpsc::Receiver<Job>,
    workers: usize,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(workers));
    let mut running = JoinSet::new();
    loop {
        let job = tokio::select! {
            _ = shutdown.cancelled() => break,
            job = queue.recv() => match job { Some(job) => job, None => break },
        };
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => {
                processor.hand_back(job).await;
                break;
            }
        };
        let processor = processor.clone();
        running.spawn(async move {
            processor.run(job).await;
            drop(slot);
        });
        // Reap finished tasks so the set does not grow without bound.
        while running.try_join_next().is_some() {}
    }
    queue.close();
    let mut handed_back = 0;
    while let Ok(job) = queue.try_recv() {
        processor.hand_back(job).await;
        handed_back += 1;
    }
    if handed_back > 0 {
        tracing::info!(jobs = handed_back, "queued work handed back at shutdown");
    }
    while running.join_next().await.is_some() {}
}
