//! The webhook inbox: one document per webhook event, written before LINE gets
//! its 200 and holding what a worker needs to process the event. LINE redelivers
//! an event with the same `webhookEventId`; the second `create` fails with
//! `ALREADY_EXISTS` and the delivery is dropped.
//!
//! A stored event is leased: its owner works on it until `leaseUntil`; after that
//! any instance may take it over (crash recovery), exactly one winning through
//! an update-time precondition.

use super::docs::collections::{DEAD_LETTERS, WEBHOOK_INBOX};
use super::docs::{DeadLetterDoc, DeadLetterKind, InboxDoc, InboxState};
use super::lease::Leased;
use super::writes::{create, if_exists, merge, merge_deleting, set};
use super::{Store, StoreError, classify};
use crate::ids::deterministic_id;
use firestore::FirestoreInstant;
use firestore::gcloud_sdk::google::firestore::v1::Write;
use serde::Serialize;
use std::time::Duration;

/// LINE does not say how long it keeps redelivering; a week is well past any
/// retry window seen, and the TTL policy (README) clears records after that.
pub const INBOX_RETENTION: Duration = Duration::from_secs(8 * 24 * 60 * 60);

/// The inbox id of one event of one channel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InboxKey(String);

impl InboxKey {
    /// `None` when either part contains NUL (LINE never sends that; such input is
    /// refused rather than hashed ambiguously).
    pub fn new(destination: &str, webhook_event_id: &str) -> Option<Self> {
        if destination.contains('\0') || webhook_event_id.contains('\0') || webhook_event_id.is_empty() {
            return None;
        }
        Some(Self(deterministic_id(&[destination, webhook_event_id])))
    }

    pub fn from_document_id(id: String) -> Self {
        Self(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This delivery is the first: it is stored, leased to us, and acknowledged.
    Claimed,
    /// The event was stored before: a redelivery. Do nothing.
    Duplicate,
}

/// What the inbox records about an event at claim time.
pub struct NewEvent<'a> {
    pub destination: &'a str,
    pub webhook_event_id: &'a str,
    pub event_type: &'a str,
    pub message_id: Option<&'a str>,
    /// The raw event JSON.
    pub payload: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StateChange<'a> {
    state: InboxState,
    #[serde(with = "firestore::serialize_as_timestamp")]
    lease_until: FirestoreInstant,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
}

impl Store {
    /// Stores the event, leased to this instance. One round trip.
    pub async fn claim_event(&self, key: &InboxKey, event: NewEvent<'_>) -> Result<Claim, StoreError> {
        let now = FirestoreInstant::now();
        let doc = InboxDoc {
            destination: event.destination.to_owned(),
            webhook_event_id: event.webhook_event_id.to_owned(),
            event_type: event.event_type.to_owned(),
            message_id: event.message_id.map(str::to_owned),
            payload: Some(event.payload),
            state: InboxState::Pending,
            lease_owner: self.options.instance_id.clone(),
            lease_until: now + self.options.lease,
            attempts: 1,
            received_at: now,
            expire_at: now + INBOX_RETENTION,
            last_error: None,
            text_removed: false,
        };
        let write = create(self.document_path(WEBHOOK_INBOX, key.as_str()), &doc)?;
        // One round trip on this event's path, shared with the claims batched with it.
        super::round_trips::count();
        self.claimer.claim(write).await
    }

    /// Part of an effect's commit: the event is done, and its payload (with any
    /// message text and the reply token) is removed.
    pub(super) fn inbox_done_write(&self, key: &InboxKey) -> Result<Write, StoreError> {
        let change = StateChange {
            state: InboxState::Done,
            lease_until: FirestoreInstant::now(),
            last_error: None,
        };
        let path = self.document_path(WEBHOOK_INBOX, key.as_str());
        Ok(if_exists(merge_deleting(path, &change, &["payload"], Vec::new())?))
    }

    /// Marks an event done that had no effect (already answered, not restarted).
    /// Queued with the batched settles (see `settler`): the event had no effect,
    /// so running it again (if the batch were lost) could not double anything.
    pub async fn mark_event_done(&self, key: &InboxKey) -> Result<(), StoreError> {
        self.settler.submit(self.inbox_done_write(key)?);
        Ok(())
    }

    /// Gives the lease back after `retry_in`: a failed attempt is retried by the
    /// sweeper (of any instance), never lost.
    pub async fn release_event(
        &self,
        key: &InboxKey,
        retry_in: Duration,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        let change = StateChange {
            state: InboxState::Pending,
            lease_until: FirestoreInstant::now() + retry_in,
            last_error: error,
        };
        let write = if_exists(merge(
            self.document_path(WEBHOOK_INBOX, key.as_str()),
            &change,
            Vec::new(),
        )?);
        self.commit_settling(vec![write]).await
    }

    /// Parks an event that kept failing, in one commit with its dead letter.
    pub async fn park_event(&self, key: &InboxKey, doc: &InboxDoc, reason: &str) -> Result<(), StoreError> {
        let change = StateChange {
            state: InboxState::Dead,
            lease_until: FirestoreInstant::now(),
            last_error: Some(reason),
        };
        let letter = DeadLetterDoc {
            kind: DeadLetterKind::Event,
            target_id: key.as_str().to_owned(),
            reason: reason.to_owned(),
            attempts: doc.attempts,
            webhook_event_id: Some(doc.webhook_event_id.clone()),
            line_user_id: None,
            event_type: Some(doc.event_type.clone()),
            action_key: None,
            parked_at: FirestoreInstant::now(),
        };
        let writes = vec![
            if_exists(merge(
                self.document_path(WEBHOOK_INBOX, key.as_str()),
                &change,
                Vec::new(),
            )?),
            set(
                self.document_path(DEAD_LETTERS, &dead_letter_id(DeadLetterKind::Event, key.as_str())),
                &letter,
            )?,
        ];
        self.commit_settling(writes).await
    }

    /// Pending events whose lease ran out, oldest first.
    pub async fn expired_events(&self, limit: u32) -> Result<Vec<Leased<InboxDoc>>, StoreError> {
        self.expired(WEBHOOK_INBOX, limit).await
    }

    /// Takes over an expired event: exactly one caller wins per lease.
    pub async fn take_over_event(&self, leased: &Leased<InboxDoc>) -> Result<bool, StoreError> {
        self.take_over(WEBHOOK_INBOX, leased, leased.doc.attempts + 1).await
    }

    pub async fn event(&self, key: &InboxKey) -> Result<Option<Leased<InboxDoc>>, StoreError> {
        self.leased_doc(WEBHOOK_INBOX, key.as_str()).await
    }

    /// Puts a parked event back in line with a fresh lease for this instance.
    pub async fn revive_event(&self, key: &InboxKey) -> Result<(), StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Revive<'a> {
            state: InboxState,
            attempts: u32,
            lease_owner: &'a str,
            #[serde(with = "firestore::serialize_as_timestamp")]
            lease_until: FirestoreInstant,
        }
        let revive = Revive {
            state: InboxState::Pending,
            attempts: 1,
            lease_owner: &self.options.instance_id,
            lease_until: FirestoreInstant::now() + self.options.lease,
        };
        let write = if_exists(merge(
            self.document_path(WEBHOOK_INBOX, key.as_str()),
            &revive,
            Vec::new(),
        )?);
        self.commit_settling(vec![write]).await
    }

    /// An `unsend`: removes the text of that message from every stored copy.
    /// Processed events no longer hold a payload; this reaches pending and parked ones.
    pub async fn remove_message_text(&self, message_id: &str) -> Result<usize, StoreError> {
        let found = self
            .db
            .fluent()
            .select()
            .from(WEBHOOK_INBOX)
            .filter(|q| q.for_all([q.field("messageId").eq(message_id)]))
            .query()
            .await
            .map_err(classify)?;
        let mut writes = Vec::new();
        for document in found {
            let doc: InboxDoc = firestore::FirestoreDb::deserialize_doc_to(&document)?;
            let payload = doc.payload.as_deref().map(without_message_text);
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Redacted {
                #[serde(skip_serializing_if = "Option::is_none")]
                payload: Option<String>,
                text_removed: bool,
            }
            writes.push(if_exists(merge(
                document.name.clone(),
                &Redacted {
                    payload,
                    text_removed: true,
                },
                Vec::new(),
            )?));
        }
        let count = writes.len();
        if count > 0 {
            self.commit_settling(writes).await?;
        }
        Ok(count)
    }
}

/// The event JSON with its message text blanked.
fn without_message_text(payload: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(payload) {
        Ok(mut event) => {
            if let Some(message) = event.get_mut("message").and_then(serde_json::Value::as_object_mut) {
                message.insert("text".to_owned(), serde_json::Value::from(""));
            }
            event.to_string()
        }
        // Not JSON we wrote: drop it rather than keep text we cannot redact.
        Err(_) => String::new(),
    }
}

/// Dead letters are keyed by what they park, so parking twice keeps one letter.
pub fn dead_letter_id(kind: DeadLetterKind, target_id: &str) -> String {
    let prefix = match kind {
        DeadLetterKind::Event => "event",
        DeadLetterKind::Outbound => "outbound",
        DeadLetterKind::UncertainReply => "uncertain",
    };
    format!("{prefix}-{target_id}")
}
