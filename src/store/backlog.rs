//! What waits in the database, for the metrics' gauges: pending inbox records,
//! pending ledger entries and the age of the oldest, and dead letters. Counts
//! are aggregation queries (one read per thousand index entries, capped), served
//! by the automatic single-field index on `state`; the oldest pending entry is
//! found among at most [`OLDEST_SCAN`] pending entries read with their
//! `createdAt` only (ordering by `createdAt` would need an index on a field kept
//! unindexed for write throughput, see `firestore.indexes.json`).

use super::docs::collections::{DEAD_LETTERS, OUTBOUND_LEDGER, WEBHOOK_INBOX};
use super::round_trips::{QUERY, Timed};
use super::{Store, StoreError, classify};
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Document;

/// Pending ledger entries read to find the oldest: with more pending, the age
/// shown is that of the oldest among the first this many (in id order).
pub(crate) const OLDEST_SCAN: u32 = 500;
/// Counts stop here: beyond it the backlog is plainly large, and an exact
/// count would cost a read per thousand entries more.
const COUNT_CAP: usize = 1_000_000;

/// The backlog as read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backlog {
    pub(crate) inbox_pending: u64,
    pub(crate) ledger_pending: u64,
    /// `createdAt` of the oldest pending ledger entry found, in ms since the epoch.
    pub(crate) oldest_pending_ms: Option<i64>,
    pub(crate) dead_letters: u64,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Created {
    #[serde(with = "firestore::serialize_as_timestamp")]
    created_at: FirestoreInstant,
}

impl Store {
    /// Reads the backlog: three requests at once, within the request timeout.
    pub(crate) async fn backlog(&self) -> Result<Backlog, StoreError> {
        let read = futures::future::try_join3(
            self.count(WEBHOOK_INBOX, true),
            self.pending_ledger(),
            self.count(DEAD_LETTERS, false),
        );
        let (inbox_pending, (ledger_pending, oldest_pending_ms), dead_letters) =
            tokio::time::timeout(self.options.request_timeout, read)
                .await
                .map_err(|_| StoreError::Unavailable("the backlog read timed out".into()))??;
        Ok(Backlog {
            inbox_pending,
            ledger_pending,
            oldest_pending_ms,
            dead_letters,
        })
    }

    /// The number of pending entries and the oldest one's `createdAt`: counted
    /// from the scan when it found fewer than it may read, else counted apart.
    async fn pending_ledger(&self) -> Result<(u64, Option<i64>), StoreError> {
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .fields(["createdAt"])
            .from(OUTBOUND_LEDGER)
            .filter(|q| q.for_all([q.field("state").eq("pending")]))
            .limit(OLDEST_SCAN)
            .query()
            .timed(QUERY)
            .await
            .map_err(classify)?;
        let oldest = documents
            .iter()
            .filter_map(|document| firestore::FirestoreDb::deserialize_doc_to::<Created>(document).ok())
            .map(|created| created.created_at.as_millisecond())
            .min();
        let count = if documents.len() < OLDEST_SCAN as usize {
            documents.len() as u64
        } else {
            self.count(OUTBOUND_LEDGER, true).await?
        };
        Ok((count, oldest))
    }

    /// Documents of `collection` (only those in state `pending` when asked), by
    /// an aggregation query.
    async fn count(&self, collection: &str, pending_only: bool) -> Result<u64, StoreError> {
        self.count_where(
            collection,
            |q| q.for_all([pending_only.then(|| q.field("state").eq("pending")).flatten()]),
            Some(COUNT_CAP),
        )
        .await
    }
}
