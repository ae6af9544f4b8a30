//! The one place that orchestrates decide -> commit -> send.
//!
//! - [`ingest`]: the request path. The engine decides once per event; what has
//!   an effect is stored in the inbox with its plan, then handed to a worker.
//! - The worker pool (bounded, off the request path) hands each job to the
//!   service that does it, each built with only the handles it uses:
//!   - [`EventWorker`]: answers, starts and card taps, typed text, follows. It
//!     runs the guards and commits each effect with its ledger entry in one
//!     atomic commit, then hands the entry to the sender.
//!   - [`TimerFirer`]: due timers this instance claimed, one commit each.
//!   - [`OutboundSender`]: sends recorded actions (fresh, recovered, retried).
//! - [`sweeper`]: only finds work (expired events and sends, due timers) and
//!   queues it, on any instance; told to come back soon through [`SweepSoon`].
//! - [`manual_send`], [`replay`] and [`timer_cancel`]: the operators' sends,
//!   dead-letter replays and timer cancels, with typed outcomes for the admin
//!   routes.
//!
//! If the queue is full or the process dies, nothing is lost: the stored event's
//! lease runs out and the sweeper of some instance picks it up.

mod answer;
mod branches;
mod campaign_runs;
pub(crate) mod campaigns;
pub(crate) mod error;
mod follow;
pub(crate) mod follower_sync;
pub(crate) mod form_receipts;
pub(crate) mod hand_edits;
mod hold;
pub(crate) mod ingest;
pub(crate) mod legacy_answers;
mod liveness;
pub(crate) mod manual_send;
mod notice;
pub(crate) mod personal;
mod processed;
pub(crate) mod replay;
mod retries;
pub(crate) mod rich_menu_deploy;
pub(crate) mod rich_menu_links;
mod sender;
pub(crate) mod sources;
mod start;
mod sweeper;
pub(crate) mod timer_cancel;
mod timer_pace;
mod timers;
mod typed;
pub(crate) mod user_data;
mod versions;
mod work;
mod worker;

pub(crate) use error::PipelineError;
pub(crate) use sender::OutboundSender;
pub(crate) use timers::TimerFirer;
pub(crate) use versions::Versions;
pub(crate) use worker::{EventSettings, EventWorker, EventWorkerParts};

use crate::metrics::Metrics;
use crate::outbound::ScheduledRetry;
use crate::store::{InboxKey, LedgerDoc, Store, Version};
use futures::StreamExt;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use timer_pace::{TimerPace, TimerTurn};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use work::Work;

/// The counts a ledger entry raises: "sent" for the question `node` it asks
/// (by arm too, in an A/B test) and the run of the split arm it took, on the
/// day of `now` in the scenario's time zone.
pub(crate) fn asked_on(
    engine: &crate::engine::Engine,
    scenario: &crate::ids::ScenarioId,
    node: Option<&crate::ids::NodeId>,
    arms: &crate::engine::Arms,
    now: chrono::DateTime<chrono::Utc>,
) -> crate::store::EntryCounts {
    let day = || engine.day_of(scenario, now);
    crate::store::EntryCounts {
        asks: node.map(|node| crate::store::AsksDoc {
            node: node.to_string(),
            day: day(),
            variant: arms.asks.clone(),
        }),
        split: arms.took.as_ref().map(|took| crate::store::SplitDoc {
            node: took.node.to_string(),
            label: took.label.clone(),
            day: day(),
        }),
    }
}

/// A time as Firestore stores it (the current time in the unreachable case of
/// a time Firestore cannot hold).
pub(super) fn instant(at: chrono::DateTime<chrono::Utc>) -> firestore::FirestoreInstant {
    firestore::FirestoreInstant::from_millisecond(at.timestamp_millis())
        .unwrap_or_else(|_| firestore::FirestoreInstant::now())
}

/// Told when work is left for a sweeper (released for a retry, or stored while
/// the queue was full): the sweeper sweeps at its shortest interval again. Shared
/// by whoever leaves such work and the sweeper, and nothing else.
#[derive(Clone, Default)]
pub(crate) struct SweepSoon(Arc<tokio::sync::Notify>);

impl SweepSoon {
    pub(crate) fn notify(&self) {
        self.0.notify_one();
    }

    async fn notified(&self) {
        self.0.notified().await;
    }
}

/// One unit of work.
pub(crate) enum Job {
    Event(Box<EventJob>),
    /// A recorded outbound action to send (recovered, or a retry that is due).
    Outbound(Box<OutboundJob>),
    /// A timer that fell due, claimed by this instance.
    Timer(Box<timers::TimerJob>),
}

impl Job {
    fn id(&self) -> &str {
        match self {
            Job::Event(job) => job.key.as_str(),
            Job::Outbound(job) => &job.id,
            Job::Timer(job) => &job.id,
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
    /// Taken over by a sweeper: its attempt is not counted in the store yet (a
    /// fresh event's first attempt is implied by its claim).
    pub(crate) recovered: bool,
    /// Firestore round trips spent storing it, for the metrics; `None` when this
    /// instance did not store it (a recovery).
    pub(crate) claim_round_trips: Option<u32>,
    /// Its place among the events of one user in one webhook request.
    pub(crate) turn: Turn,
}

/// Events of one user within one webhook request are processed in the order
/// LINE sent them: each waits until the one before it has been processed (or
/// was never queued), then lets the next one go when it ends, however it ends.
/// The inbox plan names the event before too ([`Work::after`]), so a retry or
/// another instance keeps the order; this is the fast path.
#[derive(Default)]
pub(crate) struct Turn {
    after: Option<tokio::sync::oneshot::Receiver<bool>>,
    done: Option<tokio::sync::oneshot::Sender<bool>>,
}

impl Turn {
    /// Turns for a chain of `count` events, in order.
    pub(crate) fn chain(count: usize) -> Vec<Turn> {
        let mut turns = Vec::with_capacity(count);
        let mut after = None;
        for _ in 0..count {
            let (done, next) = tokio::sync::oneshot::channel();
            turns.push(Turn {
                after: after.take(),
                done: Some(done),
            });
            after = Some(next);
        }
        turns
    }

    /// Waits for the previous event of the chain, at most `limit` (a lease's
    /// worth: an event stuck elsewhere must not hold up the next for ever).
    /// `true` when it was processed here (its "done" may still be on its way to
    /// Firestore, batched): then the next need not read it.
    async fn wait(&mut self, limit: Duration) -> bool {
        match self.after.take() {
            Some(after) => matches!(tokio::time::timeout(limit, after).await, Ok(Ok(true))),
            None => false,
        }
    }

    /// Lets the next event of the chain go; `processed` when this one was.
    fn finish(&mut self, processed: bool) {
        if let Some(done) = self.done.take() {
            let _ = done.send(processed);
        }
    }
}

pub(crate) struct OutboundJob {
    pub(crate) id: String,
    pub(crate) doc: LedgerDoc,
    pub(crate) version: Version,
    /// When the lease in `version` runs out.
    pub(crate) lease_until: Instant,
}

/// Sends due for another turn wait here, ahead of new events: a reply's retries
/// run against its token's clock, and each is one LINE call.
const SEND_QUEUE: usize = 64;

/// Due timers this instance claimed wait here, in a queue of their own: a timer
/// storm (thousands due at once) never takes the room webhook events need, so
/// a tap during it is queued behind other events only, never behind timers.
const TIMER_QUEUE: usize = 500;

#[derive(Debug, Clone)]
pub(crate) struct PipelineSettings {
    /// Jobs processed at once. 0: this instance only stores events (ingest only).
    pub(crate) workers: usize,
    pub(crate) queue_capacity: usize,
    pub(crate) sweep_interval: Duration,
    /// Processing attempts of one event before it is parked as a dead letter.
    pub(crate) max_event_attempts: u32,
}

/// When a lease taken now for `lease` runs out, as this process's clock sees it.
fn lease_deadline(lease: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(lease).unwrap_or(now)
}

/// Ids of the records queued or running on this instance: the sweeper never takes
/// over what this instance already holds, even when its lease ran out in the queue.
#[derive(Default)]
pub(crate) struct InHand(Mutex<HashSet<String>>);

impl InHand {
    /// Holds `id` until the returned guard is dropped.
    fn hold(self: &Arc<Self>, id: &str) -> Held {
        self.insert(id);
        Held {
            in_hand: self.clone(),
            id: id.to_owned(),
        }
    }

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
        self.0.lock().is_ok_and(|ids| ids.contains(id))
    }

    fn len(&self) -> usize {
        self.0.lock().map_or(0, |ids| ids.len())
    }
}

/// Removes a job's id from [`InHand`] when the job ends, however it ends (even a
/// panic), so the sweeper can take its record again once the lease runs out.
struct Held {
    in_hand: Arc<InHand>,
    id: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.in_hand.remove(&self.id);
    }
}

pub(crate) struct Pipeline {
    jobs: mpsc::Sender<Job>,
    sends: mpsc::Sender<Job>,
    timers: mpsc::Sender<Job>,
    shutdown: CancellationToken,
    tasks: tokio::sync::Mutex<Vec<JoinHandle<()>>>,
    /// The heartbeat task, and what stops it: after the work, not with it.
    beats: tokio::sync::Mutex<Option<JoinHandle<()>>>,
    stop_beats: CancellationToken,
    /// Flushes the batched settles at shutdown.
    store: Store,
    in_hand: Arc<InHand>,
    sweep_soon: SweepSoon,
    /// Free worker slots; `None` on an ingest-only instance.
    slots: Option<Arc<Semaphore>>,
    /// Live traffic and the timers' firing time: the timers' share of the
    /// workers and the timer sweeper's claims follow them.
    pace: Arc<TimerPace>,
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

/// What the pipeline runs on: the services the workers hand jobs to, and the
/// handles its own loops (sweeper, retry timer) use. Built in start-up.
pub(crate) struct PipelineParts {
    pub(crate) events: Arc<EventWorker>,
    pub(crate) timers: Arc<TimerFirer>,
    pub(crate) sender: Arc<OutboundSender>,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    /// The same set the sender holds its sends in.
    pub(crate) in_hand: Arc<InHand>,
    /// The same signal the event worker raises.
    pub(crate) sweep_soon: SweepSoon,
}

impl Pipeline {
    pub(crate) fn start(
        parts: PipelineParts,
        settings: PipelineSettings,
        retries: mpsc::UnboundedReceiver<ScheduledRetry>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let (jobs, queue) = mpsc::channel(settings.queue_capacity.max(1));
        let (sends, send_queue) = mpsc::channel(SEND_QUEUE);
        let (timer_jobs, timer_queue) = mpsc::channel(TIMER_QUEUE);
        let PipelineParts {
            events,
            timers,
            sender,
            store,
            metrics,
            in_hand,
            sweep_soon,
        } = parts;
        let slots = (settings.workers > 0).then(|| Arc::new(Semaphore::new(settings.workers)));
        let pipeline = Arc::new(Self {
            jobs,
            sends,
            timers: timer_jobs,
            shutdown: shutdown.clone(),
            tasks: tokio::sync::Mutex::new(Vec::new()),
            beats: tokio::sync::Mutex::new(None),
            stop_beats: CancellationToken::new(),
            store: store.clone(),
            in_hand: in_hand.clone(),
            sweep_soon: sweep_soon.clone(),
            slots: slots.clone(),
            pace: Arc::new(TimerPace::new(settings.workers)),
        });
        if let Some(slots) = slots {
            let queues = Queues {
                sends: send_queue,
                events: queue,
                timers: timer_queue,
            };
            let lease = store.lease();
            let dispatch = Dispatch {
                events,
                timers,
                sender,
                store: store.clone(),
            };
            let abandoned = liveness::Abandoned::default();
            let beats = tokio::spawn(liveness::run(
                store.clone(),
                abandoned.clone(),
                pipeline.stop_beats.clone(),
            ));
            if let Ok(mut held) = pipeline.beats.try_lock() {
                *held = Some(beats);
            }
            let sweeper = Arc::new(sweeper::Sweeper::new(
                store,
                pipeline.clone(),
                in_hand.clone(),
                settings,
                metrics,
                sweep_soon,
                abandoned,
            ));
            let workers = tokio::spawn(run_workers(
                dispatch,
                queues,
                slots,
                in_hand,
                pipeline.pace.clone(),
                shutdown.clone(),
            ));
            let timers = tokio::spawn(sweeper.clone().run_timers(shutdown.clone()));
            let sweeper = tokio::spawn(sweeper.run(shutdown.clone()));
            let timer = tokio::spawn(retries::run(pipeline.clone(), retries, lease, shutdown));
            if let Ok(mut tasks) = pipeline.tasks.try_lock() {
                tasks.push(workers);
                tasks.push(timers);
                tasks.push(sweeper);
                tasks.push(timer);
            }
        }
        pipeline
    }

    /// A webhook event came in (see [`timer_pace`]: timers keep to their
    /// floor for a moment).
    pub(crate) fn live_event(&self) {
        self.pace.event_came();
    }

    /// Reserves room for one job, unless the queue is full, the instance stops,
    /// or it has no workers: then the record is left for any sweeper.
    pub(crate) fn try_reserve(&self) -> Option<QueueSlot<'_>> {
        self.reserve_in(&self.jobs)
    }

    /// Reserves room in the send queue, which workers take from first.
    pub(crate) fn try_reserve_send(&self) -> Option<QueueSlot<'_>> {
        self.reserve_in(&self.sends)
    }

    /// Reserves room in the timer queue (see [`TIMER_QUEUE`]).
    fn try_reserve_timer(&self) -> Option<QueueSlot<'_>> {
        self.reserve_in(&self.timers)
    }

    /// How many due timers a sweep may claim now (see [`timer_pace`]).
    fn timer_claims(&self) -> timer_pace::Claims {
        let room = self.timers.capacity();
        let queued = self.timers.max_capacity().saturating_sub(room);
        self.pace.claims(queued, room, self.store.lease())
    }

    /// A timer sweep found due timers, the oldest due `waited` ago (see
    /// [`timer_pace::OVERDUE`]).
    fn timers_found_due(&self, waited: Option<Duration>) {
        self.pace.found_due(waited);
    }

    fn reserve_in<'a>(&'a self, queue: &'a mpsc::Sender<Job>) -> Option<QueueSlot<'a>> {
        if self.shutdown.is_cancelled() || self.slots.is_none() {
            return None;
        }
        let permit = queue.try_reserve().ok()?;
        Some(QueueSlot {
            permit,
            in_hand: &self.in_hand,
        })
    }

    /// Jobs waiting in this instance's queues (reserved room included): events, sends, timers.
    pub(crate) fn queued(&self) -> crate::metrics::series::QueueDepths {
        let waiting = |queue: &mpsc::Sender<Job>| queue.max_capacity().saturating_sub(queue.capacity());
        crate::metrics::series::QueueDepths {
            events: waiting(&self.jobs),
            sends: waiting(&self.sends),
            timers: waiting(&self.timers),
        }
    }

    /// Asks the sweeper to sweep soon: an event was stored for any sweeper (the
    /// queue was full).
    pub(crate) fn sweep_soon(&self) {
        self.sweep_soon.notify();
    }

    /// Room left in the send queue.
    fn send_room(&self) -> usize {
        self.sends.capacity()
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
        // Keep part of the grace for the settles ("sent" marks) still queued.
        let for_work = grace.saturating_sub((grace / 4).min(Duration::from_secs(2)));
        let timed_out = tokio::time::timeout(for_work, futures::future::join_all(tasks))
            .await
            .is_err();
        if timed_out {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "work still running at the end of the grace period; its leases will run out"
            );
        }
        let left = grace.saturating_sub(started.elapsed());
        self.store.flush_settles(left).await;
        // The heartbeat lasts as long as the work: then, with everything handed
        // back or done, the record goes and no one takes this instance for dead.
        // Work abandoned at the end of the grace is left to the others, who take
        // it over when the record stops changing, without waiting for its leases.
        let finished = !timed_out;
        self.stop_beats.cancel();
        if let Some(beats) = self.beats.lock().await.take() {
            let _ = beats.await;
        }
        if finished
            && self.slots.is_some()
            && let Err(error) = self.store.forget_me().await
        {
            tracing::warn!(error = %error, "could not remove this instance's heartbeat record");
        }
    }
}

/// Counts a running send (or timer) while it lives, and says when it ends
/// (even in a panic) to whoever waits for that.
struct Sending {
    count: Arc<AtomicUsize>,
    ended: Option<Arc<tokio::sync::Notify>>,
}

impl Sending {
    fn start(count: &Arc<AtomicUsize>, ended: Option<Arc<tokio::sync::Notify>>) -> Self {
        count.fetch_add(1, AtomicOrdering::Relaxed);
        Self {
            count: count.clone(),
            ended,
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.count.fetch_sub(1, AtomicOrdering::Relaxed);
        if let Some(ended) = &self.ended {
            ended.notify_one();
        }
    }
}

/// The queues workers take jobs from.
struct Queues<T = Job> {
    sends: mpsc::Receiver<T>,
    events: mpsc::Receiver<T>,
    timers: mpsc::Receiver<T>,
}

impl<T> Queues<T> {
    /// The next job. Sends go first unless `sends_first` is false (half the
    /// workers already send: events must not starve behind a slow LINE);
    /// timers where `timers` puts them. The first queue in that order with a
    /// job waiting gives it; with none waiting, whichever allowed queue gets a
    /// job first. `None` once the queues are closed.
    async fn next(&mut self, sends_first: bool, timers: TimerTurn) -> Option<T> {
        let order: &[usize] = match (sends_first, timers) {
            (true, TimerTurn::First) => &[0, 2, 1],
            (true, TimerTurn::Last) => &[0, 1, 2],
            (true, TimerTurn::Held) => &[0, 1],
            (false, TimerTurn::First) => &[2, 1, 0],
            (false, TimerTurn::Last) => &[1, 0, 2],
            (false, TimerTurn::Held) => &[1, 0],
        };
        let mut open = 0;
        for index in order {
            match self.queue(*index).try_recv() {
                Ok(job) => return Some(job),
                Err(mpsc::error::TryRecvError::Empty) => open += 1,
                Err(mpsc::error::TryRecvError::Disconnected) => {}
            }
        }
        if open == 0 {
            return None;
        }
        let timers_allowed = timers != TimerTurn::Held;
        tokio::select! {
            Some(job) = self.sends.recv() => Some(job),
            Some(job) = self.events.recv() => Some(job),
            Some(job) = self.timers.recv(), if timers_allowed => Some(job),
            else => None,
        }
    }

    fn queue(&mut self, index: usize) -> &mut mpsc::Receiver<T> {
        match index {
            0 => &mut self.sends,
            1 => &mut self.events,
            _ => &mut self.timers,
        }
    }

    /// Closes the queues and takes the jobs waiting in them now.
    fn close_and_take(&mut self) -> Vec<T> {
        self.sends.close();
        self.events.close();
        self.timers.close();
        let mut waiting = Vec::new();
        for queue in [&mut self.sends, &mut self.events, &mut self.timers] {
            while let Ok(job) = queue.try_recv() {
                waiting.push(job);
            }
        }
        waiting
    }

    /// After [`Self::close_and_take`]: the jobs sent into room reserved before
    /// the close (a sweep holds its reservations across its claim, a webhook
    /// across its inbox commit), as they come. `recv` ends only when a closed
    /// queue is empty and no reservation is left, so none is dropped with its
    /// lease held; each reservation ends within a Firestore timeout.
    async fn next_late(&mut self) -> Option<T> {
        for queue in [&mut self.sends, &mut self.events, &mut self.timers] {
            if let Some(job) = queue.recv().await {
                return Some(job);
            }
        }
        None
    }
}

/// Hands each job to the service that does it.
#[derive(Clone)]
struct Dispatch {
    events: Arc<EventWorker>,
    timers: Arc<TimerFirer>,
    sender: Arc<OutboundSender>,
    /// Gives queued jobs' leases back at shutdown.
    store: Store,
}

impl Dispatch {
    async fn run(&self, job: Job) {
        match job {
            Job::Event(job) => self.events.run(*job).await,
            Job::Timer(job) => self.timers.fire(*job).await,
            Job::Outbound(job) => self.sender.deliver_queued(*job).await,
        }
    }

    /// Gives a queued job's lease back at shutdown so another instance takes it now.
    async fn hand_back(&self, job: &Job) {
        let result = match job {
            Job::Event(job) => self
                .store
                .release_event(
                    &job.key,
                    job.version,
                    job.attempt.saturating_sub(1),
                    Duration::ZERO,
                    None,
                )
                .await
                .map(|_| ()),
            Job::Outbound(job) => self.store.hand_back_outbound(&job.id, job.version).await.map(|_| ()),
            Job::Timer(job) => self
                .store
                .release_timer(&job.id, job.version, job.doc.attempts)
                .await
                .map(|_| ()),
        };
        if let Err(error) = result {
            tracing::warn!(error = %error, "could not hand work back; its lease will run out");
        }
    }
}

/// Queued jobs handed back at once at shutdown (each a conditional write).
const HAND_BACKS_AT_ONCE: usize = 32;

/// Takes jobs off the queues and runs each in its own task, at most `workers` at
/// once. On shutdown, queued jobs are handed back and running ones finish.
async fn run_workers(
    dispatch: Dispatch,
    mut queues: Queues,
    slots: Arc<Semaphore>,
    in_hand: Arc<InHand>,
    pace: Arc<TimerPace>,
    shutdown: CancellationToken,
) {
    let mut running = JoinSet::new();
    let workers = slots.available_permits();
    let sending = Arc::new(AtomicUsize::new(0));
    let firing = Arc::new(AtomicUsize::new(0));
    // Wakes the loop when a timer ends, so a timer waiting for its share goes.
    let timer_ended = Arc::new(tokio::sync::Notify::new());
    loop {
        let sends_first = sending.load(AtomicOrdering::Relaxed) < (workers / 2).max(1);
        let timers = pace.turn(firing.load(AtomicOrdering::Relaxed));
        let job = tokio::select! {
            _ = shutdown.cancelled() => break,
            job = queues.next(sends_first, timers) => match job { Some(job) => job, None => break },
            // Timers held back by their share: look again when one ends.
            () = timer_ended.notified(), if timers == TimerTurn::Held => continue,
        };
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            _ = shutdown.cancelled() => {
                dispatch.hand_back(&job).await;
                in_hand.remove(job.id());
                break;
            }
        };
        let Ok(slot) = slot else {
            break;
        };
        let dispatch = dispatch.clone();
        let held = Held {
            in_hand: in_hand.clone(),
            id: job.id().to_owned(),
        };
        let send = matches!(job, Job::Outbound(_)).then(|| Sending::start(&sending, None));
        let fire = matches!(job, Job::Timer(_)).then(|| Sending::start(&firing, Some(timer_ended.clone())));
        let pace = pace.clone();
        running.spawn(async move {
            let began = Instant::now();
            dispatch.run(job).await;
            if fire.is_some() {
                pace.fired(began.elapsed());
            }
            drop(send);
            drop(fire);
            drop(held);
            drop(slot);
        });
        // Reap finished tasks so the set does not grow without bound.
        while running.try_join_next().is_some() {}
    }
    // What waits goes back at once; what a sweep or a webhook was still
    // putting into room reserved before the close, as it comes. A sweep may
    // have queued 500 timers: one at a time, their hand-backs would not fit
    // the grace, and what is not handed back waits out its lease.
    let waiting = queues.close_and_take();
    let late = futures::stream::unfold(queues, |mut queues| async move {
        queues.next_late().await.map(|job| (job, queues))
    });
    let handed_back = AtomicUsize::new(0);
    futures::stream::iter(waiting)
        .chain(late)
        .for_each_concurrent(HAND_BACKS_AT_ONCE, |job| {
            let (dispatch, in_hand, handed_back) = (&dispatch, &in_hand, &handed_back);
            async move {
                dispatch.hand_back(&job).await;
                in_hand.remove(job.id());
                handed_back.fetch_add(1, AtomicOrdering::Relaxed);
            }
        })
        .await;
    let handed_back = handed_back.into_inner();
    if handed_back > 0 {
        tracing::info!(jobs = handed_back, "queued work handed back at shutdown");
    }
    while running.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three queues of `capacity` each, with their senders (sends,
    /// events, timers).
    fn queues(capacity: usize) -> ([mpsc::Sender<&'static str>; 3], Queues<&'static str>) {
        let (sends, send_queue) = mpsc::channel(capacity);
        let (events, event_queue) = mpsc::channel(capacity);
        let (timers, timer_queue) = mpsc::channel(capacity);
        let queues = Queues {
            sends: send_queue,
            events: event_queue,
            timers: timer_queue,
        };
        ([sends, events, timers], queues)
    }

    /// What the workers take next from queues holding `waiting` (send, event,
    /// timer: one job each where true), in order, until nothing is left that
    /// they may take.
    async fn order(waiting: [bool; 3], sends_first: bool, timers: TimerTurn) -> Vec<&'static str> {
        let ([sends, events, timer_jobs], mut queues) = queues(4);
        for ((present, queue), name) in waiting
            .into_iter()
            .zip([&sends, &events, &timer_jobs])
            .zip(["send", "event", "timer"])
        {
            if present {
                queue.try_send(name).unwrap_or_default();
            }
        }
        let mut taken = Vec::new();
        while let Ok(Some(job)) =
            tokio::time::timeout(Duration::from_millis(20), queues.next(sends_first, timers)).await
        {
            taken.push(job);
        }
        taken
    }

    #[tokio::test]
    async fn each_queue_gives_its_jobs_in_the_workers_order() {
        use TimerTurn::{First, Held, Last};
        let all = [true, true, true];
        let cases = [
            (all, true, Last, vec!["send", "event", "timer"]),
            (all, false, Last, vec!["event", "send", "timer"]),
            (all, true, First, vec!["send", "timer", "event"]),
            (all, false, First, vec!["timer", "event", "send"]),
            // Timers holding their share: the others go, the timer waits.
            (all, true, Held, vec!["send", "event"]),
            (all, false, Held, vec!["event", "send"]),
            ([false, false, true], true, Last, vec!["timer"]),
            ([false, false, true], true, Held, vec![]),
        ];
        for (waiting, sends_first, timers, expected) in cases {
            assert_eq!(
                order(waiting, sends_first, timers).await,
                expected,
                "{waiting:?} sends first {sends_first}, timers {timers:?}"
            );
        }
    }

    /// A queue that is empty now gives the job that arrives later.
    #[tokio::test]
    async fn a_job_arriving_while_the_workers_wait_is_taken() {
        let ([_sends, events, _timers], mut queues) = queues(1);
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            events.send("event").await.unwrap_or_default();
            events
        });
        assert_eq!(queues.next(true, TimerTurn::Held).await, Some("event"));
        drop(later.await);
    }

    /// Room reserved before the close (a sweep claiming its timers) is filled
    /// after it: the drain waits for it and returns that job with the others.
    #[tokio::test]
    async fn the_drain_at_shutdown_takes_jobs_sent_into_room_reserved_before_it() {
        let ([sends, events, timers], mut queues) = queues(2);
        events.try_send("queued event").unwrap_or_default();
        let (reserved, sent_later) = (timers.clone(), tokio::sync::oneshot::channel::<()>());
        let (go, wait) = sent_later;
        let sweep = tokio::spawn(async move {
            let Ok(permit) = reserved.reserve().await else {
                return;
            };
            let _ = wait.await;
            permit.send("claimed timer");
        });
        // Let the sweep reserve its room, then shut down while it claims.
        for _ in 0..1000 {
            if timers.capacity() < 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(timers.capacity(), 1, "the sweep did not reserve its room");
        assert_eq!(queues.close_and_take(), vec!["queued event"], "what waits goes at once");
        assert!(sends.try_send("after").is_err(), "a closed queue takes no new job");
        let late = tokio::spawn(async move {
            let mut late = Vec::new();
            while let Some(job) = queues.next_late().await {
                late.push(job);
            }
            late
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!late.is_finished(), "the drain ended with a reservation outstanding");
        let _ = go.send(());
        assert_eq!(late.await.unwrap_or_default(), vec!["claimed timer"]);
        drop(sweep.await);
    }
}
