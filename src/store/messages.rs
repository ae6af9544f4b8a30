//! Message marks: which came first for a text message, its effect or its unsend.
//!
//! The commit that acts on a text message creates the mark `processed`; an unsend
//! creates it `unsent`. Both are `create`s of one deterministic id, so exactly one
//! lands: an unsend that arrives first stops the work already queued for its
//! message (that commit fails), and one that arrives later finds the message
//! processed. No query by `messageId` anywhere: one write, by id.

use super::docs::collections::MESSAGE_MARKS;
use super::docs::{MessageMarkDoc, MessageMarkState};
use super::later;
use super::writes::{CommitOutcome, create};
use super::{Store, StoreError};
use crate::ids::deterministic_id;
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Write;
use std::time::Duration;

/// As long as inbox records: a redelivery of the message must still meet it.
const MARK_RETENTION: Duration = Duration::from_secs(8 * 24 * 60 * 60);

/// The mark id of one message of one channel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub(crate) struct MessageKey(String);

impl MessageKey {
    /// `None` when a part contains NUL (never sent by LINE).
    pub(crate) fn new(destination: &str, message_id: &str) -> Option<Self> {
        if destination.contains('\0') || message_id.contains('\0') || message_id.is_empty() {
            return None;
        }
        Some(Self(deterministic_id(&[destination, message_id])))
    }

    pub(super) fn id(&self) -> &str {
        &self.0
    }
}

/// What an unsend found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnsendOutcome {
    /// Recorded before the message had any effect: it never will.
    Stopped,
    /// The message had its effect already (or was unsent before).
    TooLate,
}

impl Store {
    fn mark(&self, key: &MessageKey, state: MessageMarkState) -> Result<Write, StoreError> {
        let now = FirestoreInstant::now();
        let doc = MessageMarkDoc {
            state,
            at: now,
            expire_at: later(now, MARK_RETENTION),
        };
        Ok(create(self.document_path(MESSAGE_MARKS, &key.0), &doc)?)
    }

    /// Part of the commit of a text message's effect.
    pub(super) fn message_processed_write(&self, key: &MessageKey) -> Result<Write, StoreError> {
        self.mark(key, MessageMarkState::Processed)
    }

    /// An unsend: one `create` by id, on the request path.
    pub(crate) async fn record_unsend(&self, key: &MessageKey) -> Result<UnsendOutcome, StoreError> {
        match self.commit(vec![self.mark(key, MessageMarkState::Unsent)?]).await {
            CommitOutcome::Committed(_) => Ok(UnsendOutcome::Stopped),
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(UnsendOutcome::TooLate),
            // LINE gets 503 and redelivers the unsend; its create then tells.
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }
}
