//! The outbound ledger: every outbound action is recorded under a deterministic
//! id (from its action key) before it is sent, then settled as sent, uncertain or
//! failed. Creating the entry is also the guard against sending an action twice:
//! a second `create` of the same action fails with `ALREADY_EXISTS`.

use super::docs::collections::{DEAD_LETTERS, OUTBOUND_LEDGER};
use super::docs::{DeadLetterDoc, DeadLetterKind, LedgerDoc, LedgerState, RouteDoc};
use super::inbox::dead_letter_id;
use super::lease::Leased;
use super::writes::{CommitError, create, if_exists, merge_deleting, set};
use super::{Store, StoreError};
use crate::outbound::OutboundAction;
use firestore::FirestoreInstant;
use firestore::gcloud_sdk::google::firestore::v1::Write;
use serde::Serialize;
use std::time::Duration;

/// Kept for audits and for answering "did this user get that message?".
pub const LEDGER_RETENTION: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// How an action ended, or that it waits for another attempt.
#[derive(Debug, Clone)]
pub enum Settlement {
    Sent,
    /// A reply whose answer never came: never resent automatically.
    Uncertain(String),
    /// Refused by LINE, or out of attempts.
    Failed(String),
    /// Try again after the given time (the lease runs out then).
    RetryAt {
        after: Duration,
        error: String,
    },
}

/// The outcome of recording an action outside an effect commit (manual sends).
#[derive(Debug, Clone)]
pub enum Recorded {
    New,
    /// Recorded by an earlier call: the entry as it stands.
    Existing(Box<Leased<LedgerDoc>>),
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
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<RouteDoc>,
}

/// An action's ledger entry, built once: written by the effect's commit, then
/// handed as it is to the courier.
#[derive(Debug, Clone)]
pub struct StagedAction {
    pub ledger_id: String,
    pub doc: LedgerDoc,
}

impl Store {
    /// The `create` of a new pending entry, for an effect's commit.
    pub(super) fn ledger_create_write(&self, staged: &StagedAction) -> Result<Write, StoreError> {
        Ok(create(
            self.document_path(OUTBOUND_LEDGER, &staged.ledger_id),
            &staged.doc,
        )?)
    }

    /// The pending entry of a new action, leased to this instance.
    pub fn stage(&self, action: &OutboundAction) -> StagedAction {
        let now = FirestoreInstant::now();
        let doc = LedgerDoc {
            action_key: action.action_key.clone(),
            line_user_id: action.user.to_string(),
            messages: serde_json::to_string(&action.messages).expect("messages serialise"),
            route: if action.reply.is_some() {
                RouteDoc::Reply
            } else {
                RouteDoc::Push
            },
            reply_token: action.reply.as_ref().map(|reply| reply.token.clone()),
            event_time_ms: action.reply.as_ref().map(|reply| reply.event_time_ms),
            retry_key: action.retry_key().to_string(),
            state: LedgerState::Pending,
            attempts: 0,
            lease_owner: self.options.instance_id.clone(),
            lease_until: now + self.options.lease,
            created_at: now,
            last_error: None,
            scenario_id: action.scenario.to_string(),
            webhook_event_id: action.webhook_event_id.clone(),
            inbox_id: action.inbox_id.clone(),
            answer_id: action.answer_id.clone(),
            expire_at: now + LEDGER_RETENTION,
        };
        StagedAction {
            ledger_id: action.ledger_id(),
            doc,
        }
    }

    /// Records an action on its own (manual sends). An action recorded before
    /// comes back as it stands, so the caller can tell "already sent".
    pub async fn record_outbound(&self, staged: &StagedAction) -> Result<Recorded, StoreError> {
        let write = self.ledger_create_write(staged)?;
        match self.commit(vec![write]).await {
            Ok(_) => Ok(Recorded::New),
            Err(CommitError::AlreadyExists | CommitError::FailedPrecondition) => {
                let existing = self
                    .outbound(&staged.ledger_id)
                    .await?
                    .ok_or_else(|| StoreError::Unavailable("ledger entry vanished".into()))?;
                Ok(Recorded::Existing(Box::new(existing)))
            }
            Err(CommitError::NotFound) => Err(StoreError::Unavailable("unexpected NOT_FOUND".into())),
            Err(CommitError::Store(error)) => Err(error),
        }
    }

    pub async fn outbound(&self, ledger_id: &str) -> Result<Option<Leased<LedgerDoc>>, StoreError> {
        self.leased_doc(OUTBOUND_LEDGER, ledger_id).await
    }

    /// Records how an action ended (or when to try again). Uncertain and failed
    /// actions get a dead letter in the same commit.
    pub async fn settle_outbound(
        &self,
        ledger_id: &str,
        doc: &LedgerDoc,
        attempts: u32,
        route: RouteDoc,
        settlement: &Settlement,
    ) -> Result<(), StoreError> {
        let now = FirestoreInstant::now();
        let (state, lease_until, error, letter) = match settlement {
            Settlement::Sent => (LedgerState::Sent, now, None, None),
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
            Settlement::RetryAt { after, error, .. } => {
                (LedgerState::Pending, now + *after, Some(error.as_str()), None)
            }
        };
        let change = SettleChange {
            state,
            attempts,
            lease_until,
            last_error: error,
            route: Some(route),
        };
        // A settled action will never be replied to again: drop the token.
        let delete: &[&str] = if state == LedgerState::Pending {
            &[]
        } else {
            &["replyToken"]
        };
        let path = self.document_path(OUTBOUND_LEDGER, ledger_id);
        let settle = if_exists(merge_deleting(path, &change, delete, Vec::new())?);
        if matches!(settlement, Settlement::Sent) {
            // The common case goes with the batched settles (see `settler`).
            self.settler.submit(settle);
            return Ok(());
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
                parked_at: now,
            };
            writes.push(set(
                self.document_path(DEAD_LETTERS, &dead_letter_id(kind, ledger_id)),
                &dead,
            )?);
        }
        self.commit_settling(writes).await
    }

    /// Pending actions whose lease ran out (a crash, or a scheduled retry).
    pub async fn expired_outbound(&self, limit: u32) -> Result<Vec<Leased<LedgerDoc>>, StoreError> {
        self.expired(OUTBOUND_LEDGER, limit).await
    }

    pub async fn take_over_outbound(&self, record: &Leased<LedgerDoc>) -> Result<bool, StoreError> {
        self.take_over(OUTBOUND_LEDGER, record, record.doc.attempts).await
    }

    /// Puts a failed or uncertain action back to pending, leased to this instance,
    /// as a push (a replayed action never reuses a reply token).
    pub async fn revive_outbound(&self, ledger_id: &str) -> Result<(), StoreError> {
        let change = SettleChange {
            state: LedgerState::Pending,
            attempts: 0,
            lease_until: FirestoreInstant::now() + self.options.lease,
            last_error: None,
            route: Some(RouteDoc::Push),
        };
        let path = self.document_path(OUTBOUND_LEDGER, ledger_id);
        self.commit_settling(vec![if_exists(merge_deleting(
            path,
            &change,
            &["replyToken"],
            Vec::new(),
        )?)])
        .await
    }
}
