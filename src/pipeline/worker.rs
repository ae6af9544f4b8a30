//! Processing one stored event: the guard reads, one atomic commit records the
//! effect together with the inbox's "done" and the ledger entry of what to send,
//! and only then the courier sends. Every write names the version of the inbox
//! record this worker holds, so a worker that was superseded changes nothing.

use super::hold::{Failure, Hold};
use super::processed::Processed;
use super::work::{Plan, Work};
use super::{EventJob, InHand, Job};
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::metrics::series;
use crate::outbound::{Courier, Origin, StagedAction};
use crate::store::round_trips::counted;
use crate::store::{Store, Version};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

#[derive(Debug, Clone)]
pub(crate) struct ProcessorSettings {
    /// Wait before a failed event is retried (grows with its attempts).
    pub(crate) retry_backoff: Duration,
    /// A guarded scenario started twice for one user within this window starts once.
    pub(crate) start_dedup: Duration,
}

pub(crate) struct Processor {
    /// Decides again where a decision needs what only the store knows (a text
    /// that may answer the user's open question).
    pub(super) engine: Engine,
    pub(super) store: Store,
    pub(super) courier: Courier,
    pub(super) metrics: Arc<Metrics>,
    pub(super) settings: ProcessorSettings,
    /// Records this instance holds: the sweeper leaves them alone.
    pub(super) in_hand: Arc<InHand>,
    /// Told when work is left for a sweeper (released for a retry, or stored
    /// while the queue was full): it sweeps at its shortest interval again.
    pub(super) sweep_soon: tokio::sync::Notify,
    /// Engines for runs pinned to older scenario versions.
    pub(super) versions: Arc<super::versions::Versions>,
}

impl Processor {
    pub(crate) fn new(
        engine: Engine,
        store: Store,
        courier: Courier,
        metrics: Arc<Metrics>,
        settings: ProcessorSettings,
    ) -> Self {
        Self {
            versions: Arc::new(super::versions::Versions::new(engine.clone(), store.clone())),
            engine,
            store,
            courier,
            metrics,
            settings,
            in_hand: Arc::new(InHand::default()),
            sweep_soon: tokio::sync::Notify::new(),
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn courier(&self) -> &Courier {
        &self.courier
    }

    pub(crate) fn versions(&self) -> Arc<super::versions::Versions> {
        self.versions.clone()
    }

    pub(crate) async fn run(&self, job: Job) {
        match job {
            Job::Event(mut job) => {
                let mut turn = std::mem::take(&mut job.turn);
                let predecessor_done = turn.wait(self.store.lease() / 2).await;
                let span = event_span(&job.work, job.key.as_str());
                let fresh = job.claim_round_trips;
                let event_type = job.work.event_type.clone();
                let (result, round_trips) = counted(self.attempt(*job, predecessor_done).instrument(span)).await;
                turn.finish(result.is_ok());
                record_attempt(&event_type, &result);
                // Counted for events whose whole life this instance saw (not recoveries).
                if let (Ok(processed), Some(claim)) = (result, fresh) {
                    self.metrics.record(processed.metric_kind(), claim + round_trips);
                }
            }
            Job::Timer(job) => self.fire_timer(*job).await,
            Job::Outbound(job) => {
                // A send that waited in the queue for more than half its lease
                // renews it first (conditionally): the call must not outlive it.
                let version = if job.lease_until.saturating_duration_since(Instant::now()) >= self.store.lease() / 2 {
                    Some(job.version)
                } else {
                    match self.store.renew_outbound(&job.id, job.version, job.doc.attempts).await {
                        Ok(version) => version,
                        Err(error) => {
                            tracing::warn!(ledger.id = %job.id, error = %error, "could not renew the lease; the action is left to the sweeper");
                            None
                        }
                    }
                };
                match version {
                    Some(version) => {
                        self.courier
                            .deliver(&job.id, &job.doc, version, Origin::Recovered)
                            .await;
                    }
                    None => {
                        tracing::info!(ledger.id = %job.id, outcome = "superseded", "the action was taken over while it waited")
                    }
                }
            }
        }
    }

    /// One processing attempt; a failure gives the event back for a later one.
    /// `predecessor_done`: the user's previous event of the same request was
    /// processed here just now (no need to read it).
    async fn attempt(&self, job: EventJob, predecessor_done: bool) -> Result<Processed, Failure> {
        let version = self.pick_up(&job).await?;
        let hold = Hold {
            key: job.key.clone(),
            version,
        };
        let waiting = if predecessor_done {
            Ok(false)
        } else {
            self.predecessor_pending(&job.work).await
        };
        let outcome = match waiting {
            Ok(false) => self.process(&hold, &job.work).await,
            Ok(true) => Err(Failure::Waiting),
            Err(error) => Err(error.into()),
        };
        match outcome {
            Ok(processed) => {
                tracing::info!(outcome = processed.as_str(), attempt = job.attempt, "event processed");
                Ok(processed)
            }
            Err(Failure::Superseded) => {
                tracing::info!(outcome = "superseded", "another instance holds or finished the event");
                Err(Failure::Superseded)
            }
            Err(Failure::Waiting) => {
                // Not an attempt: the record keeps the count it had.
                let retry_in = self.settings.retry_backoff;
                tracing::info!(
                    outcome = "waiting",
                    retry_in_ms = retry_in.as_millis() as u64,
                    "the user's previous event is not done yet"
                );
                let attempts = job.attempt.saturating_sub(1);
                self.sweep_soon.notify_one();
                if let Err(error) = self
                    .store
                    .release_event(&hold.key, hold.version, attempts, retry_in, None)
                    .await
                {
                    tracing::warn!(error = %error, "could not release the event; its lease will run out");
                }
                Err(Failure::Waiting)
            }
            Err(Failure::Store(error)) => {
                let retry_in = self.settings.retry_backoff.saturating_mul(job.attempt.max(1));
                tracing::error!(error = %error, retry_in_ms = retry_in.as_millis() as u64, outcome = "failed", "event processing failed; it will be retried");
                self.sweep_soon.notify_one();
                match self
                    .store
                    .release_event(&hold.key, hold.version, job.attempt, retry_in, Some(&error.to_string()))
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => tracing::info!("the event moved on meanwhile; nothing released"),
                    Err(release) => {
                        tracing::warn!(error = %release, "could not release the event; its lease will run out")
                    }
                }
                Err(Failure::Store(error))
            }
        }
    }

    /// A lease covers work in progress: a job that waited in the queue for more
    /// than half its lease renews it (conditionally) before it starts, and a
    /// recovered job counts its attempt now that it starts.
    async fn pick_up(&self, job: &EventJob) -> Result<Version, Failure> {
        let half = self.store.lease() / 2;
        if !job.recovered && job.lease_until.saturating_duration_since(Instant::now()) >= half {
            return Ok(job.version);
        }
        match self.store.start_event(&job.key, job.version, job.attempt).await {
            Ok(Some(version)) => Ok(version),
            Ok(None) => {
                tracing::info!(
                    outcome = "superseded",
                    "the event was taken over while it waited in the queue"
                );
                Err(Failure::Superseded)
            }
            Err(error) => {
                tracing::warn!(error = %error, "could not renew the lease; the event is left to the sweeper");
                Err(Failure::Superseded)
            }
        }
    }

    /// Whether the user's previous event of the same webhook request (if any)
    /// is still pending: events of one user are processed in LINE's order, also
    /// when the earlier one failed and waits for its retry. A parked (dead) one
    /// does not hold the next up.
    async fn predecessor_pending(&self, work: &Work) -> Result<bool, crate::store::StoreError> {
        let Some(after) = &work.after else {
            return Ok(false);
        };
        let key = crate::store::InboxKey::from_document_id(after.clone());
        Ok(self
            .store
            .event(&key)
            .await?
            .is_some_and(|record| record.doc.state == crate::store::InboxState::Pending))
    }

    /// Carries out a stored event's plan from the version in `hold`. Used by the
    /// workers and by dead-letter replays.
    pub(super) async fn process(&self, hold: &Hold, work: &Work) -> Result<Processed, Failure> {
        match &work.plan {
            Plan::Answer(plan) => self.answer(hold, work, plan).await,
            Plan::CardTap(plan) => self.card_tap(hold, work, plan).await,
            Plan::Start(plan) => self.start(hold, work, plan).await,
            Plan::Text(plan) => self.text(hold, work, plan).await,
            Plan::Follow(plan) => self.follow(hold, work, plan).await,
        }
    }

    /// An event that ends without effect: its "done" goes with the batched settles.
    pub(super) fn done_without_effect(&self, hold: &Hold) -> Result<(), Failure> {
        self.store.mark_event_done(&hold.key, hold.version)?;
        Ok(())
    }

    /// Whether the event's reply token is still worth a reply.
    pub(super) fn reply_is_fresh(&self, work: &Work) -> bool {
        work.reply_token.is_some() && self.courier.reply_is_fresh(work.event_time_ms)
    }

    /// Sends an action this worker recorded. Without the entry's version (never
    /// seen: a write always has one) it is left to the sweeper.
    pub(super) async fn send(&self, staged: Option<&StagedAction>, version: Option<Version>) {
        if let (Some(staged), Some(version)) = (staged, version) {
            // Held while it is sent: this instance's sweeper must not take it over.
            let _held = self.in_hand.hold(&staged.ledger_id);
            self.courier
                .deliver(&staged.ledger_id, &staged.doc, version, Origin::Fresh)
                .await;
        }
    }

    /// Gives a queued job's lease back at shutdown so another instance takes it now.
    pub(super) async fn hand_back(&self, job: &Job) {
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

/// Counts one processing attempt by its outcome, and the duplicate it stopped.
fn record_attempt(event_type: &str, result: &Result<Processed, Failure>) {
    let outcome = match result {
        Ok(processed) => {
            if let Some((guard, reason)) = processed.duplicate() {
                series::duplicate_stopped(guard, reason);
            }
            processed.as_str()
        }
        Err(Failure::Store(_)) => "failed",
        Err(Failure::Superseded) => "superseded",
        Err(Failure::Waiting) => "waiting",
    };
    series::event_processed(event_type, outcome);
}

pub(super) fn event_span(work: &Work, inbox_id: &str) -> tracing::Span {
    tracing::info_span!(
        "event",
        event.id = %work.webhook_event_id,
        event.kind = %work.event_type,
        inbox.id = inbox_id,
        user.id = %work.plan.user(),
    )
}
