//! Heartbeats, and the instances that stopped beating. Every instance rewrites
//! its `instances/{id}` record every [`BEAT`] and lists the others'; one whose
//! record has not changed for [`DEAD_AFTER`] (by this instance's monotonic
//! clock, so wall clocks never meet) is taken for dead, and its leased events
//! and messages are swept as if their leases had run out. A killed instance's
//! users so get their next message within seconds, not after the 30 s lease,
//! while their reply tokens are still fresh, at the cost of one write and one
//! small read per instance per beat, and nothing per event.
//!
//! An instance taken for dead that was only stalled (a long pause) finds its
//! work taken over when it wakes: its writes are conditional on the versions it
//! read, so they change nothing, as after an expired lease. A round whose own
//! beat or list failed proves nothing about the others (Firestore may have
//! failed for them too), so it starts the count again. Timers it had claimed
//! wait for their claim to run out (the claim moved their wake time). What it
//! had leased into the future on purpose (a retry after `Retry-After`, an event
//! waiting for the user's previous one) is swept at once, early: a push keeps
//! its retry key, and an event waits again if it must.

use crate::store::{Store, Version};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often an instance rewrites its record (under the one write a second a
/// Firestore document sustains).
pub(super) const BEAT: Duration = Duration::from_millis(1500);
/// A record unchanged this long, by the reader's clock, is a dead instance's:
/// three beats lost in a row.
pub(super) const DEAD_AFTER: Duration = Duration::from_millis(5000);
/// Instances' records read per beat, at most.
const LISTED: u32 = 100;

/// The instances taken for dead: their leases are void. Shared with the sweeper.
#[derive(Clone, Default)]
pub(crate) struct Abandoned {
    owners: Arc<RwLock<HashSet<String>>>,
    /// Raised when an instance is newly taken for dead: sweep now.
    rescue: Arc<Notify>,
}

impl Abandoned {
    /// The instances taken for dead right now.
    pub(super) fn owners(&self) -> HashSet<String> {
        self.owners.read().map(|owners| owners.clone()).unwrap_or_default()
    }

    pub(super) async fn rescue_needed(&self) {
        self.rescue.notified().await;
    }

    fn set(&self, dead: HashSet<String>) {
        let newly = match self.owners.write() {
            Ok(mut owners) => {
                let newly = dead.iter().any(|owner| !owners.contains(owner));
                *owners = dead;
                newly
            }
            Err(_) => false,
        };
        if newly {
            self.rescue.notify_one();
        }
    }
}

/// What this instance saw of the others' records: each one's version and when
/// it last changed (this instance's clock).
pub(super) struct Liveness {
    me: String,
    seen: HashMap<String, (Version, Instant)>,
}

/// What one look at the records says.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Verdict {
    /// Unchanged for [`DEAD_AFTER`].
    pub(super) dead: HashSet<String>,
    /// Dead for a lease longer: what they held at their death has been taken
    /// over or has expired (a retry they had scheduled for later is swept like
    /// any other once due), so their records can go.
    pub(super) gone: Vec<(String, Version)>,
}

impl Liveness {
    pub(super) fn new(me: &str) -> Self {
        Self {
            me: me.to_owned(),
            seen: HashMap::new(),
        }
    }

    /// Forgets what it saw: after a round whose beat or list failed (Firestore
    /// in trouble), the others' beats may have failed too, so an unchanged
    /// record proves nothing until it stays unchanged through healthy rounds.
    pub(super) fn rebaseline(&mut self) {
        self.seen.clear();
    }

    /// Takes in the records listed at `now` (when the list was asked for);
    /// `lease` is how long a lease lasts.
    pub(super) fn observe(&mut self, listed: &[(String, Version)], now: Instant, lease: Duration) -> Verdict {
        let mut verdict = Verdict::default();
        let mut present = HashSet::new();
        for (id, version) in listed {
            if *id == self.me {
                continue;
            }
            present.insert(id.clone());
            match self.seen.get_mut(id) {
                Some((seen, since)) if *seen == *version => {
                    let still = now.saturating_duration_since(*since);
                    if still >= DEAD_AFTER {
                        verdict.dead.insert(id.clone());
                    }
                    if still >= DEAD_AFTER + lease {
                        verdict.gone.push((id.clone(), *version));
                    }
                }
                Some(entry) => *entry = (*version, now),
                None => {
                    self.seen.insert(id.clone(), (*version, now));
                }
            }
        }
        self.seen.retain(|id, _| present.contains(id));
        verdict
    }
}

/// Beats, looks at the others, and tells the sweeper who died, until `stop`
/// (the pipeline's shutdown raises it once its work is handed back or done, so
/// no one takes a stopping instance's work for a dead one's).
pub(super) async fn run(store: Store, abandoned: Abandoned, stop: CancellationToken) {
    let mut liveness = Liveness::new(store.instance_id());
    let lease = store.lease();
    loop {
        let beat = store.beat().await;
        if let Err(error) = &beat {
            tracing::warn!(error = %error, "could not record this instance's heartbeat");
        }
        let asked = Instant::now();
        match store.instances(LISTED).await {
            Ok(_) if beat.is_err() => liveness.rebaseline(),
            Ok(listed) => {
                let verdict = liveness.observe(&listed, asked, lease);
                let before = abandoned.owners();
                for owner in verdict.dead.difference(&before) {
                    tracing::warn!(instance.id = %owner, outcome = "taken_for_dead", "an instance stopped beating; its leased work is taken over");
                }
                abandoned.set(verdict.dead);
                for (id, version) in verdict.gone {
                    if let Err(error) = store.forget_instance(&id, version).await {
                        tracing::warn!(instance.id = %id, error = %error, "could not remove a dead instance's record");
                    }
                }
            }
            Err(error) => {
                liveness.rebaseline();
                tracing::warn!(error = %error, "could not list the instances");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(BEAT) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gcloud_sdk::prost_types::Timestamp;

    fn version(seconds: i64) -> Version {
        Version::new_for_tests(Timestamp { seconds, nanos: 0 })
    }

    #[test]
    fn an_instance_whose_record_stops_changing_is_dead_after_five_seconds_and_gone_after_the_lease() {
        let lease = Duration::from_secs(30);
        let mut liveness = Liveness::new("me");
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let listed = |other: i64| vec![("me".to_owned(), version(1)), ("other".to_owned(), version(other))];
        // (ms since start, the other's version, dead?, gone?)
        let steps = [
            (0, 1, false, false),
            (1500, 2, false, false),
            (3000, 3, false, false),
            (4500, 3, false, false),
            (7500, 3, false, false),
            (8000, 3, true, false),
            (20_000, 3, true, false),
            (38_000, 3, true, true),
            // It beats again (a pause, not a death): alive.
            (39_500, 4, false, false),
        ];
        for (ms, other, dead, gone) in steps {
            let verdict = liveness.observe(&listed(other), at(ms), lease);
            assert_eq!(verdict.dead.contains("other"), dead, "at {ms} ms");
            assert_eq!(!verdict.gone.is_empty(), gone, "at {ms} ms");
            assert!(!verdict.dead.contains("me"), "never itself");
        }
        // After a failed round the count starts again: unchanged records are
        // not dead until they stay so through healthy rounds.
        let verdict = liveness.observe(&listed(4), at(40_000), lease);
        assert!(verdict.dead.is_empty());
        liveness.rebaseline();
        assert!(
            liveness.observe(&listed(4), at(46_000), lease).dead.is_empty(),
            "seen afresh"
        );
        assert!(liveness.observe(&listed(4), at(51_000), lease).dead.contains("other"));
        // A record that went is forgotten.
        let verdict = liveness.observe(&[("me".to_owned(), version(1))], at(50_000), lease);
        assert_eq!(verdict, Verdict::default());
        assert!(liveness.seen.is_empty());
    }
}
