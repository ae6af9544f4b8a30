//! Dead-letter replay (`POST /admin/dead-letters/{id}/replay`). A parked event
//! runs again through the guards like any other (an answer recorded meanwhile
//! stops it); a parked action is pushed with its original retry key.
//!
//! The record is revived and its letter removed in one commit, conditional on the
//! record as read; a replay that fails again parks it again, with a new letter.
//! A record that is no longer parked (it succeeded, or a replay is under way) is
//! not touched: the caller learns its state.

use super::OutboundSender;
use super::hold::{Failure, Hold};
use super::processed::Processed;
use super::work::Work;
use super::worker::{EventWorker, event_span};
use crate::clock::Clock;
use crate::outbound::Delivery;
use crate::store::{DeadLetterKind, InboxKey, InboxState, LedgerState, RouteDoc, Settlement, Store, StoreError};
use std::sync::Arc;
use tracing::Instrument;

#[derive(Clone)]
pub(crate) struct Replayer {
    /// Runs a revived event through its guards.
    events: Arc<EventWorker>,
    /// Sends a revived action.
    sender: Arc<OutboundSender>,
    store: Store,
    clock: Clock,
}

/// What a replay did.
#[derive(Debug)]
pub(crate) enum Replayed {
    /// The event ran again.
    Event(Processed),
    /// The action was sent (or logged, or scheduled for a retry).
    Outbound(Settlement),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error("no dead letter with id {0:?}")]
    UnknownLetter(String),
    /// The record is not parked (any more): it is in this state.
    #[error("the record is no longer parked; it is {0}")]
    NotParked(&'static str),
    /// The letter parks something a replay cannot send again.
    #[error("{0}")]
    NotReplayable(&'static str),
    /// Sending it again may send it twice: the caller must confirm
    /// (`{"force": true}`) after reading why.
    #[error("{}", .0.explain())]
    NeedsForce(ReplayRisk),
    /// It failed again and was parked again, with a new letter.
    #[error("the replay failed again and was parked: {0}")]
    FailedAgain(String),
    /// Firestore failed (the kinds the admin API maps to statuses once).
    #[error(transparent)]
    Pipeline(#[from] super::PipelineError),
}

impl From<StoreError> for ReplayError {
    fn from(error: StoreError) -> Self {
        ReplayError::Pipeline(super::PipelineError::Store(error))
    }
}

/// Why replaying a parked message may deliver it twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplayRisk {
    /// A push first tried more than [`RETRY_KEY_TRUST`] ago: LINE may have
    /// delivered it, and no longer remembers its retry key to refuse a second.
    RetryKeyExpired,
    /// A reply whose outcome is unknown: it may have arrived, and the replay is a
    /// push LINE cannot tell from it.
    ReplyOutcomeUnknown,
}

impl ReplayRisk {
    /// The `reason` of the 409.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReplayRisk::RetryKeyExpired => "retry_key_expired",
            ReplayRisk::ReplyOutcomeUnknown => "reply_outcome_unknown",
        }
    }

    pub(crate) fn explain(self) -> &'static str {
        match self {
            ReplayRisk::RetryKeyExpired => {
                "this message was first sent over 23 hours ago: it may have reached the user, and LINE no longer \
                 remembers its retry key, so a replay may deliver it twice; replay with {\"force\": true} to send it anyway"
            }
            ReplayRisk::ReplyOutcomeUnknown => {
                "LINE may have delivered this reply (its answer never came): a replay is a push and may deliver it \
                 twice; replay with {\"force\": true} to send it anyway"
            }
        }
    }
}

/// How long LINE is trusted to remember a push's retry key: it keeps them 24
/// hours; an hour less leaves room for clock differences and the time a replay
/// takes.
pub(crate) const RETRY_KEY_TRUST: std::time::Duration = std::time::Duration::from_secs(23 * 60 * 60);

/// What the facts of a parked message say about replaying it. `first_sent_ms`
/// is when its entry was recorded, just before its first call.
fn replay_risk(
    uncertain_reply: bool,
    pushed: bool,
    attempts: u32,
    first_sent_ms: i64,
    now_ms: i64,
) -> Option<ReplayRisk> {
    let trusted_ms = i64::try_from(RETRY_KEY_TRUST.as_millis()).unwrap_or(i64::MAX);
    if uncertain_reply {
        Some(ReplayRisk::ReplyOutcomeUnknown)
    } else if pushed && attempts > 0 && now_ms.saturating_sub(first_sent_ms) >= trusted_ms {
        Some(ReplayRisk::RetryKeyExpired)
    } else {
        None
    }
}

/// A dead letter as its confirmation shows it.
#[derive(Debug)]
pub(crate) struct LetterLook {
    pub(crate) letter: crate::store::DeadLetterDoc,
    /// Why a replay now may deliver it twice (a replay then needs `force`).
    pub(crate) risk: Option<ReplayRisk>,
}

/// How long a replay waits for its batched marks before it answers.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);

impl Replayer {
    pub(crate) fn new(events: Arc<EventWorker>, sender: Arc<OutboundSender>, store: Store, clock: Clock) -> Self {
        Self {
            events,
            sender,
            store,
            clock,
        }
    }

    /// What replaying the parked message of `doc` risks now.
    fn risk_of(&self, doc: &crate::store::LedgerDoc) -> Option<ReplayRisk> {
        replay_risk(
            // Once a reply's outcome was unknown it stays so (a forced replay
            // that failed again was pushed, and is still a possible second copy).
            doc.reply_outcome_unknown || (doc.route == RouteDoc::Reply && doc.state == LedgerState::Uncertain),
            doc.route == RouteDoc::Push,
            doc.attempts,
            doc.created_at.as_millisecond(),
            self.clock.now_ms(),
        )
    }

    /// A dead letter and what replaying it now would risk, for the
    /// operator's confirmation; reads only. `None`: no such letter.
    pub(crate) async fn look(&self, letter_id: &str) -> Result<Option<LetterLook>, ReplayError> {
        if !is_letter_id(letter_id) {
            return Ok(None);
        }
        let Some(letter) = self.store.dead_letter(letter_id).await? else {
            return Ok(None);
        };
        let risk = match letter.doc.kind {
            DeadLetterKind::Outbound | DeadLetterKind::UncertainReply => self
                .store
                .outbound(&letter.doc.target_id)
                .await?
                .and_then(|record| self.risk_of(&record.doc)),
            DeadLetterKind::Event | DeadLetterKind::CampaignChunk => None,
        };
        Ok(Some(LetterLook {
            letter: letter.doc,
            risk,
        }))
    }

    /// Replays a dead letter. `force`: the operator read why a message's replay
    /// may deliver it twice ([`ReplayError::NeedsForce`]) and sends it anyway.
    pub(crate) async fn replay(&self, letter_id: &str, force: bool) -> Result<Replayed, ReplayError> {
        // Dead letter ids are `{kind}-{hex id}`: anything else (a path
        // character, a reserved `__x__` id) names none, and never reaches
        // Firestore as a document path.
        if !is_letter_id(letter_id) {
            return Err(ReplayError::UnknownLetter(letter_id.to_owned()));
        }
        let store = &self.store;
        let letter = store
            .dead_letter(letter_id)
            .await?
            .ok_or_else(|| ReplayError::UnknownLetter(letter_id.to_owned()))?;
        let replayed = match letter.doc.kind {
            DeadLetterKind::Event => {
                let key = InboxKey::from_document_id(letter.doc.target_id.clone());
                self.replay_event(letter_id, &key).await.map(Replayed::Event)
            }
            DeadLetterKind::Outbound | DeadLetterKind::UncertainReply => self
                .replay_outbound(letter_id, &letter.doc.target_id, force)
                .await
                .map(Replayed::Outbound),
            // LINE refused the chunk's request as it stands; sending it again
            // would be refused again. A new campaign (skipAnswered) reaches them.
            DeadLetterKind::CampaignChunk => Err(ReplayError::NotReplayable(
                "a campaign chunk LINE refused is not replayed; fix the scenario and start a new campaign",
            )),
        };
        // "Sent" and "done" marks are batched; an operator who looks right after
        // this answer must find them recorded.
        store.flush_settles(FLUSH_LIMIT).await;
        replayed
    }

    async fn replay_event(&self, letter_id: &str, key: &InboxKey) -> Result<Processed, ReplayError> {
        let store = &self.store;
        let record = store
            .event(key)
            .await?
            .ok_or_else(|| ReplayError::UnknownLetter(letter_id.to_owned()))?;
        if record.doc.state != InboxState::Dead {
            return Err(ReplayError::NotParked(record.doc.state.as_str()));
        }
        let work = match record.doc.plan.as_deref().map(Work::decode) {
            Some(Ok(work)) => work,
            Some(Err(reason)) => return Err(ReplayError::FailedAgain(reason)),
            None => return Err(ReplayError::FailedAgain("the stored event has no plan".into())),
        };
        let version = store
            .revive_event(key, record.version)
            .await?
            .ok_or(ReplayError::NotParked("changing"))?;
        let hold = Hold {
            key: key.clone(),
            version,
        };
        let span = event_span(&work, key.as_str());
        match self.events.process(&hold, &work).instrument(span).await {
            Ok(processed) => Ok(processed),
            Err(Failure::Superseded | Failure::Waiting) => Err(ReplayError::NotParked("pending")),
            // A follow waiting for a source link's login: back when it is over.
            Err(Failure::Deferred(wait)) => {
                if let Err(error) = store.defer_event(key, version, 0, wait).await {
                    tracing::warn!(error = %error, "could not release the event; its lease will run out");
                }
                Err(ReplayError::NotParked("pending"))
            }
            Err(Failure::Failed(error)) => {
                let reason = format!("replay failed: {error}");
                match store.park_event(key, version, &record.doc, &reason).await {
                    Ok(true) => {
                        tracing::error!(inbox.id = key.as_str(), reason = %reason, outcome = "parked", "replayed event failed again");
                        Err(ReplayError::FailedAgain(reason))
                    }
                    // The commit thought lost had landed, or another instance took
                    // the event: say what the record is now.
                    Ok(false) => match store.event(key).await? {
                        Some(now) => Err(ReplayError::NotParked(now.doc.state.as_str())),
                        None => Err(ReplayError::UnknownLetter(letter_id.to_owned())),
                    },
                    Err(park) => {
                        tracing::error!(inbox.id = key.as_str(), error = %park, "a failed replay could not be parked again; its lease will run out and the sweeper retries it");
                        Err(ReplayError::from(park))
                    }
                }
            }
        }
    }

    async fn replay_outbound(&self, letter_id: &str, ledger_id: &str, force: bool) -> Result<Settlement, ReplayError> {
        let store = &self.store;
        let record = store
            .outbound(ledger_id)
            .await?
            .ok_or_else(|| ReplayError::UnknownLetter(letter_id.to_owned()))?;
        if !matches!(record.doc.state, LedgerState::Failed | LedgerState::Uncertain) {
            return Err(ReplayError::NotParked(record.doc.state.as_str()));
        }
        let risk = self.risk_of(&record.doc);
        if let Some(risk) = risk {
            if !force {
                return Err(ReplayError::NeedsForce(risk));
            }
            tracing::warn!(
                ledger.id = ledger_id,
                risk = risk.as_str(),
                "replaying by the operator's choice: it may be delivered twice"
            );
        }
        // As revived: a push from a clean slate, never the reply token again;
        // a rich menu link stays one (it has no messages to push).
        let route = match record.doc.route {
            RouteDoc::RichMenu => RouteDoc::RichMenu,
            RouteDoc::Reply | RouteDoc::Push => RouteDoc::Push,
        };
        let version = store
            .revive_outbound(ledger_id, record.version, route)
            .await?
            .ok_or(ReplayError::NotParked("changing"))?;
        let mut doc = record.doc;
        doc.state = LedgerState::Pending;
        doc.route = route;
        doc.attempts = 0;
        doc.reply_token = None;
        doc.lease_owner = store.instance_id().to_owned();
        match self.sender.deliver_revived(ledger_id, &doc, version).await {
            Delivery::Settled(settlement) => Ok(settlement),
            Delivery::NotSettled => Err(ReplayError::NotParked("pending")),
        }
    }
}
/// Whether `id` has the shape of a dead letter id: 1 to 200 ASCII letters,
/// digits, `-` and `_`, not starting with `__`.
pub(crate) fn is_letter_id(id: &str) -> bool {
    (1..=200).contains(&id.len())
        && !id.starts_with("__")
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: i64 = 3_600_000;

    #[test]
    fn a_replay_needs_force_when_it_may_deliver_twice() {
        let now = 1_000 * HOUR_MS;
        // (uncertain reply, pushed, attempts, first sent hours ago, expected)
        let cases = [
            (false, true, 1, 1, None),
            (false, true, 3, 22, None),
            (false, true, 1, 23, Some(ReplayRisk::RetryKeyExpired)),
            (false, true, 12, 200, Some(ReplayRisk::RetryKeyExpired)),
            // Never called LINE: it cannot have arrived.
            (false, true, 0, 200, None),
            // A reply LINE refused for certain used no retry key and arrived nowhere.
            (false, false, 2, 200, None),
            (true, false, 1, 0, Some(ReplayRisk::ReplyOutcomeUnknown)),
            (true, false, 5, 100, Some(ReplayRisk::ReplyOutcomeUnknown)),
        ];
        for (uncertain, pushed, attempts, hours_ago, expected) in cases {
            assert_eq!(
                replay_risk(uncertain, pushed, attempts, now - hours_ago * HOUR_MS, now),
                expected,
                "uncertain reply {uncertain}, pushed {pushed}, {attempts} attempts, {hours_ago} h ago"
            );
        }
        assert_eq!(ReplayRisk::RetryKeyExpired.as_str(), "retry_key_expired");
    }
}
