//! Survey results, decided from counts: which nodes a scenario's funnel shows,
//! in what order, with what rates and shares. Pure: the counts come in.

use super::Engine;
use crate::ids::{NodeId, ScenarioId};
use crate::scenario::{LoadedScenario, Node};
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use serde::Serialize;
use std::collections::BTreeMap;

/// How many latest answers a free-text question shows.
pub(crate) const LATEST_TEXT_ANSWERS: u32 = 20;

/// The counts of one scenario over a range of days.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counts<'a> {
    pub(crate) sent: &'a BTreeMap<String, u64>,
    pub(crate) answered: &'a BTreeMap<String, u64>,
    pub(crate) choices: &'a BTreeMap<String, BTreeMap<String, u64>>,
    /// Per node, per A/B arm label.
    pub(crate) sent_by_variant: &'a BTreeMap<String, BTreeMap<String, u64>>,
    pub(crate) answered_by_variant: &'a BTreeMap<String, BTreeMap<String, u64>>,
    /// Per node, per choice value, per arm label.
    pub(crate) choices_by_variant: &'a BTreeMap<String, BTreeMap<String, BTreeMap<String, u64>>>,
    /// Per split node, per arm label.
    pub(crate) runs: &'a BTreeMap<String, BTreeMap<String, u64>>,
}

/// One split node's arms and the runs that took each.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SplitResults {
    pub(crate) node: String,
    pub(crate) arms: Vec<ArmResults>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ArmResults {
    pub(crate) label: String,
    pub(crate) runs: u64,
}

/// A question's counts within one arm of the split it is behind.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArmCounts {
    pub(crate) sent: u64,
    pub(crate) answered: u64,
    pub(crate) response_rate: Option<f64>,
}

/// One question node's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeResults {
    pub(crate) node_id: String,
    /// `survey`, `text_question` or `date_question`.
    pub(crate) kind: &'static str,
    pub(crate) text: String,
    pub(crate) sent: u64,
    pub(crate) answered: u64,
    /// `answered / sent`, when something was sent.
    pub(crate) response_rate: Option<f64>,
    /// For a question behind a split: its counts per arm label (every arm of
    /// the split, and labels counted but no longer among its arms), keyed by
    /// label; empty otherwise.
    pub(crate) by_variant: BTreeMap<String, ArmCounts>,
    /// A choice question's choices, in the scenario's order, then values no
    /// longer among its choices (from an earlier version).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) choices: Vec<ChoiceResults>,
    /// A free-text question's latest answers (filled by the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) latest: Option<Vec<LatestAnswer>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChoiceResults {
    pub(crate) value: String,
    /// `None` for a value the current scenario no longer offers.
    pub(crate) label: Option<String>,
    pub(crate) count: u64,
    /// `count / answered` of the node, when it was answered.
    pub(crate) share: Option<f64>,
    /// The count per arm label, for a question behind a split.
    pub(crate) by_variant: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LatestAnswer {
    pub(crate) answer_id: String,
    pub(crate) user_id: String,
    pub(crate) value: String,
    /// RFC 3339 in the scenario's time zone.
    pub(crate) answered_at: String,
}

/// A results request's days, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DayRange {
    pub(crate) from: Option<NaiveDate>,
    pub(crate) to: Option<NaiveDate>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RangeError {
    #[error("{field} must be a date written YYYY-MM-DD, not {value:?}")]
    BadDate { field: &'static str, value: String },
    #[error("from ({from}) is after to ({to})")]
    Inverted { from: NaiveDate, to: NaiveDate },
}

impl DayRange {
    /// `from` and `to` as a query gives them; empty counts as absent.
    pub(crate) fn parse(from: Option<&str>, to: Option<&str>) -> Result<Self, RangeError> {
        let day = |field: &'static str, value: Option<&str>| match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(value) => strict_day(value).map(Some).ok_or_else(|| RangeError::BadDate {
                field,
                value: value.to_owned(),
            }),
        };
        let range = Self {
            from: day("from", from)?,
            to: day("to", to)?,
        };
        if let (Some(from), Some(to)) = (range.from, range.to)
            && from > to
        {
            return Err(RangeError::Inverted { from, to });
        }
        Ok(range)
    }

    /// The days as counter documents name them.
    pub(crate) fn days(&self) -> (Option<String>, Option<String>) {
        let text = |day: Option<NaiveDate>| day.map(|day| day.format("%Y-%m-%d").to_string());
        (text(self.from), text(self.to))
    }
}

/// A day written exactly `YYYY-MM-DD`, in the years 1970 to 9999: chrono alone
/// also takes `+10000-01-01` or `0000-01-01`, days Firestore timestamps and
/// counter document names cannot hold.
fn strict_day(value: &str) -> Option<NaiveDate> {
    let shape = value.len() == 10
        && value.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    let day = NaiveDate::parse_from_str(value, "%Y-%m-%d").ok().filter(|_| shape)?;
    (1970..=9999).contains(&day.year()).then_some(day)
}

impl Engine {
    /// `at`'s day in the time zone of `scenario` (Tokyo for one that is gone),
    /// `YYYY-MM-DD`: the day whose counters an effect raises.
    pub(crate) fn day_of(&self, scenario: &ScenarioId, at: DateTime<Utc>) -> String {
        let zone = self.zone_of(scenario);
        at.with_timezone(&zone).format("%Y-%m-%d").to_string()
    }

    pub(crate) fn zone_of(&self, scenario: &ScenarioId) -> chrono_tz::Tz {
        self.scenario(scenario)
            .map_or(crate::scenario::DEFAULT_TIME_ZONE, |loaded| loaded.timing().zone)
    }

    /// `[start, end)` of a range in epoch milliseconds, in the scenario's zone.
    pub(crate) fn range_ms(&self, scenario: &ScenarioId, range: DayRange) -> (Option<i64>, Option<i64>) {
        let zone = self.zone_of(scenario);
        let start_of = |day: NaiveDate| super::campaign::start_of_day_ms(zone, day);
        (
            range.from.map(start_of),
            range.to.and_then(|day| day.succ_opt()).map(start_of),
        )
    }

    /// Epoch milliseconds as RFC 3339 in the scenario's zone.
    pub(crate) fn local_time(&self, scenario: &ScenarioId, ms: i64) -> String {
        let zone = self.zone_of(scenario);
        DateTime::from_timestamp_millis(ms)
            .map(|at| {
                at.with_timezone(&zone)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
            })
            .unwrap_or_default()
    }

    /// The funnel of `scenario`: its question nodes in file order, with counts.
    pub(crate) fn results(&self, scenario: &ScenarioId, counts: &Counts<'_>) -> Option<Vec<NodeResults>> {
        let loaded = self.scenario(scenario)?;
        Some(
            question_nodes(loaded)
                .map(|node| node_results(node, &arm_labels(loaded, node.id(), counts), counts))
                .collect(),
        )
    }

    /// The scenario's splits in file order: each arm's runs, then labels
    /// counted but no longer among its arms; then splits counted that the
    /// loaded version no longer has.
    pub(crate) fn split_results(&self, scenario: &ScenarioId, counts: &Counts<'_>) -> Option<Vec<SplitResults>> {
        let loaded = self.scenario(scenario)?;
        let gone = counts
            .runs
            .iter()
            .filter(|(node, _)| !loaded.splits().any(|split| split.id.as_str() == node.as_str()))
            .map(|(node, runs)| SplitResults {
                node: node.clone(),
                arms: runs
                    .iter()
                    .map(|(label, runs)| ArmResults {
                        label: label.clone(),
                        runs: *runs,
                    })
                    .collect(),
            });
        Some(
            loaded
                .splits()
                .map(|split| {
                    let counted = counts.runs.get(split.id.as_str());
                    let mut labels: Vec<String> = split.arms.iter().map(|arm| arm.label.clone()).collect();
                    for label in counted.into_iter().flat_map(BTreeMap::keys) {
                        if !labels.contains(label) {
                            labels.push(label.clone());
                        }
                    }
                    SplitResults {
                        node: split.id.to_string(),
                        arms: labels
                            .into_iter()
                            .map(|label| ArmResults {
                                runs: counted.and_then(|runs| runs.get(&label)).copied().unwrap_or(0),
                                label,
                            })
                            .collect(),
                    }
                })
                .chain(gone)
                .collect(),
        )
    }
}

/// The arm labels a question's counts are broken down by: the arms of the
/// split it is behind, then any other label counted for it (an arm since
/// removed); none for a question no split leads to and nothing counted by arm.
fn arm_labels(loaded: &LoadedScenario, node: &NodeId, counts: &Counts<'_>) -> Vec<String> {
    let mut labels: Vec<String> = loaded
        .variant_split(node)
        .map(|split| split.arms.iter().map(|arm| arm.label.clone()).collect())
        .unwrap_or_default();
    let counted = [counts.sent_by_variant, counts.answered_by_variant]
        .into_iter()
        .filter_map(|map| map.get(node.as_str()))
        .flat_map(BTreeMap::keys);
    for label in counted {
        if !labels.contains(label) {
            labels.push(label.clone());
        }
    }
    labels
}

/// One question of a scenario as a campaign's results list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuestionOutline {
    pub(crate) node: String,
    pub(crate) kind: &'static str,
    pub(crate) text: String,
    /// A survey's choices: value and label.
    pub(crate) choices: Vec<(String, String)>,
}

impl Engine {
    /// The questions of `scenario` in file order.
    pub(crate) fn question_outlines(&self, scenario: &ScenarioId) -> Option<Vec<QuestionOutline>> {
        let loaded = self.scenario(scenario)?;
        Some(
            question_nodes(loaded)
                .map(|node| {
                    let (kind, text, choices) = match node {
                        Node::Survey(survey) => (
                            "survey",
                            survey.text.clone(),
                            survey
                                .choices
                                .iter()
                                .map(|choice| (choice.value.clone(), choice.label.clone()))
                                .collect(),
                        ),
                        Node::TextQuestion(question) => ("text_question", question.text.clone(), Vec::new()),
                        Node::DateQuestion(question) => ("date_question", question.text.clone(), Vec::new()),
                        _ => ("other", String::new(), Vec::new()),
                    };
                    QuestionOutline {
                        node: node.id().to_string(),
                        kind,
                        text,
                        choices,
                    }
                })
                .collect(),
        )
    }
}

impl Engine {
    /// The questions a run of `scenario` asks first, with no answer behind
    /// them: reached from its start and from each trigger through messages,
    /// splits and branches (decided at once, for the user). A wait ends the
    /// walk (what follows it is a step, sent later), and so do a card and an
    /// end.
    pub(crate) fn entry_questions(&self, scenario: &ScenarioId) -> Option<Vec<String>> {
        let loaded = self.scenario(scenario)?;
        Some(entry_questions(loaded))
    }
}

fn entry_questions(loaded: &LoadedScenario) -> Vec<String> {
    let mut to_visit: Vec<&NodeId> = std::iter::once(&loaded.start)
        .chain(loaded.scenario.nodes.iter().filter_map(|node| match node {
            Node::Trigger(trigger) => Some(&trigger.next),
            _ => None,
        }))
        .collect();
    to_visit.reverse();
    let mut seen: std::collections::HashSet<&NodeId> = std::collections::HashSet::new();
    let mut questions: Vec<String> = Vec::new();
    while let Some(id) = to_visit.pop() {
        if !seen.insert(id) {
            continue;
        }
        let mut next: Vec<&NodeId> = match loaded.node(id) {
            Some(Node::Message(message)) => message.next.iter().collect(),
            Some(Node::Split(split)) => split.arms.iter().map(|arm| &arm.next).collect(),
            Some(Node::Branch(branch)) => branch
                .arms
                .iter()
                .map(|arm| &arm.next)
                .chain(std::iter::once(&branch.otherwise))
                .collect(),
            Some(question @ (Node::Survey(_) | Node::TextQuestion(_) | Node::DateQuestion(_))) => {
                questions.push(question.id().to_string());
                Vec::new()
            }
            _ => Vec::new(),
        };
        // Depth first, in the file's order of the arms.
        next.reverse();
        to_visit.extend(next);
    }
    questions
}

fn question_nodes(loaded: &LoadedScenario) -> impl Iterator<Item = &Node> {
    loaded
        .scenario
        .nodes
        .iter()
        .filter(|node| matches!(node, Node::Survey(_) | Node::TextQuestion(_) | Node::DateQuestion(_)))
}

fn node_results(node: &Node, labels: &[String], counts: &Counts<'_>) -> NodeResults {
    let id: &NodeId = node.id();
    let count = |map: &BTreeMap<String, u64>| map.get(id.as_str()).copied().unwrap_or(0);
    let sent = count(counts.sent);
    let answered = count(counts.answered);
    let ratio = |part: u64, whole: u64| (whole > 0).then(|| part as f64 / whole as f64);
    let by_label = |map: &BTreeMap<String, BTreeMap<String, u64>>, label: &str| {
        map.get(id.as_str())
            .and_then(|labels| labels.get(label))
            .copied()
            .unwrap_or(0)
    };
    let by_variant = labels
        .iter()
        .map(|label| {
            let sent = by_label(counts.sent_by_variant, label);
            let answered = by_label(counts.answered_by_variant, label);
            let counts = ArmCounts {
                sent,
                answered,
                response_rate: ratio(answered, sent),
            };
            (label.clone(), counts)
        })
        .collect();
    let choice_by_variant = |value: &str| -> BTreeMap<String, u64> {
        let counted = counts
            .choices_by_variant
            .get(id.as_str())
            .and_then(|values| values.get(value));
        labels
            .iter()
            .map(|label| {
                let count = counted.and_then(|labels| labels.get(label)).copied().unwrap_or(0);
                (label.clone(), count)
            })
            .collect()
    };
    let (kind, text, choices) = match node {
        Node::Survey(survey) => {
            let counted = counts.choices.get(id.as_str());
            let of = |value: &str| counted.and_then(|values| values.get(value)).copied().unwrap_or(0);
            let mut choices: Vec<ChoiceResults> = survey
                .choices
                .iter()
                .map(|choice| ChoiceResults {
                    value: choice.value.clone(),
                    label: Some(choice.label.clone()),
                    count: of(&choice.value),
                    share: ratio(of(&choice.value), answered),
                    by_variant: choice_by_variant(&choice.value),
                })
                .collect();
            for (value, count) in counted.into_iter().flatten() {
                if !survey.choices.iter().any(|choice| &choice.value == value) {
                    choices.push(ChoiceResults {
                        value: value.clone(),
                        label: None,
                        count: *count,
                        share: ratio(*count, answered),
                        by_variant: choice_by_variant(value),
                    });
                }
            }
            ("survey", survey.text.clone(), choices)
        }
        Node::TextQuestion(question) => ("text_question", question.text.clone(), Vec::new()),
        Node::DateQuestion(question) => ("date_question", question.text.clone(), Vec::new()),
        _ => ("other", String::new(), Vec::new()),
    };
    NodeResults {
        node_id: id.to_string(),
        kind,
        text,
        sent,
        answered,
        response_rate: ratio(answered, sent),
        by_variant,
        choices,
        latest: None,
    }
}

/// The Net Promoter Score of an 0-10 question: the percent of its answers
/// 9 or 10 minus the percent 0 to 6, rounded to a whole number (halves away
/// from zero); `None` for a question whose choices are not exactly the values
/// `"0"` to `"10"`, or when none of them was answered. Values counted but no
/// longer offered (from an earlier version) are not scores: left out.
pub(crate) fn nps(node: &NodeResults) -> Option<i64> {
    if node.kind != "survey" {
        return None;
    }
    let score = |value: &str| (0..=10u8).find(|score| score.to_string() == value);
    let offered: Vec<(u8, u64)> = node
        .choices
        .iter()
        .filter(|choice| choice.label.is_some())
        .map(|choice| score(&choice.value).map(|score| (score, choice.count)))
        .collect::<Option<_>>()?;
    let mut scores: Vec<u8> = offered.iter().map(|(score, _)| *score).collect();
    scores.sort_unstable();
    if scores != (0..=10).collect::<Vec<u8>>() {
        return None;
    }
    let sum = |range: std::ops::RangeInclusive<u8>| -> i128 {
        offered
            .iter()
            .filter(|(score, _)| range.contains(score))
            .map(|(_, count)| i128::from(*count))
            .sum()
    };
    let (detractors, total, promoters) = (sum(0..=6), sum(0..=10), sum(9..=10));
    if total == 0 {
        return None;
    }
    let scaled = (promoters - detractors) * 100;
    let rounded = (scaled.abs() * 2 + total) / (2 * total) * scaled.signum();
    i64::try_from(rounded).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from`, `to`, and the range or words of the error.
    type RangeCase<'a> = (Option<&'a str>, Option<&'a str>, Result<DayRange, &'a str>);

    #[test]
    fn day_ranges_parse_or_say_what_is_wrong() {
        let day = |text: &str| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok();
        let cases: [RangeCase; 11] = [
            (None, None, Ok(DayRange { from: None, to: None })),
            (Some(""), Some(" "), Ok(DayRange { from: None, to: None })),
            (
                Some("2026-12-01"),
                Some("2026-12-01"),
                Ok(DayRange {
                    from: day("2026-12-01"),
                    to: day("2026-12-01"),
                }),
            ),
            (Some("2026-13-01"), None, Err("from must be a date")),
            (None, Some("yesterday"), Err("to must be a date")),
            (Some("2026-12-02"), Some("2026-12-01"), Err("is after")),
            (Some("+10000-01-01"), None, Err("from must be a date")),
            (Some("0000-01-01"), None, Err("from must be a date")),
            (None, Some("1969-12-31"), Err("to must be a date")),
            (None, Some("2026-1-5"), Err("to must be a date")),
            (
                Some("1970-01-01"),
                Some("9999-12-31"),
                Ok(DayRange {
                    from: day("1970-01-01"),
                    to: day("9999-12-31"),
                }),
            ),
        ];
        for (from, to, expected) in cases {
            match (DayRange::parse(from, to), expected) {
                (Ok(range), Ok(expected)) => assert_eq!(range, expected),
                (Err(error), Err(words)) => assert!(error.to_string().contains(words), "{error}"),
                (got, expected) => panic!("{from:?}..{to:?}: {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn a_runs_first_questions_are_reached_from_its_start_and_triggers_through_messages() {
        const SURVEY: &str = r#"
[[nodes]]
id = "rating"
kind = "survey"
text = "How was it?"
choices = [{ label = "Good", value = "good", next = "comment" }]

[[nodes]]
id = "comment"
kind = "text_question"
text = "Anything else?"
"#;
        let cases = [
            // A keyword, a greeting, then the first question (also the start).
            (
                r#"
[[nodes]]
id = "by_keyword"
kind = "trigger"
on = "text"
keywords = ["go"]
next = "hello"

[[nodes]]
id = "hello"
kind = "message"
text = "Hello"
next = "rating"
"#,
                vec!["rating"],
            ),
            // A start that is not the first question in the file, and a
            // trigger straight to another question.
            (
                r#"
start = "comment"

[[nodes]]
id = "by_keyword"
kind = "trigger"
on = "text"
keywords = ["go"]
next = "rating"
"#,
                vec!["comment", "rating"],
            ),
            // A split first: either arm's question starts a run.
            (
                r#"
[[nodes]]
id = "opening"
kind = "split"
arms = [
  { label = "A", weight = 1, next = "rating" },
  { label = "B", weight = 1, next = "comment" },
]
"#,
                vec!["rating", "comment"],
            ),
            // A greeting, then a wait: the question after it is a step.
            (
                r#"
[[nodes]]
id = "hello"
kind = "message"
text = "Hello"
next = "later"

[[nodes]]
id = "later"
kind = "wait"
after = "1d"
next = "rating"
"#,
                vec![],
            ),
        ];
        // The samples: through a branch and a split to the question; a wait
        // before the question (its step) lists none.
        let engine = engine();
        for (scenario, expected) in [("ja_vip", vec!["interest"]), ("ja_followup", vec![])] {
            let id = ScenarioId::parse(scenario).expect("an id");
            let listed = engine.entry_questions(&id).expect("a sample");
            assert_eq!(listed, expected, "{scenario}");
        }
        for (nodes, expected) in cases {
            let text = format!("id = \"walk\"\n{nodes}{SURVEY}");
            let loaded = crate::scenario::load_version(&text, "walk.toml".into())
                .unwrap_or_else(|error| panic!("{error:?}: {text}"));
            assert_eq!(entry_questions(&loaded), expected, "{text}");
        }
    }

    fn engine() -> Engine {
        let dir = crate::repo_path("scenarios");
        let scenarios = crate::scenario::load_dir(&dir).expect("the samples load");
        Engine::new(std::sync::Arc::new(scenarios))
    }

    #[test]
    fn a_funnel_lists_question_nodes_in_order_with_rates_shares_and_old_values() {
        let engine = engine();
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(key, count)| ((*key).to_owned(), *count)).collect()
        };
        let sent = map(&[("rating", 10), ("return", 4)]);
        let answered = map(&[("rating", 8)]);
        let choices = BTreeMap::from([("rating".to_owned(), map(&[("5", 6), ("1", 1), ("3", 1)]))]);
        let none = BTreeMap::new();
        let counts = Counts {
            sent: &sent,
            answered: &answered,
            choices: &choices,
            sent_by_variant: &none,
            answered_by_variant: &none,
            choices_by_variant: &BTreeMap::new(),
            runs: &none,
        };
        let scenario = ScenarioId::parse("satisfaction").expect("valid");
        let nodes = engine.results(&scenario, &counts).expect("a known scenario");
        let ids: Vec<&str> = nodes.iter().map(|node| node.node_id.as_str()).collect();
        assert_eq!(ids, ["rating", "return"]);
        let rating = &nodes[0];
        assert_eq!((rating.sent, rating.answered, rating.response_rate), (10, 8, Some(0.8)));
        let shares: Vec<(&str, Option<&str>, u64, Option<f64>)> = rating
            .choices
            .iter()
            .map(|c| (c.value.as_str(), c.label.as_deref(), c.count, c.share))
            .collect();
        assert_eq!(
            shares,
            [
                ("5", Some("Very satisfied"), 6, Some(0.75)),
                ("4", Some("Satisfied"), 0, Some(0.0)),
                ("2", Some("Not really"), 0, Some(0.0)),
                ("1", Some("Unsatisfied"), 1, Some(0.125)),
                ("3", None, 1, Some(0.125)),
            ]
        );
        let back = &nodes[1];
        assert_eq!((back.sent, back.answered, back.response_rate), (4, 0, Some(0.0)));
        assert!(
            back.choices.iter().all(|choice| choice.share.is_none()),
            "nothing answered: no shares"
        );
        assert!(
            engine
                .results(&ScenarioId::parse("gone").expect("valid"), &counts)
                .is_none()
        );
    }

    #[test]
    fn splits_list_runs_per_arm_and_questions_behind_them_count_by_arm() {
        let engine = engine();
        let nested = |pairs: &[(&str, &[(&str, u64)])]| -> BTreeMap<String, BTreeMap<String, u64>> {
            pairs
                .iter()
                .map(|(key, inner)| {
                    let inner = inner.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
                    ((*key).to_owned(), inner)
                })
                .collect()
        };
        let sent = BTreeMap::from([("interest".to_owned(), 5)]);
        let answered = BTreeMap::from([("interest".to_owned(), 3)]);
        let choices = nested(&[("interest", &[("yes", 2), ("no", 1)])]);
        let sent_by_variant = nested(&[("interest", &[("A", 3), ("B", 2)])]);
        let answered_by_variant = nested(&[("interest", &[("A", 2), ("B", 1)])]);
        let choices_by_variant = BTreeMap::from([(
            "interest".to_owned(),
            nested(&[("yes", &[("A", 2)]), ("no", &[("B", 1)])]),
        )]);
        let runs = nested(&[("ab", &[("B", 2), ("A", 3), ("old", 1)]), ("gone", &[("X", 4)])]);
        let counts = Counts {
            sent: &sent,
            answered: &answered,
            choices: &choices,
            sent_by_variant: &sent_by_variant,
            answered_by_variant: &answered_by_variant,
            choices_by_variant: &choices_by_variant,
            runs: &runs,
        };
        let scenario = ScenarioId::parse("ja_vip").expect("valid");
        let splits = engine.split_results(&scenario, &counts).expect("known");
        let listed: Vec<(&str, Vec<(&str, u64)>)> = splits
            .iter()
            .map(|split| {
                let arms = split.arms.iter().map(|arm| (arm.label.as_str(), arm.runs)).collect();
                (split.node.as_str(), arms)
            })
            .collect();
        assert_eq!(
            listed,
            [("ab", vec![("A", 3), ("B", 2), ("old", 1)]), ("gone", vec![("X", 4)])],
            "arms in file order, then arms and splits no longer in the scenario"
        );
        let nodes = engine.results(&scenario, &counts).expect("known");
        let interest = &nodes[0];
        assert_eq!(interest.node_id, "interest");
        let arm = |label: &str| (interest.by_variant[label].sent, interest.by_variant[label].answered);
        assert_eq!((arm("A"), arm("B")), ((3, 2), (2, 1)));
        let yes = &interest.choices[0];
        assert_eq!(
            (yes.value.as_str(), yes.by_variant["A"], yes.by_variant["B"]),
            ("yes", 2, 0)
        );
        let untouched = engine
            .results(&ScenarioId::parse("satisfaction").expect("valid"), &counts)
            .expect("known");
        assert!(
            untouched.iter().all(|node| node.by_variant.is_empty()),
            "no split, no arms"
        );
    }

    /// A question of `kind` with `choices` (value, count), all offered.
    fn question(kind: &'static str, choices: &[(&str, u64)]) -> NodeResults {
        let answered = choices.iter().map(|(_, count)| count).sum();
        NodeResults {
            node_id: "q".to_owned(),
            kind,
            text: "How likely are you to recommend us?".to_owned(),
            sent: answered,
            answered,
            response_rate: None,
            by_variant: BTreeMap::new(),
            choices: choices
                .iter()
                .map(|(value, count)| ChoiceResults {
                    value: (*value).to_owned(),
                    label: Some((*value).to_owned()),
                    count: *count,
                    share: None,
                    by_variant: BTreeMap::new(),
                })
                .collect(),
            latest: None,
        }
    }

    /// Counts of the scores 0 to 10, in that order.
    fn scores(counts: [u64; 11]) -> Vec<(String, u64)> {
        (0..=10)
            .zip(counts)
            .map(|(score, count)| (score.to_string(), count))
            .collect()
    }

    #[test]
    fn nps_is_promoters_minus_detractors_for_0_to_10_questions_only() {
        let survey = |counts: &[(String, u64)]| {
            let pairs: Vec<(&str, u64)> = counts.iter().map(|(value, count)| (value.as_str(), *count)).collect();
            question("survey", &pairs)
        };
        let mut reversed = scores([1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0]);
        reversed.reverse();
        let mut with_old_value = survey(&scores([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]));
        with_old_value.choices.push(ChoiceResults {
            value: "n/a".to_owned(),
            label: None,
            count: 5,
            share: None,
            by_variant: BTreeMap::new(),
        });
        let zero_to_nine: Vec<(String, u64)> = scores([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]).into_iter().take(10).collect();
        let mut eleven = scores([0; 11]);
        eleven.push(("11".to_owned(), 1));
        let cases: Vec<(&str, NodeResults, Option<i64>)> = vec![
            ("no answers", survey(&scores([0; 11])), None),
            (
                "all promoters",
                survey(&scores([0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 2])),
                Some(100),
            ),
            (
                "all detractors",
                survey(&scores([1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0])),
                Some(-100),
            ),
            (
                "all passives",
                survey(&scores([0, 0, 0, 0, 0, 0, 0, 2, 5, 0, 0])),
                Some(0),
            ),
            // 3 promoters, 1 passive, 2 detractors: 50% - 33.3% = 16.7.
            ("mix", survey(&scores([0, 1, 0, 0, 0, 0, 1, 1, 0, 2, 1])), Some(17)),
            // 1 of 8: 12.5, away from zero either way.
            ("half up", survey(&scores([0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 1])), Some(13)),
            (
                "half down",
                survey(&scores([0, 0, 0, 0, 0, 1, 0, 0, 7, 0, 0])),
                Some(-13),
            ),
            ("choices in another order", survey(&reversed), Some(33)),
            ("old values left out", with_old_value, Some(100)),
            ("not 0-10", question("survey", &[("good", 3), ("bad", 1)]), None),
            (
                "1-5",
                question("survey", &[("1", 1), ("2", 0), ("3", 0), ("4", 2), ("5", 9)]),
                None,
            ),
            ("0-9", survey(&zero_to_nine), None),
            ("0-11", survey(&eleven), None),
            ("not a survey", question("text_question", &[]), None),
        ];
        for (name, node, expected) in cases {
            assert_eq!(nps(&node), expected, "{name}");
        }
    }

    #[test]
    fn the_sample_nps_question_is_one_and_its_1_to_5_rating_is_not() {
        let engine = engine();
        let none = BTreeMap::new();
        let choices = BTreeMap::from([
            (
                "nps".to_owned(),
                BTreeMap::from([("10".to_owned(), 3), ("3".to_owned(), 1)]),
            ),
            ("satisfaction".to_owned(), BTreeMap::from([("5".to_owned(), 4)])),
        ]);
        let answered = BTreeMap::from([("nps".to_owned(), 4), ("satisfaction".to_owned(), 4)]);
        let counts = Counts {
            sent: &answered,
            answered: &answered,
            choices: &choices,
            sent_by_variant: &none,
            answered_by_variant: &none,
            choices_by_variant: &BTreeMap::new(),
            runs: &none,
        };
        let scenario = ScenarioId::parse("ja_satisfaction").expect("valid");
        let nodes = engine.results(&scenario, &counts).expect("known");
        let scored: Vec<(&str, Option<i64>)> = nodes.iter().map(|node| (node.node_id.as_str(), nps(node))).collect();
        assert_eq!(scored, [("satisfaction", None), ("nps", Some(50)), ("comment", None)]);
    }

    #[test]
    fn days_and_ranges_follow_the_scenarios_zone() {
        let engine = engine();
        let scenario = ScenarioId::parse("satisfaction").expect("valid");
        // 2026-11-30 15:30 UTC is 2026-12-01 00:30 in Tokyo (the default zone).
        let at = DateTime::parse_from_rfc3339("2026-11-30T15:30:00Z")
            .expect("valid")
            .with_timezone(&Utc);
        assert_eq!(engine.day_of(&scenario, at), "2026-12-01");
        let range = DayRange::parse(Some("2026-12-01"), Some("2026-12-01")).expect("valid");
        let (from, to) = engine.range_ms(&scenario, range);
        let tokyo_midnight = DateTime::parse_from_rfc3339("2026-11-30T15:00:00Z")
            .expect("valid")
            .timestamp_millis();
        assert_eq!(from, Some(tokyo_midnight));
        assert_eq!(to, Some(tokyo_midnight + 24 * 3_600_000));
        assert_eq!(
            engine.local_time(&scenario, tokyo_midnight),
            "2026-12-01T00:00:00.000+09:00"
        );
    }
}
