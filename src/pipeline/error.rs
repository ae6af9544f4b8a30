//! What can go wrong in the pipeline, by kind, so each kind reaches the caller
//! as what it is (the admin API maps them to statuses once, in `http`): a
//! Firestore failure is worth retrying, a conflict means the record kept
//! changing under us, bad input will never succeed, and a value that cannot be
//! encoded is our own bug.

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PipelineError {
    /// Firestore failed or did not answer in time: try again later.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The records the operation reads kept changing under it (other writers
    /// won every round): try again.
    #[error("{0}")]
    Contention(String),
    /// The input names something that cannot exist (a malformed id, say):
    /// trying again changes nothing.
    #[error("{0}")]
    InvalidInput(String),
    /// A value could not be encoded for storage: a defect, not the caller's fault.
    #[error("{0}")]
    Encoding(String),
    /// What loading checked does not hold (a scenario a run names is not
    /// loaded, a chain validation walked does not render): a defect.
    #[error("{0}")]
    Defect(String),
}
