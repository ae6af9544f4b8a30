//! A scenario's answers as operators read them: one row per user and run (a
//! campaign's run, or the user's own), newest first, with the user's cached
//! display name, a column per question; filtered by days and by a tag the
//! user has now.
//!
//! Newest first without an index on a time that takes every answer's write:
//! each question node's latest answers come from the index the results'
//! latest free-text answers already use (`scenarioId`, `nodeId`,
//! `answeredAt` descending), at most a page's worth per node; a row's
//! newest answer is among its node's latest (every answer above it in that
//! list is another row, newer), so merging the lists finds the page's rows.
//! Their other answers are then read by user. A page reads at most
//! `nodes × (ROWS + 10)` answers, the rows' own answers and their users'
//! records.

use crate::engine::Engine;
use crate::engine::results::{DayRange, QuestionOutline, RangeError};
use crate::ids::ScenarioId;
use crate::store::{ListedAnswer, Store, StoreError};
use crate::values::AnswerValue;
use std::collections::{BTreeMap, HashMap};

/// Rows a page shows.
pub(crate) const ROWS: usize = 50;
/// Answers a page reads of one user, at most (every node of every run).
const ANSWERS_PER_USER_QUERY: u32 = 1000;

#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerRunsError {
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error(transparent)]
    BadRange(#[from] RangeError),
    #[error("that page link is not valid: start from the first page")]
    BadCursor,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A row's key: the user and the campaign whose run it is (`None`: not a
/// campaign's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RunKey {
    pub(crate) user: String,
    pub(crate) campaign: Option<String>,
}

impl RunKey {
    fn of(answer: &ListedAnswer) -> Self {
        Self {
            user: answer.line_user_id.clone(),
            campaign: answer.campaign_id.clone(),
        }
    }
}

/// Where a page ends: its last row's newest answer time and key. Rows go by
/// time, newest first, then by key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) ms: i64,
    pub(crate) key: RunKey,
}

impl Cursor {
    /// `{ms}.{user}.{campaign or -}`: ids are letters and digits only.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{}.{}.{}",
            self.ms,
            self.key.user,
            self.key.campaign.as_deref().unwrap_or("-")
        )
    }

    pub(crate) fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let ms = parts.next()?.parse().ok()?;
        let user = parts.next().filter(|user| crate::ids::is_line_user_id(user))?;
        let campaign = match parts.next()? {
            "-" => None,
            id => Some(crate::ids::DocumentHexId::parse(id)?.as_str().to_owned()),
        };
        parts.next().is_none().then(|| Self {
            ms,
            key: RunKey {
                user: user.to_owned(),
                campaign,
            },
        })
    }

    /// Whether a row at `ms` with `key` comes after this cursor.
    fn before(&self, ms: i64, key: &RunKey) -> bool {
        ms < self.ms || (ms == self.ms && *key > self.key)
    }
}

fn answered_ms(answer: &ListedAnswer) -> Option<i64> {
    answer.answered_at.map(firestore::jiff::Timestamp::as_millisecond)
}

/// The newest answer time of each run among `answers` in `[from, to)`.
fn newest_by_run<'a>(
    answers: impl IntoIterator<Item = &'a ListedAnswer>,
    (from, to): (Option<i64>, Option<i64>),
) -> HashMap<RunKey, i64> {
    let mut newest: HashMap<RunKey, i64> = HashMap::new();
    for answer in answers {
        let Some(ms) = answered_ms(answer) else { continue };
        if from.is_some_and(|from| ms < from) || to.is_some_and(|to| ms >= to) {
            continue;
        }
        let at = newest.entry(RunKey::of(answer)).or_insert(ms);
        *at = (*at).max(ms);
    }
    newest
}

/// Runs in page order (newest answer first, then by key), after `after`, at
/// most `limit`.
fn in_page_order(newest: HashMap<RunKey, i64>, after: Option<&Cursor>, limit: usize) -> Vec<(RunKey, i64)> {
    let mut runs: Vec<(RunKey, i64)> = newest
        .into_iter()
        .filter(|(key, ms)| after.is_none_or(|cursor| cursor.before(*ms, key)))
        .collect();
    runs.sort_by(|(a_key, a_ms), (b_key, b_ms)| b_ms.cmp(a_ms).then_with(|| a_key.cmp(b_key)));
    runs.truncate(limit);
    runs
}

/// The page's rows from the nodes' latest answers: candidates in page order,
/// then kept only when their newest answer of all (`all`, every answer of
/// their users) is the one that placed them, so a run shown on an earlier
/// page (by a newer answer) is not shown again.
pub(crate) fn pick_runs(
    latest: &[ListedAnswer],
    all: &[ListedAnswer],
    range: (Option<i64>, Option<i64>),
    after: Option<&Cursor>,
    limit: usize,
) -> Vec<(RunKey, i64)> {
    let candidates = in_page_order(newest_by_run(latest, range), after, limit);
    let truly = newest_by_run(all, range);
    candidates
        .into_iter()
        .filter(|(key, ms)| truly.get(key) == Some(ms))
        .collect()
}

/// One row: a user's run and their answers, a cell per question.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunRow {
    pub(crate) key: RunKey,
    pub(crate) name: Option<String>,
    /// The newest answer's time (ms since the epoch).
    pub(crate) latest_ms: i64,
    pub(crate) cells: Vec<String>,
}

/// What a cell shows: a choice's label (its value when the scenario no
/// longer offers it), a typed answer as typed, nothing once redacted.
fn cell(question: &QuestionOutline, value: Option<&AnswerValue>) -> String {
    match value {
        Some(AnswerValue::Text(text)) => question
            .choices
            .iter()
            .find(|(choice, _)| choice == text)
            .map_or_else(|| text.clone(), |(_, label)| label.clone()),
        Some(number) => number.to_string(),
        None => String::new(),
    }
}

/// The rows of `runs` from their users' answers.
pub(crate) fn rows_of(
    runs: &[(RunKey, i64)],
    answers: &[ListedAnswer],
    questions: &[QuestionOutline],
    names: &HashMap<String, String>,
) -> Vec<RunRow> {
    let mut by_run: BTreeMap<&RunKey, Vec<&ListedAnswer>> = BTreeMap::new();
    for answer in answers {
        let key = RunKey::of(answer);
        if let Some((key, _)) = runs.iter().find(|(run, _)| *run == key) {
            by_run.entry(key).or_default().push(answer);
        }
    }
    runs.iter()
        .map(|(key, ms)| {
            let of_run = by_run.get(key).map(Vec::as_slice).unwrap_or_default();
            RunRow {
                key: key.clone(),
                name: names.get(&key.user).cloned(),
                latest_ms: *ms,
                cells: questions
                    .iter()
                    .map(|question| {
                        of_run
                            .iter()
                            .find(|answer| answer.node_id == question.node)
                            .map(|answer| cell(question, answer.value.as_ref()))
                            .unwrap_or_default()
                    })
                    .collect(),
            }
        })
        .collect()
}

/// What a page asks for (the console's query, as typed).
#[derive(Debug, Default)]
pub(crate) struct RunsQuery<'a> {
    pub(crate) from: Option<&'a str>,
    pub(crate) to: Option<&'a str>,
    /// Only users who have this tag now.
    pub(crate) tag: Option<&'a str>,
    pub(crate) after: Option<&'a str>,
}

/// One page of rows.
#[derive(Debug)]
pub(crate) struct RunsPage {
    pub(crate) questions: Vec<QuestionOutline>,
    pub(crate) rows: Vec<RunRow>,
    /// The next page's cursor, when there may be one.
    pub(crate) next: Option<String>,
    /// The scenario's zone, for the rows' times.
    pub(crate) zone: chrono_tz::Tz,
}

#[derive(Clone)]
pub(crate) struct AnswerRuns {
    engine: Engine,
    store: Store,
}

impl AnswerRuns {
    pub(crate) fn new(engine: Engine, store: Store) -> Self {
        Self { engine, store }
    }

    pub(crate) async fn page(&self, scenario: &str, query: &RunsQuery<'_>) -> Result<RunsPage, AnswerRunsError> {
        let unknown = || AnswerRunsError::UnknownScenario(scenario.to_owned());
        let id = ScenarioId::parse(scenario).map_err(|_| unknown())?;
        let questions = self.engine.question_outlines(&id).ok_or_else(unknown)?;
        let zone = self.engine.zone_of(&id);
        let range = self.engine.range_ms(&id, DayRange::parse(query.from, query.to)?);
        let after = match query.after.filter(|after| !after.is_empty()) {
            Some(text) => Some(Cursor::decode(text).ok_or(AnswerRunsError::BadCursor)?),
            None => None,
        };
        // Ties at the cursor's time may hold runs shown already: read a few more.
        let per_node = u32::try_from(ROWS + 10).unwrap_or(u32::MAX);
        let mut latest = Vec::new();
        let mut more = false;
        for question in &questions {
            let answers = self
                .store
                .recent_answers(
                    scenario,
                    &question.node,
                    range,
                    after.as_ref().map(|cursor| cursor.ms),
                    per_node,
                )
                .await?;
            more |= answers.len() >= per_node as usize;
            latest.extend(answers);
        }
        let candidates = in_page_order(newest_by_run(&latest, range), after.as_ref(), ROWS);
        let mut users: Vec<String> = candidates.iter().map(|(key, _)| key.user.clone()).collect();
        users.sort_unstable();
        users.dedup();
        let all = self
            .store
            .answers_of_users(scenario, &users, ANSWERS_PER_USER_QUERY)
            .await?;
        let runs = pick_runs(&latest, &all, range, after.as_ref(), ROWS);
        let facts = self.store.users_by_id(&users).await?;
        let tagged: Vec<&str> = facts
            .iter()
            .filter(|user| query.tag.is_none_or(|tag| user.tags.iter().any(|has| has == tag)))
            .map(|user| user.id.as_str())
            .collect();
        let names: HashMap<String, String> = facts
            .iter()
            .filter_map(|user| Some((user.id.clone(), user.display_name.clone()?)))
            .collect();
        let shown: Vec<(RunKey, i64)> = runs
            .into_iter()
            .filter(|(key, _)| query.tag.is_none() || tagged.contains(&key.user.as_str()))
            .collect();
        // The cursor is the last candidate, shown or not: a filter never makes
        // a page repeat or skip one.
        let next = candidates
            .last()
            .filter(|_| more || candidates.len() >= ROWS)
            .map(|(key, ms)| {
                Cursor {
                    ms: *ms,
                    key: key.clone(),
                }
                .encode()
            });
        Ok(RunsPage {
            rows: rows_of(&shown, &all, &questions, &names),
            questions,
            next,
            zone,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "U0000000000000000000000000000000a";
    const B: &str = "U0000000000000000000000000000000b";
    const C: &str = "U0000000000000000000000000000000c";
    const CAMPAIGN: &str = "0123456789abcdef0123456789abcdef01234567";

    fn answer(user: &str, node: &str, value: &str, ms: i64, campaign: Option<&str>) -> ListedAnswer {
        ListedAnswer {
            id: format!("{user}-{node}-{ms}"),
            scenario_id: "lunch".to_owned(),
            node_id: node.to_owned(),
            line_user_id: user.to_owned(),
            value: Some(AnswerValue::Text(value.to_owned())),
            value_type: String::new(),
            redacted: false,
            tags: Vec::new(),
            scenario_version: Some(1),
            answered_at: firestore::FirestoreInstant::from_millisecond(ms).ok(),
            webhook_event_id: None,
            variant: None,
            campaign_id: campaign.map(str::to_owned),
        }
    }

    fn key(user: &str, campaign: Option<&str>) -> RunKey {
        RunKey {
            user: user.to_owned(),
            campaign: campaign.map(str::to_owned),
        }
    }

    #[test]
    fn runs_come_newest_first_once_each_and_pages_continue_where_they_stopped() {
        let all = vec![
            answer(A, "rating", "good", 100, None),
            answer(A, "comment", "ok", 400, None),
            answer(B, "rating", "bad", 300, None),
            answer(B, "rating", "good", 500, Some(CAMPAIGN)),
            answer(C, "rating", "good", 300, None),
        ];
        let cursor = |ms: i64, k: RunKey| Cursor { ms, key: k };
        // (latest lists, after, limit, expected)
        type Case = (Vec<ListedAnswer>, Option<Cursor>, usize, Vec<(RunKey, i64)>);
        let cases: Vec<Case> = vec![
            (
                all.clone(),
                None,
                10,
                vec![
                    (key(B, Some(CAMPAIGN)), 500),
                    (key(A, None), 400),
                    (key(B, None), 300),
                    (key(C, None), 300),
                ],
            ),
            (
                all.clone(),
                None,
                2,
                vec![(key(B, Some(CAMPAIGN)), 500), (key(A, None), 400)],
            ),
            // The next page: A's older answer (100) does not bring A back.
            (
                all.iter().filter(|a| answered_ms(a) <= Some(400)).cloned().collect(),
                Some(cursor(400, key(A, None))),
                10,
                vec![(key(B, None), 300), (key(C, None), 300)],
            ),
            // A tie at the cursor's time: the run after it in key order follows.
            (
                all.iter().filter(|a| answered_ms(a) <= Some(300)).cloned().collect(),
                Some(cursor(300, key(B, None))),
                10,
                vec![(key(C, None), 300)],
            ),
        ];
        for (latest, after, limit, expected) in cases {
            assert_eq!(
                pick_runs(&latest, &all, (None, None), after.as_ref(), limit),
                expected,
                "{after:?}"
            );
        }
        // A day range counts only its answers: A's newest in range is 100.
        assert_eq!(
            pick_runs(&all, &all, (Some(0), Some(200)), None, 10),
            vec![(key(A, None), 100)]
        );
    }

    #[test]
    fn a_row_has_a_cell_per_question_with_choice_labels() {
        let questions = vec![
            QuestionOutline {
                node: "rating".to_owned(),
                kind: "survey",
                text: "How was it?".to_owned(),
                choices: vec![("good".to_owned(), "とても良い".to_owned())],
            },
            QuestionOutline {
                node: "comment".to_owned(),
                kind: "text_question",
                text: "Anything else?".to_owned(),
                choices: Vec::new(),
            },
            QuestionOutline {
                node: "age".to_owned(),
                kind: "text_question",
                text: "Age?".to_owned(),
                choices: Vec::new(),
            },
        ];
        let mut redacted = answer(A, "age", "", 90, None);
        redacted.value = None;
        let answers = vec![
            answer(A, "rating", "good", 100, None),
            answer(A, "comment", "駐車場が狭い", 90, None),
            redacted,
            answer(A, "rating", "gone", 50, Some(CAMPAIGN)),
        ];
        let names = HashMap::from([(A.to_owned(), "田中".to_owned())]);
        let rows = rows_of(
            &[(key(A, None), 100), (key(A, Some(CAMPAIGN)), 50)],
            &answers,
            &questions,
            &names,
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].cells, ["とても良い", "駐車場が狭い", ""]);
        assert_eq!(rows[0].name.as_deref(), Some("田中"));
        assert_eq!(
            rows[1].cells,
            ["gone", "", ""],
            "a value no longer offered shows as stored"
        );
    }

    #[test]
    fn cursors_read_back_and_anything_else_is_refused() {
        let cursor = Cursor {
            ms: 1_700_000_000_000,
            key: key(A, Some(CAMPAIGN)),
        };
        assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        let plain = Cursor {
            ms: -5,
            key: key(B, None),
        };
        assert_eq!(Cursor::decode(&plain.encode()), Some(plain));
        for bad in [
            "",
            "x",
            "1.U1.-",
            &format!("1.{A}.zz"),
            &format!("1.{A}.-.more"),
            &format!("a.{A}.-"),
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }
}
