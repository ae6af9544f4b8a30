//! The outbound sender: sends what a commit recorded in the ledger, through the
//! courier, while this instance's sweeper knows the entry is in hand here.

use super::work::Work;
use super::{InHand, OutboundJob};
use crate::outbound::{Courier, Delivery, StagedAction};
use crate::store::{LedgerDoc, Store, Version};
use std::sync::Arc;
use std::time::Instant;

pub(crate) struct OutboundSender {
    courier: Courier,
    /// Renews the lease of a send that waited long in the queue.
    store: Store,
    /// Records this instance holds: the sweeper leaves them alone.
    in_hand: Arc<InHand>,
}

impl OutboundSender {
    pub(crate) fn new(courier: Courier, store: Store, in_hand: Arc<InHand>) -> Self {
        Self {
            courier,
            store,
            in_hand,
        }
    }

    /// Whether the event's reply token is still worth a reply.
    pub(super) fn reply_is_fresh(&self, work: &Work) -> bool {
        work.reply_token.is_some() && self.courier.reply_is_fresh(work.reply_issued_ms())
    }

    /// Sends an action a commit of this instance recorded. Without the entry's
    /// version (never seen: a write always has one) it is left to the sweeper.
    pub(super) async fn send_staged(&self, staged: Option<&StagedAction>, version: Option<Version>) {
        if let (Some(staged), Some(version)) = (staged, version) {
            // Held while it is sent: this instance's sweeper must not take it over.
            let _held = self.in_hand.hold(&staged.ledger_id);
            self.courier.deliver(&staged.ledger_id, &staged.doc, version).await;
        }
    }

    /// Sends a recovered action or a retry that fell due. One that waited in the
    /// queue for more than half its lease renews it first (conditionally): the
    /// call must not outlive it.
    pub(super) async fn deliver_queued(&self, job: OutboundJob) {
        let version = if job.lease_until.saturating_duration_since(Instant::now()) >= self.store.lease() / 2 {
            Some(job.version)
        } else {
            match self.store.renew_outbound(&job.id, job.version, job.doc.attempts).await {
                Ok(version) => version,
                Err(error) => {
                    tracing::warn!(ledger.id = %job.id, error = %error, "could not renew the lease; the action is left to the sweeper");
                    None
                }
            }
        };
        match version {
            Some(version) => {
                self.courier.deliver(&job.id, &job.doc, version).await;
            }
            None => {
                tracing::info!(ledger.id = %job.id, outcome = "superseded", "the action was taken over while it waited");
            }
        }
    }

    /// Sends an action a dead-letter replay revived (leased to this instance).
    pub(super) async fn deliver_revived(&self, ledger_id: &str, doc: &LedgerDoc, version: Version) -> Delivery {
        self.courier.deliver(ledger_id, doc, version).await
    }
}
