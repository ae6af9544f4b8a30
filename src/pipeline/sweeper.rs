//! Recovers work whose lease ran out: events a crashed (or failed) run left
//! pending, events stored while a queue was full, and outbound actions waiting
//! for another attempt. Every instance sweeps; an update-time precondition lets
//! exactly one take each record.
//!
//! The sweeper takes over no more records than this instance has idle workers,
//! and reserves their queue room first, so a record it takes starts at once (its
//! attempt counts only then) and never waits out its lease in a queue. Records
//! this instance already holds are never taken again. A record that cannot be
//! read is parked on its own; the sweep goes on for the others.

use super::work::Work;
use super::{EventJob, InHand, Job, OutboundJob, Pipeline, PipelineSettings, SweepSoon};
use crate::metrics::Metrics;
use crate::store::{DeadLetterKind, InboxDoc, InboxKey, LedgerDoc, Store, StoreError, Stored, Swept};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Records looked at per sweep and kind, at most.
const BATCH: usize = 64;

/// Work this instance holds (queued or running) up to which the timer sweeper
/// claims due timers.
const MAX_TIMERS: usize = 500;
/// Between timer sweeps while more timers are due than one sweep took.
const SOON: std::time::Duration = std::time::Duration::from_millis(20);

/// Claims of one timer after which it is given up (skipped and logged): its
/// firing failed every time.
const MAX_TIMER_CLAIMS: u32 = 10;

/// A sweep that found nothing spends at most about this share of the sweeper's
/// time: when its queries are slow (the emulator scans a whole collection for
/// one, so their cost grows with the data) the next sweep waits longer, up to
/// [`MAX_STRETCH`] intervals. Where queries are fast (Firestore's indexes) the
/// interval stays `SWEEP_INTERVAL_MS`. Anything found, a failed sweep, or an
/// event stored while the queue was full brings it back at once.
const IDLE_COST_FACTOR: u32 = 10;
const MAX_STRETCH: u32 = 8;

/// Finds work and queues it: the sweeper reads and takes over records, and puts
/// them in this instance's queues; the workers do the work.
pub(super) struct Sweeper {
    store: Store,
    /// The queues it reserves room in before it takes a record over.
    queues: Arc<Pipeline>,
    /// Records this instance holds: never taken over again here.
    in_hand: Arc<InHand>,
    settings: PipelineSettings,
    metrics: Arc<Metrics>,
    sweep_soon: SweepSoon,
    /// Instances taken for dead: their leased records are swept now.
    abandoned: super::liveness::Abandoned,
}

impl Sweeper {
    pub(super) fn new(
        store: Store,
        queues: Arc<Pipeline>,
        in_hand: Arc<InHand>,
        settings: PipelineSettings,
        metrics: Arc<Metrics>,
        sweep_soon: SweepSoon,
        abandoned: super::liveness::Abandoned,
    ) -> Self {
        Self {
            store,
            queues,
            in_hand,
            settings,
            metrics,
            sweep_soon,
            abandoned,
        }
    }

    pub(super) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let base = self.settings.sweep_interval;
        let mut wait = base;
        // The last event sweep took all it had room for, so more may be waiting
        // (events stored while the queue was full, or many leases run out at
        // once): events are swept again as soon as workers free up, not once
        // per interval. Sends are still swept once per interval meanwhile.
        let mut backlog = false;
        let mut sends_swept = std::time::Instant::now()
            .checked_sub(base)
            .unwrap_or_else(std::time::Instant::now);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                // An event was stored for any sweeper (the queue was full), or work
                // was released for a retry: back to the short interval.
                _ = self.sweep_soon.notified(), if wait > base => {
                    wait = base;
                    continue;
                }
                // An instance was taken for dead: its work is swept at once,
                // whatever the stretch.
                _ = self.abandoned.rescue_needed() => {}
            }
            let started = std::time::Instant::now();
            let mut busy = false;
            // Sends first, into their own queue that workers take from first: a
            // reply's retries run against its token's clock, and each is one call.
            let sends = self.queues.send_room().min(BATCH);
            if sends > 0 && (!backlog || sends_swept.elapsed() >= base) {
                sends_swept = std::time::Instant::now();
                match self.sweep_outbound(sends).await {
                    Ok(found) => busy |= found > 0,
                    Err(error) => {
                        busy = true;
                        tracing::warn!(error = %error, "sweep of pending outbound actions failed");
                    }
                }
            }
            let events = self.queues.idle_workers().min(BATCH);
            if events > 0 {
                match self.sweep_events(events).await {
                    Ok(swept) => {
                        busy |= swept.found > 0;
                        backlog = swept.taken >= events;
                    }
                    Err(error) => {
                        busy = true;
                        backlog = false;
                        tracing::warn!(error = %error, "sweep of expired events failed");
                    }
                }
            }
            wait = if backlog {
                BACKLOG_POLL
            } else if busy {
                base
            } else {
                started
                    .elapsed()
                    .saturating_mul(IDLE_COST_FACTOR)
                    .clamp(base, base.saturating_mul(MAX_STRETCH))
            };
        }
    }

    /// The timer sweeper: claims timers that fell due, in batches, and queues them.
    /// Its own loop, so a backlog of due timers is worked off back to back (and
    /// costs no event or ledger sweeps); otherwise it looks every sweep interval.
    pub(super) async fn run_timers(self: Arc<Self>, shutdown: CancellationToken) {
        let base = self.settings.sweep_interval;
        let mut wait = base;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            // What the timers' workers fire within half a lease (fewer while
            // users talk to the bot: see `timer_pace`), and no more than a
            // busy instance can start soon: what it holds already (events,
            // sends, timers) counts against it, so an idle peer takes the rest.
            let claims = self.queues.timer_claims();
            let budget = claims.budget.min(MAX_TIMERS.saturating_sub(self.in_hand.len()));
            let least = claims.least;
            if budget < least {
                wait = SOON;
                continue;
            }
            let (result, round_trips) = crate::store::round_trips::counted(self.sweep_timers(budget)).await;
            wait = match result {
                Ok(swept) => {
                    if swept.found > 0 {
                        // The query and the batched claims, shared by the timers found.
                        self.metrics.record("timer_sweep", round_trips);
                    }
                    // More due, and some taken: back soon. None taken (all
                    // held here, or lost to other instances): the base wait,
                    // not a due query every few milliseconds.
                    if swept.more && swept.claimed > 0 { SOON } else { base }
                }
                Err(error) => {
                    tracing::warn!(error = %error, "sweep of due timers failed");
                    base
                }
            };
        }
    }

    /// What to ask for: the records this instance holds show up too, and are skipped.
    fn query_limit(&self, budget: usize) -> u32 {
        u32::try_from((budget + self.in_hand.len()).min(4 * BATCH)).unwrap_or(u32::MAX)
    }

    /// A swept record this instance may take over: readable (an unreadable one is
    /// parked on its own) and not already held here.
    async fn candidate<T>(&self, kind: DeadLetterKind, swept: Swept<T>) -> Result<Option<Stored<T>>, StoreError> {
        match swept {
            Swept::Readable(record) if self.in_hand.contains(&record.id) => Ok(None),
            Swept::Readable(record) => Ok(Some(record)),
            Swept::Unreadable { id, version, error } => {
                tracing::error!(record.id = %id, error = %error, outcome = "parked", "an unreadable record was parked");
                self.store.park_unreadable(kind, &id, version, &error).await?;
                Ok(None)
            }
        }
    }
}

/// What an event sweep found and took.
struct EventSweep {
    /// Expired events the query returned (this instance's own among them).
    found: usize,
    /// Taken over and queued.
    taken: usize,
}

/// Between event sweeps while a backlog drains: a worker frees up within tens of
/// milliseconds, and a poll with no idle worker reads nothing.
const BACKLOG_POLL: std::time::Duration = std::time::Duration::from_millis(25);

/// What the sweeper did with one record.
enum Step {
    Took,
    Skipped,
    /// No queue room left (the instance stops, or the queue filled up).
    Stop,
}

/// One record's errors do not stop the sweep for the others; this many in one
/// sweep do (Firestore is then down, and each would wait out its timeout).
const ERRORS_PER_SWEEP: usize = 3;

/// Runs `step` over `records` until `budget` records were taken.
async fn sweep<T, F>(records: Vec<Swept<T>>, budget: usize, mut step: impl FnMut(Swept<T>) -> F) -> usize
where
    F: std::future::Future<Output = Result<Step, StoreError>>,
{
    let (mut taken, mut errors) = (0, 0);
    for record in records {
        if taken >= budget {
            break;
        }
        match step(record).await {
            Ok(Step::Took) => taken += 1,
            Ok(Step::Skipped) => {}
            Ok(Step::Stop) => break,
            Err(error) => {
                tracing::warn!(error = %error, "a record could not be swept; it is tried again later");
                errors += 1;
                if errors >= ERRORS_PER_SWEEP {
                    break;
                }
            }
        }
    }
    taken
}

impl Sweeper {
    /// Takes over up to `budget` expired events.
    async fn sweep_events(&self, budget: usize) -> Result<EventSweep, StoreError> {
        let records = self
            .store
            .expired_events(self.query_limit(budget), &self.abandoned.owners())
            .await?;
        let found = records.len();
        let taken = sweep(records, budget, |swept| self.take_event(swept)).await;
        Ok(EventSweep { found, taken })
    }

    async fn take_event(&self, swept: Swept<InboxDoc>) -> Result<Step, StoreError> {
        let store = &self.store;
        let Some(record) = self.candidate(DeadLetterKind::Event, swept).await? else {
            return Ok(Step::Skipped);
        };
        let key = InboxKey::from_document_id(record.id.clone());
        if record.doc.attempts >= self.settings.max_event_attempts {
            let reason = record.doc.last_error.as_deref().unwrap_or("processing did not finish");
            let reason = format!("gave up after {} attempts: {reason}", record.doc.attempts);
            tracing::error!(inbox.id = key.as_str(), event.id = %record.doc.webhook_event_id, reason = %reason, outcome = "parked", "event parked as a dead letter");
            store.park_event(&key, record.version, &record.doc, &reason).await?;
            return Ok(Step::Skipped);
        }
        let work = match record.doc.plan.as_deref().map(Work::decode) {
            Some(Ok(work)) => work,
            Some(Err(reason)) => return park_plan(store, &key, &record, &reason).await,
            None => return park_plan(store, &key, &record, "the stored event has no plan").await,
        };
        let Some(slot) = self.queues.try_reserve() else {
            return Ok(Step::Stop);
        };
        let lease_until = super::lease_deadline(store.lease());
        let Some(version) = store.take_over_event(&record).await? else {
            return Ok(Step::Skipped);
        };
        let attempt = record.doc.attempts + 1;
        tracing::info!(inbox.id = key.as_str(), event.id = %record.doc.webhook_event_id, attempt, "taking over an expired event");
        slot.send(Job::Event(Box::new(EventJob {
            key,
            version,
            work,
            lease_until,
            attempt,
            recovered: true,
            claim_round_trips: None,
            turn: super::Turn::default(),
        })));
        Ok(Step::Took)
    }
}

async fn park_plan(store: &Store, key: &InboxKey, record: &Stored<InboxDoc>, reason: &str) -> Result<Step, StoreError> {
    tracing::error!(
        inbox.id = key.as_str(),
        reason,
        outcome = "parked",
        "an event without a readable plan was parked"
    );
    store.park_event(key, record.version, &record.doc, reason).await?;
    Ok(Step::Skipped)
}

/// What a timer sweep found.
struct TimerSweep {
    found: usize,
    /// More were due than it asked for.
    more: bool,
    /// Claimed and queued.
    claimed: usize,
}

impl Sweeper {
    /// Claims up to `budget` timers that fell due, in one `BatchWrite`, and queues
    /// the ones won; how many were due.
    async fn sweep_timers(&self, budget: usize) -> Result<TimerSweep, StoreError> {
        let store = &self.store;
        // Claimed timers are not due again until their claim runs out: the query
        // does not return what this instance holds. Twice the budget is asked for
        // and taken from a random point of it, so instances sweeping at once
        // mostly claim different timers.
        let limit = u32::try_from(budget.saturating_mul(2)).unwrap_or(u32::MAX);
        let mut found = store.due_timers(limit).await?;
        // How long the oldest found has been due decides whether live traffic
        // still holds timers back. By its due time, not its wake time: a claim
        // that ran out or was given back moved that, and those are the late ones.
        let oldest_due = found
            .iter()
            .filter_map(|swept| match swept {
                Swept::Readable(timer) if !self.in_hand.contains(&timer.id) => Some(timer.doc.due_at.as_millisecond()),
                _ => None,
            })
            .min();
        self.queues.timers_found_due(oldest_due.map(|due_ms| {
            std::time::Duration::from_millis(u64::try_from(store.now_ms().saturating_sub(due_ms)).unwrap_or(0))
        }));
        // Claimed by what that now says: a sweep that finds the backlog gone
        // claims as little as live traffic allows.
        let budget = budget.min(self.queues.timer_claims().budget);
        let count = found.len();
        let more = count >= limit as usize;
        if count > 0 {
            let offset = (uuid::Uuid::new_v4().as_u128() % count as u128) as usize;
            found.rotate_left(offset);
        }
        let mut due = Vec::new();
        for swept in found {
            if due.len() >= budget {
                break;
            }
            let (id, version, reason) = match swept {
                Swept::Readable(timer) if self.in_hand.contains(&timer.id) => continue,
                Swept::Readable(timer) if timer.doc.attempts < MAX_TIMER_CLAIMS => {
                    due.push(timer);
                    continue;
                }
                Swept::Readable(timer) => (timer.id, timer.version, "failed_repeatedly".to_owned()),
                Swept::Unreadable { id, version, error } => (id, version, error),
            };
            // A timer that cannot be read, or whose firing failed on every claim,
            // ends (skipped, logged) instead of being claimed for ever.
            tracing::error!(timer.id = %id, reason = %reason, outcome = "skipped", "a timer was given up");
            let outcome = if reason == "failed_repeatedly" {
                "failed_repeatedly"
            } else {
                "unreadable"
            };
            if let Err(error) = store
                .end_timer(&id, version, crate::store::TimerState::Skipped, outcome)
                .await
            {
                tracing::warn!(timer.id = %id, error = %error, "could not end the timer; tried again next sweep");
            }
        }
        let mut slots = Vec::new();
        for _ in 0..due.len() {
            match self.queues.try_reserve_timer() {
                Some(slot) => slots.push(slot),
                None => break,
            }
        }
        due.truncate(slots.len());
        let lease_until = super::lease_deadline(store.lease());
        let claimed = store.claim_timers(&due).await?;
        let won: Vec<_> = due
            .into_iter()
            .zip(claimed)
            .zip(slots)
            .filter_map(|((timer, version), slot)| version.map(|version| (timer, version, slot)))
            .collect();
        // The users' state for every timer won, in one read: each firing is then
        // one commit (it reads again only if that commit meets a change).
        let requests: Vec<_> = won
            .iter()
            .filter_map(|(timer, _, _)| super::timers::context_request(&timer.doc))
            .collect();
        let contexts = match store.timer_contexts(&requests).await {
            Ok(contexts) if contexts.len() == won.len() => contexts.into_iter().map(Some).collect(),
            Ok(_) => vec![None; won.len()],
            Err(error) => {
                tracing::warn!(error = %error, "could not read the due timers' context; each firing reads its own");
                vec![None; won.len()]
            }
        };
        let claimed = won.len();
        for ((timer, version, slot), context) in won.into_iter().zip(contexts) {
            slot.send(Job::Timer(Box::new(super::timers::job(
                timer,
                version,
                lease_until,
                context,
            ))));
        }
        Ok(TimerSweep {
            found: count,
            more,
            claimed,
        })
    }

    /// Takes over up to `budget` pending actions that are due; how many were due.
    async fn sweep_outbound(&self, budget: usize) -> Result<usize, StoreError> {
        let records = self
            .store
            .expired_outbound(self.query_limit(budget), &self.abandoned.owners())
            .await?;
        let found = records.len();
        sweep(records, budget, |swept| self.take_outbound(swept)).await;
        Ok(found)
    }

    async fn take_outbound(&self, swept: Swept<LedgerDoc>) -> Result<Step, StoreError> {
        let store = &self.store;
        let Some(record) = self.candidate(DeadLetterKind::Outbound, swept).await? else {
            return Ok(Step::Skipped);
        };
        let Some(slot) = self.queues.try_reserve_send() else {
            return Ok(Step::Stop);
        };
        let lease_until = super::lease_deadline(store.lease());
        let Some(version) = store.take_over_outbound(&record).await? else {
            return Ok(Step::Skipped);
        };
        tracing::info!(ledger.id = %record.id, attempts = record.doc.attempts, "taking over a pending outbound action");
        slot.send(Job::Outbound(Box::new(OutboundJob {
            id: record.id,
            doc: record.doc,
            version,
            lease_until,
        })));
        Ok(Step::Took)
    }
}
