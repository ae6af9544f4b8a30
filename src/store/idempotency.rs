//! Operators' idempotency keys: the first call with a key records what it asked
//! for; a retry with the same key and the same request is the same operation,
//! and the same key with another request is refused (HTTP 422).

use super::docs::AdminRequestDoc;
use super::docs::collections::ADMIN_REQUESTS;
use super::later;
use super::writes::{CommitOutcome, create};
use super::{Store, StoreError};
use crate::ids::deterministic_id;
use std::time::Duration;

/// As long as the ledger entries the key names.
const REQUEST_RETENTION: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// As long as a console page stays open and is reloaded.
const FORM_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestCheck {
    /// The first call with this key.
    First,
    /// A retry of the same request.
    Repeat,
    /// The key was used before for a different request.
    Conflict,
}

impl Store {
    /// The create of a console form's receipt (`admin_requests/{id}`, `id`
    /// from the form's key and what it asks), for the commit of the form's
    /// change: a second commit with it fails whole, so the form lands once.
    pub(crate) fn form_receipt_write(
        &self,
        operation: &str,
        id: &str,
    ) -> Result<gcloud_sdk::google::firestore::v1::Write, StoreError> {
        let now = self.now();
        let doc = AdminRequestDoc {
            operation: operation.to_owned(),
            body_hash: id.to_owned(),
            created_at: now,
            expire_at: later(now, FORM_RETENTION),
        };
        Ok(create(self.document_path(ADMIN_REQUESTS, id), &doc)?)
    }

    /// Records a console form's receipt on its own, after the form's action
    /// (an action that is the same however often it runs, such as a cancel):
    /// a form sent again finds it. One recorded already is fine.
    pub(crate) async fn record_form_receipt(&self, operation: &str, id: &str) -> Result<(), StoreError> {
        match self.commit(vec![self.form_receipt_write(operation, id)?]).await {
            CommitOutcome::Committed(_) | CommitOutcome::AlreadyExists => Ok(()),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
            CommitOutcome::Changed => Err(StoreError::Unavailable("unexpected precondition failure".into())),
        }
    }

    /// Whether a console form's receipt is recorded.
    pub(crate) async fn has_form_receipt(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.get_stored::<AdminRequestDoc>(ADMIN_REQUESTS, id).await?.is_some())
    }

    /// Records (or compares with) the request first made with `key`.
    pub(crate) async fn check_request(
        &self,
        operation: &str,
        key: &str,
        body_hash: &str,
        audit: Option<&super::AuditEntry>,
    ) -> Result<RequestCheck, StoreError> {
        let id = deterministic_id(&[operation, key]);
        let now = self.now();
        let doc = AdminRequestDoc {
            operation: operation.to_owned(),
            body_hash: body_hash.to_owned(),
            created_at: now,
            expire_at: later(now, REQUEST_RETENTION),
        };
        // The operator's audit entry lands with the request's record, or not at all.
        let mut writes = vec![create(self.document_path(ADMIN_REQUESTS, &id), &doc)?];
        if let Some(entry) = audit {
            writes.push(self.audit_write(entry)?);
        }
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => return Ok(RequestCheck::First),
            // Recorded before, or perhaps by this very commit: the record tells.
            CommitOutcome::AlreadyExists | CommitOutcome::Unknown(_) => {}
            CommitOutcome::Changed => return Err(StoreError::Unavailable("unexpected precondition failure".into())),
            CommitOutcome::Failed(error) => return Err(error),
        }
        let stored = self
            .get_stored::<AdminRequestDoc>(ADMIN_REQUESTS, &id)
            .await?
            .ok_or_else(|| StoreError::Unavailable("the request record could not be written".into()))?;
        Ok(if stored.doc.body_hash == body_hash {
            RequestCheck::Repeat
        } else {
            RequestCheck::Conflict
        })
    }
}
