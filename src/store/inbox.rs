//! The webhook inbox: one document per webhook event, created before the event is
//! acted on. LINE redelivers an event with the same `webhookEventId`; the second
//! `create` fails with `ALREADY_EXISTS` and the delivery is dropped.

use super::docs::{InboxDoc, InboxState, collections::WEBHOOK_INBOX};
use super::writes::{CommitError, create, merge};
use super::{Store, StoreError, classify};
use crate::ids::deterministic_id;
use firestore::FirestoreInstant;
use firestore::gcloud_sdk::google::firestore::v1::Write;
use std::time::Duration;

/// LINE does not say how long it keeps redelivering; a week is well past any
/// retry window seen, and the TTL policy (README) clears records after that.
pub const INBOX_RETENTION: Duration = Duration::from_secs(8 * 24 * 60 * 60);

/// The inbox id of one event of one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxKey(String);

impl InboxKey {
    /// `None` when either part contains NUL (LINE never sends that; such input is
    /// refused rather than hashed ambiguously).
    pub fn new(destination: &str, webhook_event_id: &str) -> Option<Self> {
        if destination.contains('\0')
            || webhook_event_id.contains('\0')
            || webhook_event_id.is_empty()
        {
            return None;
        }
        Some(Self(deterministic_id(&[destination, webhook_event_id])))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This delivery is the first: act on it.
    Claimed,
    /// The event was claimed before: a redelivery or a replay. Do nothing.
    Duplicate,
}

/// What the inbox records about a claimed event (never its text or reply token).
pub struct ClaimedEvent<'a> {
    pub destination: &'a str,
    pub webhook_event_id: &'a str,
    pub event_type: &'a str,
}

impl Store {
    pub async fn claim_event(
        &self,
        key: &InboxKey,
        event: &ClaimedEvent<'_>,
    ) -> Result<Claim, StoreError> {
        let now = FirestoreInstant::now();
        let doc = InboxDoc {
            destination: event.destination.to_owned(),
            webhook_event_id: event.webhook_event_id.to_owned(),
            event_type: event.event_type.to_owned(),
            state: InboxState::Processing,
            received_at: now,
            expire_at: now + INBOX_RETENTION,
        };
        let write = create(self.document_path(WEBHOOK_INBOX, key.as_str()), &doc)?;
        match self.commit(vec![write]).await {
            Ok(_) => Ok(Claim::Claimed),
            Err(CommitError::AlreadyExists) => Ok(Claim::Duplicate),
            Err(CommitError::FailedPrecondition) => Ok(Claim::Duplicate),
            Err(CommitError::Store(error)) => Err(error),
        }
    }

    /// Gives the claim back after a failure that happened before any effect was
    /// committed, so LINE's redelivery can run the event again.
    pub async fn release_event(&self, key: &InboxKey) -> Result<(), StoreError> {
        self.db
            .fluent()
            .delete()
            .from(WEBHOOK_INBOX)
            .document_id(key.as_str())
            .execute()
            .await
            .map_err(classify)
    }

    /// Part of an effect's commit: the event is done and must never be released.
    pub(super) fn inbox_done_write(&self, key: &InboxKey) -> Result<Write, StoreError> {
        #[derive(serde::Serialize)]
        struct Done {
            state: InboxState,
        }
        Ok(merge(
            self.document_path(WEBHOOK_INBOX, key.as_str()),
            &Done {
                state: InboxState::Done,
            },
            Vec::new(),
        )?)
    }
}
