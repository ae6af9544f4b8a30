//! Counters the service keeps about itself: events handled and the Firestore
//! round trips they cost, per kind of event. Served at `GET /admin/metrics`; the
//! benchmark prints round trips per event from them.
//!
//! The Prometheus series of `GET /metrics` are listed in [`series`]; [`exporter`]
//! holds the recorder they are kept in.

pub(crate) mod exporter;
pub(crate) mod series;

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, Default, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct KindCounters {
    pub(crate) events: u64,
    pub(crate) firestore_round_trips: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    kinds: Mutex<BTreeMap<&'static str, KindCounters>>,
}

impl Metrics {
    pub(crate) fn record(&self, kind: &'static str, round_trips: u32) {
        // A poisoned lock only means another thread panicked mid-update: the
        // counters are still usable.
        let mut kinds = self.kinds.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let counters = kinds.entry(kind).or_default();
        counters.events += 1;
        counters.firestore_round_trips += u64::from(round_trips);
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<&'static str, KindCounters> {
        self.kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}
