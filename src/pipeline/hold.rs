//! A worker's hold on one stored event, and what it does when a commit's outcome
//! is unknown: it reads what happened before acting again.

use crate::store::{InboxKey, InboxState, Store, StoreError, Version};

/// The event a worker is processing and the version of its inbox record the
/// worker holds: every write it makes to the record names that version.
pub(super) struct Hold {
    pub(super) key: InboxKey,
    pub(super) version: Version,
}

/// Why an attempt ended without finishing the event.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// Another instance took the event over, or finished it: this attempt
    /// changes nothing more.
    #[error("superseded by another instance")]
    Superseded,
    /// Firestore failed or could not be reached: retried later.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a read found after a commit whose outcome was unknown (or that met a
/// changed inbox record).
#[derive(Debug)]
pub(super) enum Found {
    /// The commit landed; `Some(version)` when its ledger entry is this
    /// instance's to send (pending, leased to us, never attempted).
    Landed(Option<Version>),
    /// The record is as the worker left it: the commit did not land (and a late
    /// landing is impossible once the record changes, as it names this version).
    NotLanded,
    /// Someone else holds or finished the event.
    Superseded,
}

impl Hold {
    /// Reads the inbox record (and the ledger entry the commit would have written)
    /// in one round trip, to learn whether a commit landed.
    pub(super) async fn find_out(&self, store: &Store, ledger_id: Option<&str>) -> Result<Found, StoreError> {
        let (event, entry) = store.event_and_entry(&self.key, ledger_id).await?;
        let Some(event) = event else {
            return Ok(Found::Superseded);
        };
        if event.doc.state == InboxState::Pending && event.version == self.version {
            return Ok(Found::NotLanded);
        }
        if event.doc.state != InboxState::Done {
            return Ok(Found::Superseded);
        }
        let ours = entry.filter(|entry| {
            entry.doc.state == crate::store::LedgerState::Pending
                && entry.doc.attempts == 0
                && entry.doc.lease_owner == store.instance_id()
        });
        Ok(Found::Landed(ours.map(|entry| entry.version)))
    }
}
