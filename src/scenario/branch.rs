//! `branch` nodes: the first arm whose `when` holds for the user's state wins,
//! else `else`. The decision is pure: the caller reads the state (tags,
//! fields, first seen, the answers and scenarios a condition names) and asks.

use super::typed::AnswerValue;
use crate::ids::{NodeId, ScenarioId};
use crate::values::FieldValue;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Tries its arms in order; the first whose `when` holds leads on.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchNode {
    pub id: NodeId,
    pub arms: Vec<BranchArm>,
    /// Where the scenario goes when no arm's `when` holds.
    #[serde(rename = "else")]
    pub otherwise: NodeId,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchArm {
    pub when: Condition,
    pub next: NodeId,
    /// Links this rich menu to the user when the arm is taken (`"default"`:
    /// unlinks theirs).
    #[serde(default)]
    pub rich_menu: Option<String>,
}

/// Every key given must hold (an empty `when` always holds).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Condition {
    #[serde(default)]
    pub tags: Option<TagCondition>,
    /// Scenarios the user answered, each of them.
    #[serde(default)]
    pub answered: Option<Vec<ScenarioId>>,
    /// Scenarios the user answered none of.
    #[serde(default)]
    pub not_answered: Option<Vec<ScenarioId>>,
    /// First seen on or after this day (`YYYY-MM-DD`, in the scenario's zone).
    #[serde(default)]
    pub first_seen_from: Option<String>,
    /// First seen on or before this day.
    #[serde(default)]
    pub first_seen_to: Option<String>,
    /// The user's recorded answer to a question.
    #[serde(default)]
    pub answer: Option<AnswerCondition>,
    /// A user field.
    #[serde(default)]
    pub field: Option<FieldCheck>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TagCondition {
    #[serde(default)]
    pub any_of: Option<Vec<String>>,
    #[serde(default)]
    pub all_of: Option<Vec<String>>,
    #[serde(default)]
    pub none_of: Option<Vec<String>>,
}

/// The user's answer to `node` (of this scenario, or of `scenario`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerCondition {
    #[serde(default)]
    pub scenario: Option<ScenarioId>,
    pub node: NodeId,
    /// One of these values (a choice's value, a typed text, a date as written).
    #[serde(default, rename = "in")]
    pub one_of: Option<Vec<String>>,
    /// At least: a number for numbers, an ISO date or time for dates.
    #[serde(default)]
    pub min: Option<FieldValue>,
    #[serde(default)]
    pub max: Option<FieldValue>,
}

/// A user field: every key given must hold.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldCheck {
    pub name: String,
    #[serde(default)]
    pub equals: Option<FieldValue>,
    #[serde(default, rename = "in")]
    pub one_of: Option<Vec<FieldValue>>,
    /// `true`: the user has the field; `false`: they do not.
    #[serde(default)]
    pub exists: Option<bool>,
}

/// What a branch reads of one user, as of the step that reaches it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserState {
    pub tags: BTreeSet<String>,
    pub fields: BTreeMap<String, FieldValue>,
    pub first_seen_ms: Option<i64>,
    /// Recorded answers, by (scenario, node).
    pub answers: HashMap<(ScenarioId, NodeId), AnswerValue>,
    /// Scenarios the user answered.
    pub answered: HashSet<ScenarioId>,
}

/// Which way a branch went, and why (for the simulator and the logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The arm's position (from 0); `None`: `else`.
    pub arm: Option<usize>,
    pub next: NodeId,
}

impl BranchNode {
    /// The way `state` takes. `scenario` is the branch's own (an `answer`
    /// without `scenario` names a node of it); `day_start_ms` turns a
    /// `YYYY-MM-DD` into the start of that day in the scenario's zone.
    pub fn decide(
        &self,
        scenario: &ScenarioId,
        state: &UserState,
        day_start_ms: impl Fn(&str) -> Option<i64>,
    ) -> Taken {
        for (index, arm) in self.arms.iter().enumerate() {
            if arm.when.holds(scenario, state, &day_start_ms) {
                return Taken {
                    arm: Some(index),
                    next: arm.next.clone(),
                };
            }
        }
        Taken {
            arm: None,
            next: self.otherwise.clone(),
        }
    }

    /// Every node a way out of it leads to: the arms in order, then `else`.
    pub fn targets(&self) -> impl Iterator<Item = &NodeId> {
        self.arms
            .iter()
            .map(|arm| &arm.next)
            .chain(std::iter::once(&self.otherwise))
    }
}

impl Condition {
    pub fn holds(&self, scenario: &ScenarioId, state: &UserState, day_start_ms: impl Fn(&str) -> Option<i64>) -> bool {
        let has = |tag: &String| state.tags.contains(tag);
        let tags = self.tags.as_ref().is_none_or(|tags| {
            tags.any_of.as_ref().is_none_or(|any| any.iter().any(has))
                && tags.all_of.as_ref().is_none_or(|all| all.iter().all(has))
                && !tags.none_of.as_ref().is_some_and(|none| none.iter().any(has))
        });
        let answered = self
            .answered
            .as_ref()
            .is_none_or(|all| all.iter().all(|id| state.answered.contains(id)));
        let not_answered = !self
            .not_answered
            .as_ref()
            .is_some_and(|none| none.iter().any(|id| state.answered.contains(id)));
        let from = self.first_seen_from.as_deref().map(&day_start_ms);
        let to = self
            .first_seen_to
            .as_deref()
            .map(|day| day_start_ms(day).map(|start| start.saturating_add(24 * 3_600_000)));
        let seen_from = from.is_none_or(|from| from.zip(state.first_seen_ms).is_some_and(|(from, seen)| seen >= from));
        let seen_to = to.is_none_or(|to| to.zip(state.first_seen_ms).is_some_and(|(to, seen)| seen < to));
        let answer = self.answer.as_ref().is_none_or(|condition| {
            let key = (
                condition.scenario.clone().unwrap_or_else(|| scenario.clone()),
                condition.node.clone(),
            );
            condition.holds(state.answers.get(&key))
        });
        let field = self
            .field
            .as_ref()
            .is_none_or(|check| check.holds(state.fields.get(&check.name)));
        tags && answered && not_answered && seen_from && seen_to && answer && field
    }

    /// The (scenario, node) answers it reads.
    pub fn answers_read<'a>(&'a self, scenario: &'a ScenarioId) -> Option<(&'a ScenarioId, &'a NodeId)> {
        self.answer
            .as_ref()
            .map(|answer| (answer.scenario.as_ref().unwrap_or(scenario), &answer.node))
    }

    /// The scenarios whose "answered" it reads.
    pub fn scenarios_read(&self) -> impl Iterator<Item = &ScenarioId> {
        self.answered.iter().flatten().chain(self.not_answered.iter().flatten())
    }
}

impl AnswerCondition {
    /// Whether the recorded `answer` (none: not answered) meets it: `in` by
    /// the value as written, `min`/`max` numerically for numbers and as text
    /// for dates and times (ISO strings sort as they read).
    pub fn holds(&self, answer: Option<&AnswerValue>) -> bool {
        let Some(answer) = answer else {
            return false;
        };
        let value = FieldValue::from(answer);
        let text = answer.to_string();
        let in_list = self.one_of.as_ref().is_none_or(|values| values.contains(&text));
        let at_least = self
            .min
            .as_ref()
            .is_none_or(|min| compare(&value, min).is_some_and(std::cmp::Ordering::is_ge));
        let at_most = self
            .max
            .as_ref()
            .is_none_or(|max| compare(&value, max).is_some_and(std::cmp::Ordering::is_le));
        in_list && at_least && at_most
    }
}

impl FieldCheck {
    pub fn holds(&self, value: Option<&FieldValue>) -> bool {
        if let Some(exists) = self.exists
            && exists != value.is_some()
        {
            return false;
        }
        if self.equals.is_none() && self.one_of.is_none() {
            return true;
        }
        let Some(value) = value else {
            return false;
        };
        let same = |other: &FieldValue| compare(value, other) == Some(std::cmp::Ordering::Equal);
        self.equals.as_ref().is_none_or(same) && self.one_of.as_ref().is_none_or(|values| values.iter().any(same))
    }
}

/// Numbers numerically, texts as text, booleans for equality; `None` across kinds.
pub fn compare(value: &FieldValue, other: &FieldValue) -> Option<std::cmp::Ordering> {
    match (value, other) {
        (FieldValue::Text(a), FieldValue::Text(b)) => Some(a.cmp(b)),
        (FieldValue::Bool(a), FieldValue::Bool(b)) => (a == b).then_some(std::cmp::Ordering::Equal),
        _ => value.as_number()?.partial_cmp(&other.as_number()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id<T>(parse: fn(String) -> Result<T, crate::ids::IdError>, raw: &str) -> T {
        parse(raw.to_owned()).expect("valid id")
    }

    fn branch(toml_arms: &str) -> BranchNode {
        toml::from_str(&format!("id = \"route\"\nelse = \"default\"\narms = [{toml_arms}]"))
            .unwrap_or_else(|error| panic!("{error}"))
    }

    fn state() -> UserState {
        let mut state = UserState {
            tags: ["vip".to_owned(), "new".to_owned()].into_iter().collect(),
            fields: [
                ("plan".to_owned(), FieldValue::Text("gold".into())),
                ("age".to_owned(), FieldValue::Integer(25)),
            ]
            .into_iter()
            .collect(),
            first_seen_ms: Some(1_000),
            ..UserState::default()
        };
        let here = id(ScenarioId::parse, "s");
        state
            .answers
            .insert((here, id(NodeId::parse, "rating")), AnswerValue::Text("2".into()));
        state.answers.insert(
            (id(ScenarioId::parse, "ja_profile"), id(NodeId::parse, "age")),
            AnswerValue::Integer(24),
        );
        state.answered.insert(id(ScenarioId::parse, "ja_profile"));
        state
    }

    #[test]
    fn the_first_arm_that_holds_wins_and_else_catches_the_rest() {
        let scenario = id(ScenarioId::parse, "s");
        let day = |_: &str| Some(0);
        let cases: [(&str, Option<usize>); 16] = [
            (r#"{ when = { tags = { anyOf = ["vip"] } }, next = "a" }"#, Some(0)),
            (r#"{ when = { tags = { anyOf = ["gold"] } }, next = "a" }"#, None),
            (
                r#"{ when = { tags = { allOf = ["vip", "new"] } }, next = "a" }"#,
                Some(0),
            ),
            (r#"{ when = { tags = { allOf = ["vip", "x"] } }, next = "a" }"#, None),
            (r#"{ when = { tags = { noneOf = ["churn"] } }, next = "a" }"#, Some(0)),
            (
                r#"{ when = { tags = { anyOf = ["vip"], noneOf = ["new"] } }, next = "a" }"#,
                None,
            ),
            (
                r#"{ when = { answer = { node = "rating", in = ["1", "2"] } }, next = "a" }"#,
                Some(0),
            ),
            (
                r#"{ when = { answer = { node = "rating", in = ["5"] } }, next = "a" }"#,
                None,
            ),
            (
                r#"{ when = { answer = { node = "other", in = ["1"] } }, next = "a" }"#,
                None,
            ),
            (
                r#"{ when = { answer = { scenario = "ja_profile", node = "age", min = 20, max = 29 } }, next = "a" }"#,
                Some(0),
            ),
            (
                r#"{ when = { answer = { scenario = "ja_profile", node = "age", min = 25 } }, next = "a" }"#,
                None,
            ),
            (
                r#"{ when = { field = { name = "plan", equals = "gold" } }, next = "a" }"#,
                Some(0),
            ),
            (
                r#"{ when = { field = { name = "plan", exists = false } }, next = "a" }"#,
                None,
            ),
            (
                r#"{ when = { answered = ["ja_profile"], tags = { noneOf = ["churn_risk"] } }, next = "a" }"#,
                Some(0),
            ),
            (
                r#"{ when = { notAnswered = ["ja_profile"] }, next = "a" }, { when = { field = { name = "age", in = [25, 26] } }, next = "b" }"#,
                Some(1),
            ),
            (r#"{ when = { firstSeenFrom = "2026-01-01" }, next = "a" }"#, Some(0)),
        ];
        for (arms, expected) in cases {
            let taken = branch(arms).decide(&scenario, &state(), day);
            assert_eq!(taken.arm, expected, "{arms}");
            let next = match expected {
                Some(0) => "a",
                Some(_) => "b",
                None => "default",
            };
            assert_eq!(taken.next.as_str(), next, "{arms}");
        }
    }

    #[test]
    fn first_seen_days_bound_the_users_first_seen_time() {
        let scenario = id(ScenarioId::parse, "s");
        // Days start at their number times a day, for the test.
        let day = |text: &str| {
            text.strip_prefix("day")
                .and_then(|n| n.parse::<i64>().ok())
                .map(|n| n * 86_400_000)
        };
        let seen = |ms: i64| UserState {
            first_seen_ms: Some(ms),
            ..UserState::default()
        };
        let node = branch(r#"{ when = { firstSeenFrom = "day1", firstSeenTo = "day2" }, next = "a" }"#);
        for (ms, holds) in [
            (86_399_999, false),
            (86_400_000, true),
            (3 * 86_400_000 - 1, true),
            (3 * 86_400_000, false),
        ] {
            assert_eq!(node.decide(&scenario, &seen(ms), day).arm.is_some(), holds, "{ms}");
        }
        assert_eq!(
            node.decide(&scenario, &UserState::default(), day).arm,
            None,
            "never seen"
        );
    }
}
