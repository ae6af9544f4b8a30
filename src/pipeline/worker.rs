//! Processing one stored event: the guard reads, one atomic commit records the
//! effect together with the inbox's "done" and the ledger entry of what to send,
//! and only then the courier sends. Every write names the version of the inbox
//! record this worker holds, so a worker that was superseded changes nothing.

use super::hold::{Failure, Hold};
use super::processed::Processed;
use super::work::{Plan, Work};
use super::{EventJob, OutboundSender, SweepSoon, Versions};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::metrics::series;
use crate::store::round_trips::counted;
use crate::store::{Store, Version};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The longest a user's event waits for their previous one, put back to wait,
/// before it looks again (a follow waits at most `SOURCE_WAIT_SECS`, 30 s).
const MAX_WAIT_FOR_PREDECESSOR: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub(crate) struct EventSettings {
    /// Wait before a failed event is retried (grows with its attempts).
    pub(crate) retry_backoff: Duration,
    /// A guarded scenario started twice for one user within this window starts once.
    pub(crate) start_dedup: Duration,
}

/// The event worker: carries out stored events' plans (answers, starts and card
/// taps, typed text, follows and unfollows), each through its guard and one
/// atomic commit, then hands what the commit recorded to the sender.
pub(crate) struct EventWorker {
    /// The engines: the loaded scenarios decide again where a decision needs
    /// what only the store knows (a text that may answer the user's open
    /// question), and older versions decide for runs pinned to them.
    pub(super) versions: Arc<Versions>,
    pub(super) store: Store,
    pub(super) sender: Arc<OutboundSender>,
    /// The values of personal texts (`{name}`, fields, answers).
    pub(super) personal: super::personal::Personaliser,
    metrics: Arc<Metrics>,
    pub(super) settings: EventSettings,
    /// Raised when an event is released for a retry: the sweeper comes back soon.
    sweep_soon: SweepSoon,
    pub(super) clock: Clock,
    /// The campaigns of answers' runs.
    pub(super) campaign_runs: super::campaign_runs::CampaignRuns,
    /// Friend-add sources waiting for a follow.
    pub(super) sources: super::sources::SourceStarts,
}

/// The handles an event worker is built with.
pub(crate) struct EventWorkerParts {
    pub(crate) versions: Arc<Versions>,
    pub(crate) store: Store,
    pub(crate) sender: Arc<OutboundSender>,
    pub(crate) personal: super::personal::Personaliser,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) sweep_soon: SweepSoon,
    pub(crate) clock: Clock,
    pub(crate) sources: super::sources::SourceStarts,
}

impl EventWorker {
    pub(crate) fn new(parts: EventWorkerParts, settings: EventSettings) -> Self {
        let EventWorkerParts {
            versions,
            store,
            sender,
            personal,
            metrics,
            sweep_soon,
            clock,
            sources,
        } = parts;
        Self {
            campaign_runs: super::campaign_runs::CampaignRuns::new(store.clone()),
            versions,
            store,
            sender,
            personal,
            metrics,
            settings,
            sweep_soon,
            clock,
            sources,
        }
    }

    /// Processes one event this instance holds, in its turn among the events of
    /// the same user and request.
    pub(super) async fn run(&self, mut job: EventJob) {
        let mut turn = std::mem::take(&mut job.turn);
        let predecessor_done = turn.wait(self.store.lease() / 2).await;
        let span = event_span(&job.work, job.key.as_str());
        let fresh = job.claim_round_trips;
        let event_type = job.work.event_type.clone();
        let (result, round_trips) = counted(self.attempt(job, predecessor_done).instrument(span)).await;
        turn.finish(result.is_ok());
        record_attempt(&event_type, &result);
        // Counted for events whose whole life this instance saw (not recoveries).
        if let (Ok(processed), Some(claim)) = (result, fresh) {
            self.metrics.record(processed.metric_kind(), claim + round_trips);
        }
    }

    /// The timer documents `plans` schedule for `user`, due from now, each by
    /// the scenario version of its run.
    pub(super) async fn schedule(
        &self,
        user: &crate::ids::LineUserId,
        plans: &[crate::engine::TimerPlan],
    ) -> Result<Vec<(String, crate::store::TimerDoc)>, crate::store::StoreError> {
        let mut timers = Vec::with_capacity(plans.len());
        for plan in plans {
            let engine = self.versions.engine_for(&plan.scenario, plan.version).await?;
            timers.extend(super::timers::schedule(
                &engine,
                user,
                std::slice::from_ref(plan),
                self.clock.now(),
            ));
        }
        Ok(timers)
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
            Ok(None)
        } else {
            self.predecessor_pending(&job.work).await
        };
        let mut retry_in = self.settings.retry_backoff;
        let outcome = match waiting {
            Ok(None) => self.process(&hold, &job.work).await,
            Ok(Some(deferred_for)) => {
                // A predecessor put back to wait (a follow waiting for a
                // source login) is not polled meanwhile.
                retry_in = retry_in.max(deferred_for.min(MAX_WAIT_FOR_PREDECESSOR));
                Err(Failure::Waiting)
            }
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
                tracing::info!(
                    outcome = "waiting",
                    retry_in_ms = retry_in.as_millis() as u64,
                    "the user's previous event is not done yet"
                );
                let attempts = job.attempt.saturating_sub(1);
                self.sweep_soon.notify();
                if let Err(error) = self
                    .store
                    .release_event(&hold.key, hold.version, attempts, retry_in, None)
                    .await
                {
                    tracing::warn!(error = %error, "could not release the event; its lease will run out");
                }
                Err(Failure::Waiting)
            }
            Err(Failure::Deferred(wait)) => {
                // Not an attempt either: back when the wait is over.
                tracing::info!(
                    outcome = "deferred",
                    retry_in_ms = wait.as_millis() as u64,
                    "the follow waits for a source link's login"
                );
                let attempts = job.attempt.saturating_sub(1);
                if let Err(error) = self.store.defer_event(&hold.key, hold.version, attempts, wait).await {
                    tracing::warn!(error = %error, "could not release the event; its lease will run out");
                }
                Err(Failure::Deferred(wait))
            }
            Err(Failure::Failed(error)) => {
                let retry_in = self.settings.retry_backoff.saturating_mul(job.attempt.max(1));
                tracing::error!(error = %error, retry_in_ms = retry_in.as_millis() as u64, outcome = "failed", "event processing failed; it will be retried");
                self.sweep_soon.notify();
                match self
                    .store
                    .release_event(&hold.key, hold.version, job.attempt, retry_in, Some(&error.to_string()))
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => tracing::info!("the event moved on meanwhile; nothing released"),
                    Err(release) => {
                        tracing::warn!(error = %release, "could not release the event; its lease will run out");
                    }
                }
                Err(Failure::Failed(error))
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
    async fn predecessor_pending(&self, work: &Work) -> Result<Option<Duration>, crate::store::StoreError> {
        let Some(after) = &work.after else {
            return Ok(None);
        };
        let key = crate::store::InboxKey::from_document_id(after.clone());
        let Some(record) = self.store.event(&key).await? else {
            return Ok(None);
        };
        if record.doc.state != crate::store::InboxState::Pending {
            return Ok(None);
        }
        let deferred_ms = record
            .doc
            .deferred_until_ms
            .map_or(0, |until| until.saturating_sub(self.clock.now_ms()));
        Ok(Some(Duration::from_millis(deferred_ms.max(0).unsigned_abs())))
    }

    /// Carries out a stored event's plan from the version in `hold`. Used by the
    /// workers and by dead-letter replays.
    pub(super) async fn process(&self, hold: &Hold, work: &Work) -> Result<Processed, Failure> {
        match &work.plan {
            Plan::Answer(plan) => self.answer(hold, work, plan).await,
            Plan::CardTap(plan) => self.card_tap(hold, work, plan).await,
            Plan::MenuTap(plan) => self.menu_tap(hold, work, plan).await,
            Plan::Start(plan) => self.start(hold, work, plan).await,
            Plan::Text(plan) => self.text(hold, work, plan).await,
            Plan::Follow(plan) => self.follow(hold, work, plan).await,
            Plan::Hint(plan) => {
                let noticed = self
                    .notice(hold, work, &plan.user, &plan.notice, work.message.as_ref())
                    .await?;
                Ok(match noticed {
                    super::notice::Noticed::Sent => Processed::Hinted,
                    super::notice::Noticed::Withheld => Processed::NoTrigger,
                    super::notice::Noticed::Unsent => Processed::Unsent,
                })
            }
        }
    }

    /// An event that ends without effect: its "done" goes with the batched settles.
    pub(super) fn done_without_effect(&self, hold: &Hold) -> Result<(), Failure> {
        self.store.mark_event_done(&hold.key, hold.version)?;
        Ok(())
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
        Err(Failure::Failed(_)) => "failed",
        Err(Failure::Superseded) => "superseded",
        Err(Failure::Waiting) => "waiting",
        Err(Failure::Deferred(_)) => "deferred",
    };
    series::event_processed(event_type, outcome);
}

pub(super) fn event_span(work: &Work, inbox_id: &str) -> tracing::Span {
    tracing::info_span!(
        "event",
        event.id = %work.webhook_event_id,
        event.kind = %work.event_type,
        inbox.id = inbox_id,
        user.id = %crate::log_ids::logged(work.plan.user().as_str()),
    )
}
