//! Leases on inbox events and ledger entries: who works on a record, until when,
//! and the takeover of expired ones by any instance.
//!
//! The sweeper asks for `state == pending` in document-id order from a random
//! point of the id space (ids are hashes), and keeps those whose lease ran out.
//! That query needs only the automatic single-field index on `state`, whose
//! entries are ordered by the random ids: no index holds sequential values, so
//! inbox and ledger writes are not capped by Firestore's limit of about 500 writes
//! per second on such an index (`leaseUntil` is exempt from indexing). On the
//! emulator, which scans the collection for every query, it costs one scan; a
//! composite index with a shard prefix would have cost one scan per shard.

use super::round_trips::Timed;
use super::writes::{CommitOutcome, Expect, expecting, merge};
use super::{Store, StoreError, Version, classify};
use firestore::FirestoreInstant;
use firestore::FirestoreQueryCursor;
use gcloud_sdk::google::firestore::v1::Document;
use gcloud_sdk::google::firestore::v1::value::ValueType;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashSet;

/// Pages a sweep reads per collection at most.
const MAX_PAGES: usize = 4;

/// A record as read, with the version its next state change must name.
#[derive(Debug, Clone)]
pub(crate) struct Stored<T> {
    pub(crate) id: String,
    pub(crate) doc: T,
    pub(crate) version: Version,
}

impl<T: DeserializeOwned> Stored<T> {
    pub(super) fn decode(document: Document) -> Result<Self, StoreError> {
        let id = document_id(&document.name).to_owned();
        let version = Version::new(document.update_time.unwrap_or_default());
        let doc = firestore::FirestoreDb::deserialize_doc_to(&document)?;
        Ok(Stored { id, doc, version })
    }
}

/// A record found by the sweeper: readable, or not (then it is parked on its own,
/// and the sweep goes on for everyone else).
#[derive(Debug)]
pub(crate) enum Swept<T> {
    Readable(Stored<T>),
    Unreadable {
        id: String,
        version: Version,
        error: String,
    },
}

/// A document found by a sweep, decoded if it can be.
pub(super) fn swept<T: DeserializeOwned>(document: Document) -> Swept<T> {
    let id = document_id(&document.name).to_owned();
    let version = Version::new(document.update_time.unwrap_or_default());
    match Stored::decode(document) {
        Ok(stored) => Swept::Readable(stored),
        Err(error) => Swept::Unreadable {
            id,
            version,
            error: error.to_string(),
        },
    }
}

pub(crate) fn document_id(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LeaseChange<'a> {
    lease_owner: &'a str,
    #[serde(with = "firestore::serialize_as_timestamp")]
    lease_until: FirestoreInstant,
    attempts: u32,
    /// Ledger entries: the new owner records reply calls before making them
    /// (see `LedgerDoc::reply_marks_by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_marks_by: Option<&'a str>,
}

impl Store {
    /// Records of `collection` still `pending` whose lease ran out, up to
    /// `limit`, looked for in pages of `limit` (at most [`MAX_PAGES`]) from a
    /// random point of the id space, wrapping around once: no record waits behind
    /// others for ever, and many pending records that are not due (pushes backing
    /// off during a LINE outage) do not hide the due ones for long.
    ///
    /// Records leased to an instance in `abandoned` (it stopped beating) count
    /// as expired whatever their lease says.
    pub(super) async fn expired<T: DeserializeOwned>(
        &self,
        collection: &str,
        limit: u32,
        abandoned: &HashSet<String>,
    ) -> Result<Vec<Swept<T>>, StoreError> {
        let origin = reference_value(self.document_path(collection, &random_id()));
        let mut start = Some(FirestoreQueryCursor::BeforeValue(vec![origin.clone()]));
        let mut end = None;
        let mut wrapped = false;
        let mut due = Vec::new();
        let now = self.now();
        for _ in 0..MAX_PAGES {
            let page = self
                .pending_between(collection, start.take(), end.clone(), limit)
                .await?;
            let full = u32::try_from(page.len()).unwrap_or(u32::MAX) >= limit;
            let last = page.last().map(|document| document.name.clone());
            due.extend(
                page.into_iter()
                    .filter(|document| lease_ran_out(document, now) || leased_to(document, abandoned)),
            );
            if due.len() >= limit as usize {
                break;
            }
            match (full, last) {
                (true, Some(last)) => start = Some(FirestoreQueryCursor::AfterValue(vec![reference_value(last)])),
                _ if wrapped => break,
                _ => {
                    wrapped = true;
                    end = Some(origin.clone());
                }
            }
        }
        due.truncate(limit as usize);
        Ok(due.into_iter().map(swept).collect())
    }

    /// Pending records in id order, from `start` and before `end` when given.
    async fn pending_between(
        &self,
        collection: &str,
        start: Option<FirestoreQueryCursor>,
        end: Option<firestore::FirestoreValue>,
        limit: u32,
    ) -> Result<Vec<Document>, StoreError> {
        super::round_trips::count();
        let mut query = self
            .db
            .fluent()
            .select()
            .from(collection)
            .filter(|q| q.for_all([q.field("state").eq("pending")]))
            .order(|o| o.fields([o.field("__name__").ascending()]))
            .limit(limit);
        if let Some(start) = start {
            query = query.start_at(start);
        }
        if let Some(end) = end {
            query = query.end_at(FirestoreQueryCursor::BeforeValue(vec![end]));
        }
        query.query().timed(super::round_trips::QUERY).await.map_err(classify)
    }

    /// Moves the lease to this instance unless the record changed since `version`.
    /// `Ok(Some(new version))` when this instance won.
    pub(super) async fn lease_to_me(
        &self,
        collection: &str,
        id: &str,
        version: Version,
        attempts: u32,
        until: FirestoreInstant,
    ) -> Result<Option<Version>, StoreError> {
        self.lease_to_me_marking(collection, id, version, attempts, until, false)
            .await
    }

    /// [`Store::lease_to_me`]; with `reply_marks`, the write also says that
    /// this instance records reply calls before making them (ledger entries).
    pub(super) async fn lease_to_me_marking(
        &self,
        collection: &str,
        id: &str,
        version: Version,
        attempts: u32,
        until: FirestoreInstant,
        reply_marks: bool,
    ) -> Result<Option<Version>, StoreError> {
        let change = LeaseChange {
            lease_owner: &self.options.instance_id,
            lease_until: until,
            attempts,
            reply_marks_by: reply_marks.then_some(self.options.instance_id.as_str()),
        };
        let write = merge(self.document_path(collection, id), &change, Vec::new())?;
        match self.commit(vec![expecting(write, Expect::At(version))]).await {
            CommitOutcome::Committed(versions) => Ok(versions.into_iter().next().flatten()),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(None),
            // Find out: the lease is ours if the record holds exactly what we wrote.
            CommitOutcome::Unknown(error) => {
                #[derive(serde::Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Lease {
                    lease_owner: String,
                    #[serde(with = "firestore::serialize_as_timestamp")]
                    lease_until: FirestoreInstant,
                }
                tracing::warn!(error = %error, "a lease change's outcome is unknown; reading the record");
                let found = self.get_stored::<Lease>(collection, id).await?;
                Ok(found
                    .filter(|lease| {
                        lease.doc.lease_owner == self.options.instance_id
                            && super::same_instant(lease.doc.lease_until, until)
                    })
                    .map(|lease| lease.version))
            }
            CommitOutcome::Failed(error) => Err(error),
        }
    }
}

/// A document id somewhere in the id space: 40 random hex digits.
fn random_id() -> String {
    let (high, low) = (uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    format!("{high}{low}")[..40].to_owned()
}

pub(super) fn reference_value(path: String) -> firestore::FirestoreValue {
    firestore::FirestoreValue::from(gcloud_sdk::google::firestore::v1::Value {
        value_type: Some(ValueType::ReferenceValue(path)),
    })
}

/// Whether a record's lease ran out by `now`. A record without a readable
/// `leaseUntil` counts as due: the sweeper parks what it cannot read.
/// Whether the record is leased to one of `owners`.
fn leased_to(document: &Document, owners: &HashSet<String>) -> bool {
    !owners.is_empty()
        && matches!(
            document.fields.get("leaseOwner").and_then(|value| value.value_type.as_ref()),
            Some(ValueType::StringValue(owner)) if owners.contains(owner)
        )
}

fn lease_ran_out(document: &Document, now: FirestoreInstant) -> bool {
    match document
        .fields
        .get("leaseUntil")
        .and_then(|value| value.value_type.as_ref())
    {
        Some(ValueType::TimestampValue(until)) => firestore::FirestoreInstant::from_microsecond(
            until.seconds.saturating_mul(1_000_000) + i64::from(until.nanos / 1000),
        )
        .map_or(true, |until| until < now),
        _ => true,
    }
}
