//! What `GET /metrics` answers: the Prometheus text of every series in
//! `crate::metrics::series`. The backlog gauges need Firestore reads, so they are
//! read at scrape time but at most once per [`BACKLOG_MAX_AGE`] (scrapes in
//! between show the last values; a failed read keeps them and is counted); a
//! service nobody scrapes reads nothing. The queue depth is this instance's
//! memory, read at every scrape through a [`QueueDepth`] handle.

use crate::clock::Clock;
use crate::metrics::series::{self, BacklogGauges, QueueDepths};
use crate::store::{Backlog, Store};
use metrics_exporter_prometheus::PrometheusHandle;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The backlog gauges are read again when older than this.
pub(crate) const BACKLOG_MAX_AGE: Duration = Duration::from_secs(5);
/// Histogram samples are folded in this often even when nobody scrapes, so
/// they never pile up in memory.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Jobs waiting in this instance's queues right now (events, sends, timers). Start-up
/// builds it from the pipeline, so reports read the depth without depending on
/// the pipeline (a floor beside it, not above it).
pub(crate) type QueueDepth = Box<dyn Fn() -> QueueDepths + Send + Sync>;

pub(crate) struct Scrape {
    handle: PrometheusHandle,
    store: Store,
    queue_depth: QueueDepth,
    /// The pending ledger entry's age is measured on it.
    clock: Clock,
    /// When the backlog was last read (or tried). An async lock: concurrent
    /// scrapes wait for one read instead of each sending their own.
    backlog_read_at: tokio::sync::Mutex<Option<Instant>>,
}

impl Scrape {
    pub(crate) fn new(handle: PrometheusHandle, store: Store, queue_depth: QueueDepth, clock: Clock) -> Self {
        Self {
            handle,
            store,
            queue_depth,
            clock,
            backlog_read_at: tokio::sync::Mutex::new(None),
        }
    }

    /// The Prometheus text exposition of every series.
    pub(crate) async fn render(&self) -> String {
        self.refresh_backlog().await;
        let depths = (self.queue_depth)();
        series::queue_depth(depths);
        self.handle.run_upkeep();
        self.handle.render()
    }

    async fn refresh_backlog(&self) {
        let mut read_at = self.backlog_read_at.lock().await;
        if read_at.is_some_and(|at| at.elapsed() < BACKLOG_MAX_AGE) {
            return;
        }
        match self.store.backlog().await {
            Ok(backlog) => series::backlog(gauges(backlog, self.clock.now_ms())),
            Err(error) => {
                series::backlog_read_failed();
                tracing::warn!(error = %error, outcome = "failed", "could not read the backlog; the gauges keep their last values");
            }
        }
        // Also after a failure: an unavailable Firestore is not asked at every scrape.
        *read_at = Some(Instant::now());
    }

    /// Folds histogram samples in every few seconds until `shutdown`.
    pub(crate) fn spawn_upkeep(&self, shutdown: CancellationToken) {
        let handle = self.handle.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(UPKEEP_INTERVAL);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = interval.tick() => handle.run_upkeep(),
                }
            }
        });
    }
}

/// The gauges of a backlog read at `now_ms` (ms since the epoch). A clock that
/// is behind a writer's shows age 0, never a negative one.
fn gauges(backlog: Backlog, now_ms: i64) -> BacklogGauges {
    let age_ms = backlog
        .oldest_pending_ms
        .map_or(0, |oldest| u64::try_from(now_ms.saturating_sub(oldest)).unwrap_or(0));
    BacklogGauges {
        ledger_pending: backlog.ledger_pending,
        ledger_oldest_pending_age: Duration::from_millis(age_ms),
        dead_letters: backlog.dead_letters,
        inbox_pending: backlog.inbox_pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_pending_age_is_never_negative() {
        let now = 1_000_000;
        let cases = [
            (None, Duration::ZERO),
            (Some(now), Duration::ZERO),
            (Some(now - 2_500), Duration::from_millis(2_500)),
            // Written by an instance whose clock is ahead.
            (Some(now + 700), Duration::ZERO),
        ];
        for (oldest, age) in cases {
            let backlog = Backlog {
                inbox_pending: 3,
                ledger_pending: 2,
                oldest_pending_ms: oldest,
                dead_letters: 1,
            };
            let gauges = gauges(backlog, now);
            assert_eq!(gauges.ledger_oldest_pending_age, age, "{oldest:?}");
            assert_eq!(
                (gauges.inbox_pending, gauges.ledger_pending, gauges.dead_letters),
                (3, 2, 1)
            );
        }
    }
}
