//! `instances/{id}`: one document per running service process, rewritten every
//! heartbeat, so the other instances can tell a process that died (SIGKILL, a
//! lost machine) from one that is only busy, and take over its leased work
//! before the leases run out. The record holds nothing but the id and the
//! times: who is alive is read from whether its update time keeps moving, on
//! the reader's own monotonic clock, so the instances' wall clocks never meet.

use super::docs::collections::INSTANCES;
use super::lease::document_id;
use super::round_trips::Timed;
use super::writes::{CommitOutcome, Expect, delete, expecting, set};
use super::{Store, StoreError, Version, classify, later};
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Document;
use serde::Serialize;
use std::time::Duration;

/// A record nobody rewrites goes after a day (with the collection's TTL policy
/// on `expireAt`), if no instance removed it first.
const RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Beat<'a> {
    instance_id: &'a str,
    /// For the TTL policy only: liveness is read from the update time.
    #[serde(with = "firestore::serialize_as_timestamp")]
    expire_at: FirestoreInstant,
}

impl Store {
    /// Rewrites this instance's record: it is alive.
    pub(crate) async fn beat(&self) -> Result<(), StoreError> {
        let now = self.now();
        let beat = Beat {
            instance_id: &self.options.instance_id,
            expire_at: later(now, RETENTION),
        };
        let write = set(self.document_path(INSTANCES, &self.options.instance_id), &beat)?;
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) | CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(()),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// The instances' records (id and version), at most `limit`.
    pub(crate) async fn instances(&self, limit: u32) -> Result<Vec<(String, Version)>, StoreError> {
        super::round_trips::count();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .from(INSTANCES)
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(documents
            .into_iter()
            .map(|document| {
                let version = Version::new(document.update_time.unwrap_or_default());
                (document_id(&document.name).to_owned(), version)
            })
            .collect())
    }

    /// Removes a dead instance's record, unless it beat again since `version`.
    pub(crate) async fn forget_instance(&self, id: &str, version: Version) -> Result<(), StoreError> {
        let write = expecting(delete(self.document_path(INSTANCES, id)), Expect::At(version));
        match self.commit(vec![write]).await {
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
            _ => Ok(()),
        }
    }

    /// Removes this instance's record at shutdown, once its work is handed back.
    pub(crate) async fn forget_me(&self) -> Result<(), StoreError> {
        let write = delete(self.document_path(INSTANCES, &self.options.instance_id));
        match self.commit(vec![write]).await {
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
            _ => Ok(()),
        }
    }
}
