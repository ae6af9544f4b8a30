//! A console confirmation form's receipt (`admin_requests`): once the form's
//! action landed, the same form sent again (a double click, a reload, the
//! Back button) finds it and does nothing again. Used for actions that are
//! safe to repeat anyway (a replay finds the letter gone, an erasure finds
//! nothing left, a cancel finds the campaign cancelled), so a receipt that
//! cannot be read or written costs a harmless repeat, never a lost action.

use crate::store::Store;

#[derive(Clone)]
pub(crate) struct FormReceipts {
    store: Store,
}

impl FormReceipts {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }

    /// The receipt of the form with `key` doing `operation` to `target`
    /// (a letter, a user, a campaign and its options): a key sent with
    /// another target or operation is another receipt.
    pub(crate) fn id(operation: &str, key: &str, target: &[&str]) -> String {
        let mut parts = vec![operation, key];
        parts.extend_from_slice(target);
        crate::ids::deterministic_id(&parts)
    }

    /// Whether the form's action landed already. A receipt that cannot be
    /// read counts as absent (see the module's note).
    pub(crate) async fn landed(&self, receipt: &str) -> bool {
        self.store.has_form_receipt(receipt).await.unwrap_or(false)
    }

    /// Records that the form's action landed. When that write fails, the
    /// same form sent again repeats its (repeatable) action.
    pub(crate) async fn record(&self, operation: &str, receipt: &str) {
        if let Err(error) = self.store.record_form_receipt(operation, receipt).await {
            tracing::warn!(error = %error, operation, outcome = "receipt_missing", "a console form's receipt was not recorded");
        }
    }
}
