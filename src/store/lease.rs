//! Leases on inbox events and ledger entries: who works on a record, until when,
//! and the takeover of expired ones by any instance.
//!
//! The sweeper's query, `state == pending AND leaseUntil < now`, is served in
//! production by the composite index (shard, state, leaseUntil) of
//! `firestore.indexes.json`. The `shard` prefix spreads the index entries of
//! records written at the same moment over [`SHARDS`] ranges, so inbox writes are
//! not capped by Firestore's limit of about 500 writes per second on an index of
//! sequential values.

use super::docs::SHARDS;
use super::writes::{CommitOutcome, Expect, expecting, merge, timestamp_value};
use super::{Store, StoreError, Version, classify};
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Document;
use serde::Serialize;
use serde::de::DeserializeOwned;

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

pub(super) fn document_id(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or_default()
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LeaseChange<'a> {
    lease_owner: &'a str,
    #[serde(with = "firestore::serialize_as_timestamp")]
    lease_until: FirestoreInstant,
    attempts: u32,
}

impl Store {
    /// Records of `collection` still `pending` whose lease ran out, oldest first.
    pub(super) async fn expired<T: DeserializeOwned>(
        &self,
        collection: &str,
        limit: u32,
    ) -> Result<Vec<Swept<T>>, StoreError> {
        super::round_trips::count();
        let now = FirestoreInstant::now();
        let shards: Vec<u32> = (0..SHARDS).collect();
        let documents = self
            .db
            .fluent()
            .select()
            .from(collection)
            .filter(|q| {
                q.for_all([
                    q.field("shard").is_in(shards.clone()),
                    q.field("state").eq("pending"),
                    q.field("leaseUntil").less_than(timestamp_value(now)),
                ])
            })
            .order(|o| o.fields([o.field("leaseUntil").ascending()]))
            .limit(limit)
            .query()
            .await
            .map_err(classify)?;
        Ok(documents
            .into_iter()
            .map(|document| {
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
            })
            .collect())
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
        let change = LeaseChange {
            lease_owner: &self.options.instance_id,
            lease_until: until,
            attempts,
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
