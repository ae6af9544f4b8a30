//! Timers: scheduled steps, reminders and expiries, one document each.
//!
//! - `timers/{timerId}`: the id hashes scenario, node, user, run and kind, so
//!   the commit that schedules a timer can be retried without making a second
//!   one. A timer is written in the same atomic commit as the step that
//!   schedules it.
//! - A timer is due when `wakeAtMs` (its due time, then the end of a claim's
//!   lease) has passed and it is still `pending`. Any instance claims a due
//!   timer with an update-time precondition, so exactly one holds it; a crash
//!   leaves the lease to run out and another instance claims it again.
//! - Firing is one commit conditional on the timer as claimed (and on the
//!   user's scenario marker as read), so a cancel, an answer or a new run that
//!   lands first makes a late firing change nothing.
//!
//! The due query (`state == pending`, `wakeAtMs <= now`, ordered by `wakeAtMs`)
//! needs the composite index in `firestore.indexes.json`.

use super::docs::collections::{OPEN_QUESTIONS, SCENARIO_ANSWERS, SURVEY_RESPONSES, TIMERS, USERS};
use super::lease::{Stored, Swept, swept};
use super::questions::QuestionChange;
use super::round_trips::Timed;
use super::writes::{CommitOutcome, Expect, batch_write, code, expecting, merge, set};
use super::{LedgerDoc, OpenQuestionDoc, Store, StoreError, Version, classify, later};
use crate::ids::TimerKind;
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::{Document, Write};
use serde::{Deserialize, Serialize};

/// `timers/{timerId}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TimerDoc {
    pub(crate) line_user_id: String,
    pub(crate) scenario_id: String,
    /// The scenario version of the run that scheduled it.
    pub(crate) scenario_version: u32,
    /// The user's pass through the scenario that scheduled it.
    pub(crate) run: String,
    /// The wait node (a step) or the question (a reminder, an expiry).
    pub(crate) node_id: String,
    pub(crate) kind: TimerKind,
    /// When it is meant to fire.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) due_at: FirestoreInstant,
    /// When an instance may take it: its due time, then the end of a claim's lease.
    pub(crate) wake_at_ms: i64,
    pub(crate) state: TimerState,
    /// Why it ended (`sent`, `answered`, `unfollowed`, `superseded`, `late`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<String>,
    /// Reminders already sent (a reminder timer is re-armed after each).
    #[serde(default)]
    pub(crate) reminders: u32,
    /// Claims so far.
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease_owner: Option<String>,
    /// The ledger entry of the message its firing sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ledger_id: Option<String>,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) scheduled_at: FirestoreInstant,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) ended_at: Option<FirestoreInstant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TimerState {
    Pending,
    /// Fired: its message was recorded for sending.
    Done,
    /// Found without a reason to fire (answered, unfollowed, superseded, late).
    Skipped,
    /// Stopped before it fired (an unfollow, an operator, an answer).
    Cancelled,
}

impl TimerState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TimerState::Pending => "pending",
            TimerState::Done => "done",
            TimerState::Skipped => "skipped",
            TimerState::Cancelled => "cancelled",
        }
    }
}

/// What a timer's firing needs to know about the user, read in one round trip.
#[derive(Debug, Clone)]
pub(crate) struct TimerContext {
    /// The user's marker of the timer's scenario, with its version.
    pub(crate) marker: Option<(MarkerRun, Version)>,
    /// `false` only when the user unfollowed last.
    pub(crate) following: bool,
    /// The user's tags (the campaigns' opt-out tag stops a campaign's timers).
    pub(crate) tags: Vec<String>,
    /// The version of `users/{id}` as read (`None`: absent): the firing
    /// commit names it, so an unfollow recorded meanwhile stops the push.
    pub(crate) user_version: Option<Version>,
    /// Whether the question (of a reminder or an expiry) has an answer.
    pub(crate) answered: bool,
    /// The user's open question, with its version.
    pub(crate) open_question: Option<Stored<OpenQuestionDoc>>,
    /// The other timer of the same question (a reminder's expiry, an expiry's
    /// reminder), with its version.
    pub(crate) sibling: Option<Stored<TimerDoc>>,
}

/// The documents one timer's firing reads, by id.
pub(crate) struct ContextRequest<'a> {
    pub(crate) timer: &'a TimerDoc,
    pub(crate) marker_id: String,
    /// The answer of the timer's question (reminders and expiries).
    pub(crate) answer_id: Option<String>,
    /// The question's other timer (reminders and expiries).
    pub(crate) sibling_id: Option<String>,
    /// Whether the firing needs the user's open question (reminders and
    /// expiries do; a step asks its question without reading it).
    pub(crate) reads_open_question: bool,
}

/// One timer's context from the documents read for it, in [`Store::context_paths`] order.
fn decode_context(
    request: &ContextRequest<'_>,
    found: &mut impl Iterator<Item = Option<Document>>,
) -> Result<TimerContext, StoreError> {
    let marker = match found.next().flatten() {
        Some(document) => {
            let stored = Stored::<MarkerRun>::decode(document)?;
            Some((stored.doc, stored.version))
        }
        None => None,
    };
    #[derive(Deserialize)]
    struct Following {
        #[serde(default)]
        following: Option<bool>,
        #[serde(default)]
        tags: Vec<String>,
    }
    let (following, user_version, tags) = match found.next().flatten() {
        Some(document) => {
            let stored = Stored::<Following>::decode(document)?;
            (
                stored.doc.following != Some(false),
                Some(stored.version),
                stored.doc.tags,
            )
        }
        None => (true, None, Vec::new()),
    };
    let open_question = if request.reads_open_question {
        found.next().flatten().map(Stored::decode).transpose()?
    } else {
        None
    };
    let answered = match &request.answer_id {
        Some(_) => found.next().flatten().is_some(),
        None => false,
    };
    let sibling = match &request.sibling_id {
        Some(_) => found.next().flatten().map(Stored::decode).transpose()?,
        None => None,
    };
    Ok(TimerContext {
        marker,
        following,
        tags,
        user_version,
        answered,
        open_question,
        sibling,
    })
}

/// The run a marker names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MarkerRun {
    #[serde(default)]
    pub(crate) run: Option<String>,
}

/// How a timer ends, as its firing commit writes it.
pub(crate) struct TimerEnd<'a> {
    pub(crate) state: TimerState,
    pub(crate) outcome: &'a str,
    pub(crate) ledger_id: Option<&'a str>,
    /// A reminder that goes on: its next due time and the reminders sent.
    pub(crate) rearm: Option<(FirestoreInstant, u32)>,
}

/// The writes of one timer's firing, beside the timer's own change.
pub(crate) struct FiringWrites<'a> {
    /// The marker id and its version as read: a start or an answer in between
    /// makes the firing change nothing.
    pub(crate) marker: Option<(&'a str, Version)>,
    /// The user and the version of `users/{id}` as read (`None`: absent).
    pub(crate) user: Option<(&'a str, Option<Version>)>,
    pub(crate) question: Option<QuestionChange>,
    /// A timer this firing ends (an expiry ends its question's pending
    /// reminder), conditional on the version read.
    pub(crate) cancels: Option<(&'a str, Version)>,
    pub(crate) timers: &'a [(String, TimerDoc)],
    pub(crate) action: Option<(&'a str, &'a LedgerDoc)>,
    /// What the sent nodes do to the user's tags and fields (with `user`).
    pub(crate) changes: &'a crate::values::UserChanges,
    /// The campaign whose run it is, recorded on the user (with `user`): a
    /// reminder reached them, or the expiry closed their question.
    pub(crate) campaign: Option<super::effects::CampaignMark<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TimerChange<'a> {
    state: TimerState,
    outcome: &'a str,
    #[serde(with = "firestore::serialize_as_timestamp")]
    ended_at: FirestoreInstant,
    #[serde(skip_serializing_if = "Option::is_none")]
    ledger_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rearm<'a> {
    #[serde(with = "firestore::serialize_as_timestamp")]
    due_at: FirestoreInstant,
    wake_at_ms: i64,
    reminders: u32,
    ledger_id: Option<&'a str>,
    outcome: &'a str,
    /// A new reminder starts its own count of claims.
    attempts: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Claim<'a> {
    wake_at_ms: i64,
    lease_owner: &'a str,
    attempts: u32,
}

impl Store {
    /// The write that schedules a timer (inside the commit of the step that
    /// schedules it). A set, not a create: the same question asked again in the
    /// same run re-arms its timer, and a firing holding the old one then finds
    /// it changed.
    pub(crate) fn timer_write(&self, id: &str, doc: &TimerDoc) -> Result<Write, StoreError> {
        Ok(set(self.document_path(TIMERS, id), doc)?)
    }

    /// One timer with its version.
    pub(crate) async fn timer(&self, id: &str) -> Result<Option<Stored<TimerDoc>>, StoreError> {
        self.get_stored(TIMERS, id).await
    }

    /// Pending timers whose wake time has passed, earliest first, up to `limit`.
    pub(crate) async fn due_timers(&self, limit: u32) -> Result<Vec<Swept<TimerDoc>>, StoreError> {
        super::round_trips::count();
        let now_ms = self.now().as_millisecond();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .from(TIMERS)
            .filter(|q| {
                q.for_all([
                    q.field("state").eq(TimerState::Pending.as_str()),
                    q.field("wakeAtMs").less_than_or_equal(now_ms),
                ])
            })
            .order(|o| o.fields([o.field("wakeAtMs").ascending()]))
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(documents.into_iter().map(swept).collect())
    }

    /// Claims due timers for this instance, each conditional on the version it
    /// was found at, in one `BatchWrite`: `Some(new version)` for each one won.
    /// The claim pushes the wake time to the end of the lease, so a crashed
    /// holder's timer is due again then.
    pub(crate) async fn claim_timers(&self, timers: &[Stored<TimerDoc>]) -> Result<Vec<Option<Version>>, StoreError> {
        if timers.is_empty() {
            return Ok(Vec::new());
        }
        let wake = later(self.now(), self.options.lease).as_millisecond();
        let writes = timers
            .iter()
            .map(|timer| {
                let claim = Claim {
                    wake_at_ms: wake,
                    lease_owner: &self.options.instance_id,
                    attempts: timer.doc.attempts.saturating_add(1),
                };
                Ok(expecting(
                    merge(self.document_path(TIMERS, &timer.id), &claim, Vec::new())?,
                    Expect::At(timer.version),
                ))
            })
            .collect::<Result<Vec<Write>, StoreError>>()?;
        super::round_trips::count();
        // A claim whose answer was lost is not taken: its lease runs out and the
        // timer is due again then (never two holders).
        let statuses = batch_write(&self.db, writes, self.options.request_timeout).await?;
        Ok(statuses
            .into_iter()
            .map(|status| (status.code == code::OK).then_some(status.version).flatten())
            .collect())
    }

    /// What the firings of `requests` must know, in one round trip for all of
    /// them: per timer the scenario marker (which run is current), whether the
    /// user follows, the user's open question, whether the question has an
    /// answer, and the question's other timer.
    pub(crate) async fn timer_contexts(
        &self,
        requests: &[ContextRequest<'_>],
    ) -> Result<Vec<TimerContext>, StoreError> {
        let mut contexts = Vec::with_capacity(requests.len());
        // BatchGetDocuments of at most 100 timers (500 documents) at once.
        for chunk in requests.chunks(100) {
            let paths = chunk.iter().flat_map(|request| self.context_paths(request)).collect();
            let mut found = self.get_many(paths).await?.into_iter();
            for request in chunk {
                contexts.push(decode_context(request, &mut found)?);
            }
        }
        Ok(contexts)
    }

    fn context_paths(&self, request: &ContextRequest<'_>) -> Vec<String> {
        let user = &request.timer.line_user_id;
        let mut paths = vec![
            self.document_path(SCENARIO_ANSWERS, &request.marker_id),
            self.document_path(USERS, user),
        ];
        if request.reads_open_question {
            paths.push(self.document_path(OPEN_QUESTIONS, user));
        }
        if let Some(answer_id) = &request.answer_id {
            paths.push(self.document_path(SURVEY_RESPONSES, answer_id));
        }
        if let Some(sibling_id) = &request.sibling_id {
            paths.push(self.document_path(TIMERS, sibling_id));
        }
        paths
    }

    /// The firing commit: the timer's end (or re-arm) conditional on the claim,
    /// the marker conditional on the version read, the question change, the
    /// timers it schedules and the ledger entry of what it sends.
    pub(crate) async fn commit_firing(
        &self,
        id: &str,
        claimed: Version,
        end: &TimerEnd<'_>,
        firing: &FiringWrites<'_>,
    ) -> CommitOutcome {
        match self.firing_writes(id, claimed, end, firing) {
            Ok(writes) => self.commit(writes).await,
            Err(error) => CommitOutcome::Failed(error),
        }
    }

    fn firing_writes(
        &self,
        id: &str,
        claimed: Version,
        end: &TimerEnd<'_>,
        firing: &FiringWrites<'_>,
    ) -> Result<Vec<Write>, StoreError> {
        let mut writes = vec![self.timer_end_write(id, claimed, end)?];
        if let Some((marker_id, read)) = firing.marker {
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Touched {
                last_timer_id: String,
            }
            let touched = Touched {
                last_timer_id: id.to_owned(),
            };
            writes.push(expecting(
                merge(self.document_path(SCENARIO_ANSWERS, marker_id), &touched, Vec::new())?,
                Expect::At(read),
            ));
        }
        if let Some((user, read)) = firing.user {
            let expect = read.map_or(Expect::Absent, Expect::At);
            writes.extend(self.user_writes(user, firing.changes, None, Some(expect), firing.campaign)?);
        }
        if let Some(change) = &firing.question {
            writes.push(self.question_write(change)?);
        }
        if let Some((timer_id, read)) = firing.cancels {
            writes.push(self.timer_cancel_write(timer_id, read, "expired")?);
        }
        for (timer_id, doc) in firing.timers {
            writes.push(self.timer_write(timer_id, doc)?);
        }
        if let Some((ledger_id, entry)) = firing.action {
            writes.extend(self.sent_count_write(entry)?);
            writes.push(self.ledger_create_write(ledger_id, entry)?);
        }
        Ok(writes)
    }

    fn timer_end_write(&self, id: &str, claimed: Version, end: &TimerEnd<'_>) -> Result<Write, StoreError> {
        let path = self.document_path(TIMERS, id);
        let write = match end.rearm {
            Some((due_at, reminders)) => merge(
                path,
                &Rearm {
                    due_at,
                    wake_at_ms: due_at.as_millisecond(),
                    reminders,
                    ledger_id: end.ledger_id,
                    outcome: end.outcome,
                    attempts: 0,
                },
                Vec::new(),
            )?,
            None => merge(
                path,
                &TimerChange {
                    state: end.state,
                    outcome: end.outcome,
                    ended_at: self.now(),
                    ledger_id: end.ledger_id,
                },
                Vec::new(),
            )?,
        };
        Ok(expecting(write, Expect::At(claimed)))
    }

    /// Cancels a timer read at `version`, inside another commit.
    pub(crate) fn timer_cancel_write(&self, id: &str, version: Version, outcome: &str) -> Result<Write, StoreError> {
        let end = TimerEnd {
            state: TimerState::Cancelled,
            outcome,
            ledger_id: None,
            rearm: None,
        };
        self.timer_end_write(id, version, &end)
    }

    /// Timers by id, each with its version (`None` when absent), in one round trip.
    pub(crate) async fn timers(&self, ids: &[String]) -> Result<Vec<Option<Stored<TimerDoc>>>, StoreError> {
        let paths = ids.iter().map(|id| self.document_path(TIMERS, id)).collect();
        self.get_many(paths)
            .await?
            .into_iter()
            .map(|found| found.map(Stored::decode).transpose())
            .collect()
    }

    /// Ends a timer at `version` without sending anything (skipped or
    /// cancelled). `Ok(false)` when it had moved on.
    pub(crate) async fn end_timer(
        &self,
        id: &str,
        version: Version,
        state: TimerState,
        outcome: &str,
    ) -> Result<bool, StoreError> {
        let end = TimerEnd {
            state,
            outcome,
            ledger_id: None,
            rearm: None,
        };
        let write = self.timer_end_write(id, version, &end)?;
        Ok(self.commit(vec![write]).await.first_version()?.is_some())
    }

    /// The user's timers, pending first then the most recent, at most `limit`.
    pub(crate) async fn user_timers(
        &self,
        user: &str,
        pending_only: bool,
        limit: u32,
    ) -> Result<Vec<Stored<TimerDoc>>, StoreError> {
        super::round_trips::count();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .from(TIMERS)
            .filter(|q| {
                q.for_all([
                    q.field("lineUserId").eq(user),
                    pending_only
                        .then(|| q.field("state").eq(TimerState::Pending.as_str()))
                        .flatten(),
                ])
            })
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        let mut timers = documents
            .into_iter()
            .map(Stored::decode)
            .collect::<Result<Vec<Stored<TimerDoc>>, StoreError>>()?;
        timers.sort_by_key(|timer| {
            (
                timer.doc.state != TimerState::Pending,
                timer.doc.due_at.as_millisecond(),
            )
        });
        Ok(timers)
    }

    /// Cancels the pending timers of `user` scheduled at or before `before_ms`
    /// (an unfollow cancels what was scheduled before it, not what a later
    /// follow scheduled), each conditional on the version read; one that
    /// changed meanwhile is read and cancelled again. Pages through them 500
    /// at a time. Returns how many were cancelled.
    pub(crate) async fn cancel_user_timers(
        &self,
        user: &str,
        before_ms: i64,
        outcome: &str,
    ) -> Result<usize, StoreError> {
        const PAGE: u32 = 500;
        let mut cancelled = 0;
        let mut conflicts = 0;
        loop {
            let found = self.user_timers(user, true, PAGE).await?;
            let full = found.len() >= PAGE as usize;
            let pending: Vec<&Stored<TimerDoc>> = found
                .iter()
                .filter(|timer| timer.doc.scheduled_at.as_millisecond() <= before_ms)
                .collect();
            if pending.is_empty() {
                // Only timers scheduled after the unfollow are left (or none).
                return Ok(cancelled);
            }
            let targets: Vec<(&str, Version)> =
                pending.iter().map(|timer| (timer.id.as_str(), timer.version)).collect();
            let (done, missed) = self.cancel_timers(&targets, outcome).await?;
            cancelled += done;
            if missed > 0 {
                conflicts += 1;
                if conflicts >= 3 {
                    return Err(StoreError::Unavailable(
                        "the user's timers kept changing while being cancelled".into(),
                    ));
                }
            } else if !full {
                return Ok(cancelled);
            }
        }
    }

    /// Cancels every pending timer of `run` (a campaign's: all its
    /// recipients'), 500 at a time, each conditional on the version read; one
    /// that changed meanwhile (claimed, re-armed) is read and cancelled again,
    /// and a firing that claimed it first then commits nothing. Returns how
    /// many were cancelled.
    pub(crate) async fn cancel_run_timers(&self, run: &str, outcome: &str) -> Result<usize, StoreError> {
        const PAGE: u32 = 500;
        const CONFLICT_ROUNDS: usize = 5;
        let (mut cancelled, mut conflicts) = (0, 0);
        loop {
            super::round_trips::count();
            let documents: Vec<Document> = self
                .db
                .fluent()
                .select()
                .from(TIMERS)
                .filter(|q| {
                    q.for_all([
                        q.field("run").eq(run),
                        q.field("state").eq(TimerState::Pending.as_str()),
                    ])
                })
                .limit(PAGE)
                .query()
                .timed(super::round_trips::QUERY)
                .await
                .map_err(classify)?;
            if documents.is_empty() {
                return Ok(cancelled);
            }
            let targets: Vec<(&str, Version)> = documents
                .iter()
                .map(|document| {
                    let id = super::lease::document_id(&document.name);
                    (id, Version::new(document.update_time.unwrap_or_default()))
                })
                .collect();
            let (done, missed) = self.cancel_timers(&targets, outcome).await?;
            cancelled += done;
            if missed > 0 {
                conflicts += 1;
                if conflicts >= CONFLICT_ROUNDS {
                    return Err(StoreError::Unavailable(
                        "the campaign's timers kept changing while being cancelled".into(),
                    ));
                }
            }
        }
    }

    /// Cancels `timers`, each conditional on its version, in one `BatchWrite`:
    /// how many were cancelled and how many had changed meanwhile.
    async fn cancel_timers(&self, timers: &[(&str, Version)], outcome: &str) -> Result<(usize, usize), StoreError> {
        let end = TimerEnd {
            state: TimerState::Cancelled,
            outcome,
            ledger_id: None,
            rearm: None,
        };
        let writes = timers
            .iter()
            .map(|(id, version)| self.timer_end_write(id, *version, &end))
            .collect::<Result<Vec<Write>, StoreError>>()?;
        super::round_trips::count();
        let statuses = batch_write(&self.db, writes, self.options.request_timeout).await?;
        let missed = statuses.iter().filter(|status| status.code != code::OK).count();
        Ok((statuses.len() - missed, missed))
    }

    /// Gives a claimed timer back unstarted (at shutdown, or its claim ran out
    /// in the queue): due again now, for any instance, with the claim count it
    /// had before (`attempts`): a claim that never started is no attempt.
    pub(crate) async fn release_timer(&self, id: &str, version: Version, attempts: u32) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Release {
            wake_at_ms: i64,
            attempts: u32,
        }
        let release = Release {
            wake_at_ms: self.now().as_millisecond(),
            attempts,
        };
        let write = expecting(
            merge(self.document_path(TIMERS, id), &release, Vec::new())?,
            Expect::At(version),
        );
        Ok(self.commit(vec![write]).await.first_version()?.is_some())
    }
}

/// Whether `commit` definitely did not land and the timer is still held (a
/// conflict elsewhere), as opposed to the timer itself having moved on.
pub(crate) fn still_held(found: Option<&Stored<TimerDoc>>, claimed: Version) -> bool {
    found.is_some_and(|timer| timer.version == claimed && timer.doc.state == TimerState::Pending)
}
