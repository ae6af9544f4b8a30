//! Cross-tabulations: every question's answers of a scenario counted by one
//! dimension, the A/B arm the question was asked in (as answered) or what the
//! user's record says now (first source, a tag, a field). Pure: the reports
//! read answers and users a page at a time and [`Tally::add`] each answer;
//! [`Engine::cross_tab`] lays the tally out as the funnel is laid out.

use super::Engine;
use crate::ids::ScenarioId;
use crate::scenario::Node;
use crate::values::FieldValue;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// Columns a cross-tab keeps apart; answers of further values (a free-text
/// field, say) are counted together in [`OTHER`]. Bounds memory and the table.
pub(crate) const MAX_COLUMNS: usize = 50;
/// The column of answers whose value had no column of its own left.
pub(crate) const OTHER: &str = "*other";
/// The column of answers without the dimension (no source, no arm, no field).
pub(crate) const NONE: &str = "";
const TAG_WITH: &str = "with";
const TAG_WITHOUT: &str = "without";
const MAX_TAG_CHARS: usize = 100;

/// What `?by=` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CrossBy {
    /// The user's first source.
    Source,
    /// Whether the user holds the tag.
    Tag(String),
    /// The A/B arm the question was asked in.
    Variant,
    /// The user's field.
    Field(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CrossByError {
    #[error("by={0:?} is not a dimension: use source, variant, tag:{{tag}} or field:{{name}}")]
    Unknown(String),
    #[error("by=tag: needs a tag of 1 to {MAX_TAG_CHARS} characters")]
    BadTag,
    #[error("by=field:{0:?} is not a field name ([a-z][a-z0-9_]{{0,39}})")]
    BadField(String),
}

/// The user as a cross-tab sees them (their record now).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserView<'a> {
    pub(crate) first_source: Option<&'a str>,
    pub(crate) tags: &'a [String],
    pub(crate) fields: &'a BTreeMap<String, FieldValue>,
}

impl CrossBy {
    pub(crate) fn parse(raw: &str) -> Result<Self, CrossByError> {
        match raw {
            "source" => Ok(CrossBy::Source),
            "variant" => Ok(CrossBy::Variant),
            _ => {
                if let Some(tag) = raw.strip_prefix("tag:") {
                    if tag.trim().is_empty() || tag.chars().count() > MAX_TAG_CHARS || tag.contains('\0') {
                        return Err(CrossByError::BadTag);
                    }
                    Ok(CrossBy::Tag(tag.to_owned()))
                } else if let Some(name) = raw.strip_prefix("field:") {
                    if !crate::scenario::is_field_name(name) {
                        return Err(CrossByError::BadField(name.to_owned()));
                    }
                    Ok(CrossBy::Field(name.to_owned()))
                } else {
                    Err(CrossByError::Unknown(raw.to_owned()))
                }
            }
        }
    }

    /// As `?by=` writes it.
    pub(crate) fn as_query(&self) -> String {
        match self {
            CrossBy::Source => "source".to_owned(),
            CrossBy::Variant => "variant".to_owned(),
            CrossBy::Tag(tag) => format!("tag:{tag}"),
            CrossBy::Field(name) => format!("field:{name}"),
        }
    }

    /// Whether the column needs the user's record (the arm is on the answer).
    pub(crate) fn reads_users(&self) -> bool {
        !matches!(self, CrossBy::Variant)
    }

    /// The column of an answer asked in arm `variant` by a user whose record
    /// is `user` (`None`: no record).
    pub(crate) fn column(&self, variant: Option<&str>, user: Option<&UserView<'_>>) -> String {
        match self {
            CrossBy::Variant => variant.unwrap_or(NONE).to_owned(),
            CrossBy::Source => user.and_then(|user| user.first_source).unwrap_or(NONE).to_owned(),
            CrossBy::Tag(tag) => {
                let tagged = user.is_some_and(|user| user.tags.contains(tag));
                (if tagged { TAG_WITH } else { TAG_WITHOUT }).to_owned()
            }
            CrossBy::Field(name) => user
                .and_then(|user| user.fields.get(name))
                .map_or_else(|| NONE.to_owned(), FieldValue::as_text),
        }
    }

    /// How a column is shown: a source by its label, a tag's two columns in
    /// words, "none" for [`NONE`].
    fn label(&self, key: &str, source_labels: &BTreeMap<String, String>) -> String {
        match (self, key) {
            (_, OTHER) => "その他".to_owned(),
            (CrossBy::Tag(tag), TAG_WITH) => format!("{tag} あり"),
            (CrossBy::Tag(tag), _) => format!("{tag} なし"),
            (CrossBy::Source, NONE) => "(経路なし)".to_owned(),
            (CrossBy::Variant, NONE) => "(分岐なし)".to_owned(),
            (CrossBy::Field(_), NONE) => "(未設定)".to_owned(),
            (CrossBy::Source, key) => source_labels.get(key).cloned().unwrap_or_else(|| key.to_owned()),
            (_, key) => key.to_owned(),
        }
    }
}

/// Answers counted so far, by node, column and (for choice questions) value.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    /// The loaded scenario's questions: answers to other nodes (removed
    /// since, or legacy records) are not counted, and take no column.
    question_nodes: HashSet<String>,
    /// Survey nodes: their values are counted (a free-text question's are
    /// not: they would grow without bound).
    choice_nodes: HashSet<String>,
    /// Answers per column, over every node.
    columns: BTreeMap<String, u64>,
    answered: BTreeMap<String, BTreeMap<String, u64>>,
    choices: BTreeMap<String, BTreeMap<String, BTreeMap<String, u64>>>,
}

impl Tally {
    /// Counts `value` (`None` when redacted or not text) to `column` for the
    /// answer to `node`, if `node` is one of the scenario's questions. Beyond
    /// [`MAX_COLUMNS`] values (in the order met) a new value goes to
    /// [`OTHER`]; [`NONE`] always has its own column.
    pub(crate) fn add(&mut self, node: &str, value: Option<&str>, column: String) {
        if !self.question_nodes.contains(node) {
            return;
        }
        let own = self.columns.keys().filter(|key| key.as_str() != NONE).count();
        let column = if column == NONE || self.columns.contains_key(&column) || own < MAX_COLUMNS {
            column
        } else {
            OTHER.to_owned()
        };
        *self.columns.entry(column.clone()).or_default() += 1;
        *self
            .answered
            .entry(node.to_owned())
            .or_default()
            .entry(column.clone())
            .or_default() += 1;
        if let Some(value) = value
            && self.choice_nodes.contains(node)
        {
            *self
                .choices
                .entry(node.to_owned())
                .or_default()
                .entry(value.to_owned())
                .or_default()
                .entry(column)
                .or_default() += 1;
        }
    }
}

/// A cross-tab as `GET /admin/scenarios/{id}/results?by=` answers it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CrossTab {
    /// As asked: `source`, `variant`, `tag:{tag}` or `field:{name}`.
    pub(crate) by: String,
    /// In key order, "none" and "other" last.
    pub(crate) columns: Vec<Column>,
    pub(crate) nodes: Vec<CrossNode>,
    /// Whether some values were counted together in "other".
    pub(crate) capped: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Column {
    pub(crate) key: String,
    pub(crate) label: String,
}

/// One question's answers by column.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CrossNode {
    pub(crate) node_id: String,
    /// `survey`, `text_question` or `date_question`.
    pub(crate) kind: &'static str,
    pub(crate) text: String,
    /// Answers per column key (every column listed, zeros included).
    pub(crate) answered: BTreeMap<String, u64>,
    pub(crate) total: u64,
    /// A choice question's choices, in the scenario's order, then values it no
    /// longer offers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) choices: Vec<CrossChoice>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CrossChoice {
    pub(crate) value: String,
    /// `None` for a value the current scenario no longer offers.
    pub(crate) label: Option<String>,
    /// Per column key.
    pub(crate) counts: BTreeMap<String, u64>,
    /// Per column key: the count over the column's answers to the question
    /// (absent where the column has none).
    pub(crate) shares: BTreeMap<String, f64>,
    pub(crate) total: u64,
}

impl Engine {
    /// An empty tally for `scenario`, which knows its choice questions.
    pub(crate) fn tally_for(&self, scenario: &ScenarioId) -> Option<Tally> {
        let loaded = self.scenario(scenario)?;
        let ids = |keep: fn(&Node) -> bool| -> HashSet<String> {
            loaded
                .scenario
                .nodes
                .iter()
                .filter(|node| keep(node))
                .map(|node| node.id().to_string())
                .collect()
        };
        Some(Tally {
            question_nodes: ids(|node| matches!(node, Node::Survey(_) | Node::TextQuestion(_) | Node::DateQuestion(_))),
            choice_nodes: ids(|node| matches!(node, Node::Survey(_))),
            ..Tally::default()
        })
    }

    /// The tally laid out: the scenario's questions in file order, each with
    /// its answers and choices per column; `source_labels` names sources.
    pub(crate) fn cross_tab(
        &self,
        scenario: &ScenarioId,
        by: &CrossBy,
        tally: &Tally,
        source_labels: &BTreeMap<String, String>,
    ) -> Option<CrossTab> {
        let loaded = self.scenario(scenario)?;
        let keys: Vec<&str> = match by {
            // Both columns, always, "with" first.
            CrossBy::Tag(_) => vec![TAG_WITH, TAG_WITHOUT],
            _ => {
                let mut keys: Vec<&str> = tally.columns.keys().map(String::as_str).collect();
                // Values in order, then "none", then "other".
                keys.sort_by_key(|key| (*key == NONE || *key == OTHER, *key == OTHER, *key));
                keys
            }
        };
        let columns: Vec<Column> = keys
            .into_iter()
            .map(|key| Column {
                key: key.to_owned(),
                label: by.label(key, source_labels),
            })
            .collect();
        let empty = BTreeMap::new();
        let per_column = |counted: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
            columns
                .iter()
                .map(|column| (column.key.clone(), counted.get(&column.key).copied().unwrap_or(0)))
                .collect()
        };
        let nodes = loaded
            .scenario
            .nodes
            .iter()
            .filter_map(|node| {
                let (kind, text, offered) = match node {
                    Node::Survey(survey) => (
                        "survey",
                        survey.text.clone(),
                        survey
                            .choices
                            .iter()
                            .map(|choice| (choice.value.clone(), Some(choice.label.clone())))
                            .collect::<Vec<_>>(),
                    ),
                    Node::TextQuestion(question) => ("text_question", question.text.clone(), Vec::new()),
                    Node::DateQuestion(question) => ("date_question", question.text.clone(), Vec::new()),
                    _ => return None,
                };
                let id = node.id().as_str();
                let answered = per_column(tally.answered.get(id).unwrap_or(&empty));
                let counted = tally.choices.get(id);
                let mut values = offered;
                for value in counted.into_iter().flat_map(BTreeMap::keys) {
                    if !values.iter().any(|(offered, _)| offered == value) {
                        values.push((value.clone(), None));
                    }
                }
                let choices = if kind == "survey" {
                    values
                        .into_iter()
                        .map(|(value, label)| {
                            let counts = per_column(counted.and_then(|values| values.get(&value)).unwrap_or(&empty));
                            let shares = counts
                                .iter()
                                .filter_map(|(key, count)| {
                                    let whole = answered.get(key).copied().unwrap_or(0);
                                    #[allow(clippy::cast_precision_loss)]
                                    let share = (whole > 0).then(|| *count as f64 / whole as f64)?;
                                    Some((key.clone(), share))
                                })
                                .collect();
                            CrossChoice {
                                total: counts.values().sum(),
                                value,
                                label,
                                counts,
                                shares,
                            }
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                Some(CrossNode {
                    node_id: id.to_owned(),
                    kind,
                    text,
                    total: answered.values().sum(),
                    answered,
                    choices,
                })
            })
            .collect();
        Some(CrossTab {
            by: by.as_query(),
            capped: tally.columns.contains_key(OTHER),
            columns,
            nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load_dir;
    use std::sync::Arc;

    fn engine() -> Engine {
        let scenarios = load_dir(&crate::repo_path("tests/fixtures/split")).expect("the fixture loads");
        Engine::new(Arc::new(scenarios))
    }

    fn ab() -> ScenarioId {
        ScenarioId::parse("ab").expect("valid")
    }

    #[test]
    fn by_parses_each_dimension_or_says_what_is_wrong() {
        let cases: [(&str, Result<CrossBy, &str>); 10] = [
            ("source", Ok(CrossBy::Source)),
            ("variant", Ok(CrossBy::Variant)),
            ("tag:src_instagram", Ok(CrossBy::Tag("src_instagram".into()))),
            ("tag:広告", Ok(CrossBy::Tag("広告".into()))),
            ("field:plan", Ok(CrossBy::Field("plan".into()))),
            ("tag:", Err("needs a tag")),
            ("tag: ", Err("needs a tag")),
            ("field:Plan", Err("\"Plan\" is not a field name")),
            ("sources", Err("by=\"sources\" is not a dimension")),
            ("", Err("is not a dimension")),
        ];
        for (raw, expected) in cases {
            match (CrossBy::parse(raw), expected) {
                (Ok(by), Ok(expected)) => {
                    assert_eq!(by, expected, "{raw}");
                    assert_eq!(by.as_query(), raw, "round trip");
                }
                (Err(error), Err(words)) => assert!(error.to_string().contains(words), "{raw}: {error}"),
                (got, _) => panic!("{raw}: {got:?}"),
            }
        }
    }

    #[test]
    fn each_dimension_puts_an_answer_in_its_column() {
        let tags = vec!["vip".to_owned()];
        let fields: BTreeMap<String, FieldValue> = [
            ("plan".to_owned(), FieldValue::Text("gold".into())),
            ("age".to_owned(), FieldValue::Integer(35)),
        ]
        .into();
        let user = UserView {
            first_source: Some("poster"),
            tags: &tags,
            fields: &fields,
        };
        let bare_fields = BTreeMap::new();
        let bare = UserView {
            first_source: None,
            tags: &[],
            fields: &bare_fields,
        };
        let cases = [
            (CrossBy::Source, Some(user), None, "poster"),
            (CrossBy::Source, Some(bare), None, NONE),
            (CrossBy::Source, None, None, NONE),
            (CrossBy::Variant, Some(user), Some("B"), "B"),
            (CrossBy::Variant, None, None, NONE),
            (CrossBy::Tag("vip".into()), Some(user), None, TAG_WITH),
            (CrossBy::Tag("vip".into()), Some(bare), None, TAG_WITHOUT),
            (CrossBy::Tag("vip".into()), None, None, TAG_WITHOUT),
            (CrossBy::Field("plan".into()), Some(user), None, "gold"),
            (CrossBy::Field("age".into()), Some(user), None, "35"),
            (CrossBy::Field("plan".into()), Some(bare), None, NONE),
        ];
        for (by, user, variant, expected) in cases {
            assert_eq!(by.column(variant, user.as_ref()), expected, "{by:?} {user:?}");
        }
        assert!(!CrossBy::Variant.reads_users());
        assert!(CrossBy::Source.reads_users());
    }

    #[test]
    fn the_layout_counts_each_choice_per_column_with_its_share() {
        let engine = engine();
        let mut tally = engine.tally_for(&ab()).expect("loaded");
        let answers = [
            ("rating", "good", "instagram_dec"),
            ("rating", "good", "instagram_dec"),
            ("rating", "bad", "instagram_dec"),
            ("rating", "good", NONE),
            ("rating", "gone", "poster"),
            ("unknown_node", "x", "poster"),
        ];
        for (node, value, column) in answers {
            tally.add(node, Some(value), column.to_owned());
        }
        let labels: BTreeMap<String, String> = [("instagram_dec".to_owned(), "Instagram 12月".to_owned())].into();
        let tab = engine
            .cross_tab(&ab(), &CrossBy::Source, &tally, &labels)
            .expect("loaded");
        assert_eq!(tab.by, "source");
        let keys: Vec<(&str, &str)> = tab
            .columns
            .iter()
            .map(|column| (column.key.as_str(), column.label.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("instagram_dec", "Instagram 12月"),
                ("poster", "poster"),
                (NONE, "(経路なし)")
            ],
            "sorted, labelled, none last"
        );
        assert_eq!(tab.nodes.len(), 1, "only the scenario's questions");
        let rating = &tab.nodes[0];
        assert_eq!(rating.total, 5);
        assert_eq!(rating.answered["instagram_dec"], 3);
        let values: Vec<(&str, Option<&str>, u64)> = rating
            .choices
            .iter()
            .map(|choice| (choice.value.as_str(), choice.label.as_deref(), choice.total))
            .collect();
        assert_eq!(
            values,
            [("good", Some("Good"), 3), ("bad", Some("Bad"), 1), ("gone", None, 1)],
            "offered choices in order, then values no longer offered"
        );
        let good = &rating.choices[0];
        assert_eq!(good.counts["instagram_dec"], 2);
        assert_eq!(good.counts["poster"], 0);
        assert!((good.shares["instagram_dec"] - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(good.shares[NONE], 1.0);
        assert_eq!(good.shares["poster"], 0.0);
        assert!(!tab.capped);
    }

    #[test]
    fn a_tag_has_both_columns_and_many_values_share_other() {
        let engine = engine();
        let mut tally = engine.tally_for(&ab()).expect("loaded");
        tally.add("rating", Some("good"), TAG_WITHOUT.to_owned());
        let tab = engine
            .cross_tab(&ab(), &CrossBy::Tag("vip".into()), &tally, &BTreeMap::new())
            .expect("loaded");
        let keys: Vec<&str> = tab.columns.iter().map(|column| column.key.as_str()).collect();
        assert_eq!(keys, [TAG_WITH, TAG_WITHOUT]);
        assert_eq!(tab.columns[0].label, "vip あり");
        assert_eq!(tab.nodes[0].answered[TAG_WITH], 0);

        let mut tally = engine.tally_for(&ab()).expect("loaded");
        for n in 0..MAX_COLUMNS + 5 {
            tally.add("rating", Some("good"), format!("v{n:03}"));
        }
        // A value seen before keeps its column.
        tally.add("rating", Some("bad"), "v000".to_owned());
        // "None" keeps its own column past the cap.
        tally.add("rating", Some("bad"), NONE.to_owned());
        let tab = engine
            .cross_tab(&ab(), &CrossBy::Field("plan".into()), &tally, &BTreeMap::new())
            .expect("loaded");
        assert_eq!(tab.columns.len(), MAX_COLUMNS + 2);
        let last: Vec<&str> = tab.columns[MAX_COLUMNS..]
            .iter()
            .map(|column| column.key.as_str())
            .collect();
        assert_eq!(last, [NONE, OTHER]);
        assert_eq!(tab.nodes[0].answered[OTHER], 5);
        assert_eq!(tab.nodes[0].answered["v000"], 2);
        assert_eq!(tab.nodes[0].answered[NONE], 1);
        assert_eq!(tab.nodes[0].total, MAX_COLUMNS as u64 + 7);
        assert!(tab.capped);
    }

    #[test]
    fn only_the_scenarios_questions_are_tallied_and_free_text_only_as_answered() {
        let mut tally = Tally {
            question_nodes: ["comment".to_owned(), "rating".to_owned()].into(),
            choice_nodes: ["rating".to_owned()].into(),
            ..Tally::default()
        };
        tally.add("comment", Some("anything at all"), NONE.to_owned());
        assert!(tally.choices.is_empty());
        assert_eq!(tally.answered["comment"][NONE], 1);
        // A removed question or a legacy record without a node: no count,
        // no column.
        tally.add("", Some("good"), "poster".to_owned());
        tally.add("gone", Some("good"), "poster".to_owned());
        assert!(!tally.columns.contains_key("poster"));
        assert!(!tally.answered.contains_key("gone"));
    }
}
