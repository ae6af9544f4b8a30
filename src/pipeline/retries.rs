//! The retry timer: sends that asked to be tried again wait here for their time,
//! then go to the send queue, which workers take from first. This instance holds
//! their entries meanwhile, so a retry never waits for a sweep (a sweep may have
//! to look through many pending pushes to find it). If the queue is full, the
//! retry waits a little and tries again; if the instance stops, the entries'
//! leases run out and any instance's sweeper retries them.

use super::{Job, OutboundJob, Pipeline, lease_deadline};
use crate::outbound::ScheduledRetry;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a due retry waits when the send queue is full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(100);

/// A retry ordered by its time (earliest first in the heap).
struct Due(ScheduledRetry);

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.0.due == other.0.due
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.due.cmp(&self.0.due)
    }
}

/// `lease`: how long the entries' leases last.
pub(super) async fn run(
    pipeline: Arc<Pipeline>,
    mut scheduled: mpsc::UnboundedReceiver<ScheduledRetry>,
    lease: Duration,
    shutdown: CancellationToken,
) {
    let mut waiting: BinaryHeap<Due> = BinaryHeap::new();
    loop {
        let next = waiting.peek().map(|due| due.0.due);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            retry = scheduled.recv() => match retry {
                Some(retry) => waiting.push(Due(retry)),
                None => return,
            },
            _ = sleep_until(next), if next.is_some() => {
                while waiting.peek().is_some_and(|due| due.0.due <= Instant::now()) {
                    let Some(Due(mut retry)) = waiting.pop() else { break };
                    match pipeline.try_reserve_send() {
                        Some(slot) => slot.send(Job::Outbound(Box::new(OutboundJob {
                            id: retry.ledger_id,
                            doc: retry.doc,
                            version: retry.version,
                            lease_until: lease_deadline(lease),
                        }))),
                        None => {
                            retry.due = Instant::now() + QUEUE_FULL_WAIT;
                            waiting.push(Due(retry));
                            break;
                        }
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}
