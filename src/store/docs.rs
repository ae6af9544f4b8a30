//! Document shapes. Field names are camelCase, as Firestore consoles and the
//! official SDKs show them; they are part of the data contract (README).

use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

pub mod collections {
    pub const SURVEY_RESPONSES: &str = "survey_responses";
    pub const USERS: &str = "users";
    pub const SCENARIO_ANSWERS: &str = "scenario_answers";
    pub const WEBHOOK_INBOX: &str = "webhook_inbox";
    pub const OUTBOUND_LEDGER: &str = "outbound_ledger";
    pub const DEAD_LETTERS: &str = "dead_letters";
}

/// `survey_responses/{answerId}`: one user's answer to one survey node.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnswerDoc {
    pub scenario_id: String,
    pub node_id: String,
    pub line_user_id: String,
    pub value: String,
    pub tags: Vec<String>,
    pub scenario_version: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub answered_at: FirestoreInstant,
    /// The event that recorded it, for tracing an answer back to LINE's delivery.
    pub webhook_event_id: String,
}

/// `scenario_answers/{markerId}`: "this user answered this scenario", the one
/// document the Flex-tap and trigger guards read.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioAnswerDoc {
    pub scenario_id: String,
    pub line_user_id: String,
    pub last_answer_id: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub last_answered_at: FirestoreInstant,
}

/// `webhook_inbox/{inboxId}`: a webhook event, stored before LINE gets its 200.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxDoc {
    pub destination: String,
    pub webhook_event_id: String,
    pub event_type: String,
    /// Set for message events, so an `unsend` can find the stored text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// The raw event JSON, what a worker needs to process it. Removed when the
    /// event is done, so message text is only kept while it is needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    pub state: InboxState,
    pub lease_owner: String,
    /// Until then the owner works on it; afterwards any instance may take it over.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub lease_until: FirestoreInstant,
    /// How many times processing was started.
    pub attempts: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub received_at: FirestoreInstant,
    /// For a Firestore TTL policy on this field; see the README.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub expire_at: FirestoreInstant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The user unsent the message: its text was removed from `payload`.
    #[serde(default)]
    pub text_removed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxState {
    /// Stored and acknowledged; a worker holds or will take its lease.
    Pending,
    /// Its effects committed (or it had none); it must never run again.
    Done,
    /// Failed too often: parked in `dead_letters` until an operator replays it.
    Dead,
}

/// `outbound_ledger/{ledgerId}`: one outbound action, recorded before it is sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerDoc {
    /// What caused it, e.g. `answer:{answerId}`, `event:{inboxId}`, `manual:...`;
    /// the ledger id and the push retry key are both derived from it.
    pub action_key: String,
    pub line_user_id: String,
    /// The messages, as JSON (scenario text only, never the user's text).
    pub messages: String,
    pub route: RouteDoc,
    /// Present while a reply may still be attempted; removed once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time_ms: Option<i64>,
    pub retry_key: String,
    pub state: LedgerState,
    pub attempts: u32,
    pub lease_owner: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub lease_until: FirestoreInstant,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub created_at: FirestoreInstant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub scenario_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_id: Option<String>,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub expire_at: FirestoreInstant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteDoc {
    Reply,
    Push,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerState {
    /// Recorded, not yet known to be delivered.
    Pending,
    /// LINE accepted it (200, or 409 for a retry key it had accepted).
    Sent,
    /// A reply whose answer never came: it may or may not have arrived. Never
    /// resent automatically; listed with the dead letters for an operator.
    Uncertain,
    /// LINE refused it, or retries ran out: parked in `dead_letters`.
    Failed,
}

/// `dead_letters/{id}`: something that kept failing, with what to find it by.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterDoc {
    pub kind: DeadLetterKind,
    /// The id of the parked `webhook_inbox` or `outbound_ledger` document.
    pub target_id: String,
    pub reason: String,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_key: Option<String>,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub parked_at: FirestoreInstant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterKind {
    /// A webhook event whose processing kept failing.
    Event,
    /// An outbound action LINE refused or that ran out of retries.
    Outbound,
    /// A reply with an unknown outcome.
    UncertainReply,
}
