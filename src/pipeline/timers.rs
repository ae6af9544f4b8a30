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
    CommitOutcome, ContextRequest, FiringWrites, QuestionChange, Stored, TimerContext, TimerDoc, TimerEnd, TimerState,
    Version, still_held,
};
use chrono::{DateTime, Utc};
use firestore::FirestoreInstant;
use std::time::Instant;
use tracing::Instrument;

/// What an answer finds of its question's own timers.
pub(super) enum AskedTimers {
    /// Not expired: these (reminder, expiry) are pending, at these versions.
    Pending(Vec<(String, Version)>),
    /// The expiry fired, or was due before the answer was given.
    Expired,
}

/// The outcome of a timer an operator cancelled.
pub(crate) const OPERATOR_CANCEL: &str = "cancelled_by_operator";

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
    /// The user's state, read for the whole sweep's batch right after the
    /// claim (`None` when that read failed): the first round uses it.
    pub(crate) context: Option<TimerContext>,
}

/// The documents the firing of `doc` reads; `None` when its ids are not ids.
pub(super) fn context_request(doc: &TimerDoc) -> Option<ContextRequest<'_>> {
    let due = due_timer(doc)?;
    let user = LineUserId::parse(doc.line_user_id.clone()).ok()?;
    // A reminder reads its question's expiry; an expiry ends its reminder.
    let sibling = match due.kind {
        TimerKind::Step => None,
        TimerKind::Remind => Some(TimerKind::Expire),
        TimerKind::Expire => Some(TimerKind::Remind),
    };
    Some(ContextRequest {
        timer: doc,
        marker_id: scenario_marker_id(&due.scenario, &user),
        answer_id: (due.kind != TimerKind::Step).then(|| answer_id(&due.scenario, &due.node, &user)),
        sibling_id: sibling.map(|kind| timer_id(&due.scenario, &due.node, &user, &due.run, kind)),
        reads_open_question: due.kind != TimerKind::Step,
    })
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
    /// so that the answer's commit cancels them conditionally; or that the
    /// question expired before the answer.
    pub(super) async fn question_timers(
        &self,
        scenario: &ScenarioId,
        version: u32,
        node: &NodeId,
        user: &LineUserId,
        run: Option<&RunId>,
        event_ms: i64,
    ) -> Result<AskedTimers, crate::store::StoreError> {
        let Some(run) = run else {
            return Ok(AskedTimers::Pending(Vec::new()));
        };
        let engine = self.versions.engine_for(scenario, version).await?;
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
            // cancel keeps the question open.
            let expiry = timer.doc.kind == TimerKind::Expire;
            let due_before = timer.doc.due_at.as_millisecond() <= event_ms;
            let kept_open = timer.doc.outcome.as_deref() == Some(OPERATOR_CANCEL);
            if expiry && (timer.doc.state == TimerState::Done || (due_before && !kept_open)) {
                return Ok(AskedTimers::Expired);
            }
            if timer.doc.state == TimerState::Pending {
                pending.push((timer.id, timer.version));
            }
        }
        Ok(AskedTimers::Pending(pending))
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
        let newest = self
            .store
            .record_following(plan.user.as_str(), plan.following, work.event_time_ms)
            .await?;
        // Only the newest unfollow cancels, and only what was scheduled before
        // it: a late one must not stop the steps of a follow that came after.
        if !plan.following && newest {
            let cancelled = self
                .store
                .cancel_user_timers(plan.user.as_str(), work.event_time_ms, "unfollowed")
                .await?;
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
        // Instrumented, never entered: an entered span held across an await
        // would stay entered on whatever the thread runs next.
        let span = tracing::info_span!(
            "timer",
            timer.id = %job.id,
            timer.kind = job.doc.kind.as_str(),
            user.id = %job.doc.line_user_id,
            scenario.id = %job.doc.scenario_id,
        );
        self.fire_claimed(job).instrument(span).await;
    }

    async fn fire_claimed(&self, mut job: TimerJob) {
        if job.lease_until <= Instant::now() {
            // Given back uncounted (unless another instance took it meanwhile).
            let released = self.store.release_timer(&job.id, job.version, job.doc.attempts).await;
            tracing::info!(
                outcome = "lease_ran_out",
                released = matches!(released, Ok(true)),
                "the claim ran out in the queue; the timer is due again"
            );
            return;
        }
        let prefetched = job.context.take();
        let (result, round_trips) = crate::store::round_trips::counted(self.try_fire(&job, prefetched)).await;
        self.metrics.record("timer_fired", round_trips);
        match result {
            Ok(outcome) => tracing::info!(outcome, attempt = job.doc.attempts + 1, "timer fell due"),
            Err(error) => {
                tracing::warn!(error = %error, outcome = "failed", "timer firing failed; it is due again when its claim runs out")
            }
        }
    }

    async fn try_fire(
        &self,
        job: &TimerJob,
        mut prefetched: Option<TimerContext>,
    ) -> Result<&'static str, crate::store::StoreError> {
        let (Some(due), Some(request)) = (due_timer(&job.doc), context_request(&job.doc)) else {
            self.store
                .end_timer(&job.id, job.version, TimerState::Skipped, "unreadable")
                .await?;
            return Ok("unreadable");
        };
        let user = LineUserId::parse(job.doc.line_user_id.clone())
            .map_err(|_| crate::store::StoreError::Unavailable("the timer's user id is not valid".into()))?;
        let marker_id = request.marker_id.clone();
        // The run's own scenario version decides, even after a newer one was deployed.
        let engine = self.versions.engine_for(&due.scenario, due.version).await?;
        for _ in 0..ROUNDS {
            let context = match prefetched.take() {
                Some(context) => context,
                None => {
                    let mut read = self.store.timer_contexts(std::slice::from_ref(&request)).await?;
                    read.pop().ok_or_else(|| {
                        crate::store::StoreError::Unavailable("the timer's context was not read".into())
                    })?
                }
            };
            let expiry = context
                .sibling
                .as_ref()
                .filter(|sibling| sibling.doc.kind == TimerKind::Expire);
            let seen = FiringSeen {
                current_run: context.marker.as_ref().and_then(|(marker, _)| marker.run.clone()),
                following: context.following,
                answered: context.answered,
                open: context
                    .open_question
                    .as_ref()
                    .and_then(|stored| super::typed::open_question(&stored.doc)),
                expired: expiry.is_some_and(|expiry| expiry.doc.state == TimerState::Done),
                expires_at: expiry
                    .filter(|expiry| expiry.doc.state == TimerState::Pending)
                    .map(|expiry| utc(expiry.doc.due_at)),
            };
            let (messages, timers, opens, asks, closes, rearm, outcome) = match engine.fire(&due, &seen, Utc::now()) {
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
                    asks,
                    closes,
                    rearm,
                    outcome,
                } => (messages, timers, opens, asks, closes, rearm, outcome),
            };
            let scheduled = schedule(&engine, &user, &timers);
            // A reminder's or an expiry's new question replaces only the open
            // question as read (a step's follows the scenario, whatever is open).
            let read_open = context
                .open_question
                .as_ref()
                .filter(|_| due.kind != TimerKind::Step)
                .map(|read| read.version);
            let question = match (&opens, closes) {
                (Some(opens), _) => Some(super::typed::opening(user.as_str(), opens, read_open)),
                (None, true) => context.open_question.as_ref().map(|read| QuestionChange::Close {
                    user: user.to_string(),
                    read: read.version,
                }),
                // A reminder of a text or date question asks it again: open from
                // now (a reply to the reminder is in the answer window), and only
                // if it is still the open question as read.
                (None, false) if due.kind == TimerKind::Remind => context
                    .open_question
                    .as_ref()
                    .filter(|read| {
                        read.doc.scenario_id == due.scenario.as_str() && read.doc.node_id == due.node.as_str()
                    })
                    .map(|read| QuestionChange::Open {
                        doc: crate::store::OpenQuestionDoc {
                            reminded_at: Some(FirestoreInstant::now()),
                            ..read.doc.clone()
                        },
                        read: Some(read.version),
                    }),
                (None, false) => None,
            };
            // An expiry ends its question's pending reminder in the same commit.
            let cancels = context
                .sibling
                .as_ref()
                .filter(|sibling| {
                    due.kind == TimerKind::Expire
                        && sibling.doc.kind == TimerKind::Remind
                        && sibling.doc.state == TimerState::Pending
                })
                .map(|sibling| (sibling.id.as_str(), sibling.version));
            let asks = super::asked(&engine, &due.scenario, asks.as_ref());
            let staged = self.stage_timer_action(job, &due, &user, messages, asks)?;
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
                user: staged.as_ref().map(|_| (user.as_str(), context.user_version)),
                question,
                cancels,
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
        asks: Option<crate::store::AsksDoc>,
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
            asks,
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
pub(super) fn job(
    timer: Stored<TimerDoc>,
    version: Version,
    lease_until: Instant,
    context: Option<TimerContext>,
) -> TimerJob {
    TimerJob {
        id: timer.id,
        doc: timer.doc,
        version,
        lease_until,
        context,
    }
}
