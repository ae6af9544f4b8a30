//! A worker's hold on one stored event, and what it does when a commit's outcome
//! is unknown: it reads what happened before acting again.

use super::PipelineError;
use crate::outbound::StagedAction;
use crate::store::{InboxKey, InboxState, LedgerState, Store, StoreError, Version};
use std::time::Duration;

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
    /// Firestore failed or could not be reached, or the records kept changing
    /// under the attempt: retried later.
    #[error(transparent)]
    Failed(#[from] PipelineError),
    /// The user's event before it in the same webhook request is not done yet:
    /// it goes back, uncounted, to wait its turn.
    #[error("waits for the event before it")]
    Waiting,
    /// A follow waits for a source link's login: it goes back, uncounted,
    /// until then (no worker is held meanwhile).
    #[error("waits {0:?} for a source link's login")]
    Deferred(std::time::Duration),
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Failed(PipelineError::Store(error))
    }
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

/// Reads after an unknown outcome: Firestore may still be slow, and giving up
/// leaves the work to wait for its lease, so a few tries are worth it.
const FIND_OUT_TRIES: u32 = 4;

impl Hold {
    /// [`Hold::find_out`], tried again (after 250 ms, 500 ms, 1 s) while the reads
    /// themselves fail.
    pub(super) async fn find_out_patiently(
        &self,
        store: &Store,
        staged: Option<&StagedAction>,
    ) -> Result<Found, StoreError> {
        let mut wait = Duration::from_millis(250);
        let mut tries = 1;
        loop {
            match self.find_out(store, staged).await {
                Ok(found) => return Ok(found),
                Err(error) if tries >= FIND_OUT_TRIES => return Err(error),
                Err(error) => {
                    tracing::warn!(error = %error, tries, "could not read what happened yet; trying again");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    tries += 1;
                }
            }
        }
    }

    /// Reads the inbox record (and the ledger entry the commit would have written)
    /// in one round trip, to learn whether a commit landed. The entry is this
    /// worker's to send only if it is exactly as staged: pending, never
    /// attempted, and holding the lease this worker wrote (a takeover, even by
    /// this instance's sweeper, writes another).
    pub(super) async fn find_out(&self, store: &Store, staged: Option<&StagedAction>) -> Result<Found, StoreError> {
        let ledger_id = staged.map(|staged| staged.ledger_id.as_str());
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
            staged.is_some_and(|staged| {
                entry.doc.state == LedgerState::Pending
                    && entry.doc.attempts == 0
                    && entry.doc.lease_owner == store.instance_id()
                    && staged.staged_lease(entry.doc.lease_until)
            })
        });
        Ok(Found::Landed(ours.map(|entry| entry.version)))
    }
}
