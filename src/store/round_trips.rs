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

/// Operations of the round-trip histogram (see `crate::metrics::series`).
pub(super) const COMMIT: &str = "commit";
pub(super) const BATCH_WRITE: &str = "batch_write";
pub(super) const BATCH_GET: &str = "batch_get";
pub(super) const QUERY: &str = "query";
pub(super) const COUNT: &str = "count";

/// Sends one Firestore request and records its latency, with the outcome
/// `outcome` reads from its result.
pub(super) async fn observed<F: Future>(
    operation: &'static str,
    request: F,
    outcome: impl FnOnce(&F::Output) -> &'static str,
) -> F::Output {
    let started = std::time::Instant::now();
    let output = request.await;
    crate::metrics::series::firestore_round_trip(operation, outcome(&output), started.elapsed());
    output
}

/// [`observed`] for a request whose `Err` is its only failure.
pub(super) async fn observed_result<T, E>(
    operation: &'static str,
    request: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    observed(operation, request, |result| match result {
        Ok(_) => crate::metrics::series::OK,
        Err(_) => crate::metrics::series::ERROR,
    })
    .await
}

/// `.timed(operation)` on a request future: [`observed_result`] at the end of a
/// fluent query chain.
pub(super) trait Timed<T, E>: Future<Output = Result<T, E>> + Sized {
    fn timed(self, operation: &'static str) -> impl Future<Output = Result<T, E>> {
        observed_result(operation, self)
    }
}

impl<F, T, E> Timed<T, E> for F where F: Future<Output = Result<T, E>> {}
