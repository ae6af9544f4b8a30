//! Carrying out the engine's decisions: inbox claim, guards, commit, then send.
//!
//! Failure policy (DESIGN.md): a failure before any effect is committed releases
//! the inbox claim and answers 5xx, so LINE's redelivery runs the event again.
//! Once an effect is committed the claim is never released: a rerun would double it.

use crate::engine::{AnswerPlan, CardTapPlan, Decision, Engine, FLEX_TAP_TAG, StartPlan};
use crate::ids::LineUserId;
use crate::line::messages::Message;
use crate::line::webhook::{Envelope, Event, EventParse};
use crate::outbound::{Outbound, ReplyContext, SendFailure};
use crate::store::{AnswerCommit, Claim, ClaimedEvent, InboxKey, Store, StoreError};
use tracing::Instrument;

#[derive(Clone)]
pub struct Dispatcher {
    engine: Engine,
    store: Store,
    outbound: Outbound,
}

/// The request could not be processed; LINE should deliver it again.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of the request's events could not be processed")]
pub struct RetryLater {
    pub failed: usize,
}

/// What became of one event, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ignored,
    Duplicate,
    Answered,
    AlreadyAnswered,
    Started,
    NotRestarted,
    CardTapped,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ignored => "ignored",
            Outcome::Duplicate => "duplicate",
            Outcome::Answered => "answered",
            Outcome::AlreadyAnswered => "already_answered",
            Outcome::Started => "started",
            Outcome::NotRestarted => "not_restarted",
            Outcome::CardTapped => "card_tapped",
        }
    }
}

/// How an event's processing failed.
enum Failure {
    /// Nothing was committed (or what was is safe to repeat): give the claim back.
    Retryable(String),
    /// An effect landed; the rest failed and must not be rerun blindly.
    Final(String),
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Retryable(error.to_string())
    }
}

impl Dispatcher {
    pub fn new(engine: Engine, store: Store, outbound: Outbound) -> Self {
        Self {
            engine,
            store,
            outbound,
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// Handles every event of one webhook request, one after the other (LINE
    /// orders a user's events within a request).
    pub async fn handle(&self, envelope: &Envelope) -> Result<(), RetryLater> {
        let mut failed = 0;
        for raw in &envelope.events {
            match Event::parse(raw) {
                EventParse::Malformed {
                    webhook_event_id,
                    reason,
                } => {
                    tracing::warn!(
                        event.id = webhook_event_id.as_deref().unwrap_or("-"),
                        reason,
                        outcome = "malformed",
                        "event skipped"
                    );
                }
                EventParse::Parsed(event) => {
                    let span = tracing::info_span!(
                        "event",
                        event.id = %event.webhook_event_id,
                        event.kind = %event.type_name,
                        event.redelivery = event.delivery_context.is_redelivery,
                        user.id = event.user_id().unwrap_or("-"),
                    );
                    if self
                        .handle_event(&envelope.destination, &event)
                        .instrument(span)
                        .await
                        .is_err()
                    {
                        failed += 1;
                    }
                }
            }
        }
        if failed > 0 {
            Err(RetryLater { failed })
        } else {
            Ok(())
        }
    }

    async fn handle_event(&self, destination: &str, event: &Event) -> Result<(), ()> {
        let decision = self.engine.decide(event);
        if let Decision::Ignore(reason) = &decision {
            tracing::info!(outcome = Outcome::Ignored.as_str(), reason = %reason, "event handled");
            return Ok(());
        }
        let Some(key) = InboxKey::new(destination, &event.webhook_event_id) else {
            tracing::warn!(
                outcome = Outcome::Ignored.as_str(),
                reason = "unusable event id",
                "event handled"
            );
            return Ok(());
        };
        let claimed = ClaimedEvent {
            destination,
            webhook_event_id: &event.webhook_event_id,
            event_type: &event.type_name,
        };
        match self.store.claim_event(&key, &claimed).await {
            Ok(Claim::Duplicate) => {
                tracing::info!(outcome = Outcome::Duplicate.as_str(), "event handled");
                return Ok(());
            }
            Ok(Claim::Claimed) => {}
            Err(error) => {
                tracing::error!(error = %error, outcome = "claim_failed", "event not processed; LINE should redeliver");
                return Err(());
            }
        }
        let run = match &decision {
            Decision::Answer(plan) => self.answer(plan, event, &key).await,
            Decision::CardTap(plan) => self.card_tap(plan, event, &key).await,
            Decision::Start(plan) => self.start(plan, event, &key).await,
            Decision::Ignore(_) => unreachable!("ignored above"),
        };
        match run {
            Ok(outcome) => {
                tracing::info!(outcome = outcome.as_str(), "event handled");
                Ok(())
            }
            Err(Failure::Final(error)) => {
                tracing::error!(
                    error,
                    outcome = "partly_failed",
                    "effect recorded, follow-up failed"
                );
                Ok(())
            }
            Err(Failure::Retryable(error)) => {
                if let Err(release) = self.store.release_event(&key).await {
                    tracing::error!(error = %release, "could not release the inbox claim");
                }
                tracing::error!(
                    error,
                    outcome = "failed",
                    "event not processed; LINE should redeliver"
                );
                Err(())
            }
        }
    }

    async fn answer(
        &self,
        plan: &AnswerPlan,
        event: &Event,
        key: &InboxKey,
    ) -> Result<Outcome, Failure> {
        if self.store.legacy_lookup()
            && self
                .store
                .node_answered_legacy(&plan.answer_id, &plan.scenario, &plan.node, &plan.user)
                .await?
        {
            return Ok(Outcome::AlreadyAnswered);
        }
        match self
            .store
            .commit_answer(plan, key, &event.webhook_event_id)
            .await?
        {
            AnswerCommit::AlreadyAnswered => Ok(Outcome::AlreadyAnswered),
            AnswerCommit::Recorded => {
                // Keyed by the answer, not the event: whichever delivery recorded the
                // answer, its follow-up is one and the same action.
                let action = format!("answer:{}", plan.answer_id);
                self.send(&plan.user, event, &plan.follow_up, &action)
                    .await
                    .map_err(|failure| Failure::Final(describe(&failure)))?;
                Ok(Outcome::Answered)
            }
        }
    }

    async fn card_tap(
        &self,
        plan: &CardTapPlan,
        event: &Event,
        key: &InboxKey,
    ) -> Result<Outcome, Failure> {
        // The guard read and the tap tag are independent: run them side by side.
        let (answered, tagged) = tokio::join!(
            self.store
                .scenario_answered(&plan.guard.marker_id, &plan.guard.scenario, &plan.user),
            self.store.record_tap_tag(&plan.user, FLEX_TAP_TAG),
        );
        tagged?;
        if answered? {
            return Ok(Outcome::AlreadyAnswered);
        }
        self.send_for_event(&plan.user, event, &plan.messages, key)
            .await?;
        Ok(Outcome::CardTapped)
    }

    async fn start(
        &self,
        plan: &StartPlan,
        event: &Event,
        key: &InboxKey,
    ) -> Result<Outcome, Failure> {
        if let Some(guard) = &plan.guard
            && self
                .store
                .scenario_answered(&guard.marker_id, &guard.scenario, &plan.user)
                .await?
        {
            return Ok(Outcome::NotRestarted);
        }
        self.send_for_event(&plan.user, event, &plan.messages, key)
            .await?;
        Ok(Outcome::Started)
    }

    /// Sends messages caused by the event itself (no commit before them): a failed
    /// send may be retried through LINE's redelivery when repeating it is safe.
    async fn send_for_event(
        &self,
        user: &LineUserId,
        event: &Event,
        messages: &[Message],
        key: &InboxKey,
    ) -> Result<(), Failure> {
        let action = format!("event:{}", key.as_str());
        self.send(user, event, messages, &action)
            .await
            .map_err(|failure| {
                if failure.safe_to_repeat() {
                    Failure::Retryable(describe(&failure))
                } else {
                    Failure::Final(describe(&failure))
                }
            })
    }

    async fn send(
        &self,
        user: &LineUserId,
        event: &Event,
        messages: &[Message],
        action: &str,
    ) -> Result<(), SendFailure> {
        if messages.is_empty() {
            return Ok(());
        }
        let reply = event.reply_token.as_deref().map(|token| ReplyContext {
            token,
            event_time_ms: event.timestamp,
        });
        let (route, delivered) = self.outbound.send(user, reply, messages, action).await?;
        tracing::info!(send.route = route.as_str(), send.result = ?delivered, send.messages = messages.len(), "messages sent");
        Ok(())
    }
}

fn describe(failure: &SendFailure) -> String {
    format!("{} failed: {}", failure.route.as_str(), failure.error)
}
