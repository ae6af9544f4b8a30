//! Counting Firestore round trips per event. A task that handles one event runs
//! inside [`counted`]; every request the store sends from within adds one. The
//! benchmark reads the totals per event kind from `/admin/metrics`.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static ROUND_TRIPS: Cell<u32>;
}

/// Runs `work` and returns its result with the number of Firestore requests it sent.
pub async fn counted<F: Future>(work: F) -> (F::Output, u32) {
    ROUND_TRIPS
        .scope(Cell::new(0), async {
            let output = work.await;
            (output, ROUND_TRIPS.with(Cell::get))
        })
        .await
}

/// Called by the store for every request it sends.
pub(super) fn count() {
    let _ = ROUND_TRIPS.try_with(|trips| trips.set(trips.get() + 1));
}
