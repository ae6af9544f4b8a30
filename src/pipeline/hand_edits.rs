//! Operators' changes of one user's tags and fields by hand (the console's
//! user page): checked by the engine, written in one commit conditional on
//! the user's record as read, with the change's audit entry.

use super::PipelineError;
use crate::engine::hand_edit::{HandEdit, HandEditError};
use crate::ids::LineUserId;
use crate::store::{AuditEntry, HandEditWrite, Store};

/// Reads of the user's record before the change gives up (a step of the
/// user's moved it each time).
const ROUNDS: usize = 3;

#[derive(Debug)]
pub(crate) enum HandEdited {
    Done,
    /// The same form landed before (its receipt is there): nothing changed now.
    Repeat,
    /// The service never saw the user: nothing written.
    UnknownUser,
    /// The change does not fit the user's record (a field beyond the limit).
    Refused(HandEditError),
}

pub(crate) struct UserEdits {
    store: Store,
}

impl UserEdits {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }

    pub(crate) async fn apply(
        &self,
        user: &LineUserId,
        edit: &HandEdit,
        audit: &AuditEntry,
        receipt: Option<&str>,
    ) -> Result<HandEdited, PipelineError> {
        let (changes, removed) = edit.changes();
        // A form that landed before is done, whatever the record is now.
        if let Some(receipt) = receipt
            && self.store.has_form_receipt(receipt).await?
        {
            return Ok(HandEdited::Repeat);
        }
        for _ in 0..ROUNDS {
            let Some(read) = self.store.user_for_edit(user.as_str()).await? else {
                return Ok(HandEdited::UnknownUser);
            };
            let fields: Vec<String> = read.doc.fields.keys().cloned().collect();
            if let Err(refused) = edit.fits(&fields) {
                return Ok(HandEdited::Refused(refused));
            }
            // Only a new field needs the record as read (the limit on fields);
            // tags and removals need it to exist.
            let exact = matches!(edit, HandEdit::SetField(..));
            match self
                .store
                .edit_user_by_hand(&read, &changes, &removed, audit, exact, receipt)
                .await?
            {
                HandEditWrite::Done => return Ok(HandEdited::Done),
                HandEditWrite::Repeat => return Ok(HandEdited::Repeat),
                // Moved, or (not exact) gone since the read: read again.
                HandEditWrite::Moved => {}
            }
        }
        Err(PipelineError::Contention(
            "the user's record kept changing; try again".into(),
        ))
    }
}
