//! Document shapes. Field names are camelCase, as Firestore consoles and the
//! official SDKs show them; they are part of the data contract.

use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

pub mod collections {
    pub const SURVEY_RESPONSES: &str = "survey_responses";
    pub const USERS: &str = "users";
    pub const SCENARIO_ANSWERS: &str = "scenario_answers";
    pub const WEBHOOK_INBOX: &str = "webhook_inbox";
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

/// `webhook_inbox/{inboxId}`: a claimed webhook event.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxDoc {
    pub destination: String,
    pub webhook_event_id: String,
    pub event_type: String,
    pub state: InboxState,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub received_at: FirestoreInstant,
    /// For a Firestore TTL policy on this field; see the README.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub expire_at: FirestoreInstant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InboxState {
    /// Claimed; its effects are being produced.
    Processing,
    /// Its state change committed; it must never run again.
    Done,
}
