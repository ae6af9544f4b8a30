//! An operator's cancel of a user's timer that has not fired
//! (`DELETE /admin/users/{id}/timers/{timerId}`): read, check, and end it
//! conditional on the version read, so a timer claimed or fired meanwhile is
//! never cancelled after the fact.

use super::timers::OPERATOR_CANCEL;
use crate::ids::{DocumentHexId, LineUserId};
use crate::store::{Store, StoreError, TimerState};

/// Read-check-write rounds before the cancel gives up: a timer claimed
/// meanwhile changes its version.
const ROUNDS: usize = 3;

/// Why a timer was not cancelled.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TimerCancelError {
    /// No such timer, or it is another user's.
    #[error("the user has no timer with id {0:?}")]
    NotFound(String),
    /// It fired, was skipped or cancelled already: it is in this state.
    #[error("the timer is no longer pending: it is {0}")]
    NotPending(&'static str),
    /// It changed under every round (claimed and released, say).
    #[error("the timer kept changing; try again")]
    KeptChanging,
    /// Firestore failed (the kinds the admin API maps to statuses once).
    #[error(transparent)]
    Pipeline(#[from] super::PipelineError),
}

impl From<StoreError> for TimerCancelError {
    fn from(error: StoreError) -> Self {
        TimerCancelError::Pipeline(super::PipelineError::Store(error))
    }
}

#[derive(Clone)]
pub(crate) struct TimerCancels {
    store: Store,
}

impl TimerCancels {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }

    /// Cancels `user`'s pending timer `timer_id`.
    pub(crate) async fn cancel(&self, user: &LineUserId, timer_id: &DocumentHexId) -> Result<(), TimerCancelError> {
        let id = timer_id.as_str();
        for _ in 0..ROUNDS {
            let timer = self
                .store
                .timer(id)
                .await?
                .filter(|timer| timer.doc.line_user_id == user.as_str())
                .ok_or_else(|| TimerCancelError::NotFound(id.to_owned()))?;
            if timer.doc.state != TimerState::Pending {
                return Err(TimerCancelError::NotPending(timer.doc.state.as_str()));
            }
            if self
                .store
                .end_timer(id, timer.version, TimerState::Cancelled, OPERATOR_CANCEL)
                .await?
            {
                tracing::info!(timer.id = %id, user.id = %crate::log_ids::logged(user.as_str()), outcome = "cancelled", "timer cancelled by an operator");
                return Ok(());
            }
        }
        Err(TimerCancelError::KeptChanging)
    }
}
