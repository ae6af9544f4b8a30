//! `notices/{id}`: when a user last got one notice (`answered_text`,
//! `hint_text`) of one question. Written by the commit that records the
//! notice's ledger entry, conditional on the record as read, so duplicates
//! arriving together send one notice.

use super::docs::collections::NOTICES;
use super::lease::Stored;
use super::writes::{Expect, expecting, set};
use super::{Store, StoreError, Version};
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Write;
use serde::{Deserialize, Serialize};

/// How long a notice record is kept (a Firestore TTL policy on `expireAt`):
/// longer than the longest interval a scenario may give (30 days).
const RETENTION: std::time::Duration = std::time::Duration::from_secs(31 * 24 * 3600);

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NoticeDoc {
    pub(crate) line_user_id: String,
    pub(crate) scenario_id: String,
    pub(crate) node_id: String,
    /// `answered` or `hint`.
    pub(crate) kind: String,
    /// The event time of the event that got the last notice.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) last_event_at: FirestoreInstant,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) expire_at: FirestoreInstant,
}

/// A notice record to write, conditional on the record as read.
pub(crate) struct NoticeWrite<'a> {
    pub(crate) id: &'a str,
    pub(crate) doc: NoticeDoc,
    /// The record's version when read; `None`: it did not exist.
    pub(crate) read: Option<Version>,
}

impl Store {
    pub(crate) async fn notice(&self, id: &str) -> Result<Option<Stored<NoticeDoc>>, StoreError> {
        self.get_stored(NOTICES, id).await
    }

    /// The record of a notice sent now for an event at `event_ms`.
    pub(crate) fn notice_doc(&self, user: &str, scenario: &str, node: &str, kind: &str, event_ms: i64) -> NoticeDoc {
        NoticeDoc {
            line_user_id: user.to_owned(),
            scenario_id: scenario.to_owned(),
            node_id: node.to_owned(),
            kind: kind.to_owned(),
            last_event_at: FirestoreInstant::from_millisecond(event_ms).unwrap_or_else(|_| self.now()),
            expire_at: super::later(self.now(), RETENTION),
        }
    }

    pub(super) fn notice_write(&self, notice: &NoticeWrite<'_>) -> Result<Write, StoreError> {
        let write = set(self.document_path(NOTICES, notice.id), &notice.doc)?;
        Ok(expecting(write, notice.read.map_or(Expect::Absent, Expect::At)))
    }
}
