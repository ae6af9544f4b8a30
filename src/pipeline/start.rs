//! Guards 2 (a Flex card tap) and 3 (text and follow triggers): a start.
//!
//! The guard reads the user's marker for the scenario (answered? started
//! recently?), the engine decides, and the start is committed conditional on the
//! marker as read: an answer or another start in between makes the commit fail,
//! and the guard reads and decides again. So a double tap, or a trigger racing an
//! answer, starts the scenario at most once. Scenarios without a survey have no
//! guard: no read, no marker, they run every time.

use super::PipelineError;
use super::asked_on;
use super::hold::{Failure, Found, Hold};
use super::processed::Processed;
use super::typed::opening;
use super::work::Work;
use super::worker::EventWorker;
use crate::engine::{
    CardTapPlan, FLEX_TAP_TAG, MenuTapPlan, RICH_MENU_TAP_TAG, RunStart, ScenarioGuard, StartPlan, StartVerdict,
    start_verdict,
};
use crate::ids::{RunId, ScenarioId};
use crate::outbound::{ActionKey, StagedAction};
use crate::store::{Effect, EffectWrites, InboxState, MessageKey, StartRecord};

/// Decide-and-commit rounds per attempt before it is retried later.
const ROUNDS: usize = 4;

/// What a start carries out, for a trigger or a card tap.
struct Starting<'a> {
    /// Whom it starts for, what it sends, the run it begins.
    run_start: &'a RunStart,
    scenario: &'a ScenarioId,
    guard: Option<&'a ScenarioGuard>,
    /// A card or menu tap's tag: recorded whether or not the scenario starts.
    tag: Option<&'static str>,
    /// A menu tap's menu: recorded with the tag.
    menu: Option<&'a str>,
    /// A text message's kept text: it goes with the commit, or before the event
    /// is done without one.
    forget_text: Option<&'a MessageKey>,
    /// A refusal by guard 3 leaves the event held and unchanged, for the
    /// caller to do something else with it (a follow's welcome).
    refusal_returns: bool,
}

impl<'a> Starting<'a> {
    /// A plan's start with no tag (a trigger's), which a refusal ends.
    fn untagged(plan: &'a StartPlan, forget_text: Option<&'a MessageKey>) -> Self {
        Self {
            run_start: &plan.run_start,
            scenario: &plan.scenario,
            guard: plan.guard.as_ref(),
            tag: None,
            menu: None,
            forget_text,
            refusal_returns: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Verdict(StartVerdict),
    /// The message that triggered it was unsent first.
    Unsent,
}

impl EventWorker {
    pub(super) async fn start(&self, hold: &Hold, work: &Work, plan: &StartPlan) -> Result<Processed, Failure> {
        self.start_forgetting(hold, work, plan, None).await
    }

    /// A start, for a text message whose text was kept: it is deleted with the
    /// start's commit, or before the event is done without one.
    pub(super) async fn start_forgetting(
        &self,
        hold: &Hold,
        work: &Work,
        plan: &StartPlan,
        forget_text: Option<&MessageKey>,
    ) -> Result<Processed, Failure> {
        let starting = Starting::untagged(plan, forget_text);
        Ok(match self.carry_out(hold, work, starting).await? {
            Ended::Verdict(StartVerdict::Start) if plan.guard.is_some() => Processed::StartedGuarded,
            Ended::Verdict(StartVerdict::Start) => Processed::Started,
            Ended::Verdict(StartVerdict::AlreadyAnswered) => Processed::NotRestarted,
            Ended::Verdict(StartVerdict::RecentlyStarted) => Processed::StartDeduplicated,
            Ended::Unsent => Processed::Unsent,
        })
    }

    /// A follow's greeting with a source's scenario; where guard 3 refuses
    /// it (the user answered that survey, or it started just now), the
    /// follow trigger's `welcome` instead, on the same hold (the refusal
    /// wrote nothing), so the new friend is greeted either way.
    pub(super) async fn greet(
        &self,
        hold: &Hold,
        work: &Work,
        source: &StartPlan,
        welcome: Option<&StartPlan>,
    ) -> Result<Processed, Failure> {
        let starting = Starting {
            refusal_returns: true,
            ..Starting::untagged(source, None)
        };
        match self.carry_out(hold, work, starting).await? {
            Ended::Verdict(StartVerdict::Start) if source.guard.is_some() => Ok(Processed::StartedGuarded),
            Ended::Verdict(StartVerdict::Start) => Ok(Processed::Started),
            Ended::Unsent => Ok(Processed::Unsent),
            Ended::Verdict(_) => {
                tracing::info!(outcome = "source_not_restarted", "the follow greets with the welcome");
                match welcome {
                    Some(welcome) => self.start(hold, work, welcome).await,
                    None => {
                        self.done_without_effect(hold)?;
                        Ok(Processed::Followed)
                    }
                }
            }
        }
    }

    pub(super) async fn card_tap(&self, hold: &Hold, work: &Work, plan: &CardTapPlan) -> Result<Processed, Failure> {
        let starting = Starting {
            run_start: &plan.run_start,
            scenario: &plan.guard.scenario,
            guard: Some(&plan.guard),
            tag: Some(FLEX_TAP_TAG),
            menu: None,
            forget_text: None,
            refusal_returns: false,
        };
        Ok(match self.carry_out(hold, work, starting).await? {
            Ended::Verdict(StartVerdict::Start) => Processed::CardTapped,
            Ended::Verdict(StartVerdict::AlreadyAnswered) => Processed::CardTapAnswered,
            Ended::Verdict(StartVerdict::RecentlyStarted) => Processed::CardTapDeduplicated,
            Ended::Unsent => Processed::Unsent,
        })
    }

    /// A rich menu's scenario area: a start under guard 3's rules, with the
    /// menu's tag and id recorded whether or not the scenario starts.
    pub(super) async fn menu_tap(&self, hold: &Hold, work: &Work, plan: &MenuTapPlan) -> Result<Processed, Failure> {
        let starting = Starting {
            run_start: &plan.start.run_start,
            scenario: &plan.start.scenario,
            guard: plan.start.guard.as_ref(),
            tag: Some(RICH_MENU_TAP_TAG),
            menu: Some(plan.menu.as_str()),
            forget_text: None,
            refusal_returns: false,
        };
        Ok(match self.carry_out(hold, work, starting).await? {
            Ended::Verdict(StartVerdict::Start) => Processed::MenuTapped,
            Ended::Verdict(StartVerdict::AlreadyAnswered) => Processed::MenuTapAnswered,
            Ended::Verdict(StartVerdict::RecentlyStarted) => Processed::MenuTapDeduplicated,
            Ended::Unsent => Processed::Unsent,
        })
    }

    async fn carry_out(&self, hold: &Hold, work: &Work, starting: Starting<'_>) -> Result<Ended, Failure> {
        // The guard first: a duplicate start ends here, before any branch or
        // personal text reads the user.
        let user = starting.run_start.user.as_str();
        let marker = starting
            .guard
            .map(|guard| (guard.marker_id.as_str(), guard.scenario.as_str(), user));
        let mut progress = match marker {
            Some((marker_id, scenario, user)) => Some(self.store.scenario_progress(marker_id, scenario, user).await?),
            None => None,
        };
        let verdict_of = |progress: Option<&crate::store::ScenarioProgress>| match progress {
            Some(progress) => start_verdict(
                progress.answered,
                progress.last_started_ms,
                work.event_time_ms,
                self.settings.start_dedup,
            ),
            None => StartVerdict::Start,
        };
        let first = verdict_of(progress.as_ref());
        if first != StartVerdict::Start && starting.tag.is_none() {
            if !starting.refusal_returns {
                self.done_forgetting(hold, starting.forget_text).await?;
            }
            return Ok(Ended::Verdict(first));
        }
        // A branch the start stopped at is decided now, from the user's state;
        // the commit expects the user's record unchanged since.
        // The version the chain was rendered from decides the branch: a newer
        // one deployed meanwhile may not have its nodes.
        let engine = match starting.run_start.run_version {
            Some(version) if starting.run_start.branch.is_some() => {
                self.versions.engine_for(starting.scenario, version).await?
            }
            _ => self.versions.current().clone(),
        };
        // A duplicate card tap (it only adds its tag) decides nothing.
        let may_start = first == StartVerdict::Start;
        let decided = if may_start {
            super::branches::decide(
                &self.store,
                &engine,
                starting.scenario,
                &starting.run_start.user,
                starting.run_start.chain(),
                starting.run_start.run.as_ref(),
                // The card tap's own tag lands in the same commit: its branches see it.
                super::branches::StepSoFar {
                    changes: crate::values::UserChanges {
                        tag: starting.tag.map(str::to_owned).into_iter().collect(),
                        ..crate::values::UserChanges::default()
                    },
                    ..super::branches::StepSoFar::default()
                },
            )
            .await?
        } else {
            super::branches::Decided {
                chain: starting.run_start.chain(),
                user_read: None,
                read: None,
            }
        };
        let (user_read, prior) = (decided.user_read, decided.read);
        let resolved = user_read.map(|_| starting.run_start.with_chain(decided.chain));
        let starting = Starting {
            run_start: resolved.as_ref().unwrap_or(starting.run_start),
            ..starting
        };
        let action = work.action(
            ActionKey::event(hold.key.as_str()),
            &hold.key,
            starting.scenario,
            &starting.run_start.messages,
            self.sender.reply_is_fresh(work),
            asked_on(
                self.versions.current(),
                starting.scenario,
                starting.run_start.asks.as_ref(),
                &starting.run_start.arms,
                self.clock.now(),
            ),
        );
        let step = super::branches::StepSoFar {
            changes: starting.run_start.changes.clone(),
            answer: None,
            read: prior,
        };
        let (action, moved) = if may_start {
            self.personal.fill(action, &engine, &step).await?
        } else {
            (None, None)
        };
        let user_read = super::personal::Moved::applied(moved, user_read);
        let mut staged = action.map(|action| action.stage(&self.store)).transpose()?;
        let timers = self
            .schedule(&starting.run_start.user, &starting.run_start.timers)
            .await?;
        let run = starting.run_start.run.as_ref().map(RunId::as_str).unwrap_or_default();
        // The version the messages were rendered from (decided at ingest).
        let run_version = starting
            .run_start
            .run_version
            .or_else(|| self.versions.current().current_version(starting.scenario))
            .unwrap_or_default();
        for _ in 0..ROUNDS {
            let verdict = verdict_of(progress.as_ref());
            let starts = verdict == StartVerdict::Start;
            if starts && !may_start {
                // Decided as a duplicate, a start after all: decide it afresh.
                return Err(PipelineError::Contention("a duplicate tap turned out to be a start".into()).into());
            }
            if !starts && starting.tag.is_none() {
                if !starting.refusal_returns {
                    self.done_forgetting(hold, starting.forget_text).await?;
                }
                return Ok(Ended::Verdict(verdict));
            }
            let start = match (starts, starting.guard, &progress) {
                (true, Some(guard), Some(progress)) => Some(StartRecord {
                    marker_id: &guard.marker_id,
                    scenario_id: guard.scenario.as_str(),
                    user,
                    read: progress.version,
                    started_at: firestore::FirestoreInstant::from_millisecond(work.event_time_ms)
                        .unwrap_or_else(|_| super::instant(self.clock.now())),
                    started_by: hold.key.as_str(),
                    run,
                    run_version,
                    variant: starting.run_start.arms.took.as_ref().map(|took| took.label.as_str()),
                }),
                _ => None,
            };
            if let Some(staged) = staged.as_mut() {
                staged.renew_lease(&self.store);
            }
            let action = staged.as_ref().filter(|_| starts);
            let effects = EffectWrites {
                tag: starting.tag.map(|tag| (user, tag)),
                menu_tap: starting.menu,
                start,
                message: work.message.as_ref().filter(|_| starts),
                forget_text: starting.forget_text,
                question: starting
                    .run_start
                    .opens
                    .as_ref()
                    .filter(|_| starts)
                    .map(|opens| opening(user, opens, None, work.line_now(self.clock.now()))),
                timers: if starts { &timers } else { &[] },
                action: action.map(StagedAction::entry),
                // With a branch decided, the user's record is written (and
                // expected unchanged) even when the chain changes nothing.
                changes: Some((user, &starting.run_start.changes))
                    .filter(|(_, changes)| starts && (!changes.is_empty() || user_read.is_some())),
                notice: None,
                user_read: user_read.filter(|_| starts),
            };
            match self.store.commit_effects(&hold.key, hold.version, &effects).await {
                Effect::Committed(version) => {
                    self.sender.send_staged(action, version).await;
                    return Ok(Ended::Verdict(verdict));
                }
                // The marker or the message mark changed since it was read (an
                // answer, another start, an unsend), or the event moved on.
                Effect::AlreadyExists | Effect::Changed => {
                    let seen = self.store.reobserve(&hold.key, marker, work.message.as_ref()).await?;
                    let still_ours = seen
                        .event
                        .is_some_and(|event| event.version == hold.version && event.doc.state == InboxState::Pending);
                    if !still_ours {
                        return Err(Failure::Superseded);
                    }
                    if seen.unsent {
                        self.done_forgetting(hold, starting.forget_text).await?;
                        return Ok(Ended::Unsent);
                    }
                    // The user's record may have changed under the branch: unless
                    // the marker now says this is no start (a duplicate landed
                    // first), this attempt ends, and the next reads and decides again.
                    if user_read.is_some() && starts && verdict_of(seen.progress.as_ref()) == StartVerdict::Start {
                        return Err(PipelineError::Contention(
                            "the user's record or the marker changed under a branch".into(),
                        )
                        .into());
                    }
                    progress = seen.progress;
                }
                Effect::Unknown(error) => {
                    tracing::warn!(error = %error, "the start commit's outcome is unknown; reading what happened");
                    match hold.find_out_patiently(&self.store, action).await? {
                        Found::Landed(version) => {
                            self.sender.send_staged(action, version).await;
                            return Ok(Ended::Verdict(verdict));
                        }
                        Found::NotLanded => {}
                        Found::Superseded => return Err(Failure::Superseded),
                    }
                }
                Effect::Failed(error) => return Err(error.into()),
            }
        }
        Err(PipelineError::Contention("the start commit kept meeting conflicts".into()).into())
    }
}
