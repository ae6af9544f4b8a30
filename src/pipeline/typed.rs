//! A text message while some scenario asks typed questions. The worker reads the
//! user's open question (one get by id); if one is open, the kept text is read
//! and the engine decides: a valid answer goes through guard 1 like any answer,
//! an invalid one counts an attempt and sends `invalid_text`, the last invalid
//! one gives up. Each commit is conditional on the open question as read, so of
//! 50 racing texts exactly one answer is recorded, and an invalid answer that
//! loses the race to a valid one changes nothing. With no open question the text
//! is an ordinary message: its keyword trigger may start a scenario.

use super::hold::{Failure, Found, Hold};
use super::processed::Processed;
use super::timers::AskedTimers;
use super::work::Work;
use super::worker::EventWorker;
use super::{PipelineError, asked_on};
use crate::engine::{AnswerPlan, OpenQuestion, OpenQuestionSeen, QuestionRef, TextPlan, TypedDecision};
use crate::ids::{NodeId, ScenarioId};
use crate::line::messages::Message;
use crate::outbound::{ActionKey, StagedAction};
use crate::store::{AnswerRecord, Effect, EffectWrites, MessageKey, OpenQuestionDoc, QuestionChange, Version};
use chrono::{DateTime, Utc};
use firestore::FirestoreInstant;

/// Read-decide-commit rounds per attempt before the event is retried later.
const ROUNDS: usize = 4;

/// Opens `question` for `user` now (the commit that asks it): replacing what
/// was open, or (with `read`) only what was read at that version. Only what the
/// user sends from now on can answer it.
pub(super) fn opening(user: &str, question: &QuestionRef, read: Option<Version>, now: DateTime<Utc>) -> QuestionChange {
    opened_at(user, question, super::instant(now), 0, read)
}

fn opened_at(
    user: &str,
    question: &QuestionRef,
    at: FirestoreInstant,
    attempts: u32,
    read: Option<Version>,
) -> QuestionChange {
    QuestionChange::Open {
        doc: OpenQuestionDoc {
            line_user_id: user.to_owned(),
            scenario_id: question.scenario.to_string(),
            scenario_version: question.version,
            node_id: question.node.to_string(),
            opened_at: at,
            attempts,
            run: question.run.as_ref().map(ToString::to_string),
            reminded_at: None,
        },
        read,
    }
}

/// What an answer does to the question it answers: closes it, or replaces it
/// with the question its follow-up asks (one write, the same document).
pub(super) fn answered(user: &str, opens: Option<&QuestionRef>, read: Version, now: DateTime<Utc>) -> QuestionChange {
    match opens {
        Some(next) => opening(user, next, Some(read), now),
        None => QuestionChange::Close {
            user: user.to_owned(),
            read,
        },
    }
}

/// The open question as stored, in the engine's terms; `None` when the stored
/// ids are not ids (never written so: then it is treated as not open).
pub(crate) fn open_question(doc: &OpenQuestionDoc) -> Option<OpenQuestion> {
    Some(OpenQuestion {
        question: QuestionRef {
            scenario: ScenarioId::parse(doc.scenario_id.clone()).ok()?,
            version: doc.scenario_version,
            node: NodeId::parse(doc.node_id.clone()).ok()?,
            run: doc.run.clone().and_then(|run| crate::ids::RunId::parse(run).ok()),
        },
        attempts: doc.attempts,
        opened_at_ms: doc.opened_at.as_millisecond(),
        reminded_at_ms: doc.reminded_at.map(firestore::jiff::Timestamp::as_millisecond),
    })
}

/// How one round ended.
enum Round {
    Done(Processed),
    /// The open question changed since it was read: read and decide again.
    Again,
    /// The question expired before the text was sent: the text is an ordinary
    /// message (its keyword may fire), as after the answer window.
    Expired,
}

impl EventWorker {
    pub(super) async fn text(&self, hold: &Hold, work: &Work, plan: &TextPlan) -> Result<Processed, Failure> {
        let Some(message) = work.message.as_ref() else {
            // Every text event has its message key; kept for completeness.
            return self.ordinary_text(hold, work, plan, None).await;
        };
        for _ in 0..ROUNDS {
            let read = self.store.open_question(plan.user.as_str()).await?;
            let Some((open, version)) = read.and_then(|read| Some((open_question(&read.doc)?, read.version))) else {
                return self.ordinary_text(hold, work, plan, Some(message)).await;
            };
            // Asked after the text arrived: not its question.
            if plan
                .arrived_to
                .as_ref()
                .is_some_and(|seen| *seen != OpenQuestionSeen::of(&open))
            {
                return self.ordinary_text(hold, work, plan, Some(message)).await;
            }
            let Some(text) = self.store.kept_text(message).await? else {
                // Deleted by an unsend (a processed event never gets here: its
                // inbox record is done), or expired while the event was parked.
                if self.store.message_unsent(message).await? {
                    self.done_without_effect(hold)?;
                    return Ok(Processed::Unsent);
                }
                tracing::warn!("the kept text is gone (expired); the text is handled as an ordinary one");
                return self.ordinary_text(hold, work, plan, Some(message)).await;
            };
            // The run's own scenario version decides, even after a newer one was deployed.
            let engine = self
                .versions
                .engine_for(&open.question.scenario, open.question.version)
                .await?;
            let decision = match engine.typed_answer(&plan.user, &open, &text, work.event_time_ms) {
                Ok(decision) => decision,
                Err(reason) => {
                    tracing::error!(reason = %reason, "a typed answer cannot be planned");
                    self.done_forgetting(hold, Some(message)).await?;
                    return Ok(Processed::QuestionNotOpen);
                }
            };
            drop(text);
            let round = match decision {
                TypedDecision::NotOpen | TypedDecision::NotTyped => {
                    return self.ordinary_text(hold, work, plan, Some(message)).await;
                }
                TypedDecision::Answer(answer) => self.typed_answer(hold, work, &answer, message, version).await?,
                TypedDecision::Invalid {
                    reason,
                    messages,
                    attempts,
                } => {
                    tracing::info!(reason = %reason, attempts, "invalid typed answer");
                    // Still the same question: it keeps when it was asked.
                    let asked = FirestoreInstant::from_millisecond(open.opened_at_ms)
                        .unwrap_or_else(|_| super::instant(self.clock.now()));
                    let mut change = opened_at(plan.user.as_str(), &open.question, asked, attempts, Some(version));
                    if let QuestionChange::Open { doc, .. } = &mut change {
                        doc.reminded_at = open
                            .reminded_at_ms
                            .and_then(|at| FirestoreInstant::from_millisecond(at).ok());
                    }
                    let key = ActionKey::event(hold.key.as_str());
                    let scenario = &open.question.scenario;
                    let outcome = Reaction {
                        messages: &messages,
                        change,
                        key,
                        scenario,
                        processed: Processed::InvalidAnswer,
                        timers: &[],
                        asks: None,
                        changes: None,
                        arms: crate::engine::Arms::default(),
                        user_read: None,
                        prior: None,
                    };
                    self.react(hold, work, message, outcome).await?
                }
                TypedDecision::GiveUp { reason, then } => {
                    tracing::info!(reason = %reason, "typed answer attempts used up");
                    // A branch the give-up chain stopped at is decided now.
                    let decided = super::branches::decide(
                        &self.store,
                        &engine,
                        &open.question.scenario,
                        &plan.user,
                        *then,
                        open.question.run.as_ref(),
                        super::branches::StepSoFar::default(),
                    )
                    .await?;
                    let (then, user_read, prior) = (decided.chain, decided.user_read, decided.read);
                    let change = answered(
                        plan.user.as_str(),
                        then.opens.as_ref(),
                        version,
                        work.line_now(self.clock.now()),
                    );
                    let outcome = Reaction {
                        messages: &then.messages,
                        change,
                        key: ActionKey::event(hold.key.as_str()),
                        scenario: &open.question.scenario,
                        processed: Processed::GaveUp,
                        timers: &then.timers,
                        asks: then.asks.as_ref(),
                        changes: Some(&then.changes),
                        arms: crate::engine::Arms::of(&then),
                        user_read,
                        prior,
                    };
                    self.react(hold, work, message, outcome).await?
                }
            };
            match round {
                Round::Done(processed) => return Ok(processed),
                Round::Again => continue,
                Round::Expired => {
                    return match self.ordinary_text(hold, work, plan, Some(message)).await? {
                        Processed::NoTrigger => Ok(Processed::QuestionExpired),
                        started => Ok(started),
                    };
                }
            }
        }
        Err(PipelineError::Contention("the open question kept changing".into()).into())
    }

    /// No question open (or it lapsed, or it takes dates): the text's keyword may
    /// start a scenario; otherwise the event ends without effect.
    async fn ordinary_text(
        &self,
        hold: &Hold,
        work: &Work,
        plan: &TextPlan,
        message: Option<&MessageKey>,
    ) -> Result<Processed, Failure> {
        match &plan.keyword {
            Some(start) => self.start_forgetting(hold, work, start, message).await,
            None => {
                self.done_forgetting(hold, message).await?;
                Ok(Processed::NoTrigger)
            }
        }
    }

    /// Deletes a kept text, then marks the event done without effect. A failed
    /// delete fails the attempt: the event is not done while its text is kept.
    pub(super) async fn done_forgetting(&self, hold: &Hold, message: Option<&MessageKey>) -> Result<(), Failure> {
        if let Some(message) = message {
            self.store.forget_text(message).await?;
        }
        self.done_without_effect(hold)
    }

    /// Guard 1 for a typed answer, conditional on the open question as read.
    async fn typed_answer(
        &self,
        hold: &Hold,
        work: &Work,
        plan: &AnswerPlan,
        message: &MessageKey,
        read: Version,
    ) -> Result<Round, Failure> {
        // As for a tap: an expiry due before the text was sent closed the
        // question (whether or not it has fired yet), and the answer cancels the
        // question's pending reminder and expiry in its own commit.
        let cancels = match self.question_timers(plan, work.event_time_ms).await? {
            AskedTimers::Pending(pending) => pending,
            AskedTimers::Expired => return Ok(Round::Expired),
        };
        // A branch the follow-up stopped at is decided now, with this answer.
        let (decided, user_read, prior) = self.decide_follow_up(plan).await?;
        let plan = decided.as_ref().unwrap_or(plan);
        let change = answered(
            plan.user.as_str(),
            plan.opens.as_ref(),
            read,
            work.line_now(self.clock.now()),
        );
        let (mut follow_up, moved) = self.stage_follow_up(hold, work, plan, prior).await?;
        let user_read = super::personal::Moved::applied(moved, user_read);
        if let Some(staged) = follow_up.as_mut() {
            staged.renew_lease(&self.store);
        }
        let timers = self.schedule(&plan.user, &plan.timers).await?;
        let campaign = self.campaign_runs.campaign_of(plan.run.as_ref()).await?;
        let record = AnswerRecord {
            question: Some(change),
            message: Some(message),
            timers: &timers,
            cancels: &cancels,
            user_read,
            ..self.answer_record(work, plan, campaign.as_deref())
        };
        let entry = follow_up.as_ref().map(StagedAction::entry);
        let found = match self.store.commit_answer(&hold.key, hold.version, &record, entry).await {
            Effect::Committed(version) => {
                self.sender.send_staged(follow_up.as_ref(), version).await;
                return Ok(Round::Done(Processed::Answered));
            }
            // The answer exists (answered before: an operator's manual send
            // asked again, so the question is closed now), or the message's mark
            // does (unsent first). Nothing was applied either way.
            Effect::AlreadyExists => {
                if self.store.answer_recorded(&plan.answer_id).await? {
                    let close = QuestionChange::Close {
                        user: plan.user.to_string(),
                        read,
                    };
                    self.store.forget_text_closing(message, &close).await?;
                    self.done_without_effect(hold)?;
                    return Ok(Round::Done(Processed::AlreadyAnswered));
                }
                // A user record the branch read as absent exists now (also
                // "already exists"): read and decide again.
                if user_read == Some(crate::store::Expect::Absent) && !self.store.message_unsent(message).await? {
                    return Ok(Round::Again);
                }
                self.done_forgetting(hold, Some(message)).await?;
                return Ok(Round::Done(Processed::Unsent));
            }
            Effect::Changed => hold.find_out_patiently(&self.store, follow_up.as_ref()).await?,
            Effect::Unknown(error) => {
                tracing::warn!(error = %error, "the typed answer commit's outcome is unknown; reading what happened");
                hold.find_out_patiently(&self.store, follow_up.as_ref()).await?
            }
            Effect::Failed(error) => return Err(error.into()),
        };
        self.after(found, follow_up.as_ref(), Processed::Answered).await
    }

    /// An invalid answer or giving up: the open question changes, the kept text
    /// goes and the reaction is sent, in one commit conditional on the question.
    async fn react(
        &self,
        hold: &Hold,
        work: &Work,
        message: &MessageKey,
        reaction: Reaction<'_>,
    ) -> Result<Round, Failure> {
        let action = work.action(
            reaction.key,
            &hold.key,
            reaction.scenario,
            reaction.messages,
            self.sender.reply_is_fresh(work),
            asked_on(
                self.versions.current(),
                reaction.scenario,
                reaction.asks,
                &reaction.arms,
                self.clock.now(),
            ),
        );
        let step = super::branches::StepSoFar {
            changes: reaction.changes.cloned().unwrap_or_default(),
            answer: None,
            read: reaction.prior.clone(),
        };
        let (action, moved) = self.personal.fill(action, self.versions.current(), &step).await?;
        let user_read = super::personal::Moved::applied(moved, reaction.user_read);
        let mut staged = action.map(|action| action.stage(&self.store)).transpose()?;
        if let Some(staged) = staged.as_mut() {
            staged.renew_lease(&self.store);
        }
        let timers = self.schedule(work.plan.user(), reaction.timers).await?;
        let effects = EffectWrites {
            message: Some(message),
            forget_text: Some(message),
            question: Some(reaction.change),
            timers: &timers,
            action: staged.as_ref().map(StagedAction::entry),
            // With a branch decided, the user's record is written (and
            // expected unchanged) even when the chain changes nothing.
            changes: reaction
                .changes
                .filter(|changes| !changes.is_empty() || user_read.is_some())
                .map(|changes| (work.plan.user().as_str(), changes)),
            user_read,
            ..EffectWrites::default()
        };
        let found = match self.store.commit_effects(&hold.key, hold.version, &effects).await {
            Effect::Committed(version) => {
                self.sender.send_staged(staged.as_ref(), version).await;
                return Ok(Round::Done(reaction.processed));
            }
            // The message's mark exists: it was unsent first. Or a user record
            // the branch read as absent exists now (also "already exists"):
            // read and decide again.
            Effect::AlreadyExists => {
                if user_read == Some(crate::store::Expect::Absent) && !self.store.message_unsent(message).await? {
                    return Ok(Round::Again);
                }
                self.done_forgetting(hold, Some(message)).await?;
                return Ok(Round::Done(Processed::Unsent));
            }
            Effect::Changed => hold.find_out_patiently(&self.store, staged.as_ref()).await?,
            Effect::Unknown(error) => {
                tracing::warn!(error = %error, "the commit's outcome is unknown; reading what happened");
                hold.find_out_patiently(&self.store, staged.as_ref()).await?
            }
            Effect::Failed(error) => return Err(error.into()),
        };
        self.after(found, staged.as_ref(), reaction.processed).await
    }

    /// Continues from what a read found after a commit that did not say it landed.
    async fn after(&self, found: Found, staged: Option<&StagedAction>, processed: Processed) -> Result<Round, Failure> {
        match found {
            Found::Landed(version) => {
                self.sender.send_staged(staged, version).await;
                Ok(Round::Done(processed))
            }
            Found::NotLanded => Ok(Round::Again),
            Found::Superseded => Err(Failure::Superseded),
        }
    }

    /// The ledger entry of an answer's follow-up, staged (`None`: nothing to send).
    /// The answer's follow-up, its placeholders filled with the user's state as
    /// the answer leaves it, staged.
    pub(super) async fn stage_follow_up(
        &self,
        hold: &Hold,
        work: &Work,
        plan: &AnswerPlan,
        prior: Option<super::branches::PriorRead>,
    ) -> Result<(Option<StagedAction>, Option<super::personal::Moved>), Failure> {
        let action = work
            .action(
                ActionKey::answer(&plan.answer_id),
                &hold.key,
                &plan.scenario,
                &plan.follow_up,
                self.sender.reply_is_fresh(work),
                asked_on(
                    self.versions.current(),
                    &plan.scenario,
                    plan.asks.as_ref(),
                    &plan.follow_arms,
                    self.clock.now(),
                ),
            )
            .map(|mut action| {
                action.answer_id = Some(plan.answer_id.clone());
                action
            });
        let step = super::branches::StepSoFar {
            changes: plan.user_changes(),
            answer: Some((&plan.scenario, &plan.node, &plan.value)),
            read: prior,
        };
        let (action, moved) = self.personal.fill(action, self.versions.current(), &step).await?;
        Ok((action.map(|action| action.stage(&self.store)).transpose()?, moved))
    }
}

/// What an invalid answer or giving up sends and changes.
struct Reaction<'a> {
    messages: &'a [Message],
    change: QuestionChange,
    key: ActionKey,
    scenario: &'a ScenarioId,
    processed: Processed,
    /// What the sent chain schedules (giving up may lead on).
    timers: &'a [crate::engine::TimerPlan],
    /// The question node the sent chain asks (giving up may lead on).
    asks: Option<&'a crate::ids::NodeId>,
    /// What the sent chain's nodes do to the user's tags and fields.
    changes: Option<&'a crate::values::UserChanges>,
    /// The split arm the sent chain took and the arm of what it asks.
    arms: crate::engine::Arms,
    /// `users/{id}` as a branch of the chain read it.
    user_read: Option<crate::store::Expect>,
    /// What that branch read: the chain's personal text renders from it.
    prior: Option<super::branches::PriorRead>,
}

impl super::EventWorker {
    /// The answer as the store records it, today by the service's clock.
    pub(super) fn answer_record<'a>(
        &self,
        work: &'a Work,
        plan: &'a AnswerPlan,
        campaign_id: Option<&'a str>,
    ) -> AnswerRecord<'a> {
        AnswerRecord {
            day: self.versions.current().day_of(&plan.scenario, self.clock.now()),
            answer_id: &plan.answer_id,
            marker_id: &plan.marker_id,
            scenario_id: plan.scenario.as_str(),
            node_id: plan.node.as_str(),
            user: plan.user.as_str(),
            value: &plan.value,
            value_type: &plan.value_type,
            tags: &plan.tags,
            changes: plan.user_changes(),
            scenario_version: plan.scenario_version,
            webhook_event_id: &work.webhook_event_id,
            question: None,
            message: None,
            timers: &[],
            cancels: &[],
            variant: plan.variant.as_deref(),
            run_variant: plan
                .variant
                .as_deref()
                .or(plan.follow_arms.took.as_ref().map(|took| took.label.as_str())),
            user_read: None,
            campaign_id,
        }
    }
}
