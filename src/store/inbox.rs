//! The webhook inbox: one document per webhook event, written before LINE gets
//! its 200 and holding what a worker needs to process the event (the engine's
//! decision, never the message text). LINE redelivers an event with the same
//! `webhookEventId`; the second `create` fails with `ALREADY_EXISTS` and the
//! delivery is dropped.
//!
//! A stored event is leased: its owner works on it until `leaseUntil`; after that
//! any instance may take it over (crash recovery). Every change names the version
//! its writer read, so exactly one of several competing writers wins and a late
//! one changes nothing; a record never moves back from `done`.

use super::docs::collections::{DEAD_LETTERS, OUTBOUND_LEDGER, WEBHOOK_INBOX};
use super::docs::{DeadLetterDoc, DeadLetterKind, InboxDoc, InboxState, LedgerDoc};
use super::later;
use super::lease::{Stored, Swept};
use super::messages::MessageKey;
use super::settler::Settle;
use super::writes::{CommitOutcome, Expect, create, delete, expecting, merge, merge_deleting, set};
use super::{Store, StoreError, Version};
use crate::ids::deterministic_id;
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Write;
use serde::Serialize;
use std::time::Duration;

/// LINE does not say how long it keeps redelivering; a week is well past any
/// retry window seen, and the TTL policy (README) clears records after that.
pub(crate) const INBOX_RETENTION: Duration = Duration::from_secs(8 * 24 * 60 * 60);

/// The inbox id of one event of one channel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct InboxKey(String);

impl InboxKey {
    /// `None` when either part contains NUL (LINE never sends that; such input is
    /// refused rather than hashed ambiguously).
    pub(crate) fn new(destination: &str, webhook_event_id: &str) -> Option<Self> {
        if destination.contains('\0') || webhook_event_id.contains('\0') || webhook_event_id.is_empty() {
            return None;
        }
        Some(Self(deterministic_id(&[destination, webhook_event_id])))
    }

    pub(crate) fn from_document_id(id: String) -> Self {
        Self(id)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This delivery is the first: it is stored, leased to us, and acknowledged.
    Claimed { version: Version },
    /// The event was stored before: a redelivery. Do nothing.
    Duplicate,
}

/// What the inbox records about an event at claim time.
pub(crate) struct NewEvent<'a> {
    pub(crate) destination: &'a str,
    pub(crate) webhook_event_id: &'a str,
    pub(crate) event_type: &'a str,
    /// The user the event came from, if any.
    pub(crate) line_user_id: Option<&'a str>,
    /// The decision and the few event fields processing needs, as JSON.
    pub(crate) plan: String,
    /// Whether a worker of this instance will take it up: then this instance holds
    /// the lease; otherwise (queue full) it is free for any sweeper at once.
    pub(crate) held: bool,
    /// A text message that may answer a typed question: its text is kept, in
    /// the same atomic commit as the record (so a redelivery, which finds the
    /// record, never writes it again).
    pub(crate) text: Option<(&'a MessageKey, &'a str)>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StateChange<'a> {
    state: InboxState,
    #[serde(with = "firestore::serialize_as_timestamp")]
    lease_until: FirestoreInstant,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deferred_until_ms: Option<i64>,
}

impl Store {
    /// Stores the event, leased to this instance. One round trip, shared with the
    /// claims batched with it.
    pub(crate) async fn claim_event(&self, key: &InboxKey, event: NewEvent<'_>) -> Result<Claim, StoreError> {
        let text = event.text;
        let write = self.inbox_create_write(key, event)?;
        if let Some((message, text)) = text {
            let writes = vec![write, self.keep_text_write(message, text)?];
            return match self.commit(writes).await {
                CommitOutcome::Committed(versions) => match versions.first().copied().flatten() {
                    Some(version) => Ok(Claim::Claimed { version }),
                    None => Err(StoreError::Unavailable("the claim landed without a version".into())),
                },
                CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(Claim::Duplicate),
                CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
            };
        }
        super::round_trips::count();
        self.claimer.claim(write).await
    }

    /// The `create` of an event's record: for a claim, or inside a commit of
    /// its own (an event the service raises itself, such as a source's start).
    pub(super) fn inbox_create_write(&self, key: &InboxKey, event: NewEvent<'_>) -> Result<Write, StoreError> {
        let now = self.now();
        let doc = InboxDoc {
            destination: event.destination.to_owned(),
            webhook_event_id: event.webhook_event_id.to_owned(),
            event_type: event.event_type.to_owned(),
            line_user_id: event.line_user_id.map(str::to_owned),
            plan: Some(event.plan),
            state: InboxState::Pending,
            lease_owner: self.options.instance_id.clone(),
            lease_until: if event.held {
                later(now, self.options.lease)
            } else {
                now
            },
            attempts: 0,
            received_at: now,
            expire_at: later(now, INBOX_RETENTION),
            last_error: None,
            deferred_until_ms: None,
        };
        Ok(create(self.document_path(WEBHOOK_INBOX, key.as_str()), &doc)?)
    }

    /// Part of an effect's commit: the event is done, and its plan (with the reply
    /// token) is removed. Only from the version the committer holds.
    pub(super) fn inbox_done_write(&self, key: &InboxKey, version: Version) -> Result<Write, StoreError> {
        let change = StateChange {
            state: InboxState::Done,
            lease_until: self.now(),
            attempts: None,
            last_error: None,
            deferred_until_ms: None,
        };
        let path = self.document_path(WEBHOOK_INBOX, key.as_str());
        Ok(expecting(
            merge_deleting(path, &change, &["plan"], Vec::new())?,
            Expect::At(version),
        ))
    }

    /// Marks an event done that had no effect (already answered, not restarted).
    /// Queued with the batched settles, which retry it while the process lives: the
    /// event had no effect, so running it again (if the process dies first) could
    /// not double anything.
    pub(crate) fn mark_event_done(&self, key: &InboxKey, version: Version) -> Result<(), StoreError> {
        self.settler
            .submit(Settle::new(self.inbox_done_write(key, version)?, "done"));
        Ok(())
    }

    /// Renews the lease for a worker starting attempt `attempt`, and counts the
    /// attempt. `None`: another instance took the event over (or finished it).
    pub(crate) async fn start_event(
        &self,
        key: &InboxKey,
        version: Version,
        attempt: u32,
    ) -> Result<Option<Version>, StoreError> {
        let until = later(self.now(), self.options.lease);
        self.lease_to_me(WEBHOOK_INBOX, key.as_str(), version, attempt, until)
            .await
    }

    /// Gives the lease back after a failed attempt: retried after `retry_in` by the
    /// sweeper of any instance. `false`: the record had moved on (another instance
    /// took it, or a commit thought lost had landed), and nothing was changed.
    pub(crate) async fn release_event(
        &self,
        key: &InboxKey,
        version: Version,
        attempts: u32,
        retry_in: Duration,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let change = StateChange {
            state: InboxState::Pending,
            lease_until: later(self.now(), retry_in),
            attempts: Some(attempts),
            last_error: error,
            deferred_until_ms: None,
        };
        self.put_back(key, version, &change).await
    }

    /// Gives the held event back until `wait` has passed, not as a retry (its
    /// attempts stay `attempts`) but to wait: the record says until when, so
    /// the user's next event waits as long instead of polling it.
    pub(crate) async fn defer_event(
        &self,
        key: &InboxKey,
        version: Version,
        attempts: u32,
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let until = later(self.now(), wait);
        let change = StateChange {
            state: InboxState::Pending,
            lease_until: until,
            attempts: Some(attempts),
            last_error: None,
            deferred_until_ms: Some(until.as_millisecond()),
        };
        self.put_back(key, version, &change).await
    }

    /// A held event back to pending, from the version its holder has.
    async fn put_back(&self, key: &InboxKey, version: Version, change: &StateChange<'_>) -> Result<bool, StoreError> {
        let write = merge(self.document_path(WEBHOOK_INBOX, key.as_str()), change, Vec::new())?;
        self.commit_conditional(vec![expecting(write, Expect::At(version))])
            .await
    }

    /// Parks an event that kept failing, in one commit with its dead letter.
    pub(crate) async fn park_event(
        &self,
        key: &InboxKey,
        version: Version,
        doc: &InboxDoc,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let letter = DeadLetterDoc {
            kind: DeadLetterKind::Event,
            target_id: key.as_str().to_owned(),
            reason: reason.to_owned(),
            attempts: doc.attempts,
            webhook_event_id: Some(doc.webhook_event_id.clone()),
            line_user_id: doc.line_user_id.clone(),
            event_type: Some(doc.event_type.clone()),
            action_key: None,
            campaign_id: None,
            user_count: None,
            parked_at: self.now(),
        };
        self.park(key.as_str(), version, &letter).await
    }

    /// Parks a record the service cannot read (written by another version, or
    /// damaged), so one bad record never stops the sweep for the others.
    pub(crate) async fn park_unreadable(
        &self,
        kind: DeadLetterKind,
        id: &str,
        version: Version,
        error: &str,
    ) -> Result<bool, StoreError> {
        let letter = DeadLetterDoc {
            kind,
            target_id: id.to_owned(),
            reason: format!("the stored record cannot be read: {error}"),
            attempts: 0,
            webhook_event_id: None,
            line_user_id: None,
            event_type: None,
            action_key: None,
            campaign_id: None,
            user_count: None,
            parked_at: self.now(),
        };
        self.park(id, version, &letter).await
    }

    async fn park(&self, id: &str, version: Version, letter: &DeadLetterDoc) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Parked<'a> {
            state: &'static str,
            #[serde(with = "firestore::serialize_as_timestamp")]
            lease_until: FirestoreInstant,
            last_error: &'a str,
        }
        let collection = match letter.kind {
            DeadLetterKind::Event => WEBHOOK_INBOX,
            DeadLetterKind::Outbound | DeadLetterKind::UncertainReply => OUTBOUND_LEDGER,
            DeadLetterKind::CampaignChunk => super::docs::collections::CAMPAIGN_CHUNKS,
        };
        let state = match letter.kind {
            DeadLetterKind::Event => "dead",
            DeadLetterKind::Outbound | DeadLetterKind::UncertainReply | DeadLetterKind::CampaignChunk => "failed",
        };
        let change = Parked {
            state,
            lease_until: self.now(),
            last_error: &letter.reason,
        };
        // A parked send will not be replied to, nor rendered with the values
        // it was decided with: no token or personal value stays at rest.
        let forget: &[&str] = if collection == OUTBOUND_LEDGER {
            &["replyToken", "personal"]
        } else {
            &[]
        };
        let writes = vec![
            expecting(
                super::writes::merge_deleting(self.document_path(collection, id), &change, forget, Vec::new())?,
                Expect::At(version),
            ),
            set(
                self.document_path(DEAD_LETTERS, &dead_letter_id(letter.kind, id)),
                letter,
            )?,
        ];
        self.commit_conditional(writes).await
    }

    /// Pending events whose lease ran out, oldest first.
    /// Those leased to an instance in `abandoned` count as expired.
    pub(crate) async fn expired_events(
        &self,
        limit: u32,
        abandoned: &std::collections::HashSet<String>,
    ) -> Result<Vec<Swept<InboxDoc>>, StoreError> {
        self.expired(WEBHOOK_INBOX, limit, abandoned).await
    }

    /// Takes over an expired event. `Some(version)` when this instance won. The
    /// attempt is counted when a worker starts it ([`Store::start_event`]), not
    /// here: a takeover whose work never starts costs no attempt.
    pub(crate) async fn take_over_event(&self, record: &Stored<InboxDoc>) -> Result<Option<Version>, StoreError> {
        let until = later(self.now(), self.options.lease);
        self.lease_to_me(WEBHOOK_INBOX, &record.id, record.version, record.doc.attempts, until)
            .await
    }

    pub(crate) async fn event(&self, key: &InboxKey) -> Result<Option<Stored<InboxDoc>>, StoreError> {
        self.get_stored(WEBHOOK_INBOX, key.as_str()).await
    }

    /// The inbox record and, if named, a ledger entry, in one round trip: what a
    /// worker reads to learn whether its commit landed.
    pub(crate) async fn event_and_entry(
        &self,
        key: &InboxKey,
        ledger_id: Option<&str>,
    ) -> Result<(Option<Stored<InboxDoc>>, Option<Stored<LedgerDoc>>), StoreError> {
        let mut paths = vec![self.document_path(WEBHOOK_INBOX, key.as_str())];
        if let Some(ledger_id) = ledger_id {
            paths.push(self.document_path(OUTBOUND_LEDGER, ledger_id));
        }
        let mut found = self.get_many(paths).await?.into_iter();
        let event = found.next().flatten().map(Stored::decode).transpose()?;
        let entry = found.next().flatten().map(Stored::decode).transpose()?;
        Ok((event, entry))
    }

    /// Puts a parked event back in line, leased to this instance, and removes its
    /// dead letter in the same commit (a new failure then leaves a new letter).
    /// `None`: the record moved on since it was read.
    pub(crate) async fn revive_event(&self, key: &InboxKey, version: Version) -> Result<Option<Version>, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Revive<'a> {
            state: InboxState,
            attempts: u32,
            lease_owner: &'a str,
            #[serde(with = "firestore::serialize_as_timestamp")]
            lease_until: FirestoreInstant,
        }
        let revive = Revive {
            state: InboxState::Pending,
            attempts: 1,
            lease_owner: &self.options.instance_id,
            lease_until: later(self.now(), self.options.lease),
        };
        let writes = vec![
            expecting(
                merge(self.document_path(WEBHOOK_INBOX, key.as_str()), &revive, Vec::new())?,
                Expect::At(version),
            ),
            delete(self.document_path(DEAD_LETTERS, &dead_letter_id(DeadLetterKind::Event, key.as_str()))),
        ];
        self.commit(writes).await.first_version()
    }

    /// Commits writes whose first one is a state change conditional on a version.
    /// `false`: the record had moved on, nothing was applied.
    pub(super) async fn commit_conditional(&self, writes: Vec<Write>) -> Result<bool, StoreError> {
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(true),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(false),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }
}

/// Dead letters are keyed by what they park, so parking twice keeps one letter.
pub(crate) fn dead_letter_id(kind: DeadLetterKind, target_id: &str) -> String {
    let prefix = match kind {
        DeadLetterKind::Event => "event",
        DeadLetterKind::Outbound => "outbound",
        DeadLetterKind::UncertainReply => "uncertain",
        DeadLetterKind::CampaignChunk => "campaign",
    };
    format!("{prefix}-{target_id}")
}
