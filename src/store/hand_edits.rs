//! An operator's change of one user's tags or fields by hand: one commit,
//! conditional on the user's record as read (so a user the service never
//! saw is not made up, and the field limit is checked against what is
//! there), carrying the change's audit entry.

use super::docs::collections::USERS;
use super::lease::Stored;
use super::timeline::UserRecord;
use super::writes::{CommitOutcome, Expect, merge_deleting, only_if_present};
use super::{AuditEntry, Store, StoreError};
use crate::values::UserChanges;
use serde::Serialize;

/// How a change by hand ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandEditWrite {
    Done,
    /// The form's receipt was there: the same form landed before.
    Repeat,
    /// The record moved under the change (a step of the user's): read again.
    Moved,
}

impl Store {
    /// The user's record as a change by hand reads it.
    pub(crate) async fn user_for_edit(&self, user: &str) -> Result<Option<Stored<UserRecord>>, StoreError> {
        self.get_stored(USERS, user).await
    }

    /// Applies `changes` and removes `removed` fields, with `audit` in the
    /// same commit: conditional on `read` (the record's version) when
    /// `exact`, else only on the record existing (tags are array transforms:
    /// concurrent changes never undo each other).
    pub(crate) async fn edit_user_by_hand(
        &self,
        read: &Stored<UserRecord>,
        changes: &UserChanges,
        removed: &[String],
        audit: &AuditEntry,
        exact: bool,
        receipt: Option<&str>,
    ) -> Result<HandEditWrite, StoreError> {
        let user = read.id.as_str();
        let mut writes = self.user_change_writes(user, changes, None, exact.then_some(Expect::At(read.version)))?;
        if !exact && let Some(first) = writes.first_mut() {
            *first = only_if_present(first.clone());
        }
        if !removed.is_empty() {
            #[derive(Serialize)]
            struct Nothing {}
            let paths: Vec<String> = removed.iter().map(|name| format!("fields.{name}")).collect();
            let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
            let write = merge_deleting(self.document_path(USERS, user), &Nothing {}, &paths, Vec::new())?;
            // The first write of the commit (the user's merge) holds the condition.
            writes.push(write);
        }
        writes.push(self.audit_write(audit)?);
        if let Some(receipt) = receipt {
            writes.push(self.form_receipt_write("hand_edit", receipt)?);
        }
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(HandEditWrite::Done),
            CommitOutcome::Changed => Ok(HandEditWrite::Moved),
            // The entry's id is new to this submission, so what exists is the
            // form's receipt: the same form's change landed before (a reload,
            // a double click). Without a receipt only the entry can be there,
            // and only if this change landed.
            CommitOutcome::AlreadyExists if receipt.is_some() => Ok(HandEditWrite::Repeat),
            CommitOutcome::AlreadyExists => Ok(HandEditWrite::Done),
            // Landed or not: the entry tells, once it is fenced. Creating it
            // now makes a late landing of the change's commit impossible (its
            // create of the entry would fail, and with it the whole commit):
            // if ours is created, the change did not land.
            CommitOutcome::Unknown(error) => match self.commit(vec![self.audit_write(audit)?]).await {
                CommitOutcome::AlreadyExists => Ok(HandEditWrite::Done),
                _ => Err(error),
            },
            CommitOutcome::Failed(error) => Err(error),
        }
    }
}
