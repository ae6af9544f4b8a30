//! Exact result counts: sharded counter documents that the answer commit and
//! the commit of a question's ledger entry raise with increment transforms.
//!
//! They are exact because they ride in commits that happen once: guard 1's
//! `create()` of the answer, the `create()` of the ledger entry (a campaign
//! chunk: its settle, conditional on its claim). No read, no transaction: an
//! increment from each commit, whatever runs at the same time.
//!
//! `result_counters/{scenarioKey}_{day}_{shard}`, one document per scenario,
//! day (in the scenario's time zone) and shard, so that a busy survey spreads
//! its writes over [`SHARDS`] documents, by the hash of the user counted (a
//! campaign chunk's recipients: by the chunk). Fields: `scenarioId`, `day`, and the maps
//! `sent.{node}`, `answered.{node}` and `choices.{node}.{value}`, each key
//! prefixed with `~` (Firestore reserves keys such as `__x__`).

use super::docs::collections::RESULT_COUNTERS;
use super::docs::{AnswerDoc, LedgerDoc};
use super::lease::reference_value;
use super::writes::merge;
use super::{Store, StoreError};
use crate::ids::deterministic_id;
use gcloud_sdk::google::firestore::v1::document_transform::FieldTransform;
use gcloud_sdk::google::firestore::v1::document_transform::field_transform::TransformType;
use gcloud_sdk::google::firestore::v1::{self as v1, Document, Write};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Counter documents per scenario and day. A document sustains about one write
/// per second, and every answer and every question sent writes one: 128 shards
/// keep each under one write a second per 100 answers a second (0.78), so a
/// campaign's first minutes (200 answers a second to one survey) do not make
/// answer commits contend over their counters. A day with few answers writes
/// few of them, and reports read only the ones that exist.
pub(crate) const SHARDS: u32 = 128;

/// The counts of one scenario over a range of days, summed over shards.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ResultCounts {
    pub(crate) sent: BTreeMap<String, u64>,
    pub(crate) answered: BTreeMap<String, u64>,
    /// Per node, per choice value.
    pub(crate) choices: BTreeMap<String, BTreeMap<String, u64>>,
    /// Per node, per A/B arm label.
    pub(crate) sent_by_variant: BTreeMap<String, BTreeMap<String, u64>>,
    pub(crate) answered_by_variant: BTreeMap<String, BTreeMap<String, u64>>,
    /// Per node, per choice value, per arm label.
    pub(crate) choices_by_variant: BTreeMap<String, BTreeMap<String, BTreeMap<String, u64>>>,
    /// Per split node, per arm label: the runs that took it.
    pub(crate) runs: BTreeMap<String, BTreeMap<String, u64>>,
}

/// A stored counter document, as read.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
#[serde(rename_all = "camelCase")]
struct CounterDoc {
    sent: BTreeMap<String, i64>,
    answered: BTreeMap<String, i64>,
    choices: BTreeMap<String, BTreeMap<String, i64>>,
    sent_by_variant: BTreeMap<String, BTreeMap<String, i64>>,
    answered_by_variant: BTreeMap<String, BTreeMap<String, i64>>,
    choices_by_variant: BTreeMap<String, BTreeMap<String, BTreeMap<String, i64>>>,
    runs: BTreeMap<String, BTreeMap<String, i64>>,
}

/// The fields every counter document carries besides its counts.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CounterFields<'a> {
    scenario_id: &'a str,
    day: &'a str,
}

impl Store {
    /// The "sent" increment of a ledger entry that asks a question (by arm as
    /// well, in an A/B test), and the "runs" of the split arm its chain took;
    /// none when it does neither. Written in the commit that creates the entry.
    pub(super) fn sent_count_write(&self, doc: &LedgerDoc) -> Result<Vec<Write>, StoreError> {
        let mut by_day: BTreeMap<&str, Vec<FieldTransform>> = BTreeMap::new();
        if let Some(asks) = &doc.asks {
            let node = key(&asks.node);
            let increments = by_day.entry(asks.day.as_str()).or_default();
            increments.push(increment(&["sent", &node], 1));
            if let Some(label) = &asks.variant {
                increments.push(increment(&["sentByVariant", &node, &key(label)], 1));
            }
        }
        if let Some(split) = &doc.split {
            by_day
                .entry(split.day.as_str())
                .or_default()
                .push(increment(&["runs", &key(&split.node), &key(&split.label)], 1));
        }
        // Both are stamped with the same clock reading, so one day and one
        // write in practice; days that differ go to their own documents.
        by_day
            .into_iter()
            .map(|(day, increments)| self.counter_write(&doc.scenario_id, day, &doc.line_user_id, increments))
            .collect()
    }

    /// What a campaign chunk's settle counts, at once: the questions it asked
    /// (by arm too) and the split arms its recipients took. `None` when it
    /// counts nothing.
    pub(super) fn chunk_sent_write(
        &self,
        sent: &super::ChunkSent<'_>,
        chunk_id: &str,
    ) -> Result<Option<Write>, StoreError> {
        let mut increments = Vec::new();
        for (node, variant, recipients) in &sent.asks {
            let node = key(node);
            increments.push(increment(&["sent", &node], i64::from(*recipients)));
            if let Some(label) = variant {
                increments.push(increment(
                    &["sentByVariant", &node, &key(label)],
                    i64::from(*recipients),
                ));
            }
        }
        for (split, label, recipients) in &sent.runs {
            increments.push(increment(&["runs", &key(split), &key(label)], i64::from(*recipients)));
        }
        if increments.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.counter_write(
            sent.scenario_id,
            sent.day,
            chunk_id,
            increments,
        )?))
    }

    /// "Answered" for the node, and the choice's count for a choice answer.
    pub(super) fn answer_count_write(&self, doc: &AnswerDoc, day: &str) -> Result<Write, StoreError> {
        let node = key(&doc.node_id);
        let variant = doc.variant.as_deref().map(key);
        let mut increments = vec![increment(&["answered", &node], 1)];
        if let Some(variant) = &variant {
            increments.push(increment(&["answeredByVariant", &node, variant], 1));
        }
        if doc.value_type == "choice"
            && let Some(value) = &doc.value
        {
            let value = key(&value.to_string());
            increments.push(increment(&["choices", &node, &value], 1));
            if let Some(variant) = &variant {
                increments.push(increment(&["choicesByVariant", &node, &value, variant], 1));
            }
        }
        self.counter_write(&doc.scenario_id, day, &doc.line_user_id, increments)
    }

    fn counter_write(
        &self,
        scenario_id: &str,
        day: &str,
        shard_by: &str,
        increments: Vec<FieldTransform>,
    ) -> Result<Write, StoreError> {
        let id = counter_document(scenario_id, day, shard_by);
        Ok(merge(
            self.document_path(RESULT_COUNTERS, &id),
            &CounterFields { scenario_id, day },
            increments,
        )?)
    }

    /// Each document of `collection` whose name lies in `[first, last]` (full
    /// paths), a page at a time: counter documents named so that a range of
    /// names is a range of days, with no index to maintain.
    pub(super) async fn each_in_name_range(
        &self,
        collection: &str,
        fields: &[&str],
        (first, last): (String, String),
        each: impl FnMut(&Document) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.each_page(
            collection,
            fields,
            |q| {
                q.for_all([
                    q.field("__name__")
                        .greater_than_or_equal(reference_value(first.clone())),
                    q.field("__name__").less_than_or_equal(reference_value(last.clone())),
                ])
            },
            each,
        )
        .await
    }

    /// The counts of `scenario_id` from day `from` to day `to` (inclusive,
    /// `YYYY-MM-DD`; absent: unbounded). One query over a range of document
    /// names: no index to maintain.
    pub(crate) async fn result_counts(
        &self,
        scenario_id: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<ResultCounts, StoreError> {
        let prefix = scenario_key(scenario_id);
        let first = self.document_path(RESULT_COUNTERS, &format!("{prefix}_{}", from.unwrap_or("")));
        // `~` sorts after every digit and `-`: the last shard of the last day.
        let last = self.document_path(
            RESULT_COUNTERS,
            &format!("{prefix}_{}~", to.map(|to| format!("{to}_")).unwrap_or_default()),
        );
        let mut counts = ResultCounts::default();
        self.each_in_name_range(
            RESULT_COUNTERS,
            &[
                "sent",
                "answered",
                "choices",
                "sentByVariant",
                "answeredByVariant",
                "choicesByVariant",
                "runs",
            ],
            (first, last),
            |document: &Document| {
                let doc: CounterDoc = firestore::FirestoreDb::deserialize_doc_to(document)?;
                add_counts(&mut counts, doc);
                Ok(())
            },
        )
        .await?;
        Ok(counts)
    }
}

/// Adds one counter document into the totals; a count that went negative or
/// is not an integer is read as zero rather than failing the report.
fn add_counts(counts: &mut ResultCounts, doc: CounterDoc) {
    add_map(&mut counts.sent, doc.sent);
    add_map(&mut counts.answered, doc.answered);
    add_nested(&mut counts.choices, doc.choices);
    add_nested(&mut counts.sent_by_variant, doc.sent_by_variant);
    add_nested(&mut counts.answered_by_variant, doc.answered_by_variant);
    add_nested(&mut counts.runs, doc.runs);
    for (node, values) in doc.choices_by_variant {
        add_nested(counts.choices_by_variant.entry(unkey(&node)).or_default(), values);
    }
}

/// Adds stored counts (keys as stored) into `totals` (keys unprefixed).
fn add_map(totals: &mut BTreeMap<String, u64>, stored: BTreeMap<String, i64>) {
    for (key, count) in stored {
        let total = totals.entry(unkey(&key)).or_default();
        *total = total.saturating_add(u64::try_from(count).unwrap_or(0));
    }
}

fn add_nested(totals: &mut BTreeMap<String, BTreeMap<String, u64>>, stored: BTreeMap<String, BTreeMap<String, i64>>) {
    for (key, inner) in stored {
        add_map(totals.entry(unkey(&key)).or_default(), inner);
    }
}

/// The counter document a count for `shard_by` (a user id, or a campaign
/// chunk's id) goes to.
fn counter_document(scenario_id: &str, day: &str, shard_by: &str) -> String {
    counter_id(scenario_id, day, shard_of(shard_by))
}

/// `{scenarioKey}_{day}_{shard}`: a scenario's documents sort together, by day.
/// (Shards were `00`-`09` before there were 128: those documents are still in
/// the day's range and counted.)
fn counter_id(scenario_id: &str, day: &str, shard: u32) -> String {
    format!("{}_{day}_{shard:03}", scenario_key(scenario_id))
}

/// A fixed-length stand-in for the scenario id: ids may hold any character,
/// and one id must never be a prefix of another's range.
fn scenario_key(scenario_id: &str) -> String {
    let mut id = deterministic_id(&["result_counters", scenario_id]);
    id.truncate(20);
    id
}

/// Spreads writes over the shards by the hash of `id`.
fn shard_of(id: &str) -> u32 {
    let hex = deterministic_id(&["shard", id]);
    u32::from_str_radix(&hex[..8], 16).unwrap_or(0) % SHARDS
}

/// A map key for a node id or a choice value.
fn key(id: &str) -> String {
    format!("~{id}")
}

fn unkey(key: &str) -> String {
    key.strip_prefix('~').unwrap_or(key).to_owned()
}

/// An increment of the map field at `path` (segments quoted as needed).
fn increment(path: &[&str], by: i64) -> FieldTransform {
    FieldTransform {
        field_path: field_path(path),
        transform_type: Some(TransformType::Increment(v1::Value {
            value_type: Some(v1::value::ValueType::IntegerValue(by)),
        })),
    }
}

/// A Firestore field path: a segment that is not a plain identifier goes in
/// backticks, with backticks and backslashes escaped.
fn field_path(segments: &[&str]) -> String {
    segments
        .iter()
        .map(|segment| {
            let plain = segment
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if plain {
                (*segment).to_owned()
            } else {
                format!("`{}`", segment.replace('\\', "\\\\").replace('`', "\\`"))
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_quote_what_is_not_an_identifier() {
        let cases: [(&[&str], &str); 5] = [
            (&["sent", "rating"], "sent.rating"),
            (&["sent", "~rating"], "sent.`~rating`"),
            (&["choices", "~q 1", "~a`b"], "choices.`~q 1`.`~a\\`b`"),
            (&["x", "~a\\b"], "x.`~a\\\\b`"),
            (&["answered", "~満足"], "answered.`~満足`"),
        ];
        for (segments, expected) in cases {
            assert_eq!(field_path(segments), expected, "{segments:?}");
        }
    }

    #[test]
    fn keys_round_trip_and_never_look_reserved() {
        for id in ["rating", "__name__", "~x", "満足度", ""] {
            let stored = key(id);
            assert!(!(stored.starts_with("__") && stored.ends_with("__")), "{stored}");
            assert_eq!(unkey(&stored), id);
        }
    }

    #[test]
    fn a_scenarios_counter_ids_sort_by_day_and_stay_apart_from_others() {
        let a = counter_id("lunch", "2026-12-01", 3);
        let b = counter_id("lunch", "2026-12-02", 0);
        assert!(a < b);
        assert!(a.starts_with(&scenario_key("lunch")));
        assert_ne!(scenario_key("lunch"), scenario_key("lunch2"));
        assert_eq!(scenario_key("lunch").len(), 20);
        // The range's end bound sorts after every shard of its last day.
        assert!(counter_id("lunch", "2026-12-02", SHARDS - 1) < format!("{}_2026-12-02_~", scenario_key("lunch")));
        assert!(format!("{}_2026-12-02_~", scenario_key("lunch")) < counter_id("lunch", "2026-12-03", 0));
    }

    #[test]
    fn shards_spread_and_stay_in_range() {
        let shards: std::collections::BTreeSet<u32> = (0..2000).map(|i| shard_of(&format!("answer-{i}"))).collect();
        assert_eq!(shards.len(), SHARDS as usize, "2,000 ids reach every shard");
        assert!(shards.iter().all(|shard| *shard < SHARDS));
        assert_eq!(shard_of("same"), shard_of("same"));
    }

    /// The write fan-out: the share of one scenario-day's counter writes that
    /// the busiest document takes, for as many users answering at once. At
    /// 100 answers a second a document may take about one write a second: a
    /// share of at most 1 %.
    #[test]
    fn no_counter_document_takes_more_than_one_write_a_second_per_100_answers_a_second() {
        // (Over many answers: a short burst is uneven, and Firestore absorbs that.)
        for users in [50_000usize, 200_000] {
            let mut writes: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
            for index in 0..users {
                // A user id as LINE spells it: U and 32 hex digits.
                let user = format!(
                    "U{:032x}",
                    (index as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
                );
                // An answer's counts, and the "sent" of the question after it (in
                // the same commit), go to the user's document.
                *writes
                    .entry(counter_document("satisfaction", "2026-12-01", &user))
                    .or_default() += 1;
            }
            let busiest = writes.values().copied().max().unwrap_or(0);
            let per_100_a_second = busiest as f64 * 100.0 / users as f64;
            assert!(
                per_100_a_second <= 1.0,
                "{users} users: the busiest document takes {per_100_a_second:.2} writes a second per 100 answers a second"
            );
            assert_eq!(writes.len(), SHARDS as usize, "{users} users reach every shard");
        }
        // One user's answers stay on one document (their own rate is a human's).
        let user = "U0123456789abcdef0123456789abcdef";
        assert_eq!(
            counter_document("satisfaction", "2026-12-01", user),
            counter_document("satisfaction", "2026-12-01", user)
        );
    }

    #[test]
    fn counts_add_over_documents_and_ignore_negatives() {
        let mut counts = ResultCounts::default();
        let doc = |sent: i64, answered: i64| CounterDoc {
            sent: BTreeMap::from([("~q".to_owned(), sent)]),
            answered: BTreeMap::from([("~q".to_owned(), answered)]),
            choices: BTreeMap::from([("~q".to_owned(), BTreeMap::from([("~5".to_owned(), answered)]))]),
            sent_by_variant: BTreeMap::from([("~q".to_owned(), BTreeMap::from([("~A".to_owned(), sent)]))]),
            answered_by_variant: BTreeMap::from([("~q".to_owned(), BTreeMap::from([("~B".to_owned(), answered)]))]),
            choices_by_variant: BTreeMap::from([(
                "~q".to_owned(),
                BTreeMap::from([("~5".to_owned(), BTreeMap::from([("~B".to_owned(), answered)]))]),
            )]),
            runs: BTreeMap::from([("~ab".to_owned(), BTreeMap::from([("~A".to_owned(), sent)]))]),
        };
        add_counts(&mut counts, doc(3, 2));
        add_counts(&mut counts, doc(4, -1));
        assert_eq!(counts.sent["q"], 7);
        assert_eq!(counts.answered["q"], 2);
        assert_eq!(counts.choices["q"]["5"], 2);
        assert_eq!(counts.sent_by_variant["q"]["A"], 7);
        assert_eq!(counts.answered_by_variant["q"]["B"], 2);
        assert_eq!(counts.choices_by_variant["q"]["5"]["B"], 2);
        assert_eq!(counts.runs["ab"]["A"], 7);
    }
}
