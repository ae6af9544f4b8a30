//! A scenario's results: its exact counters over a range of days, laid out as
//! its funnel, with a free-text question's latest answers.

use crate::engine::Engine;
use crate::engine::results::{
    Counts, DayRange, LATEST_TEXT_ANSWERS, LatestAnswer, NodeResults, RangeError, SplitResults,
};
use crate::ids::ScenarioId;
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ResultsError {
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error(transparent)]
    BadRange(#[from] RangeError),
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
}

#[derive(Clone)]
pub(crate) struct Results {
    engine: Engine,
    store: Store,
}

impl Results {
    pub(crate) fn new(engine: Engine, store: Store) -> Self {
        Self { engine, store }
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
            let latest = self
                .store
                .latest_answers(id.as_str(), &node.node_id, from_ms, to_ms, LATEST_TEXT_ANSWERS)
                .await?;
            node.latest = Some(
                latest
                    .into_iter()
                    .map(|answer| LatestAnswer {
                        answered_at: self.engine.local_time(&id, answer.answered_at_ms),
                        answer_id: answer.answer_id,
                        user_id: answer.user,
                        // A redacted answer (the user unsent it) has no value.
                        value: answer.value.map(|value| value.to_string()).unwrap_or_default(),
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
        })
    }
}
