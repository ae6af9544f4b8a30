//! Timers, carried out: scheduling them in the commits of the steps that plan
//! them, and firing the ones that fell due.
//!
//! A due timer is claimed by one instance (conditional on the version found),
//! then fired: the user's state is read in one round trip, the engine decides,
//! and one commit, conditional on the claim and on the scenario marker as read,
//! ends (or re-arms) the timer, schedules what follows and records the message
//! in the ledger. Only then is it pushed, with a retry key derived from the
//! timer. An answer, an unfollow, a new run or an operator's cancel that lands
//! first makes the firing change nothing; a crash after the claim leaves the
//! lease to run out, and the timer is claimed again.

use super::worker::Processor;
use crate::engine::{DueTimer, Engine, Firing, FiringSeen, TimerPlan};
use crate::ids::{LineUserId, NodeId, RunId, ScenarioId, TimerKind, answer_id, scenario_marker_id, timer_id};
use crate::outbound::{ActionKey, Origin, OutboundAction, StagedAction};
use crate::store::{
    CommitOutcome, FiringWrites, QuestionChange, Stored, TimerDoc, TimerEnd, TimerState, Version, still_held,
};
use chrono::{DateTime, Utc};
use firestore::FirestoreInstant;
use std::time::Instant;

/// Read-decide-commit rounds per claim.
const ROUNDS: usize = 3;

/// A due timer this instance claimed.
pub(crate) struct TimerJob {
    pub(crate) id: String,
    pub(crate) doc: TimerDoc,
    /// The timer's version after the claim.
    pub(crate) version: Version,
    /// When the claim's lease runs out.
    pub(crate) lease_until: Instant,
}

fn instant(at: DateTime<Utc>) -> FirestoreInstant {
    FirestoreInstant::from_millisecond(at.timestamp_millis()).unwrap_or_else(|_| FirestoreInstant::now())
}

fn utc(at: FirestoreInstant) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.as_millisecond()).unwrap_or_default()
}

/// The timer documents `plans` schedule for `user`, due from now.
pub(super) fn schedule(engine: &Engine, user: &LineUserId, plans: &[TimerPlan]) -> Vec<(String, TimerDoc)> {
    let now = Utc::now();
    plans
        .iter()
        .filter_map(|plan| {
            let due = engine.due_at(plan, now)?;
            let id = timer_id(&plan.scenario, &plan.node, user, &plan.run, plan.kind);
            let due_at = instant(due);
            Some((
                id,
                TimerDoc {
                    line_user_id: user.to_string(),
                    scenario_id: plan.scenario.to_string(),
                    scenario_version: plan.version,
                    run: plan.run.to_string(),
                    node_id: plan.node.to_string(),
                    kind: plan.kind,
                    due_at,
                    wake_at_ms: due_at.as_millisecond(),
                    state: TimerState::Pending,
                    outcome: None,
                    reminders: 0,
                    attempts: 0,
                    lease_owner: None,
                    ledger_id: None,
                    scheduled_at: FirestoreInstant::now(),
                    ended_at: None,
                },
            ))
        })
        .collect()
}

impl Processor {
    /// The timer documents `plans` schedule for `user`, due from now, each by
    /// the scenario version of its run.
    pub(super) async fn schedule(
        &self,
        user: &LineUserId,
        plans: &[TimerPlan],
    ) -> Result<Vec<(String, TimerDoc)>, crate::store::StoreError> {
        let mut timers = Vec::with_capacity(plans.len());
        for plan in plans {
            let engine = self.versions.engine_for(&plan.scenario, plan.version).await?;
            timers.extend(schedule(&engine, user, std::slice::from_ref(plan)));
        }
        Ok(timers)
    }

    /// The pending reminder and expiry of the question an answer answers, read
    /// so that the answer's commit cancels them conditionally. `Err(())` when
    /// the question expired before the answer (its expiry fired).
    pub(super) async fn question_timers(
        &self,
        scenario: &ScenarioId,
        version: u32,
        node: &NodeId,
        user: &LineUserId,
        run: Option<&RunId>,
    ) -> Result<Result<Vec<(String, Version)>, ()>, crate::store::StoreError> {
        let Some(run) = run else {
            return Ok(Ok(Vec::new()));
        };
        let engine = self.versions.engine_for(scenario, version).await?;
        let asks_timers = engine
            .scenario(scenario)
            .and_then(|loaded| loaded.question_timers(node))
            .is_some();
        if !asks_timers {
            return Ok(Ok(Vec::new()));
        }
        let ids = [TimerKind::Remind, TimerKind::Expire].map(|kind| timer_id(scenario, node, user, run, kind));
        let found = self.store.timers(&ids).await?;
        let mut pending = Vec::new();
        for timer in found.into_iter().flatten() {
            if timer.doc.kind == TimerKind::Expire && timer.doc.state == TimerState::Done {
                return Ok(Err(()));
            }
            if timer.doc.state == TimerState::Pending {
                pending.push((timer.id, timer.version));
            }
        }
        Ok(Ok(pending))
    }

    /// A follow or an unfollow: recorded on the user first (idempotent, by event
    /// time); an unfollow then cancels the user's pending timers (a timer that
    /// fires before its cancel lands reads `following` and sends nothing); a
    /// follow then starts the follow trigger's scenario, if any.
    pub(super) async fn follow(
        &self,
        hold: &super::hold::Hold,
        work: &super::work::Work,
        plan: &crate::engine::FollowPlan,
    ) -> Result<super::processed::Processed, super::hold::Failure> {
        self.store
            .record_following(plan.user.as_str(), plan.following, work.event_time_ms)
            .await?;
        if !plan.following {
            let cancelled = self.store.cancel_user_timers(plan.user.as_str(), "unfollowed").await?;
            tracing::info!(timers.cancelled = cancelled, "the user unfollowed");
        }
        match &plan.start {
            Some(start) => self.start(hold, work, start).await,
            None => {
                self.done_without_effect(hold)?;
                Ok(if plan.following {
                    super::processed::Processed::Followed
                } else {
                    super::processed::Processed::Unfollowed
                })
            }
        }
    }

    /// Fires one claimed timer.
    pub(super) async fn fire_timer(&self, job: TimerJob) {
        let span = tracing::info_span!(
            "timer",
            timer.id = %job.id,
            timer.kind = job.doc.kind.as_str(),
            user.id = %job.doc.line_user_id,
            scenario.id = %job.doc.scenario_id,
        );
        let _entered = span.enter();
        if job.lease_until <= Instant::now() {
            tracing::info!(
                outcome = "lease_ran_out",
                "the claim ran out in the queue; the timer is due again"
            );
            return;
        }
        match self.try_fire(&job).await {
            Ok(outcome) => tracing::info!(outcome, attempt = job.doc.attempts + 1, "timer fell due"),
            Err(error) => {
                tracing::warn!(error = %error, outcome = "failed", "timer firing failed; it is due again when its claim runs out")
            }
        }
    }

    async fn try_fire(&self, job: &TimerJob) -> Result<&'static str, crate::store::StoreError> {
        let Some(due) = due_timer(&job.doc) else {
            self.store
                .end_timer(&job.id, job.version, TimerState::Skipped, "unreadable")
                .await?;
            return Ok("unreadable");
        };
        let user = LineUserId::parse(job.doc.line_user_id.clone())
            .map_err(|_| crate::store::StoreError::Unavailable("the timer's user id is not valid".into()))?;
        let marker_id = scenario_marker_id(&due.scenario, &user);
        // The run's own scenario version decides, even after a newer one was deployed.
        let engine = self.versions.engine_for(&due.scenario, due.version).await?;
        let answer = (due.kind != TimerKind::Step).then(|| answer_id(&due.scenario, &due.node, &user));
        for _ in 0..ROUNDS {
            let context = self
                .store
                .timer_context(&job.doc, &marker_id, answer.as_deref())
                .await?;
            let seen = FiringSeen {
                current_run: context.marker.as_ref().and_then(|(marker, _)| marker.run.clone()),
                following: context.following,
                answered: context.answered,
                open: context
                    .open_question
                    .as_ref()
                    .and_then(|stored| super::typed::open_question(&stored.doc)),
            };
            let (messages, timers, opens, closes, rearm, outcome) = match engine.fire(&due, &seen, Utc::now()) {
                Firing::Skip(skip) => {
                    let ended = self
                        .store
                        .end_timer(&job.id, job.version, TimerState::Skipped, skip.as_str())
                        .await?;
                    return Ok(if ended { skip.as_str() } else { "superseded" });
                }
                Firing::Fire {
                    messages,
                    timers,
                    opens,
                    closes,
                    rearm,
                    outcome,
                } => (messages, timers, opens, closes, rearm, outcome),
            };
            let scheduled = schedule(&engine, &user, &timers);
            let question = match (&opens, closes) {
                (Some(opens), _) => Some(super::typed::opening(user.as_str(), opens, None)),
                (None, true) => context.open_question.as_ref().map(|read| QuestionChange::Close {
                    user: user.to_string(),
                    read: read.version,
                }),
                (None, false) => None,
            };
            let staged = self.stage_timer_action(job, &due, &user, messages)?;
            let end = TimerEnd {
                state: TimerState::Done,
                outcome,
                ledger_id: staged.as_ref().map(|staged| staged.ledger_id.as_str()),
                rearm: rearm.map(|at| (instant(at), due.reminders.saturating_add(1))),
            };
            let firing = FiringWrites {
                marker: context
                    .marker
                    .as_ref()
                    .map(|(_, version)| (marker_id.as_str(), *version)),
                question,
                timers: &scheduled,
                action: staged.as_ref().map(StagedAction::entry),
            };
            match self.store.commit_firing(&job.id, job.version, &end, &firing).await {
                CommitOutcome::Committed(versions) => {
                    let entry_version = versions.last().copied().flatten();
                    if let (Some(staged), Some(version)) = (staged.as_ref(), entry_version) {
                        let _held = self.in_hand.hold(&staged.ledger_id);
                        self.courier
                            .deliver(&staged.ledger_id, &staged.doc, version, Origin::Fresh)
                            .await;
                    }
                    return Ok(outcome);
                }
                // The timer, the marker or the open question moved on since read.
                CommitOutcome::Changed | CommitOutcome::AlreadyExists => {
                    let found = self.store.timer(&job.id).await?;
                    if !still_held(found.as_ref(), job.version) {
                        return Ok("superseded");
                    }
                }
                // Not known whether it landed: if it did, the timer has moved on
                // and its ledger entry is sent by whichever sweeper finds it; if
                // not, the claim runs out and the timer is due again.
                CommitOutcome::Unknown(error) => return Err(error),
                CommitOutcome::Failed(error) => return Err(error),
            }
        }
        Err(crate::store::StoreError::Unavailable(
            "the timer's firing kept meeting changes".into(),
        ))
    }

    /// The push a firing records: keyed by the timer and its due time, so each
    /// firing (each reminder) is its own action and its retries share one key.
    fn stage_timer_action(
        &self,
        job: &TimerJob,
        due: &DueTimer,
        user: &LineUserId,
        messages: Vec<crate::line::messages::Message>,
    ) -> Result<Option<StagedAction>, crate::store::StoreError> {
        if messages.is_empty() {
            return Ok(None);
        }
        let action = OutboundAction {
            key: ActionKey::timer(&job.id, job.doc.due_at.as_millisecond()),
            user: user.clone(),
            messages,
            reply: None,
            scenario: due.scenario.clone(),
            webhook_event_id: None,
            inbox_id: None,
            answer_id: None,
        };
        let mut staged = action.stage(&self.store)?;
        staged.renew_lease(&self.store);
        Ok(Some(staged))
    }
}

/// The timer as the engine sees it; `None` when its stored ids are not ids.
fn due_timer(doc: &TimerDoc) -> Option<DueTimer> {
    Some(DueTimer {
        kind: doc.kind,
        scenario: ScenarioId::parse(doc.scenario_id.clone()).ok()?,
        version: doc.scenario_version,
        run: RunId::parse(doc.run.clone()).ok()?,
        node: NodeId::parse(doc.node_id.clone()).ok()?,
        due: utc(doc.due_at),
        reminders: doc.reminders,
    })
}

/// A stored timer found due, as a job once claimed.
pub(super) fn job(timer: Stored<TimerDoc>, version: Version, lease_until: Instant) -> TimerJob {
    TimerJob {
        id: timer.id,
        doc: timer.doc,
        version,
        lease_until,
    }
}
