//! A worker's hold on one event, and what it does when a commit's outcome is
//! unknown: it reads what happened before acting again.
//!
//! A stored event is held by the version of its inbox record; an event processed
//! on the request path (`WEBHOOK_PROCESSING=inline`) has no inbox record, and its
//! effect commit's own `create`s (the answer, the ledger entry keyed by the
//! event, the message mark) and conditions (the marker, the open question) are
//! its only record: a redelivery meets them and changes nothing.

use super::PipelineError;
use crate::outbound::StagedAction;
use crate::store::{InboxKey, InboxState, LedgerState, Store, StoreError, Version};
use std::time::Duration;

/// The event a worker is processing, and how it is held.
pub(super) struct Hold {
    /// The inbox id of the event (also for an inline event, which has no inbox
    /// record: its ledger entries are keyed by it).
    pub(super) key: InboxKey,
    pub(super) custody: Custody,
}

pub(super) enum Custody {
    /// A stored event: every write to its inbox record names this version.
    Inbox(Version),
    /// An event processed on the request path, with no inbox record.
    Inline(Inline),
}

/// What an inline event carries besides its plan.
#[derive(Default)]
pub(super) struct Inline {
    /// A text message's words, in memory only (never stored for an inline event).
    pub(super) text: Option<String>,
    /// What its commits recorded to send: sent after the request is answered.
    pub(super) sends: std::sync::Mutex<Vec<(StagedAction, Version)>>,
}

impl Hold {
    /// A stored event held at `version` of its inbox record.
    pub(super) fn stored(key: InboxKey, version: Version) -> Self {
        Self {
            key,
            custody: Custody::Inbox(version),
        }
    }

    /// The inbox record and the version held, for a stored event.
    pub(super) fn inbox(&self) -> Option<(&InboxKey, Version)> {
        match &self.custody {
            Custody::Inbox(version) => Some((&self.key, *version)),
            Custody::Inline(_) => None,
        }
    }

    pub(super) fn is_inline(&self) -> bool {
        matches!(self.custody, Custody::Inline(_))
    }
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
    /// in one round trip, to learn whether a commit landed.
    pub(super) async fn find_out(&self, store: &Store, staged: Option<&StagedAction>) -> Result<Found, StoreError> {
        let Custody::Inbox(version) = self.custody else {
            return find_out_inline(store, staged).await;
        };
        let ledger_id = staged.map(|staged| staged.ledger_id.as_str());
        let (event, entry) = store.event_and_entry(&self.key, ledger_id).await?;
        let Some(event) = event else {
            return Ok(Found::Superseded);
        };
        if event.doc.state == InboxState::Pending && event.version == version {
            return Ok(Found::NotLanded);
        }
        if event.doc.state != InboxState::Done {
            return Ok(Found::Superseded);
        }
        Ok(Found::Landed(ours_to_send(store, staged, entry)))
    }
}

/// The version of the ledger entry read, when it is this worker's to send:
/// exactly as staged (pending, never attempted, and holding the lease this
/// worker wrote; a takeover, even by this instance's sweeper, writes another).
fn ours_to_send(
    store: &Store,
    staged: Option<&StagedAction>,
    entry: Option<crate::store::Stored<crate::store::LedgerDoc>>,
) -> Option<Version> {
    let entry = entry.filter(|entry| {
        staged.is_some_and(|staged| {
            entry.doc.state == LedgerState::Pending
                && entry.doc.attempts == 0
                && entry.doc.lease_owner == store.instance_id()
                && staged.staged_lease(entry.doc.lease_until)
        })
    })?;
    Some(entry.version)
}

/// After an inline commit that did not say it landed: its ledger entry tells
/// (one get by id). Without one to send, or when it is absent, the commit is
/// taken as not landed: trying it again is safe, as every inline commit with an
/// effect holds a `create` or a condition that a late landing of the first makes
/// fail (the answer, the ledger entry, the message mark, the marker as read).
async fn find_out_inline(store: &Store, staged: Option<&StagedAction>) -> Result<Found, StoreError> {
    let Some(staged) = staged else {
        return Ok(Found::NotLanded);
    };
    match store.outbound(&staged.ledger_id).await? {
        None => Ok(Found::NotLanded),
        Some(entry) => Ok(Found::Landed(ours_to_send(store, Some(staged), Some(entry)))),
    }
}
