//! The request path of `POST /webhook`. Per event the engine decides, once; an
//! event with an effect is stored in the inbox with its plan (never the message
//! text), then handed to a worker. LINE gets its 200 once every such event is
//! durably stored; if any cannot be stored, it gets 503 and redelivers the
//! request (events already stored are then dropped as duplicates, and still
//! processed once).
//!
//! An unsend is handled here, before the 200: it records that the message was
//! unsent (one `create` by id), which stops the message's effect if that has not
//! happened yet, wherever its work is queued.

use super::work::{Plan, Work};
use super::{EventJob, Job, Pipeline, PipelineError};
use crate::engine::{Decision, Engine, Ignored, OpenQuestionSeen, TextPlan};
use crate::line::webhook::{Envelope, Event, EventKind, EventParse, MessageContent};
use crate::metrics::Metrics;
use crate::metrics::series::{self, Guard};
use crate::store::round_trips::counted;
use crate::store::{Claim, InboxKey, InboxState, MessageKey, NewEvent, Store, StoreError, UnsendOutcome};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use tracing::Instrument;

#[derive(Clone)]
pub(crate) struct Ingest {
    /// The engines: the loaded scenarios, and older versions for pinned runs.
    versions: Arc<super::versions::Versions>,
    store: Store,
    pipeline: Arc<Pipeline>,
    metrics: Arc<Metrics>,
    /// Inbox ids whose claim got no answer (it may have landed, leased to us):
    /// when LINE's redelivery finds the record, this instance takes it up at once
    /// instead of leaving it until its lease runs out.
    unanswered_claims: Arc<Mutex<HashSet<String>>>,
    /// Event times are judged against it (an old signed body is ignored).
    clock: crate::clock::Clock,
}

/// Bounds the memory of unanswered claims; beyond it they wait for their leases.
const MAX_UNANSWERED_CLAIMS: usize = 10_000;

/// The oldest event time (before now) an event may have to be processed: the
/// inbox's retention less a day.
const OLDEST_EVENT_MS: i64 = (crate::store::INBOX_RETENTION.as_secs() as i64 - 24 * 60 * 60) * 1000;

/// Some events could not be stored; LINE should deliver the request again.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of the request's events could not be stored")]
pub(crate) struct RetryLater {
    pub(crate) failed: usize,
}

impl Ingest {
    pub(crate) fn new(
        versions: Arc<super::versions::Versions>,
        store: Store,
        pipeline: Arc<Pipeline>,
        metrics: Arc<Metrics>,
        clock: crate::clock::Clock,
    ) -> Self {
        Self {
            versions,
            store,
            pipeline,
            metrics,
            unanswered_claims: Arc::default(),
            clock,
        }
    }

    pub(crate) async fn handle(&self, envelope: &Envelope) -> Result<(), RetryLater> {
        // Events of one user form a chain, stored and processed in the order LINE
        // sent them; chains of different users go concurrently (the
        // acknowledgement waits for the slowest chain, not for every event).
        let mut chains: Vec<(Option<String>, Vec<Event>)> = Vec::new();
        for raw in &envelope.events {
            match Event::parse(raw) {
                EventParse::Malformed {
                    webhook_event_id,
                    reason,
                } => {
                    let kind = raw.get("type").and_then(serde_json::Value::as_str).unwrap_or_default();
                    series::webhook_event(kind, "malformed");
                    tracing::warn!(
                        event.id = webhook_event_id.as_deref().unwrap_or("-"),
                        reason,
                        outcome = "malformed",
                        "event skipped"
                    );
                }
                EventParse::Parsed(event) => {
                    let user = event.user_id().map(str::to_owned);
                    match chains.iter_mut().find(|(owner, _)| user.is_some() && *owner == user) {
                        Some((_, events)) => events.push(*event),
                        None => chains.push((user, vec![*event])),
                    }
                }
            }
        }
        let stores = chains
            .into_iter()
            .map(|(_, events)| self.store_chain(&envelope.destination, events));
        let failed: usize = futures::future::join_all(stores).await.into_iter().sum();
        if failed > 0 { Err(RetryLater { failed }) } else { Ok(()) }
    }

    /// Stores one user's events in order; the number that could not be stored.
    /// Each stored event names the one stored before it, which it waits for. At
    /// the first that cannot be stored the chain stops (the rest count as not
    /// stored): LINE redelivers the request, and the order holds.
    async fn store_chain(&self, destination: &str, events: Vec<Event>) -> usize {
        let count = events.len();
        let turns = super::Turn::chain(count);
        let mut previous: Option<InboxKey> = None;
        for (index, (event, turn)) in events.into_iter().zip(turns).enumerate() {
            let span = tracing::info_span!(
                "webhook_event",
                event.id = %event.webhook_event_id,
                event.kind = %event.type_name,
                event.redelivery = event.delivery_context.is_redelivery,
                user.id = %crate::log_ids::logged(event.user_id().unwrap_or("-")),
            );
            match self
                .store_event(destination, event, turn, previous.as_ref())
                .instrument(span)
                .await
            {
                Ok(Some(stored)) => previous = Some(stored),
                Ok(None) => {}
                Err(_) => return count - index,
            }
        }
        0
    }

    /// The inbox key of the stored event (new or a redelivery), `None` when it
    /// has no effect to store.
    async fn store_event(
        &self,
        destination: &str,
        event: Event,
        turn: super::Turn,
        after: Option<&InboxKey>,
    ) -> Result<Option<InboxKey>, PipelineError> {
        // An event older than the inbox keeps its records (less a day) may be a
        // captured body sent again after its record expired: it must not run
        // again. LINE itself redelivers for far less long.
        if event.timestamp < self.clock.now_ms().saturating_sub(OLDEST_EVENT_MS) {
            series::webhook_event(&event.type_name, "ignored");
            tracing::warn!(
                event.time_ms = event.timestamp,
                outcome = "too_old",
                "event acknowledged and ignored: older than the inbox keeps records"
            );
            return Ok(None);
        }
        let engine = match self.engine_for(&event).await {
            Ok(engine) => engine,
            Err(error) => {
                series::webhook_event(&event.type_name, "not_stored");
                return Err(error.into());
            }
        };
        let decision = match engine.decide(&event) {
            Decision::Text(plan) => self.text_decision(plan, event.timestamp).await,
            decision => decision,
        };
        let result = match decision {
            Decision::Ignore(reason @ Ignored::BrokenScenario { .. }) => {
                series::webhook_event(&event.type_name, "ignored");
                tracing::error!(outcome = "ignored", reason = %reason, "event acknowledged");
                return Ok(None);
            }
            Decision::Ignore(reason) => {
                series::webhook_event(&event.type_name, "ignored");
                tracing::info!(outcome = "ignored", reason = %reason, "event acknowledged");
                return Ok(None);
            }
            Decision::Unsend { message_id } => self
                .unsend(destination, &message_id)
                .await
                .map(|outcome| series::webhook_event(&event.type_name, outcome.as_str()))
                .map(|()| None)
                .map_err(PipelineError::from),
            decision => match Plan::from_decision(decision) {
                Some(plan) => self.claim(destination, &event, plan, turn, after).await,
                None => {
                    series::webhook_event(&event.type_name, "ignored");
                    Ok(None)
                }
            },
        };
        match &result {
            Ok(_) => {}
            // Our own bug, and every redelivery meets it again until it is fixed.
            // Still 503, not 200: an acknowledged event that was never stored is
            // lost for good, while a redelivery after the fix is stored.
            Err(error @ PipelineError::Encoding(_)) => {
                series::webhook_event(&event.type_name, "not_stored");
                tracing::error!(error = %error, outcome = "not_stored", defect = true, "event not stored: its plan cannot be encoded (a defect); LINE should redeliver");
            }
            Err(error) => {
                series::webhook_event(&event.type_name, "not_stored");
                tracing::error!(error = %error, outcome = "not_stored", "event not stored; LINE should redeliver");
            }
        }
        result
    }

    async fn claim(
        &self,
        destination: &str,
        event: &Event,
        plan: Plan,
        turn: super::Turn,
        after: Option<&InboxKey>,
    ) -> Result<Option<InboxKey>, PipelineError> {
        let Some(key) = InboxKey::new(destination, &event.webhook_event_id) else {
            series::webhook_event(&event.type_name, "ignored");
            tracing::warn!(outcome = "ignored", reason = "unusable event id", "event acknowledged");
            return Ok(None);
        };
        let work = Work::new(destination, event, plan, after, self.clock.now_ms());
        let plan = work
            .encode()
            .map_err(|error| PipelineError::Encoding(format!("the plan cannot be encoded: {error}")))?;
        // Room in the queue first: without it (overloaded, stopping, ingest-only)
        // the record is stored free for any sweeper, and no write follows the claim.
        self.pipeline.live_event();
        let slot = self.pipeline.try_reserve();
        // A text that may answer a typed question is kept by message id (never in
        // the inbox record) until its event is processed.
        let text = match (&work.plan, &work.message, &event.kind) {
            (
                Plan::Text(_),
                Some(message),
                EventKind::Message {
                    message: MessageContent::Text { text, .. },
                },
            ) => Some((message, text.as_str())),
            _ => None,
        };
        let new = NewEvent {
            destination,
            webhook_event_id: &event.webhook_event_id,
            event_type: &event.type_name,
            line_user_id: event.user_id(),
            plan,
            held: slot.is_some(),
            text,
        };
        let lease_until = super::lease_deadline(self.store.lease());
        let (claim, round_trips) = counted(self.store.claim_event(&key, new)).await;
        let claim = match claim {
            Ok(claim) => claim,
            Err(error) => {
                self.remember_unanswered(&key);
                return Err(error.into());
            }
        };
        match claim {
            Claim::Duplicate => {
                self.metrics.record("redelivery", round_trips);
                series::webhook_event(&event.type_name, "duplicate");
                series::duplicate_stopped(Guard::Inbox, "redelivered");
                tracing::info!(inbox.id = key.as_str(), outcome = "duplicate", "event acknowledged");
                if self.forget_unanswered(&key) {
                    let ingest = self.clone();
                    let adopted = key.clone();
                    tokio::spawn(async move { ingest.adopt(adopted).await });
                }
            }
            Claim::Claimed { version } => {
                series::webhook_event(&event.type_name, "stored");
                let queued = slot.is_some();
                if !queued {
                    series::event_unqueued(&event.type_name);
                    self.pipeline.sweep_soon();
                }
                if let Some(slot) = slot {
                    slot.send(Job::Event(Box::new(EventJob {
                        key: key.clone(),
                        version,
                        work,
                        lease_until,
                        attempt: 1,
                        recovered: false,
                        claim_round_trips: Some(round_trips),
                        turn,
                    })));
                }
                tracing::info!(
                    inbox.id = key.as_str(),
                    outcome = "stored",
                    queued,
                    "event acknowledged"
                );
            }
        }
        Ok(Some(key))
    }

    /// A text may answer only a text question open when it was sent. With none
    /// open (one get by id), it is an ordinary text and its words are never
    /// stored; with one open, the text is kept until the worker decides (the
    /// question may close meanwhile). If the read fails, the text is kept and the
    /// worker reads again.
    async fn text_decision(&self, plan: TextPlan, event_ms: i64) -> Decision {
        let open = match self.store.open_question(plan.user.as_str()).await {
            Ok(read) => read.and_then(|read| super::typed::open_question(&read.doc)),
            Err(error) => {
                tracing::warn!(error = %error, "could not read the open question; the text is kept for the worker");
                return Decision::Text(plan);
            }
        };
        let engine = match &open {
            Some(open) => match self
                .versions
                .engine_for(&open.question.scenario, open.question.version)
                .await
            {
                Ok(engine) => engine,
                Err(error) => {
                    tracing::warn!(error = %error, "could not read the question's scenario version; the text is kept for the worker");
                    return Decision::Text(plan);
                }
            },
            None => self.versions.current().clone(),
        };
        let hint = open.as_ref().and_then(|open| engine.hint_for(open, event_ms));
        let answers = open.filter(|open| engine.is_open_at(open, event_ms) && engine.takes_text(open));
        match (answers, plan.keyword) {
            (Some(open), keyword) => Decision::Text(TextPlan {
                keyword,
                arrived_to: Some(OpenQuestionSeen::of(&open)),
                ..plan
            }),
            (None, Some(start)) => Decision::Start(start),
            // Text at a date picker with a hint: the hint, once per interval.
            (None, None) => match hint {
                Some(notice) => Decision::Hint(crate::engine::HintPlan {
                    user: plan.user.clone(),
                    notice,
                }),
                None => Decision::Ignore(Ignored::NoTrigger),
            },
        }
    }

    /// The engine that decides `event`: for a button of a run pinned to an
    /// older scenario version, that version's (read once from Firestore).
    async fn engine_for(&self, event: &Event) -> Result<Engine, StoreError> {
        if let crate::line::webhook::EventKind::Postback { postback } = &event.kind
            && let Ok((tapped, Some(asked))) = crate::scenario::postback::Postback::decode_with_run(&postback.data)
            && let Some(version) = asked.version
            && let Some(scenario) = tapped.scenario()
        {
            return self.versions.engine_for(scenario, version).await;
        }
        Ok(self.versions.current().clone())
    }

    fn remember_unanswered(&self, key: &InboxKey) {
        if let Ok(mut keys) = self.unanswered_claims.lock() {
            if keys.len() >= MAX_UNANSWERED_CLAIMS {
                keys.clear();
            }
            keys.insert(key.as_str().to_owned());
        }
    }

    fn forget_unanswered(&self, key: &InboxKey) -> bool {
        self.unanswered_claims
            .lock()
            .is_ok_and(|mut keys| keys.remove(key.as_str()))
    }

    /// Takes up an event whose claim landed although its answer was lost: it is
    /// leased to this instance, which is not working on it.
    async fn adopt(&self, key: InboxKey) {
        let record = match self.store.event(&key).await {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(inbox.id = key.as_str(), error = %error, "could not read an unanswered claim; its lease will run out");
                return;
            }
        };
        let ours = record.doc.state == InboxState::Pending && record.doc.lease_owner == self.store.instance_id();
        let Some(Ok(work)) = record.doc.plan.as_deref().map(Work::decode) else {
            return;
        };
        if !ours || self.pipeline.in_hand.contains(key.as_str()) {
            return;
        }
        let Some(slot) = self.pipeline.try_reserve() else {
            return;
        };
        let lease_until = super::lease_deadline(self.store.lease());
        match self.store.take_over_event(&record).await {
            Ok(Some(version)) => {
                tracing::info!(
                    inbox.id = key.as_str(),
                    outcome = "adopted",
                    "a claim whose answer was lost is taken up"
                );
                slot.send(Job::Event(Box::new(EventJob {
                    key,
                    version,
                    work,
                    lease_until,
                    attempt: record.doc.attempts + 1,
                    recovered: false,
                    claim_round_trips: None,
                    turn: super::Turn::default(),
                })));
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(inbox.id = key.as_str(), error = %error, "could not take up an unanswered claim; its lease will run out");
            }
        }
    }

    /// Records an unsend; its outcome for the metrics.
    async fn unsend(&self, destination: &str, message_id: &str) -> Result<Unsent, StoreError> {
        let Some(message) = MessageKey::new(destination, message_id) else {
            tracing::warn!(
                outcome = Unsent::Ignored.as_str(),
                reason = "unusable message id",
                "unsend acknowledged"
            );
            return Ok(Unsent::Ignored);
        };
        let outcome = match self.store.record_unsend(&message).await? {
            UnsendOutcome::Stopped => Unsent::BeforeEffect,
            UnsendOutcome::TooLate => Unsent::AfterEffect,
        };
        tracing::info!(outcome = outcome.as_str(), "unsend recorded");
        Ok(outcome)
    }
}

/// What an unsend came to, as the metrics and logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unsent {
    /// Its message id cannot name a record: acknowledged, nothing stored.
    Ignored,
    /// Recorded before the message's effect: the effect will not happen.
    BeforeEffect,
    /// The message was processed already: its effect stays.
    AfterEffect,
}

impl Unsent {
    fn as_str(self) -> &'static str {
        match self {
            Unsent::Ignored => "ignored",
            Unsent::BeforeEffect => "unsent_before_effect",
            Unsent::AfterEffect => "unsent_after_effect",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Unsent;

    #[test]
    fn unsend_outcomes_keep_their_metric_names() {
        let cases = [
            (Unsent::Ignored, "ignored"),
            (Unsent::BeforeEffect, "unsent_before_effect"),
            (Unsent::AfterEffect, "unsent_after_effect"),
        ];
        for (outcome, name) in cases {
            assert_eq!(outcome.as_str(), name);
        }
    }
}
