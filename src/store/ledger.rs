//! The outbound ledger: every outbound action is recorded under a deterministic
//! id (from its action key) before it is sent, then settled as sent, logged,
//! uncertain or failed. Creating the entry is also the guard against sending an
//! action twice: a second `create` of the same action fails with `ALREADY_EXISTS`.
//! Every later change names the version its writer holds.

use super::docs::collections::{DEAD_LETTERS, OUTBOUND_LEDGER};
use super::docs::{DeadLetterDoc, DeadLetterKind, LedgerDoc, LedgerState, RouteDoc};
use super::inbox::dead_letter_id;
use super::later;
use super::lease::{Stored, Swept};
use super::questions::QuestionChange;
use super::settler::{Fact, Settle};
use super::writes::{CommitOutcome, Expect, create, delete, expecting, merge, merge_deleting, set};
use super::{Store, StoreError, Version};
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Write;
use serde::Serialize;
use std::time::Duration;

/// Kept for audits and for answering "did this user get that message?".
pub(super) const LEDGER_RETENTION: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// How an action ended, or that it waits for another attempt.
#[derive(Debug, Clone)]
pub(crate) enum Settlement {
    Sent,
    /// Dry run: printed, not sent.
    Logged,
    /// A reply that could not be settled while its token was fresh.
    Uncertain(String),
    /// Refused by LINE, or out of attempts.
    Failed(String),
    /// Try again after the given time (the lease runs out then and any
    /// instance's sweeper takes it).
    RetryAt {
        after: Duration,
        error: String,
    },
}

impl Settlement {
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Settlement::Sent => "sent",
            Settlement::Logged => "logged",
            Settlement::Uncertain(_) => "uncertain",
            Settlement::Failed(_) => "failed",
            Settlement::RetryAt { .. } => "retry_later",
        }
    }
}

/// What a turn of the courier did: recorded with its settlement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempted {
    /// LINE calls made so far.
    pub(crate) attempts: u32,
    /// The route of the last call (a reply may fall back to a push).
    pub(crate) route: RouteDoc,
    pub(crate) reply_outcome_unknown: bool,
}

impl Attempted {
    /// Nothing was called: the entry as it stands.
    pub(crate) fn unchanged(doc: &LedgerDoc) -> Self {
        Self {
            attempts: doc.attempts,
            route: doc.route,
            reply_outcome_unknown: doc.reply_outcome_unknown,
        }
    }
}

/// What became of a settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettleWrite {
    /// Queued with the batched settles ("sent", "logged").
    Queued,
    /// Written: the entry's new version.
    Written(Option<Version>),
    /// Another instance had taken the entry over: nothing changed.
    Superseded,
}

/// The outcome of recording an action outside an effect commit (manual sends).
#[derive(Debug, Clone)]
pub(crate) enum Recorded {
    New {
        version: Version,
    },
    /// Recorded by an earlier call: the entry as it stands.
    Existing(Box<Stored<LedgerDoc>>),
    /// The user's record changed since a branch of the messages read it:
    /// nothing was recorded; decide again.
    UserChanged,
}

/// What a manual send does to the user's record: `changes`, conditional on
/// `read` when a branch of its messages read the record.
pub(crate) struct UserWrite<'a> {
    pub(crate) user: &'a str,
    pub(crate) changes: &'a crate::values::UserChanges,
    pub(crate) read: Option<super::Expect>,
}

/// What a new ledger entry records about its action.
pub(crate) struct NewAction<'a> {
    pub(crate) action_key: &'a str,
    pub(crate) user: &'a str,
    /// The messages as JSON.
    pub(crate) messages: String,
    /// The reply token and the event's time, when the action may be a reply.
    pub(crate) reply: Option<(&'a str, i64)>,
    pub(crate) retry_key: String,
    pub(crate) scenario_id: &'a str,
    pub(crate) webhook_event_id: Option<&'a str>,
    pub(crate) inbox_id: Option<&'a str>,
    pub(crate) answer_id: Option<&'a str>,
    /// What the entry counts: the question the messages ask and the split
    /// arm they took, with today in the scenario's zone.
    pub(crate) counts: super::EntryCounts,
    /// What the messages' placeholders render with, until the entry is settled.
    pub(crate) personal: Option<crate::values::PersonalValues>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SettleChange<'a> {
    state: LedgerState,
    attempts: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    lease_until: FirestoreInstant,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    route: RouteDoc,
    reply_outcome_unknown: bool,
    /// Every settle records a call's outcome (or that none was made).
    reply_call_pending: bool,
}

impl Store {
    /// The pending entry of a new action, leased to this instance.
    pub(crate) fn pending_entry(&self, action: NewAction<'_>) -> LedgerDoc {
        let now = self.now();
        LedgerDoc {
            action_key: action.action_key.to_owned(),
            line_user_id: action.user.to_owned(),
            messages: action.messages,
            route: if action.reply.is_some() {
                RouteDoc::Reply
            } else {
                RouteDoc::Push
            },
            reply_token: action.reply.map(|(token, _)| token.to_owned()),
            event_time_ms: action.reply.map(|(_, at)| at),
            retry_key: action.retry_key,
            state: LedgerState::Pending,
            attempts: 0,
            reply_outcome_unknown: false,
            reply_call_pending: Some(false),
            reply_marks_by: Some(self.options.instance_id.clone()),
            lease_owner: self.options.instance_id.clone(),
            lease_until: later(now, self.options.lease),
            created_at: now,
            last_error: None,
            scenario_id: action.scenario_id.to_owned(),
            webhook_event_id: action.webhook_event_id.map(str::to_owned),
            inbox_id: action.inbox_id.map(str::to_owned),
            answer_id: action.answer_id.map(str::to_owned),
            asks: action.counts.asks,
            split: action.counts.split,
            personal: action.personal,
            expire_at: later(now, LEDGER_RETENTION),
        }
    }

    /// When a lease taken now runs out: a staged entry takes it just before the
    /// commit that writes it, so its lease covers the send that follows.
    pub(crate) fn lease_from_now(&self) -> FirestoreInstant {
        later(self.now(), self.options.lease)
    }

    /// Turns a reply LINE refused before any attempt could have reached it into a
    /// push, from the version the sender holds, before the push goes out: if
    /// another instance took the entry over meanwhile (and may be replying), this
    /// fails and nothing is pushed. `Some(version)` when it landed.
    pub(crate) async fn switch_to_push(
        &self,
        ledger_id: &str,
        version: Version,
    ) -> Result<Option<Version>, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct ToPush {
            route: RouteDoc,
            #[serde(with = "firestore::serialize_as_timestamp")]
            lease_until: FirestoreInstant,
            /// The refused call's outcome is known: it did not reach LINE.
            reply_call_pending: bool,
        }
        let change = ToPush {
            route: RouteDoc::Push,
            lease_until: self.lease_from_now(),
            reply_call_pending: false,
        };
        let path = self.document_path(OUTBOUND_LEDGER, ledger_id);
        let write = expecting(
            merge_deleting(path, &change, &["replyToken"], Vec::new())?,
            Expect::At(version),
        );
        self.leased_change(ledger_id, write, change.lease_until, "the switch to a push", |doc| {
            doc.route == RouteDoc::Push && doc.reply_token.is_none()
        })
        .await
    }

    /// Records that a reply call is about to be made, from the version the
    /// sender holds, and renews the lease for it: the write that leases the
    /// entry for the attempt. Made before the call, so an instance that takes
    /// the entry over knows whether a call may have used the token (see
    /// [`LedgerDoc::earlier_reply_call_unknown`]). `None`: the entry moved on
    /// (another instance holds it) and no call may be made.
    pub(crate) async fn mark_reply_call(
        &self,
        ledger_id: &str,
        version: Version,
    ) -> Result<Option<Version>, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct CallPending {
            reply_call_pending: bool,
            #[serde(with = "firestore::serialize_as_timestamp")]
            lease_until: FirestoreInstant,
        }
        let change = CallPending {
            reply_call_pending: true,
            lease_until: self.lease_from_now(),
        };
        let path = self.document_path(OUTBOUND_LEDGER, ledger_id);
        let write = expecting(merge(path, &change, Vec::new())?, Expect::At(version));
        // With the inbox claims' batches: under load many replies' marks share
        // one request, as their events' claims did.
        match self.claimer.update(write).await {
            Ok(found) => Ok(found),
            Err(error) => {
                tracing::warn!(error = %error, "the reply call's record has an unknown outcome; reading the entry");
                self.landed_under_my_lease(ledger_id, change.lease_until, |doc| {
                    doc.reply_call_pending == Some(true)
                })
                .await
            }
        }
    }

    /// Commits one conditional change of an entry this instance holds, which
    /// leases it until `lease_until`. An unknown outcome is found out by reading
    /// the entry. `Some(version)` when it landed.
    async fn leased_change(
        &self,
        ledger_id: &str,
        write: Write,
        lease_until: FirestoreInstant,
        what: &str,
        landed: impl FnOnce(&LedgerDoc) -> bool,
    ) -> Result<Option<Version>, StoreError> {
        match self.commit(vec![write]).await {
            CommitOutcome::Unknown(error) => {
                tracing::warn!(error = %error, "{what} has an unknown outcome; reading the entry");
                self.landed_under_my_lease(ledger_id, lease_until, landed).await
            }
            outcome => outcome.first_version(),
        }
    }

    /// After a change with an unknown outcome: it landed if the entry holds it
    /// (`landed`) under this instance's lease until `lease_until` (no other
    /// writer sets that exact lease). Its version then.
    async fn landed_under_my_lease(
        &self,
        ledger_id: &str,
        lease_until: FirestoreInstant,
        landed: impl FnOnce(&LedgerDoc) -> bool,
    ) -> Result<Option<Version>, StoreError> {
        let found = self.outbound(ledger_id).await?;
        Ok(found
            .filter(|entry| {
                landed(&entry.doc)
                    && entry.doc.lease_owner == self.options.instance_id
                    && super::same_instant(entry.doc.lease_until, lease_until)
            })
            .map(|entry| entry.version))
    }

    /// The `create` of a new pending entry, for an effect's commit.
    pub(super) fn ledger_create_write(&self, ledger_id: &str, doc: &LedgerDoc) -> Result<Write, StoreError> {
        Ok(create(self.document_path(OUTBOUND_LEDGER, ledger_id), doc)?)
    }

    /// Records an action on its own (manual sends). An action recorded before
    /// comes back as it stands, so the caller can tell "already sent". A create
    /// whose outcome is unknown and that left nothing is tried again: the id is
    /// deterministic, so it cannot record the action twice.
    pub(crate) async fn record_outbound(
        &self,
        ledger_id: &str,
        doc: &LedgerDoc,
        question: Option<&QuestionChange>,
        run: Option<&super::RunRecord<'_>>,
        timers: &[(String, super::TimerDoc)],
        user: Option<UserWrite<'_>>,
    ) -> Result<Recorded, StoreError> {
        let (changes, user_read) = match user {
            Some(user) => (Some((user.user, user.changes)), user.read),
            None => (None, None),
        };
        let mut last_error = None;
        for _ in 0..3 {
            // The entry first: its version is the first one the commit reports.
            let mut writes = vec![self.ledger_create_write(ledger_id, doc)?];
            writes.extend(self.sent_count_write(doc)?);
            if let Some(question) = question {
                writes.push(self.question_write(question)?);
            }
            if let Some(run) = run {
                writes.push(self.run_write(run)?);
            }
            for (timer_id, timer) in timers {
                writes.push(self.timer_write(timer_id, timer)?);
            }
            // With the ledger entry's create: applied once, however often the
            // send is asked for again.
            // A branch read the user's record: written (and expected
            // unchanged) even when the messages change nothing.
            if let Some((user, changes)) = changes.filter(|(_, changes)| !changes.is_empty() || user_read.is_some()) {
                writes.extend(self.user_change_writes(user, changes, None, user_read)?);
            }
            match self.commit(writes).await {
                CommitOutcome::Committed(versions) => {
                    return match versions.into_iter().next().flatten() {
                        Some(version) => Ok(Recorded::New { version }),
                        None => Err(StoreError::Unavailable(
                            "the ledger entry was written without a version".into(),
                        )),
                    };
                }
                CommitOutcome::AlreadyExists | CommitOutcome::Unknown(_) => {
                    if let Some(existing) = self.outbound(ledger_id).await? {
                        return Ok(Recorded::Existing(Box::new(existing)));
                    }
                    // A user record read as absent exists now (also "already exists").
                    if user_read == Some(super::Expect::Absent) {
                        return Ok(Recorded::UserChanged);
                    }
                    last_error = Some(StoreError::Unavailable(
                        "the ledger entry's create had no answer".into(),
                    ));
                }
                CommitOutcome::Changed if user_read.is_some() => return Ok(Recorded::UserChanged),
                CommitOutcome::Changed => {
                    return Err(StoreError::Unavailable("unexpected precondition failure".into()));
                }
                CommitOutcome::Failed(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| StoreError::Unavailable("the ledger entry could not be recorded".into())))
    }

    pub(crate) async fn outbound(&self, ledger_id: &str) -> Result<Option<Stored<LedgerDoc>>, StoreError> {
        self.get_stored(OUTBOUND_LEDGER, ledger_id).await
    }

    /// Records how an action ended (or when to try again), from the version the
    /// sender holds. Uncertain and failed actions get a dead letter in the same
    /// commit. A retry keeps the entry leased to this instance until it is due
    /// and a lease beyond: this instance retries it itself (other instances take
    /// it only if this one dies).
    pub(crate) async fn settle_outbound(
        &self,
        ledger_id: &str,
        version: Version,
        doc: &LedgerDoc,
        attempted: &Attempted,
        settlement: &Settlement,
    ) -> Result<SettleWrite, StoreError> {
        let attempts = attempted.attempts;
        let now = self.now();
        let (state, lease_until, error, letter) = match settlement {
            Settlement::Sent => (LedgerState::Sent, now, None, None),
            Settlement::Logged => (LedgerState::Logged, now, None, None),
            Settlement::Uncertain(reason) => (
                LedgerState::Uncertain,
                now,
                Some(reason.as_str()),
                Some(DeadLetterKind::UncertainReply),
            ),
            Settlement::Failed(reason) => (
                LedgerState::Failed,
                now,
                Some(reason.as_str()),
                Some(DeadLetterKind::Outbound),
            ),
            Settlement::RetryAt { after, error } => (
                LedgerState::Pending,
                later(later(now, *after), self.options.lease),
                Some(error.as_str()),
                None,
            ),
        };
        let change = SettleChange {
            state,
            attempts,
            lease_until,
            last_error: error,
            route: attempted.route,
            reply_outcome_unknown: attempted.reply_outcome_unknown,
            reply_call_pending: false,
        };
        // A settled action will never be replied to again: drop the token, and
        // the personal values its messages rendered with (a replay of a parked
        // action renders with the fallbacks).
        let delete_fields: &[&str] = if state == LedgerState::Pending {
            &[]
        } else {
            &["replyToken", "personal"]
        };
        let path = self.document_path(OUTBOUND_LEDGER, ledger_id);
        let settle = expecting(
            merge_deleting(path, &change, delete_fields, Vec::new())?,
            Expect::At(version),
        );
        if matches!(settlement, Settlement::Sent | Settlement::Logged) {
            // The common case goes with the batched settles (see `settler`). It is a
            // fact: should another instance have taken the entry over meanwhile (and
            // even parked it as uncertain), it is applied over that.
            let cleanup = [DeadLetterKind::Outbound, DeadLetterKind::UncertainReply]
                .into_iter()
                .map(|kind| self.document_path(DEAD_LETTERS, &dead_letter_id(kind, ledger_id)))
                .collect();
            let fact = Fact {
                overrides: &["pending", "uncertain", "failed"],
                cleanup,
            };
            self.settler.submit(Settle::fact(settle, state.as_str(), fact));
            return Ok(SettleWrite::Queued);
        }
        let mut writes = vec![settle];
        if let (Some(kind), Some(reason)) = (letter, error) {
            let dead = DeadLetterDoc {
                kind,
                target_id: ledger_id.to_owned(),
                reason: reason.to_owned(),
                attempts,
                webhook_event_id: doc.webhook_event_id.clone(),
                line_user_id: Some(doc.line_user_id.clone()),
                event_type: None,
                action_key: Some(doc.action_key.clone()),
                campaign_id: None,
                user_count: None,
                parked_at: now,
            };
            writes.push(set(
                self.document_path(DEAD_LETTERS, &dead_letter_id(kind, ledger_id)),
                &dead,
            )?);
        }
        Ok(match self.commit(writes).await.first_version()? {
            Some(version) => SettleWrite::Written(Some(version)),
            None => SettleWrite::Superseded,
        })
    }

    /// Pending actions whose lease ran out (a crash, or a scheduled retry).
    pub(crate) async fn expired_outbound(
        &self,
        limit: u32,
        abandoned: &std::collections::HashSet<String>,
    ) -> Result<Vec<Swept<LedgerDoc>>, StoreError> {
        self.expired(OUTBOUND_LEDGER, limit, abandoned).await
    }

    /// Takes over an expired entry. `Some(version)` when this instance won.
    pub(crate) async fn take_over_outbound(&self, record: &Stored<LedgerDoc>) -> Result<Option<Version>, StoreError> {
        let until = later(self.now(), self.options.lease);
        self.lease_to_me_marking(
            OUTBOUND_LEDGER,
            &record.id,
            record.version,
            record.doc.attempts,
            until,
            true,
        )
        .await
    }

    /// Gives an entry this instance holds back at once (at shutdown): any
    /// instance's sweeper takes it now. `false`: it had moved on.
    pub(crate) async fn hand_back_outbound(&self, ledger_id: &str, version: Version) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Free {
            #[serde(with = "firestore::serialize_as_timestamp")]
            lease_until: FirestoreInstant,
        }
        let write = merge(
            self.document_path(OUTBOUND_LEDGER, ledger_id),
            &Free {
                lease_until: self.now(),
            },
            Vec::new(),
        )?;
        self.commit_conditional(vec![expecting(write, Expect::At(version))])
            .await
    }

    /// Renews the lease of an entry this instance holds (`attempts` as it
    /// stands: a renewal is no attempt). `None`: it moved on.
    pub(crate) async fn renew_outbound(
        &self,
        ledger_id: &str,
        version: Version,
        attempts: u32,
    ) -> Result<Option<Version>, StoreError> {
        let until = self.lease_from_now();
        self.lease_to_me_marking(OUTBOUND_LEDGER, ledger_id, version, attempts, until, true)
            .await
    }

    /// Puts a failed or uncertain action back to pending, leased to this instance,
    /// as a push (a replayed action never reuses a reply token), and removes its
    /// dead letter in the same commit. `None`: the entry moved on since it was read.
    pub(crate) async fn revive_outbound(
        &self,
        ledger_id: &str,
        version: Version,
        route: RouteDoc,
    ) -> Result<Option<Version>, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Revive<'a> {
            state: LedgerState,
            attempts: u32,
            lease_owner: &'a str,
            reply_marks_by: &'a str,
            #[serde(with = "firestore::serialize_as_timestamp")]
            lease_until: FirestoreInstant,
            route: RouteDoc,
        }
        let revive = Revive {
            state: LedgerState::Pending,
            attempts: 0,
            lease_owner: &self.options.instance_id,
            reply_marks_by: &self.options.instance_id,
            lease_until: later(self.now(), self.options.lease),
            route,
        };
        let path = self.document_path(OUTBOUND_LEDGER, ledger_id);
        let mut writes = vec![expecting(
            merge_deleting(path, &revive, &["replyToken", "lastError"], Vec::new())?,
            Expect::At(version),
        )];
        for kind in [DeadLetterKind::Outbound, DeadLetterKind::UncertainReply] {
            writes.push(delete(
                self.document_path(DEAD_LETTERS, &dead_letter_id(kind, ledger_id)),
            ));
        }
        self.commit(writes).await.first_version()
    }
}
