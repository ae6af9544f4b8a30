//! Guard 1: a survey answer. The answer's `create` on its deterministic id, its
//! tags, the marker, the inbox's "done" and the follow-up's ledger entry land in
//! one atomic commit, or none of it does.

use super::hold::{Failure, Found, Hold};
use super::processed::Processed;
use super::work::Work;
use super::worker::Processor;
use crate::engine::AnswerPlan;
use crate::outbound::ActionKey;
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
        let mut follow_up = work
            .action(
                ActionKey::answer(&plan.answer_id),
                &hold.key,
                &plan.scenario,
                &plan.follow_up,
                self.reply_is_fresh(work),
            )
            .map(|mut action| {
                action.answer_id = Some(plan.answer_id.clone());
                action.stage(&self.store)
            })
            .transpose()?;
        let record = AnswerRecord {
            answer_id: &plan.answer_id,
            marker_id: &plan.marker_id,
            scenario_id: plan.scenario.as_str(),
            node_id: plan.node.as_str(),
            user: plan.user.as_str(),
            value: &plan.choice,
            tags: &plan.tags,
            scenario_version: plan.scenario_version,
            webhook_event_id: &work.webhook_event_id,
        };
        for _ in 0..COMMIT_ROUNDS {
            if let Some(staged) = follow_up.as_mut() {
                staged.renew_lease(&self.store);
            }
            let entry = follow_up
                .as_ref()
                .map(|staged| (staged.ledger_id.as_str(), &staged.doc));
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
}
