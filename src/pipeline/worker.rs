//! Processing one stored event: the engine decides, the guard reads, one atomic
//! commit records the effect together with the inbox's "done" and the ledger
//! entry of what to send, and only then the courier sends.

use super::Job;
use super::cause::{Cause, reply_context};
use super::processed::Processed;
use crate::engine::{AnswerPlan, CardTapPlan, Decision, Engine, FLEX_TAP_TAG, StartPlan};
use crate::line::messages::Message;
use crate::line::webhook::Event;
use crate::metrics::Metrics;
use crate::outbound::{Courier, Origin, OutboundAction};
use crate::store::round_trips::counted;
use crate::store::{AnswerCommit, EffectCommit, InboxKey, Settlement, StagedAction, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

pub struct Processor {
    engine: Engine,
    store: Store,
    courier: Courier,
    metrics: Arc<Metrics>,
    /// Wait before a failed event is retried (grows with its attempts).
    retry_backoff: Duration,
}

impl Processor {
    pub fn new(engine: Engine, store: Store, courier: Courier, metrics: Arc<Metrics>, retry_backoff: Duration) -> Self {
        Self {
            engine,
            store,
            courier,
            metrics,
            retry_backoff,
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn courier(&self) -> &Courier {
        &self.courier
    }

    pub async fn run(&self, job: Job) {
        match job {
            Job::Event {
                key,
                event,
                claim_round_trips,
                attempt,
            } => {
                let span = event_span(&event, &key);
                let (result, round_trips) = counted(self.process_event(&key, &event, attempt).instrument(span)).await;
                // Counted for events whose whole life this instance saw (not recoveries).
                if let (Ok(processed), Some(claim)) = (result, claim_round_trips) {
                    self.metrics.record(processed.metric_kind(), claim + round_trips);
                }
            }
            Job::Outbound { record } => {
                self.courier.deliver(&record.id, &record.doc, Origin::Recovered).await;
            }
        }
    }

    /// Gives a queued job's lease back at shutdown so another instance takes it now.
    pub async fn hand_back(&self, job: Job) {
        let result = match &job {
            Job::Event { key, .. } => self.store.release_event(key, Duration::ZERO, None).await,
            Job::Outbound { record } => {
                let retry = Settlement::RetryAt {
                    after: Duration::ZERO,
                    error: "handed back at shutdown".into(),
                };
                self.store
                    .settle_outbound(&record.id, &record.doc, record.doc.attempts, record.doc.route, &retry)
                    .await
            }
        };
        if let Err(error) = result {
            tracing::warn!(error = %error, "could not hand work back; its lease will run out");
        }
    }

    /// Processes an event; a failure releases it for a later attempt.
    pub async fn process_event(&self, key: &InboxKey, event: &Event, attempts: u32) -> Result<Processed, StoreError> {
        match self.try_process(key, event).await {
            Ok(processed) => {
                tracing::info!(outcome = processed.as_str(), "event processed");
                Ok(processed)
            }
            Err(error) => {
                let retry_in = self.retry_backoff.saturating_mul(attempts.max(1));
                tracing::error!(error = %error, retry_in_ms = retry_in.as_millis() as u64, outcome = "failed", "event processing failed; it will be retried");
                if let Err(release) = self.store.release_event(key, retry_in, Some(&error.to_string())).await {
                    tracing::warn!(error = %release, "could not release the event; its lease will run out");
                }
                Err(error)
            }
        }
    }

    async fn try_process(&self, key: &InboxKey, event: &Event) -> Result<Processed, StoreError> {
        match self.engine.decide(event) {
            Decision::Ignore(reason) => {
                tracing::info!(reason = %reason, "nothing to do");
                self.store.mark_event_done(key).await?;
                Ok(Processed::Ignored)
            }
            // Handled when the webhook stored it; nothing to do later.
            Decision::Unsend { .. } => {
                self.store.mark_event_done(key).await?;
                Ok(Processed::TextRemoved)
            }
            Decision::Answer(plan) => self.answer(&plan, event, key).await,
            Decision::CardTap(plan) => self.card_tap(&plan, event, key).await,
            Decision::Start(plan) => self.start(&plan, event, key).await,
        }
    }

    async fn answer(&self, plan: &AnswerPlan, event: &Event, key: &InboxKey) -> Result<Processed, StoreError> {
        if self.store.legacy_lookup()
            && self
                .store
                .node_answered_legacy(&plan.answer_id, &plan.scenario, &plan.node, &plan.user)
                .await?
        {
            self.store.mark_event_done(key).await?;
            return Ok(Processed::AlreadyAnswered);
        }
        // Keyed by the answer, not the event: whichever delivery records the answer,
        // its follow-up is one and the same action.
        let follow_up = self
            .cause(event, key)
            .action(format!("answer:{}", plan.answer_id), plan, &plan.follow_up)
            .map(|action| OutboundAction {
                answer_id: Some(plan.answer_id.clone()),
                ..action
            })
            .map(|action| self.store.stage(&action));
        match self
            .store
            .commit_answer(plan, key, &event.webhook_event_id, follow_up.as_ref())
            .await?
        {
            AnswerCommit::AlreadyAnswered => {
                self.store.mark_event_done(key).await?;
                Ok(Processed::AlreadyAnswered)
            }
            AnswerCommit::Recorded => {
                self.send(follow_up).await;
                Ok(Processed::Answered)
            }
        }
    }

    async fn card_tap(&self, plan: &CardTapPlan, event: &Event, key: &InboxKey) -> Result<Processed, StoreError> {
        let answered = self
            .store
            .scenario_answered(&plan.guard.marker_id, &plan.guard.scenario, &plan.user)
            .await?;
        let messages: &[Message] = if answered { &[] } else { &plan.messages };
        let action = self
            .cause(event, key)
            .action(
                format!("event:{}", key.as_str()),
                (&plan.user, &plan.guard.scenario),
                messages,
            )
            .map(|action| self.store.stage(&action));
        match self
            .store
            .commit_event_effects(key, Some((&plan.user, FLEX_TAP_TAG)), action.as_ref())
            .await?
        {
            EffectCommit::AlreadyDone => Ok(Processed::AlreadyDone),
            EffectCommit::Committed => {
                self.send(action).await;
                Ok(if answered {
                    Processed::CardTapAnswered
                } else {
                    Processed::CardTapped
                })
            }
        }
    }

    async fn start(&self, plan: &StartPlan, event: &Event, key: &InboxKey) -> Result<Processed, StoreError> {
        if let Some(guard) = &plan.guard
            && self
                .store
                .scenario_answered(&guard.marker_id, &guard.scenario, &plan.user)
                .await?
        {
            self.store.mark_event_done(key).await?;
            return Ok(Processed::NotRestarted);
        }
        let action = self
            .cause(event, key)
            .action(
                format!("event:{}", key.as_str()),
                (&plan.user, &plan.scenario),
                &plan.messages,
            )
            .map(|action| self.store.stage(&action));
        match self.store.commit_event_effects(key, None, action.as_ref()).await? {
            EffectCommit::AlreadyDone => Ok(Processed::AlreadyDone),
            EffectCommit::Committed => {
                self.send(action).await;
                Ok(if plan.guard.is_some() {
                    Processed::StartedGuarded
                } else {
                    Processed::Started
                })
            }
        }
    }

    fn cause<'a>(&self, event: &'a Event, key: &'a InboxKey) -> Cause<'a> {
        // Decided now and recorded with the action: a reply-route entry found
        // pending after a crash is uncertain, so only a usable token makes one.
        let reply = reply_context(event).filter(|reply| self.courier.reply_is_fresh(reply.event_time_ms));
        Cause { event, key, reply }
    }

    async fn send(&self, staged: Option<StagedAction>) {
        if let Some(staged) = staged {
            self.courier
                .deliver(&staged.ledger_id, &staged.doc, Origin::Fresh)
                .await;
        }
    }
}

pub fn event_span(event: &Event, key: &InboxKey) -> tracing::Span {
    tracing::info_span!(
        "event",
        event.id = %event.webhook_event_id,
        event.kind = %event.type_name,
        event.redelivery = event.delivery_context.is_redelivery,
        inbox.id = key.as_str(),
        user.id = event.user_id().unwrap_or("-"),
    )
}
