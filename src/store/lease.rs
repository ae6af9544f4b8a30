//! Leases on inbox events and ledger entries: who works on a record, until when,
//! and the takeover of expired ones by any instance.

use super::writes::{CommitError, if_unchanged_since, merge, timestamp_value};
use super::{Store, StoreError, classify};
use firestore::FirestoreInstant;
use firestore::gcloud_sdk::prost_types::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A record as read, with the update time that takeover preconditions name.
#[derive(Debug, Clone)]
pub struct Leased<T> {
    pub id: String,
    pub doc: T,
    pub update_time: Timestamp,
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
    /// Production Firestore needs the composite index in `firestore.indexes.json`.
    pub(super) async fn expired<T: DeserializeOwned>(
        &self,
        collection: &str,
        limit: u32,
    ) -> Result<Vec<Leased<T>>, StoreError> {
        super::round_trips::count();
        let now = FirestoreInstant::now();
        let documents = self
            .db
            .fluent()
            .select()
            .from(collection)
            .filter(|q| {
                q.for_all([
                    q.field("state").eq("pending"),
                    q.field("leaseUntil").less_than(timestamp_value(now)),
                ])
            })
            .order(|o| o.fields([o.field("leaseUntil").ascending()]))
            .limit(limit)
            .query()
            .await
            .map_err(classify)?;
        documents.into_iter().map(leased).collect()
    }

    pub(super) async fn leased_doc<T: DeserializeOwned>(
        &self,
        collection: &str,
        id: &str,
    ) -> Result<Option<Leased<T>>, StoreError> {
        super::round_trips::count();
        let found = self
            .db
            .fluent()
            .select()
            .by_id_in(collection)
            .one(id)
            .await
            .map_err(classify)?;
        found.map(leased).transpose()
    }

    /// Moves the lease to this instance unless someone changed the record since
    /// it was read; `false` means another instance won.
    pub(super) async fn take_over<T>(
        &self,
        collection: &str,
        record: &Leased<T>,
        attempts: u32,
    ) -> Result<bool, StoreError> {
        let change = LeaseChange {
            lease_owner: &self.options.instance_id,
            lease_until: FirestoreInstant::now() + self.options.lease,
            attempts,
        };
        let write = merge(self.document_path(collection, &record.id), &change, Vec::new())?;
        match self.commit(vec![if_unchanged_since(write, record.update_time)]).await {
            Ok(_) => Ok(true),
            Err(CommitError::FailedPrecondition | CommitError::AlreadyExists | CommitError::NotFound) => Ok(false),
            Err(CommitError::Store(error)) => Err(error),
        }
    }
}

fn leased<T: DeserializeOwned>(
    document: firestore::gcloud_sdk::google::firestore::v1::Document,
) -> Result<Leased<T>, StoreError> {
    let id = document.name.rsplit('/').next().unwrap_or_default().to_owned();
    let update_time = document.update_time.unwrap_or_default();
    let doc = firestore::FirestoreDb::deserialize_doc_to(&document)?;
    Ok(Leased { id, doc, update_time })
}
