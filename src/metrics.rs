//! Counters the service keeps about itself: events handled and the Firestore
//! round trips they cost, per kind of event. Served at `GET /admin/metrics`; the
//! benchmark prints round trips per event from them.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, Default, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindCounters {
    pub events: u64,
    pub firestore_round_trips: u64,
}

#[derive(Debug, Default)]
pub struct Metrics {
    kinds: Mutex<BTreeMap<&'static str, KindCounters>>,
}

impl Metrics {
    pub fn record(&self, kind: &'static str, round_trips: u32) {
        let mut kinds = self.kinds.lock().expect("metrics lock is never poisoned");
        let counters = kinds.entry(kind).or_default();
        counters.events += 1;
        counters.firestore_round_trips += u64::from(round_trips);
    }

    pub fn snapshot(&self) -> BTreeMap<&'static str, KindCounters> {
        self.kinds.lock().expect("metrics lock is never poisoned").clone()
    }
}
