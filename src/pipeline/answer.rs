//! Guard 1: a survey answer. The answer's `create` on its deterministic id, its
//! tags, the marker, the inbox's "done" and the follow-up's ledger entry land in
//! one atomic commit, or none of it does.
//!
//! A date answer is recorded only while its question is open: the open question
//! is read first and the commit is conditional on it (and closes it), so a
//! picker tapped after the question was answered, replaced or lapsed records
//! nothing.

use super::PipelineError;
use super::hold::{Failure, Found, Hold};
use super::notice::Noticed;
use super::processed::Processed;
use super::timers::{ANSWERED_CANCEL, AskedTimers, OPERATOR_CANCEL};
use super::typed::{answered, open_question};
use super::work::Work;
use super::worker::EventWorker;
use crate::engine::AnswerPlan;
use crate::ids::{TimerKind, timer_id};
use crate::outbound::StagedAction;
use crate::store::{AnswerRecord, Effect, TimerState};

/// Commits tried per attempt when a commit's outcome was unknown and it had not landed.
const COMMIT_ROUNDS: usize = 3;

impl EventWorker {
    pub(super) async fn answer(&self, hold: &Hold, work: &Work, plan: &AnswerPlan) -> Result<Processed, Failure> {
        if self.store.legacy_lookup()
            && self
                .store
                .node_answered_legacy(plan.scenario.as_str(), plan.node.as_str(), plan.user.as_str())
                .await?
        {
            return self.already_answered(hold, work, plan).await;
        }
        // A branch the follow-up stopped at is decided now, with this answer.
        let (decided, user_read, prior) = self.decide_follow_up(plan).await?;
        let plan = decided.as_ref().unwrap_or(plan);
        // A personal follow-up reads the user anyway: the same read says whether
        // this answer is recorded already (a repeated tap), which then ends
        // here, as its commit would have (with ALREADY_EXISTS), at no extra cost.
        let prior = match prior {
            None if !crate::engine::personal::needs(&plan.follow_up).is_empty() => {
                let engine = self.versions.current();
                let (read, answered) = self.personal.read_for_answer(engine, plan).await?;
                if answered {
                    return self.already_answered(hold, work, plan).await;
                }
                Some(read)
            }
            prior => prior,
        };
        let (mut follow_up, moved) = self.stage_follow_up(hold, work, plan, prior).await?;
        let user_read = super::personal::Moved::applied(moved, user_read);
        let timers = self.schedule(&plan.user, &plan.timers).await?;
        for _ in 0..COMMIT_ROUNDS {
            // The question's own reminder and expiry: an expiry that fired
            // first closed it; the answer cancels the pending ones.
            let cancels = match self.question_timers(plan, work.event_time_ms).await? {
                AskedTimers::Pending(pending) => pending,
                AskedTimers::Expired => {
                    self.done_without_effect(hold)?;
                    return Ok(Processed::QuestionExpired);
                }
            };
            let question = match &plan.closes {
                None => plan.opens.as_ref().map(|opens| {
                    super::typed::opening(plan.user.as_str(), opens, None, work.line_now(self.clock.now()))
                }),
                Some(closes) => match self.still_open(plan, closes, work.event_time_ms).await? {
                    Some(read) => Some(answered(
                        plan.user.as_str(),
                        plan.opens.as_ref(),
                        read,
                        work.line_now(self.clock.now()),
                    )),
                    // A picker tapped after its question was answered gets the
                    // question's answered_text (one read, only when it has one).
                    None if plan.already.is_some() && self.store.answer_recorded(&plan.answer_id).await? => {
                        return self.already_answered(hold, work, plan).await;
                    }
                    None => {
                        self.done_without_effect(hold)?;
                        return Ok(Processed::QuestionNotOpen);
                    }
                },
            };
            let campaign = self.campaign_runs.campaign_of(plan.run.as_ref()).await?;
            let record = AnswerRecord {
                question,
                timers: &timers,
                cancels: &cancels,
                user_read,
                ..self.answer_record(work, plan, campaign.as_deref())
            };
            if let Some(staged) = follow_up.as_mut() {
                staged.renew_lease(&self.store);
            }
            let entry = follow_up.as_ref().map(StagedAction::entry);
            let found = match self.store.commit_answer(&hold.key, hold.version, &record, entry).await {
                Effect::Committed(version) => {
                    self.sender.send_staged(follow_up.as_ref(), version).await;
                    return Ok(Processed::Answered);
                }
                // A user record the branch read as absent exists now (also
                // reported as "already exists"): read and decide again.
                Effect::AlreadyExists
                    if user_read == Some(crate::store::Expect::Absent)
                        && !self.store.answer_recorded(&plan.answer_id).await? =>
                {
                    return Err(PipelineError::Contention("the user's record appeared under a branch".into()).into());
                }
                // The answer exists: the user answered before. Nothing was applied.
                Effect::AlreadyExists => return self.already_answered(hold, work, plan).await,
                Effect::Changed => hold.find_out_patiently(&self.store, follow_up.as_ref()).await?,
                Effect::Unknown(error) => {
                    tracing::warn!(error = %error, "the answer commit's outcome is unknown; reading what happened");
                    hold.find_out_patiently(&self.store, follow_up.as_ref()).await?
                }
                Effect::Failed(error) => return Err(error.into()),
            };
            match found {
                Found::Landed(version) => {
                    self.sender.send_staged(follow_up.as_ref(), version).await;
                    return Ok(Processed::Answered);
                }
                // The user's record may have changed under the follow-up's
                // branch: the next attempt reads and decides again.
                Found::NotLanded if user_read.is_some() => {
                    return Err(PipelineError::Contention("the user's record changed under a branch".into()).into());
                }
                Found::NotLanded => continue,
                Found::Superseded => return Err(Failure::Superseded),
            }
        }
        Err(PipelineError::Contention("the answer commit kept failing".into()).into())
    }

    /// A tap on a question the user had answered: its `answered_text` (once per
    /// interval), or nothing.
    async fn already_answered(&self, hold: &Hold, work: &Work, plan: &AnswerPlan) -> Result<Processed, Failure> {
        let Some(notice) = &plan.already else {
            self.done_without_effect(hold)?;
            return Ok(Processed::AlreadyAnswered);
        };
        Ok(match self.notice(hold, work, &plan.user, notice, None).await? {
            Noticed::Sent => Processed::AlreadyAnsweredNoticed,
            Noticed::Withheld | Noticed::Unsent => Processed::AlreadyAnswered,
        })
    }

    /// The pending reminder and expiry of the question an answer answers, read
    /// so that the answer's commit cancels them conditionally; or that the
    /// question expired before the answer.
    pub(super) async fn question_timers(
        &self,
        plan: &AnswerPlan,
        event_ms: i64,
    ) -> Result<AskedTimers, crate::store::StoreError> {
        let (scenario, node, user) = (&plan.scenario, &plan.node, &plan.user);
        let Some(run) = plan.run.as_ref() else {
            return Ok(AskedTimers::Pending(Vec::new()));
        };
        let engine = self.versions.engine_for(scenario, plan.scenario_version).await?;
        let asks_timers = engine
            .scenario(scenario)
            .and_then(|loaded| loaded.question_timers(node))
            .is_some();
        if !asks_timers {
            return Ok(AskedTimers::Pending(Vec::new()));
        }
        let ids = [TimerKind::Remind, TimerKind::Expire].map(|kind| timer_id(scenario, node, user, run, kind));
        let found = self.store.timers(&ids).await?;
        let mut pending = Vec::new();
        for timer in found.into_iter().flatten() {
            // Expired: its expiry fired, or was due before the answer was
            // given, whatever became of it since (still pending: it sends
            // `on_expire` when it fires; cancelled by an unfollow or given
            // up: the question closed all the same). Only an operator's
            // cancel keeps the question open, and an answer's: the question
            // was answered before it expired, so a later tap is a repeat (its
            // commit finds the answer and the user gets `answered_text`).
            let expiry = timer.doc.kind == TimerKind::Expire;
            let due_before = timer.doc.due_at.as_millisecond() <= event_ms;
            let kept_open = matches!(timer.doc.outcome.as_deref(), Some(OPERATOR_CANCEL | ANSWERED_CANCEL));
            if expiry && (timer.doc.state == TimerState::Done || (due_before && !kept_open)) {
                return Ok(AskedTimers::Expired);
            }
            if timer.doc.state == TimerState::Pending {
                pending.push((timer.id, timer.version));
            }
        }
        Ok(AskedTimers::Pending(pending))
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
