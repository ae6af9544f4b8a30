//! A scenario's answers as operators read them: one row per user and run (a
//! campaign's run, or the user's own), newest first, with the user's cached
//! display name, a column per question; filtered by days and by a tag the
//! user has now.
//!
//! Newest first without an index on a time that takes every answer's write:
//! each question node's latest answers come from the index the results'
//! latest free-text answers already use (`scenarioId`, `nodeId`,
//! `answeredAt` descending), at most a page's worth per node. An answer's id
//! is the hash of (scenario, node, user), so a node's list holds one answer
//! per user: every answer above a run's newest in that list is another run's,
//! no older. So a run placed among the first `ROWS` by its newest answer is in
//! the lists, as long as its time is above the oldest time of every full list
//! (below it a list may have been cut inside a tie); runs at or below it wait
//! for the next batch. Their other answers are then read by user. A batch
//! reads at most `nodes × ROWS` answers, the rows' own answers and their
//! users' records; a page reads up to `BATCHES` batches to fill itself when
//! a tag (or runs met again by an older answer) leaves a batch short.

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
        let Some(ms) = answered_ms(answer).filter(|_| in_range(answer, (from, to))) else {
            continue;
        };
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

/// The answers to the scenario's questions: one to a node it no longer has
/// places no row and fills no cell.
fn of_questions(answers: Vec<ListedAnswer>, questions: &[QuestionOutline]) -> Vec<ListedAnswer> {
    answers
        .into_iter()
        .filter(|answer| questions.iter().any(|question| question.node == answer.node_id))
        .collect()
}

/// The candidates whose newest answer of all (`all`: every answer of their
/// users) is the one that placed them, so a run shown on an earlier page (by
/// a newer answer) is not shown again.
fn keep_placed(
    candidates: Vec<(RunKey, i64)>,
    all: &[ListedAnswer],
    range: (Option<i64>, Option<i64>),
) -> Vec<(RunKey, i64)> {
    let truly = newest_by_run(all, range);
    candidates
        .into_iter()
        .filter(|(key, ms)| truly.get(key) == Some(ms))
        .collect()
}

/// The candidates of a batch: runs after `after` in page order, at most
/// `limit`, and of those only the ones placed above `complete_above` (the
/// newest time a full node list may have cut short: below it a run's newest
/// answer may be missing from the lists), unless none is (a tie wider than a
/// list: then the lists' order is all there is). Whether more may follow.
fn batch_candidates(
    latest: &[ListedAnswer],
    range: (Option<i64>, Option<i64>),
    after: Option<&Cursor>,
    limit: usize,
    complete_above: Option<i64>,
) -> (Vec<(RunKey, i64)>, bool) {
    let all = in_page_order(newest_by_run(latest, range), after, usize::MAX);
    let total = all.len();
    let mut safe: Vec<(RunKey, i64)> = match complete_above {
        Some(floor) if all.iter().any(|(_, ms)| *ms > floor) => all.into_iter().filter(|(_, ms)| *ms > floor).collect(),
        _ => all,
    };
    let more = complete_above.is_some() || safe.len() < total || safe.len() > limit;
    safe.truncate(limit);
    (safe, more)
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
        let mut after = match query.after.filter(|after| !after.is_empty()) {
            Some(text) => Some(Cursor::decode(text).ok_or(AnswerRunsError::BadCursor)?),
            None => None,
        };
        let asked = Asked {
            scenario,
            questions: &questions,
            range,
            tag: query.tag,
        };
        // A filter (or runs met again by an older answer) can leave a batch
        // short: read on, within a budget, to fill the page.
        let mut rows = Vec::new();
        let mut next = None;
        for _ in 0..BATCHES {
            let batch = self.batch(&asked, after.as_ref()).await?;
            rows.extend(batch.rows);
            next = batch.next;
            if rows.len() >= ROWS || next.is_none() {
                break;
            }
            after = next.clone();
        }
        Ok(RunsPage {
            rows,
            questions,
            next: next.map(|cursor| cursor.encode()),
            zone,
        })
    }

    /// Up to `ROWS` rows after `after`, and where the next batch starts.
    async fn batch(&self, asked: &Asked<'_>, after: Option<&Cursor>) -> Result<Batch, AnswerRunsError> {
        let per_node = u32::try_from(ROWS).unwrap_or(u32::MAX);
        let mut latest = Vec::new();
        let mut complete_above: Option<i64> = None;
        // The questions' lists at once: one round trip's wait, not one per question.
        let lists = futures::future::try_join_all(asked.questions.iter().map(|question| {
            self.store.recent_answers(
                asked.scenario,
                &question.node,
                asked.range,
                after.map(|cursor| cursor.ms),
                per_node,
            )
        }))
        .await?;
        for answers in lists {
            if answers.len() >= per_node as usize
                && let Some(oldest) = answers.last().and_then(answered_ms)
            {
                complete_above = Some(complete_above.map_or(oldest, |floor| floor.max(oldest)));
            }
            latest.extend(answers);
        }
        let (candidates, more) = batch_candidates(&latest, asked.range, after, ROWS, complete_above);
        let mut users: Vec<String> = candidates.iter().map(|(key, _)| key.user.clone()).collect();
        users.sort_unstable();
        users.dedup();
        let all = of_questions(
            self.store
                .answers_of_users(asked.scenario, &users, ANSWERS_PER_USER_QUERY)
                .await?,
            asked.questions,
        );
        let runs = keep_placed(candidates.clone(), &all, asked.range);
        let facts = self.store.users_by_id(&users).await?;
        let tagged: Vec<&str> = facts
            .iter()
            .filter(|user| asked.tag.is_none_or(|tag| user.tags.iter().any(|has| has == tag)))
            .map(|user| user.id.as_str())
            .collect();
        let names: HashMap<String, String> = facts
            .iter()
            .filter_map(|user| Some((user.id.clone(), user.display_name.clone()?)))
            .collect();
        let shown: Vec<(RunKey, i64)> = runs
            .into_iter()
            .filter(|(key, _)| asked.tag.is_none() || tagged.contains(&key.user.as_str()))
            .collect();
        // The cells hold the answers of the days asked, as the CSV does.
        let in_days: Vec<ListedAnswer> = all.into_iter().filter(|answer| in_range(answer, asked.range)).collect();
        // The cursor is the last candidate, shown or not: a filter never makes
        // a page repeat or skip one.
        let next = candidates.last().filter(|_| more).map(|(key, ms)| Cursor {
            ms: *ms,
            key: key.clone(),
        });
        Ok(Batch {
            rows: rows_of(&shown, &in_days, asked.questions, &names),
            next,
        })
    }
}

/// Batches a page reads at most to fill itself.
const BATCHES: usize = 4;

/// What a page asks of each batch.
struct Asked<'a> {
    scenario: &'a str,
    questions: &'a [QuestionOutline],
    range: (Option<i64>, Option<i64>),
    tag: Option<&'a str>,
}

/// One batch's rows and where the next starts.
struct Batch {
    rows: Vec<RunRow>,
    next: Option<Cursor>,
}

fn in_range(answer: &ListedAnswer, (from, to): (Option<i64>, Option<i64>)) -> bool {
    answered_ms(answer).is_some_and(|ms| from.is_none_or(|from| ms >= from) && to.is_none_or(|to| ms < to))
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
        let pick = |latest: &[ListedAnswer], range, after: Option<&Cursor>, limit| {
            let (candidates, _) = batch_candidates(latest, range, after, limit, None);
            keep_placed(candidates, &all, range)
        };
        for (latest, after, limit, expected) in cases {
            assert_eq!(
                pick(&latest, (None, None), after.as_ref(), limit),
                expected,
                "{after:?}"
            );
        }
        // A day range counts only its answers: A's newest in range is 100.
        assert_eq!(pick(&all, (Some(0), Some(200)), None, 10), vec![(key(A, None), 100)]);
    }

    #[test]
    fn runs_at_or_below_a_full_lists_oldest_time_wait_for_the_next_batch() {
        let latest = vec![
            answer(A, "rating", "good", 500, None),
            answer(B, "rating", "good", 300, None),
            answer(C, "comment", "x", 300, None),
        ];
        // (complete above, expected runs, more)
        let cases = [
            (
                None,
                vec![(key(A, None), 500), (key(B, None), 300), (key(C, None), 300)],
                false,
            ),
            (Some(300), vec![(key(A, None), 500)], true),
            // Nothing above it (a tie wider than a list): the lists' order.
            (
                Some(600),
                vec![(key(A, None), 500), (key(B, None), 300), (key(C, None), 300)],
                true,
            ),
        ];
        for (floor, expected, more) in cases {
            assert_eq!(
                batch_candidates(&latest, (None, None), None, 10, floor),
                (expected, more),
                "{floor:?}"
            );
        }
        // Cut to the limit: more follow.
        let (runs, more) = batch_candidates(&latest, (None, None), None, 2, None);
        assert_eq!((runs.len(), more), (2, true));
    }

    #[test]
    fn runs_in_one_millisecond_follow_the_cursor_in_key_order_and_old_nodes_are_left_out() {
        let mut b = answer(B, "rating", "good", 400, None);
        let mut a = answer(A, "rating", "good", 400, None);
        a.answered_at = firestore::FirestoreInstant::from_microsecond(400_300).ok();
        b.answered_at = firestore::FirestoreInstant::from_microsecond(400_700).ok();
        let latest = vec![a, b];
        let after = Cursor {
            ms: 400,
            key: key(A, None),
        };
        let (runs, _) = batch_candidates(&latest, (None, None), Some(&after), 10, None);
        assert_eq!(
            runs,
            vec![(key(B, None), 400)],
            "B, tied with A to the millisecond, comes next"
        );
        let questions = vec![QuestionOutline {
            node: "rating".to_owned(),
            kind: "survey",
            text: String::new(),
            choices: Vec::new(),
        }];
        let kept = of_questions(
            vec![
                answer(A, "rating", "good", 1, None),
                answer(A, "removed_node", "x", 2, None),
            ],
            &questions,
        );
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].node_id, "rating");
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
