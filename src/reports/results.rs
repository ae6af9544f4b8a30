//! A scenario's results: its exact counters over a range of days, laid out as
//! its funnel, with a free-text question's latest answers; and, asked with
//! `?by=`, its answers cross-tabulated by one dimension.

use crate::engine::Engine;
use crate::engine::crosstab::{CrossBy, CrossByError, CrossTab, UserView};
use crate::engine::results::{
    Counts, DayRange, LATEST_TEXT_ANSWERS, LatestAnswer, NodeResults, QuestionOutline, RangeError, SplitResults,
};
use crate::ids::ScenarioId;
use crate::scenario::sources::Sources;
use crate::store::EXPORT_PAGE;
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ResultsError {
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error(transparent)]
    BadRange(#[from] RangeError),
    #[error(transparent)]
    BadBy(#[from] CrossByError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `GET /admin/scenarios/{id}/results` answers.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScenarioResults {
    pub(crate) scenario_id: String,
    pub(crate) title: Option<String>,
    pub(crate) version: u32,
    pub(crate) time_zone: String,
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) nodes: Vec<NodeResults>,
    /// The scenario's A/B splits and the runs of each arm.
    pub(crate) variants: Vec<SplitResults>,
    /// The answers cross-tabulated by `?by=`, when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cross_tab: Option<CrossTab>,
}

#[derive(Clone)]
pub(crate) struct Results {
    engine: Engine,
    store: Store,
    /// Source labels by id, for the columns of a cross-tab by source.
    source_labels: Arc<BTreeMap<String, String>>,
}

impl Results {
    /// The time zone of a loaded scenario (its days and times), by name.
    pub(crate) fn zone_name(&self, scenario: &str) -> Option<&'static str> {
        let id = ScenarioId::parse(scenario).ok()?;
        self.engine.scenario(&id).map(|loaded| loaded.timing().zone.name())
    }

    /// A question node of a loaded scenario as the scenario now has it (what
    /// the bot asks, for the timeline's sentences): its text, and its
    /// choices' labels by value.
    pub(crate) fn question(&self, scenario: &str, node: &str) -> Option<QuestionOutline> {
        let id = ScenarioId::parse(scenario).ok()?;
        self.engine
            .question_outlines(&id)?
            .into_iter()
            .find(|question| question.node == node)
    }

    /// The questions a run of a loaded scenario asks first (see
    /// [`Engine::entry_questions`]); none for an unknown scenario.
    pub(crate) fn entry_questions(&self, scenario: &str) -> Vec<String> {
        ScenarioId::parse(scenario)
            .ok()
            .and_then(|id| self.engine.entry_questions(&id))
            .unwrap_or_default()
    }

    /// A loaded scenario's title, as operators named it.
    pub(crate) fn title(&self, scenario: &str) -> Option<String> {
        let id = ScenarioId::parse(scenario).ok()?;
        self.engine.scenario(&id)?.scenario.title.clone()
    }

    pub(crate) fn new(engine: Engine, store: Store, sources: &Sources) -> Self {
        let source_labels = sources
            .all()
            .iter()
            .map(|source| (source.id.clone(), source.label.clone()))
            .collect();
        Self {
            engine,
            store,
            source_labels: Arc::new(source_labels),
        }
    }

    /// Every loaded scenario's funnel, in scenario id order: over the last
    /// `days` days up to `now` (each in its scenario's time zone), or all days.
    /// The counters are one document per shard and day, so the range bounds
    /// what a page load reads.
    pub(crate) async fn all(
        &self,
        days: Option<u32>,
        now: DateTime<Utc>,
    ) -> Result<Vec<ScenarioResults>, ResultsError> {
        let mut ids: Vec<String> = self
            .engine
            .scenarios()
            .iter()
            .map(|loaded| loaded.scenario.id.to_string())
            .collect();
        ids.sort();
        let mut all = Vec::with_capacity(ids.len());
        for id in ids {
            let from = days.and_then(|days| {
                let scenario = ScenarioId::parse(id.as_str()).ok()?;
                let first = now.checked_sub_days(chrono::Days::new(u64::from(days.saturating_sub(1))))?;
                Some(self.engine.day_of(&scenario, first))
            });
            all.push(self.scenario(&id, from.as_deref(), None).await?);
        }
        Ok(all)
    }

    /// The funnel of `scenario` from day `from` to day `to` (inclusive, in its
    /// time zone; either may be absent).
    pub(crate) async fn scenario(
        &self,
        scenario: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<ScenarioResults, ResultsError> {
        let unknown = || ResultsError::UnknownScenario(scenario.to_owned());
        let id = ScenarioId::parse(scenario).map_err(|_| unknown())?;
        let loaded = self.engine.scenario(&id).ok_or_else(unknown)?;
        let range = DayRange::parse(from, to)?;
        let (from_day, to_day) = range.days();
        let counts = self
            .store
            .result_counts(id.as_str(), from_day.as_deref(), to_day.as_deref())
            .await?;
        let view = Counts {
            sent: &counts.sent,
            answered: &counts.answered,
            choices: &counts.choices,
            sent_by_variant: &counts.sent_by_variant,
            answered_by_variant: &counts.answered_by_variant,
            choices_by_variant: &counts.choices_by_variant,
            runs: &counts.runs,
        };
        let mut nodes = self.engine.results(&id, &view).ok_or_else(unknown)?;
        let variants = self.engine.split_results(&id, &view).ok_or_else(unknown)?;
        let (from_ms, to_ms) = self.engine.range_ms(&id, range);
        for node in nodes.iter_mut().filter(|node| node.kind == "text_question") {
            // The answers page's query of a question's latest answers, with no cursor.
            let latest = self
                .store
                .recent_answers(id.as_str(), &node.node_id, (from_ms, to_ms), None, LATEST_TEXT_ANSWERS)
                .await?;
            node.latest = Some(
                latest
                    .into_iter()
                    .filter_map(|answer| {
                        let at = answer.answered_at?.as_millisecond();
                        Some(LatestAnswer {
                            answered_at: self.engine.local_time(&id, at),
                            answer_id: answer.id,
                            user_id: answer.line_user_id,
                            // A redacted answer (the user unsent it) has no value.
                            value: answer.value.map(|value| value.to_string()).unwrap_or_default(),
                        })
                    })
                    .collect(),
            );
        }
        Ok(ScenarioResults {
            scenario_id: id.to_string(),
            title: loaded.scenario.title.clone(),
            version: loaded.scenario.version,
            time_zone: self.engine.zone_of(&id).name().to_owned(),
            from: from_day,
            to: to_day,
            nodes,
            variants,
            cross_tab: None,
        })
    }

    /// The answers of `scenario` answered from day `from` to day `to`
    /// (as [`Self::scenario`] takes them) counted by `by`. Exact: every answer
    /// of the scenario is read, a page at a time (as the CSV export reads
    /// them), with its users' records when the dimension is on the user
    /// (one batched read a page). Memory holds a page and the counts.
    pub(crate) async fn cross_tab(
        &self,
        scenario: &str,
        by: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<CrossTab, ResultsError> {
        let unknown = || ResultsError::UnknownScenario(scenario.to_owned());
        let id = ScenarioId::parse(scenario).map_err(|_| unknown())?;
        let by = CrossBy::parse(by)?;
        let range = DayRange::parse(from, to)?;
        let mut tally = self.engine.tally_for(&id).ok_or_else(unknown)?;
        let (from_ms, to_ms) = self.engine.range_ms(&id, range);
        let in_range = |at: Option<i64>| match (from_ms, to_ms) {
            (None, None) => true,
            _ => at.is_some_and(|at| from_ms.is_none_or(|from| at >= from) && to_ms.is_none_or(|to| at < to)),
        };
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store
                .answers_page(id.as_str(), None, after.as_deref(), EXPORT_PAGE)
                .await?;
            let answers: Vec<_> = page
                .answers
                .iter()
                .filter(|answer| in_range(answer.answered_at.map(firestore::jiff::Timestamp::as_millisecond)))
                .collect();
            let users = if by.reads_users() {
                let mut ids: Vec<String> = answers.iter().map(|answer| answer.line_user_id.clone()).collect();
                ids.sort_unstable();
                ids.dedup();
                self.store
                    .users_by_id(&ids)
                    .await?
                    .into_iter()
                    .map(|user| (user.id.clone(), user))
                    .collect()
            } else {
                HashMap::new()
            };
            for answer in answers {
                let user = users.get(&answer.line_user_id).map(|user| UserView {
                    first_source: user.first_source.as_deref(),
                    tags: &user.tags,
                    fields: &user.fields,
                });
                let value = match &answer.value {
                    Some(crate::values::AnswerValue::Text(value)) => Some(value.as_str()),
                    _ => None,
                };
                tally.add(
                    &answer.node_id,
                    value,
                    by.column(answer.variant.as_deref(), user.as_ref()),
                );
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        self.engine
            .cross_tab(&id, &by, &tally, &self.source_labels)
            .ok_or_else(unknown)
    }
}
