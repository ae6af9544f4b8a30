//! Outbound actions: what to send to whom and why, the ledger entry and push
//! retry key derived from it, and the [`Courier`] that takes a recorded action to
//! its end state.

mod courier;
mod menu_sync;

pub(crate) use courier::{Courier, Delivery, PauseAt, RetryPolicy, ScheduledRetry};
pub(crate) use menu_sync::MenuSync;

use crate::ids::{LineUserId, ScenarioId, deterministic_id};
use crate::line::messages::Message;
use crate::store::{LedgerDoc, Store, StoreError};
use uuid::Uuid;

/// Namespace of the version-5 UUIDs used as retry keys (a fixed random UUID).
const RETRY_KEY_NAMESPACE: Uuid = Uuid::from_u128(0x6c1e_5b7a_1f0d_4d8e_9a3c_2b4f_8e71_d093);

/// The identity of an action: SHA-256 over its NUL-separated parts, like answer
/// ids, so no part can spill into another (an idempotency key may contain `:`).
/// The ledger id is the key itself; the push retry key is derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActionKey(String);

impl ActionKey {
    /// The follow-up of an answer: whichever delivery recorded the answer, its
    /// follow-up is one and the same action.
    pub(crate) fn answer(answer_id: &str) -> Self {
        Self(deterministic_id(&["answer", answer_id]))
    }

    /// What one event (a trigger, a card tap) sends.
    pub(crate) fn event(inbox_id: &str) -> Self {
        Self(deterministic_id(&["event", inbox_id]))
    }

    /// An operator's manual send of `scenario` to `user`. `None` when the key
    /// holds a NUL (it would make the hash ambiguous).
    pub(crate) fn manual(idempotency_key: &str, scenario: &ScenarioId, user: &LineUserId) -> Option<Self> {
        (!idempotency_key.contains('\0')).then(|| {
            Self(deterministic_id(&[
                "manual",
                idempotency_key,
                scenario.as_str(),
                user.as_str(),
            ]))
        })
    }

    /// What a timer's firing sends: each firing (each reminder) is its own
    /// action, keyed by the timer and the time it was due.
    pub(crate) fn timer(timer_id: &str, due_ms: i64) -> Self {
        Self(deterministic_id(&["timer", timer_id, &due_ms.to_string()]))
    }

    /// One chunk of a campaign: its one multicast call, however often it is
    /// retried (across instances and restarts), carries one retry key.
    pub(crate) fn campaign_chunk(chunk_id: &str) -> Self {
        Self(deterministic_id(&["campaign_chunk", chunk_id]))
    }

    /// One recipient's push of a push campaign: a user is in one chunk of the
    /// one plan sent, so every turn of that chunk pushes with one retry key.
    pub(crate) fn campaign_push(campaign_id: &str, user: &LineUserId) -> Self {
        Self(deterministic_id(&["campaign_push", campaign_id, user.as_str()]))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The same action always carries the same key, so LINE accepts its push at
    /// most once (it answers 409 to a repeat for 24 hours).
    pub(crate) fn retry_key(&self) -> Uuid {
        Uuid::new_v5(&RETRY_KEY_NAMESPACE, self.0.as_bytes())
    }
}

/// The reply token of the event that caused an action, and when the event happened.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplyContext {
    pub(crate) token: String,
    pub(crate) event_time_ms: i64,
}

/// One outbound action, before it is recorded in the ledger.
#[derive(Debug, Clone)]
pub(crate) struct OutboundAction {
    pub(crate) key: ActionKey,
    pub(crate) user: LineUserId,
    pub(crate) messages: Vec<Message>,
    /// Present when the action may be sent as a (free) reply.
    pub(crate) reply: Option<ReplyContext>,
    pub(crate) scenario: ScenarioId,
    pub(crate) webhook_event_id: Option<String>,
    pub(crate) inbox_id: Option<String>,
    pub(crate) answer_id: Option<String>,
    /// The question node the messages ask and the split arm they took: their
    /// counts rise with the entry's create.
    pub(crate) counts: crate::store::EntryCounts,
    /// What the messages' placeholders render with (see `engine::personal`).
    pub(crate) personal: Option<crate::values::PersonalValues>,
}

/// An action's ledger entry, built once: written by the effect's commit, then
/// handed as it is to the courier.
#[derive(Debug, Clone)]
pub(crate) struct StagedAction {
    pub(crate) ledger_id: String,
    pub(crate) doc: LedgerDoc,
    /// The leases of earlier commit rounds: a round thought lost may land late,
    /// and the entry then holds one of these.
    pub(crate) earlier_leases: Vec<firestore::FirestoreInstant>,
}

impl StagedAction {
    /// The ledger entry as an effect commit writes it.
    pub(crate) fn entry(&self) -> (&str, &LedgerDoc) {
        (self.ledger_id.as_str(), &self.doc)
    }

    /// Starts the entry's lease now, just before the commit that writes it.
    pub(crate) fn renew_lease(&mut self, store: &Store) {
        let earlier = std::mem::replace(&mut self.doc.lease_until, store.lease_from_now());
        self.earlier_leases.push(earlier);
    }

    /// Whether `lease` is one this worker staged for the entry.
    pub(crate) fn staged_lease(&self, lease: firestore::FirestoreInstant) -> bool {
        std::iter::once(&self.doc.lease_until)
            .chain(&self.earlier_leases)
            .any(|staged| crate::store::same_instant(*staged, lease))
    }
}

impl OutboundAction {
    /// The pending ledger entry of this action, leased to this instance.
    pub(crate) fn stage(&self, store: &Store) -> Result<StagedAction, StoreError> {
        let messages = serde_json::to_string(&self.messages)
            .map_err(|error| StoreError::Unavailable(format!("messages cannot be written: {error}")))?;
        let ledger_id = self.key.as_str().to_owned();
        let doc = store.pending_entry(crate::store::NewAction {
            action_key: self.key.as_str(),
            user: self.user.as_str(),
            messages,
            reply: self
                .reply
                .as_ref()
                .map(|reply| (reply.token.as_str(), reply.event_time_ms)),
            retry_key: self.key.retry_key().to_string(),
            scenario_id: self.scenario.as_str(),
            webhook_event_id: self.webhook_event_id.as_deref(),
            inbox_id: self.inbox_id.as_deref(),
            answer_id: self.answer_id.as_deref(),
            counts: self.counts.clone(),
            personal: self.personal.clone(),
        });
        Ok(StagedAction {
            ledger_id,
            doc,
            earlier_leases: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_keys_hash_their_parts_apart() {
        let scenario = ScenarioId::parse("lunch").expect("valid");
        let user = LineUserId::parse("U1").expect("valid");
        let a = ActionKey::manual("a:b", &scenario, &user).expect("no NUL");
        let b = ActionKey::manual("a", &ScenarioId::parse("b:lunch").expect("valid"), &user).expect("no NUL");
        assert_ne!(a, b, "a ':' in one part cannot make two keys equal");
        assert_eq!(a.as_str().len(), 40);
        assert_eq!(ActionKey::manual("a\0b", &scenario, &user), None);
        assert_ne!(ActionKey::answer("x"), ActionKey::event("x"));
    }

    #[test]
    fn retry_keys_are_stable_per_action_and_distinct_across_actions() {
        assert_eq!(
            ActionKey::answer("abc").retry_key(),
            ActionKey::answer("abc").retry_key()
        );
        assert_ne!(
            ActionKey::answer("abc").retry_key(),
            ActionKey::answer("abd").retry_key()
        );
        assert_eq!(ActionKey::answer("abc").retry_key().get_version_num(), 5);
    }
}
