//! Outbound actions: what to send to whom and why, the push retry key derived
//! from it, and the [`Courier`] that takes a recorded action to its end state.

mod courier;

pub use courier::{Courier, Origin, RetryPolicy};

use crate::ids::{LineUserId, ScenarioId, deterministic_id};
use crate::line::messages::Message;
use uuid::Uuid;

/// Namespace of the version-5 UUIDs used as retry keys (a fixed random UUID).
const RETRY_KEY_NAMESPACE: Uuid = Uuid::from_u128(0x6c1e_5b7a_1f0d_4d8e_9a3c_2b4f_8e71_d093);

/// The retry key of an action: the same action always carries the same key, so
/// LINE accepts its push at most once (it answers 409 to a repeat for 24 hours).
pub fn retry_key(action_key: &str) -> Uuid {
    Uuid::new_v5(&RETRY_KEY_NAMESPACE, action_key.as_bytes())
}

/// The reply token of the event that caused an action, and when the event happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyContext {
    pub token: String,
    pub event_time_ms: i64,
}

/// One outbound action, before it is recorded in the ledger.
#[derive(Debug, Clone)]
pub struct OutboundAction {
    /// `answer:{answerId}`, `event:{inboxId}` or `manual:{key}:{scenario}:{user}`.
    pub action_key: String,
    pub user: LineUserId,
    pub messages: Vec<Message>,
    /// Present when the action may be sent as a (free) reply.
    pub reply: Option<ReplyContext>,
    pub scenario: ScenarioId,
    pub webhook_event_id: Option<String>,
    pub inbox_id: Option<String>,
    pub answer_id: Option<String>,
}

impl OutboundAction {
    pub fn ledger_id(&self) -> String {
        deterministic_id(&[&self.action_key])
    }

    pub fn retry_key(&self) -> Uuid {
        retry_key(&self.action_key)
    }

    /// An operator's manual send: always a push.
    pub fn manual(idempotency_key: &str, scenario: &ScenarioId, user: &LineUserId, messages: Vec<Message>) -> Self {
        Self {
            action_key: format!("manual:{idempotency_key}:{scenario}:{user}"),
            user: user.clone(),
            messages,
            reply: None,
            scenario: scenario.clone(),
            webhook_event_id: None,
            inbox_id: None,
            answer_id: None,
        }
    }
}

pub fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_keys_are_stable_per_action_and_distinct_across_actions() {
        assert_eq!(retry_key("answer:abc"), retry_key("answer:abc"));
        assert_ne!(retry_key("answer:abc"), retry_key("answer:abd"));
        assert_eq!(retry_key("answer:abc").get_version_num(), 5);
    }
}
