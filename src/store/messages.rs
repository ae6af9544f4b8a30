//! Message marks: which came first for a text message, its effect or its unsend.
//!
//! The commit that acts on a text message creates the mark `processed`; an unsend
//! creates it `unsent`. Both are `create`s of one deterministic id, so exactly one
//! lands: an unsend that arrives first stops the work already queued for its
//! message (that commit fails), and one that arrives later finds the message
//! processed. No query by `messageId` anywhere: one write, by id.

use super::docs::collections::{MESSAGE_MARKS, SURVEY_RESPONSES};
use super::docs::{MessageMarkDoc, MessageMarkState};
use super::later;
use super::lease::Stored;
use super::writes::{CommitOutcome, create, merge_deleting};
use super::{Store, StoreError};
use crate::ids::deterministic_id;
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
    fn mark(&self, key: &MessageKey, state: MessageMarkState, answer_id: Option<&str>) -> Result<Write, StoreError> {
        let now = self.now();
        let doc = MessageMarkDoc {
            state,
            at: now,
            expire_at: later(now, MARK_RETENTION),
            answer_id: answer_id.map(str::to_owned),
        };
        Ok(create(self.document_path(MESSAGE_MARKS, &key.0), &doc)?)
    }

    /// Part of the commit of a text message's effect; `answer_id` when its text
    /// is a recorded answer.
    pub(super) fn message_processed_write(
        &self,
        key: &MessageKey,
        answer_id: Option<&str>,
    ) -> Result<Write, StoreError> {
        self.mark(key, MessageMarkState::Processed, answer_id)
    }

    /// An unsend, on the request path: one `create` by id (with the deletion of
    /// the message's kept text, if any). If the message had its effect already and
    /// its text was recorded as an answer, the answer keeps no text: one get of the
    /// mark and one update of the answer, by id.
    pub(crate) async fn record_unsend(&self, key: &MessageKey) -> Result<UnsendOutcome, StoreError> {
        let writes = vec![
            self.mark(key, MessageMarkState::Unsent, None)?,
            self.forget_text_write(key),
        ];
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(UnsendOutcome::Stopped),
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => {
                self.redact_answer_of(key).await?;
                Ok(UnsendOutcome::TooLate)
            }
            // LINE gets 503 and redelivers the unsend; its create then tells.
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Whether the message was unsent (its mark says so). One get by id.
    pub(crate) async fn message_unsent(&self, key: &MessageKey) -> Result<bool, StoreError> {
        let mark: Option<Stored<MessageMarkDoc>> = self.get_stored(MESSAGE_MARKS, &key.0).await?;
        Ok(mark.is_some_and(|mark| mark.doc.state == MessageMarkState::Unsent))
    }

    async fn redact_answer_of(&self, key: &MessageKey) -> Result<(), StoreError> {
        let mark: Option<Stored<MessageMarkDoc>> = self.get_stored(MESSAGE_MARKS, &key.0).await?;
        let Some(answer_id) = mark.and_then(|mark| mark.doc.answer_id) else {
            return Ok(());
        };
        #[derive(serde::Serialize)]
        struct Redacted {
            redacted: bool,
        }
        let write = merge_deleting(
            self.document_path(SURVEY_RESPONSES, &answer_id),
            &Redacted { redacted: true },
            &["value"],
            Vec::new(),
        )?;
        // Only an existing answer: never create a stub.
        let write = super::writes::only_if_present(write);
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) | CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(()),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }
}
