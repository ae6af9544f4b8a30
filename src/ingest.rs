//! The request path of `POST /webhook`: store every event that can have an
//! effect in the inbox (with what is needed to process it), then hand it to the
//! pipeline. LINE gets its 200 once every such event is durably stored; if any
//! cannot be stored, it gets 503 and redelivers the request (events already
//! stored are then dropped as duplicates, and still processed once).

use crate::engine::{Decision, Engine};
use crate::line::webhook::{Envelope, Event, EventKind, EventParse, MessageContent};
use crate::metrics::Metrics;
use crate::pipeline::{Job, Pipeline};
use crate::store::round_trips::counted;
use crate::store::{Claim, InboxKey, NewEvent, Store, StoreError};
use std::sync::Arc;
use tracing::Instrument;

#[derive(Clone)]
pub struct Ingest {
    engine: Engine,
    store: Store,
    pipeline: Arc<Pipeline>,
}

impl Ingest {
    fn metrics(&self) -> &Metrics {
        self.pipeline.processor().metrics()
    }
}

/// Some events could not be stored; LINE should deliver the request again.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of the request's events could not be stored")]
pub struct RetryLater {
    pub failed: usize,
}

impl Ingest {
    pub fn new(engine: Engine, store: Store, pipeline: Arc<Pipeline>) -> Self {
        Self {
            engine,
            store,
            pipeline,
        }
    }

    pub async fn handle(&self, envelope: &Envelope) -> Result<(), RetryLater> {
        let mut stores = Vec::new();
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
                        "webhook_event",
                        event.id = %event.webhook_event_id,
                        event.kind = %event.type_name,
                        event.redelivery = event.delivery_context.is_redelivery,
                        user.id = event.user_id().unwrap_or("-"),
                    );
                    stores.push(self.store_event(&envelope.destination, raw, *event).instrument(span));
                }
            }
        }
        // Events are stored concurrently: the acknowledgement waits for the
        // slowest write, not for the sum of them.
        let failed = futures::future::join_all(stores)
            .await
            .into_iter()
            .filter(Result::is_err)
            .count();
        if failed > 0 { Err(RetryLater { failed }) } else { Ok(()) }
    }

    async fn store_event(&self, destination: &str, raw: &serde_json::Value, event: Event) -> Result<(), StoreError> {
        let decision = self.engine.decide(&event);
        let result = match decision {
            Decision::Ignore(reason) => {
                tracing::info!(outcome = "ignored", reason = %reason, "event acknowledged");
                return Ok(());
            }
            Decision::Unsend { message_id } => self.remove_text(&message_id).await,
            _ => self.claim(destination, raw, event).await,
        };
        if let Err(error) = &result {
            tracing::error!(error = %error, outcome = "not_stored", "event not stored; LINE should redeliver");
        }
        result
    }

    async fn claim(&self, destination: &str, raw: &serde_json::Value, event: Event) -> Result<(), StoreError> {
        let Some(key) = InboxKey::new(destination, &event.webhook_event_id) else {
            tracing::warn!(outcome = "ignored", reason = "unusable event id", "event acknowledged");
            return Ok(());
        };
        let message_id = match &event.kind {
            EventKind::Message {
                message: MessageContent::Text { id, .. },
            } => Some(id.as_str()),
            _ => None,
        };
        let new = NewEvent {
            destination,
            webhook_event_id: &event.webhook_event_id,
            event_type: &event.type_name,
            message_id,
            payload: raw.to_string(),
        };
        let (claim, round_trips) = counted(self.store.claim_event(&key, new)).await;
        match claim? {
            Claim::Duplicate => {
                self.metrics().record("redelivery", round_trips);
                tracing::info!(inbox.id = key.as_str(), outcome = "duplicate", "event acknowledged")
            }
            Claim::Claimed => {
                let queued = self.pipeline.submit(Job::Event {
                    key: key.clone(),
                    event: Box::new(event),
                    claim_round_trips: Some(round_trips),
                    attempt: 1,
                });
                tracing::info!(
                    inbox.id = key.as_str(),
                    outcome = "stored",
                    queued,
                    "event acknowledged"
                );
                if !queued {
                    // Overloaded or stopping: let any instance's sweeper take it now
                    // instead of after our lease. If this fails, the lease runs out.
                    let _ = self.store.release_event(&key, std::time::Duration::ZERO, None).await;
                }
            }
        }
        Ok(())
    }

    /// An unsend is handled right away, before LINE's 200: removing the text is
    /// the whole of its effect, and it must not wait behind other work.
    async fn remove_text(&self, message_id: &str) -> Result<(), StoreError> {
        let removed = self.store.remove_message_text(message_id).await?;
        tracing::info!(
            records = removed,
            outcome = "text_removed",
            "unsent message text removed"
        );
        Ok(())
    }
}
