//! Where a user is, and texts that may be answers.
//!
//! - `open_questions/{lineUserId}`: the typed or date question the user has
//!   open. It is written in the commit that sends the question; an answer, an
//!   invalid attempt, giving up and lapsing change it conditional on the version
//!   they read, so of racing answers one records and the others find it closed.
//! - `message_texts/{messageKey}`: a text message's text while its event waits
//!   to be processed (only when some scenario asks typed questions). The commit
//!   that processes the event deletes it, and so does an unsend: one write by id.

use super::docs::collections::{MESSAGE_TEXTS, OPEN_QUESTIONS, SURVEY_RESPONSES};
use super::lease::Stored;
use super::messages::MessageKey;
use super::writes::{CommitOutcome, Expect, delete, expecting, set};
use super::{Store, StoreError, Version, later};
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Write;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long an unprocessed text may be kept at most (as long as inbox records),
/// for a Firestore TTL policy on `expireAt`.
const TEXT_RETENTION: Duration = Duration::from_secs(8 * 24 * 60 * 60);

/// `open_questions/{lineUserId}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OpenQuestionDoc {
    pub(crate) line_user_id: String,
    pub(crate) scenario_id: String,
    pub(crate) scenario_version: u32,
    pub(crate) node_id: String,
    /// When the question was asked: the time (this instance's clock) at which
    /// the commit that asks it was made.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) opened_at: FirestoreInstant,
    /// Invalid answers so far.
    #[serde(default)]
    pub(crate) attempts: u32,
    /// The run that asked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<String>,
    /// When a reminder last asked it again: the answer window runs from then.
    /// (`openedAt` stays: it identifies the asking a text arrived to.)
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) reminded_at: Option<FirestoreInstant>,
}

/// `message_texts/{messageKey}`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeptTextDoc {
    text: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    expire_at: FirestoreInstant,
}

/// A change to a user's open question, as part of an effect commit.
#[derive(Debug, Clone)]
pub(crate) enum QuestionChange {
    /// Asks a new question, replacing whatever was open (or, with `read`, only
    /// if the open question is still at that version).
    Open {
        doc: OpenQuestionDoc,
        read: Option<Version>,
    },
    /// Closes the open question read at `read` (answered, given up, lapsed).
    Close { user: String, read: Version },
}

impl Store {
    /// The user's open question with its version, or `None`.
    pub(crate) async fn open_question(&self, user: &str) -> Result<Option<Stored<OpenQuestionDoc>>, StoreError> {
        self.get_stored(OPEN_QUESTIONS, user).await
    }

    pub(super) fn question_write(&self, change: &QuestionChange) -> Result<Write, StoreError> {
        Ok(match change {
            QuestionChange::Open { doc, read } => {
                let write = set(self.document_path(OPEN_QUESTIONS, &doc.line_user_id), doc)?;
                match read {
                    Some(version) => expecting(write, Expect::At(*version)),
                    None => write,
                }
            }
            QuestionChange::Close { user, read } => {
                expecting(delete(self.document_path(OPEN_QUESTIONS, user)), Expect::At(*read))
            }
        })
    }

    /// Keeps a text message's text until its event is processed: part of the
    /// event's claim.
    pub(super) fn keep_text_write(&self, key: &MessageKey, text: &str) -> Result<Write, StoreError> {
        let doc = KeptTextDoc {
            text: text.to_owned(),
            expire_at: later(self.now(), TEXT_RETENTION),
        };
        Ok(set(self.document_path(MESSAGE_TEXTS, key.id()), &doc)?)
    }

    pub(super) fn forget_text_write(&self, key: &MessageKey) -> Write {
        delete(self.document_path(MESSAGE_TEXTS, key.id()))
    }

    /// The kept text of a message; `None` once processed or unsent.
    pub(crate) async fn kept_text(&self, key: &MessageKey) -> Result<Option<String>, StoreError> {
        let kept: Option<Stored<KeptTextDoc>> = self.get_stored(MESSAGE_TEXTS, key.id()).await?;
        Ok(kept.map(|kept| kept.doc.text))
    }

    /// Deletes a message's kept text (an event that ended without an effect
    /// commit). Deleting what is gone is not an error.
    pub(crate) async fn forget_text(&self, key: &MessageKey) -> Result<(), StoreError> {
        match self.commit(vec![self.forget_text_write(key)]).await {
            CommitOutcome::Committed(_) | CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(()),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Deletes a message's kept text and closes the open question read at
    /// `close` (one whose answer turned out to exist already: an operator's
    /// manual send asked it again). If the question moved on meanwhile, only the
    /// text goes.
    pub(crate) async fn forget_text_closing(&self, key: &MessageKey, close: &QuestionChange) -> Result<(), StoreError> {
        match self
            .commit(vec![self.forget_text_write(key), self.question_write(close)?])
            .await
        {
            CommitOutcome::Committed(_) => Ok(()),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => self.forget_text(key).await,
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Whether answer `answer_id` is recorded (one get by id).
    pub(crate) async fn answer_recorded(&self, answer_id: &str) -> Result<bool, StoreError> {
        let found = self
            .get_many(vec![self.document_path(SURVEY_RESPONSES, answer_id)])
            .await?;
        Ok(found.into_iter().next().flatten().is_some())
    }
}
