//! Guard 1: a survey answer. The answer's `create` on its deterministic id, its
//! tags, the marker, the inbox's "done" and the follow-up's ledger entry land in
//! one atomic commit, or none of it does.
//!
//! A date answer is recorded only while its question is open: the open question
//! is read first and the commit is conditional on it (and closes it), so a
//! picker tapped after the question was answered, replaced or lapsed records
//! nothing.

use super::hold::{Failure, Found, Hold};
use super::processed::Processed;
use super::typed::{answer_record, answered, open_question};
use super::work::Work;
use super::worker::Processor;
use crate::engine::AnswerPlan;
use crate::outbound::StagedAction;
use crate::store::{AnswerRecord, Effect, StoreError};

/// Commits tried per attempt when a commit's outcome was unknown and it had not landed.
const COMMIT_ROUNDS: usize = 3;

impl Processor {
    pub(super) async fn answer(&self, hold: &Hold, work: &Work, plan: &AnswerPlan) -> Result<Processed, Failure> {
        if self.store.legacy_lookup()
            && self
                .store
                .node_answered_legacy(plan.scenario.as_str(), plan.node.as_str(), plan.user.as_str())
                .await?
        {
            self.done_without_effect(hold)?;
            return Ok(Processed::AlreadyAnswered);
        }
        let mut follow_up = self.stage_follow_up(hold, work, plan)?;
        let timers = self.schedule(&plan.user, &plan.timers).await?;
        for _ in 0..COMMIT_ROUNDS {
            // The question's own reminder and expiry: an expiry that fired
            // first closed it; the answer cancels the pending ones.
            let cancels = match self
                .question_timers(
                    &plan.scenario,
                    plan.scenario_version,
                    &plan.node,
                    &plan.user,
                    plan.run.as_ref(),
                    work.event_time_ms,
                )
                .await?
            {
                super::timers::AskedTimers::Pending(pending) => pending,
                super::timers::AskedTimers::Expired => {
                    self.done_without_effect(hold)?;
                    return Ok(Processed::QuestionExpired);
                }
            };
            let question = match &plan.closes {
                None => plan
                    .opens
                    .as_ref()
                    .map(|opens| super::typed::opening(plan.user.as_str(), opens, None)),
                Some(closes) => match self.still_open(plan, closes, work.event_time_ms).await? {
                    Some(read) => Some(answered(plan.user.as_str(), plan.opens.as_ref(), read)),
                    None => {
                        self.done_without_effect(hold)?;
                        return Ok(Processed::QuestionNotOpen);
                    }
                },
            };
            let record = AnswerRecord {
                question,
                timers: &timers,
                cancels: &cancels,
                ..answer_record(work, plan, &self.engine)
            };
            if let Some(staged) = follow_up.as_mut() {
                staged.renew_lease(&self.store);
            }
            let entry = follow_up.as_ref().map(StagedAction::entry);
            let found = match self.store.commit_answer(&hold.key, hold.version, &record, entry).await {
                Effect::Committed(version) => {
                    self.send(follow_up.as_ref(), version).await;
                    return Ok(Processed::Answered);
                }
                // The answer exists: the user answered before. Nothing was applied.
                Effect::AlreadyExists => {
                    self.done_without_effect(hold)?;
                    return Ok(Processed::AlreadyAnswered);
                }
                Effect::Changed => hold.find_out_patiently(&self.store, follow_up.as_ref()).await?,
                Effect::Unknown(error) => {
                    tracing::warn!(error = %error, "the answer commit's outcome is unknown; reading what happened");
                    hold.find_out_patiently(&self.store, follow_up.as_ref()).await?
                }
                Effect::Failed(error) => return Err(error.into()),
            };
            match found {
                Found::Landed(version) => {
                    self.send(follow_up.as_ref(), version).await;
                    return Ok(Processed::Answered);
                }
                Found::NotLanded => continue,
                Found::Superseded => return Err(Failure::Superseded),
            }
        }
        Err(StoreError::Unavailable("the answer commit kept failing".into()).into())
    }

    /// The version of the user's open question when it is `closes` and has not
    /// lapsed by the event's time; `None` when it is not open.
    async fn still_open(
        &self,
        plan: &AnswerPlan,
        closes: &crate::engine::QuestionRef,
        event_ms: i64,
    ) -> Result<Option<crate::store::Version>, Failure> {
        let Some(read) = self.store.open_question(plan.user.as_str()).await? else {
            return Ok(None);
        };
        let Some(open) = open_question(&read.doc) else {
            return Ok(None);
        };
        let same = open.question.scenario == closes.scenario && open.question.node == closes.node;
        let engine = self
            .versions
            .engine_for(&open.question.scenario, open.question.version)
            .await?;
        let fresh = engine.is_open_at(&open, event_ms);
        Ok((same && fresh).then_some(read.version))
    }
}
