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

use super::{OutboundSender, PipelineError, Versions, instant};
use crate::clock::Clock;
use crate::engine::{
    DueTimer, Engine, Firing, FiringSeen, OpenRead, QuestionMove, Skip, TimerPlan, ends_sibling, question_move,
};
use crate::ids::{LineUserId, NodeId, RunId, ScenarioId, TimerKind, answer_id, scenario_marker_id, timer_id};
use crate::metrics::Metrics;
use crate::outbound::{ActionKey, OutboundAction, StagedAction};
use crate::store::{
    CommitOutcome, ContextRequest, FiringWrites, QuestionChange, Store, Stored, TimerContext, TimerDoc, TimerEnd,
    TimerState, Version, still_held,
};
use chrono::{DateTime, Utc};
use firestore::FirestoreInstant;
use std::sync::Arc;
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
/// The outcome an answer's commit gives the question's pending timers.
pub(crate) const ANSWERED_CANCEL: &str = "answered";

/// Read-decide-commit rounds per claim.
const ROUNDS: usize = 3;

/// What a campaign's results count of a firing with this outcome (the
/// engine's `Firing::outcome`): every expiry closed the question, late or
/// silent (opted out) too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutcomeMark {
    Reminded,
    Expired,
}

impl OutcomeMark {
    fn of(self, campaign: &str) -> crate::store::CampaignMark<'_> {
        match self {
            OutcomeMark::Reminded => crate::store::CampaignMark::Reminded(campaign),
            OutcomeMark::Expired => crate::store::CampaignMark::Expired(campaign),
        }
    }
}

fn outcome_mark(outcome: &str) -> Option<OutcomeMark> {
    match outcome {
        "reminded" => Some(OutcomeMark::Reminded),
        "expired" | "expired_late" | "expired_opted_out" => Some(OutcomeMark::Expired),
        _ => None,
    }
}

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

fn utc(at: FirestoreInstant) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.as_millisecond()).unwrap_or_default()
}

/// The timer documents `plans` schedule for `user`, due from `now`.
pub(super) fn schedule(
    engine: &Engine,
    user: &LineUserId,
    plans: &[TimerPlan],
    now: DateTime<Utc>,
) -> Vec<(String, TimerDoc)> {
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
                    scheduled_at: instant(now),
                    ended_at: None,
                },
            ))
        })
        .collect()
}

/// What a firing ended as, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fired {
    /// Its stored ids are not ids: skipped.
    Unreadable,
    /// It had no reason to fire any more: skipped, for this reason.
    Skipped(Skip),
    /// Another instance (or an answer, an unfollow, a cancel) moved it on first.
    Superseded,
    /// It fired: sent, reminded or expired, as the engine named it.
    Done(&'static str),
}

impl Fired {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Fired::Unreadable => "unreadable",
            Fired::Skipped(skip) => skip.as_str(),
            Fired::Superseded => "superseded",
            Fired::Done(outcome) => outcome,
        }
    }
}

/// The timer firer: fires the due timers this instance claimed, each in one
/// commit conditional on the claim and on the user's state as read, then hands
/// the message it recorded to the sender.
pub(crate) struct TimerFirer {
    /// The run's own scenario version decides, even after a newer one was deployed.
    versions: Arc<Versions>,
    store: Store,
    sender: Arc<OutboundSender>,
    personal: super::personal::Personaliser,
    metrics: Arc<Metrics>,
    clock: Clock,
    /// A campaign's timers send nothing to who holds it (`CAMPAIGN_OPT_OUT_TAG`).
    opt_out_tag: String,
    /// Which campaign a run is, for its results (who was reminded, whose
    /// question expired).
    campaign_runs: super::campaign_runs::CampaignRuns,
}

impl TimerFirer {
    pub(crate) fn new(
        versions: Arc<Versions>,
        store: Store,
        sender: Arc<OutboundSender>,
        personal: super::personal::Personaliser,
        metrics: Arc<Metrics>,
        clock: Clock,
        opt_out_tag: String,
    ) -> Self {
        Self {
            versions,
            campaign_runs: super::campaign_runs::CampaignRuns::new(store.clone()),
            store,
            sender,
            personal,
            metrics,
            clock,
            opt_out_tag,
        }
    }

    /// Fires one claimed timer.
    pub(super) async fn fire(&self, job: TimerJob) {
        // Instrumented, never entered: an entered span held across an await
        // would stay entered on whatever the thread runs next.
        let span = tracing::info_span!(
            "timer",
            timer.id = %job.id,
            timer.kind = job.doc.kind.as_str(),
            user.id = %crate::log_ids::logged(&job.doc.line_user_id),
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
            Ok(fired) => tracing::info!(
                outcome = fired.as_str(),
                attempt = job.doc.attempts + 1,
                "timer fell due"
            ),
            Err(error) => {
                tracing::warn!(error = %error, outcome = "failed", "timer firing failed; it is due again when its claim runs out");
            }
        }
    }

    async fn try_fire(&self, job: &TimerJob, mut prefetched: Option<TimerContext>) -> Result<Fired, PipelineError> {
        let (Some(due), Some(request)) = (due_timer(&job.doc), context_request(&job.doc)) else {
            self.store
                .end_timer(&job.id, job.version, TimerState::Skipped, Fired::Unreadable.as_str())
                .await?;
            return Ok(Fired::Unreadable);
        };
        let user = LineUserId::parse(job.doc.line_user_id.clone())
            .map_err(|_| PipelineError::InvalidInput("the timer's user id is not valid".into()))?;
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
                opted_out: due.run.is_campaign_run() && context.tags.contains(&self.opt_out_tag),
            };
            let now = self.clock.now();
            // `Some`: a branch read the user's record (at that version, or absent).
            let mut user_read: Option<Option<crate::store::Version>> = None;
            // What that branch read: the chain's personal text renders from it.
            let prior;
            let (messages, timers, opens, asks, arms, changes, closes, rearm, outcome) =
                match engine.fire(&due, &seen, now) {
                    Firing::Skip(skip) => {
                        let ended = self
                            .store
                            .end_timer(&job.id, job.version, TimerState::Skipped, skip.as_str())
                            .await?;
                        return Ok(if ended { Fired::Skipped(skip) } else { Fired::Superseded });
                    }
                    Firing::Fire {
                        messages,
                        timers,
                        opens,
                        asks,
                        arms,
                        branch,
                        changes,
                        closes,
                        rearm,
                        outcome,
                    } => {
                        let chain = crate::engine::Rendered {
                            messages,
                            opens,
                            timers,
                            asks,
                            changes,
                            variant: arms.took,
                            asks_variant: arms.asks,
                            branch,
                        };
                        // A branch the chain stopped at is decided now, from the
                        // user's state; the firing expects the record unchanged.
                        let decided = super::branches::decide(
                            &self.store,
                            &engine,
                            &due.scenario,
                            &user,
                            chain,
                            Some(&due.run),
                            super::branches::StepSoFar::default(),
                        )
                        .await?;
                        if let Some(read) = decided.user_read {
                            let read = match read {
                                crate::store::Expect::At(version) => Some(version),
                                crate::store::Expect::Absent => None,
                            };
                            // The firing was decided on the context (whether the
                            // user follows, ...): a record that moved on since
                            // means reading the context again, never committing
                            // on a newer version than the decision saw.
                            if read != context.user_version {
                                continue;
                            }
                            user_read = Some(read);
                        }
                        prior = decided.read;
                        let chain = decided.chain;
                        let arms = crate::engine::Arms::of(&chain);
                        (
                            chain.messages,
                            chain.timers,
                            chain.opens,
                            chain.asks,
                            arms,
                            chain.changes,
                            closes,
                            rearm,
                            outcome,
                        )
                    }
                };
            let scheduled = schedule(&engine, &user, &timers, now);
            let read = context.open_question.as_ref();
            let question = question_change(
                &user,
                question_move(
                    &due,
                    opens.as_ref(),
                    closes,
                    read.map(|read| OpenRead {
                        scenario: &read.doc.scenario_id,
                        node: &read.doc.node_id,
                    }),
                ),
                read,
                now,
            );
            let cancels = context
                .sibling
                .as_ref()
                .filter(|sibling| ends_sibling(due.kind, sibling.doc.kind, sibling.doc.state == TimerState::Pending))
                .map(|sibling| (sibling.id.as_str(), sibling.version));
            let asks = super::asked_on(&engine, &due.scenario, asks.as_ref(), &arms, now);
            let step = super::branches::StepSoFar {
                changes: changes.clone(),
                answer: None,
                read: prior,
            };
            let (staged, moved) = self
                .stage_timer_action(job, &due, &user, messages, asks, (&engine, &step))
                .await?;
            // The name cached just now moved the record the firing expects.
            if let Some(moved) = moved {
                let expected = user_read.unwrap_or(context.user_version);
                let from = match moved.from {
                    crate::store::Expect::At(version) => Some(version),
                    crate::store::Expect::Absent => None,
                };
                if expected == from {
                    user_read = Some(Some(moved.to));
                }
            }
            let end = TimerEnd {
                state: TimerState::Done,
                outcome,
                ledger_id: staged.as_ref().map(|staged| staged.ledger_id.as_str()),
                rearm: rearm.map(|at| (instant(at), due.reminders.saturating_add(1))),
            };
            let campaign = match outcome_mark(outcome) {
                Some(mark) => self
                    .campaign_runs
                    .campaign_of(Some(&due.run))
                    .await?
                    .map(|campaign| (mark, campaign)),
                None => None,
            };
            let firing = FiringWrites {
                marker: context
                    .marker
                    .as_ref()
                    .map(|(_, version)| (marker_id.as_str(), *version)),
                user: (staged.is_some() || !changes.is_empty() || user_read.is_some() || campaign.is_some())
                    .then(|| (user.as_str(), user_read.unwrap_or(context.user_version))),
                campaign: campaign.as_ref().map(|(mark, campaign)| mark.of(campaign)),
                question,
                cancels,
                timers: &scheduled,
                action: staged.as_ref().map(StagedAction::entry),
                changes: &changes,
            };
            match self.store.commit_firing(&job.id, job.version, &end, &firing).await {
                CommitOutcome::Committed(versions) => {
                    let entry_version = versions.last().copied().flatten();
                    self.sender.send_staged(staged.as_ref(), entry_version).await;
                    return Ok(Fired::Done(outcome));
                }
                // The timer, the marker or the open question moved on since read.
                CommitOutcome::Changed | CommitOutcome::AlreadyExists => {
                    let found = self.store.timer(&job.id).await?;
                    if !still_held(found.as_ref(), job.version) {
                        return Ok(Fired::Superseded);
                    }
                }
                // Not known whether it landed: if it did, the timer has moved on
                // and its ledger entry is sent by whichever sweeper finds it; if
                // not, the claim runs out and the timer is due again.
                CommitOutcome::Unknown(error) => return Err(error.into()),
                CommitOutcome::Failed(error) => return Err(error.into()),
            }
        }
        Err(PipelineError::Contention(
            "the timer's firing kept meeting changes".into(),
        ))
    }

    /// The push a firing records: keyed by the timer and its due time, so each
    /// firing (each reminder) is its own action and its retries share one key.
    async fn stage_timer_action(
        &self,
        job: &TimerJob,
        due: &DueTimer,
        user: &LineUserId,
        messages: Vec<crate::line::messages::Message>,
        counts: crate::store::EntryCounts,
        (engine, step): (&crate::engine::Engine, &super::branches::StepSoFar<'_>),
    ) -> Result<(Option<StagedAction>, Option<super::personal::Moved>), crate::store::StoreError> {
        if messages.is_empty() {
            return Ok((None, None));
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
            counts,
            personal: None,
        };
        // Placeholders take the user's state at the firing.
        let (Some(action), moved) = self.personal.fill(Some(action), engine, step).await? else {
            return Ok((None, None));
        };
        let mut staged = action.stage(&self.store)?;
        staged.renew_lease(&self.store);
        Ok((Some(staged), moved))
    }
}

/// The write a firing's [`QuestionMove`] makes to the open question `read`.
fn question_change(
    user: &LineUserId,
    change: QuestionMove,
    read: Option<&Stored<crate::store::OpenQuestionDoc>>,
    now: DateTime<Utc>,
) -> Option<QuestionChange> {
    match change {
        QuestionMove::Open {
            question,
            replace_only_read,
        } => {
            let read = read.filter(|_| replace_only_read).map(|read| read.version);
            Some(super::typed::opening(user.as_str(), &question, read, now))
        }
        QuestionMove::Close => read.map(|read| QuestionChange::Close {
            user: user.to_string(),
            read: read.version,
        }),
        QuestionMove::Remind => read.map(|read| QuestionChange::Open {
            doc: crate::store::OpenQuestionDoc {
                reminded_at: Some(instant(now)),
                ..read.doc.clone()
            },
            read: Some(read.version),
        }),
        QuestionMove::Keep => None,
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
        user: crate::ids::LineUserId::parse(doc.line_user_id.clone()).ok()?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_campaigns_results_count_every_reminder_sent_and_every_expiry_that_closed_a_question() {
        let cases = [
            ("reminded", Some(OutcomeMark::Reminded)),
            ("expired", Some(OutcomeMark::Expired)),
            ("expired_late", Some(OutcomeMark::Expired)),
            ("expired_opted_out", Some(OutcomeMark::Expired)),
            ("sent", None),
            ("answered", None),
            ("opted_out", None),
        ];
        for (outcome, mark) in cases {
            assert_eq!(outcome_mark(outcome), mark, "{outcome}");
        }
    }
}
