//! An owner's erasure of one user's personal data (個人情報の削除): every
//! answer's value redacted (the answer stays, so counts stay), the user's
//! fields and cached display name removed, their open question deleted.
//! Idempotent: run again, it finds nothing left to remove.

use super::PipelineError;
use crate::ids::LineUserId;
use crate::store::{ANSWER_PAGE, Store};

pub(crate) struct UserErasure {
    store: Store,
}

impl UserErasure {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }

    /// Erases `user`'s data; the number of answers whose value it removed.
    pub(crate) async fn erase(&self, user: &LineUserId) -> Result<u64, PipelineError> {
        let mut redacted = 0u64;
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store
                .answer_values_of_user(user.as_str(), after.as_deref())
                .await?;
            let full = page.len() >= usize::try_from(ANSWER_PAGE).unwrap_or(usize::MAX);
            after = page.last().map(|(id, _)| id.clone());
            let holding: Vec<String> = page
                .into_iter()
                .filter(|(_, holds_value)| *holds_value)
                .map(|(id, _)| id)
                .collect();
            self.store.redact_answers(&holding).await?;
            redacted += u64::try_from(holding.len()).unwrap_or(u64::MAX);
            if !full {
                break;
            }
        }
        self.store.forget_user_details(user.as_str()).await?;
        Ok(redacted)
    }
}
