//! Document shapes. Field names are camelCase, as Firestore consoles and the
//! official SDKs show them; they are part of the data contract (README).

use crate::values::AnswerValue;
use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

pub(crate) mod collections {
    pub(crate) const SURVEY_RESPONSES: &str = "survey_responses";
    pub(crate) const USERS: &str = "users";
    pub(crate) const SCENARIO_ANSWERS: &str = "scenario_answers";
    pub(crate) const WEBHOOK_INBOX: &str = "webhook_inbox";
    pub(crate) const OUTBOUND_LEDGER: &str = "outbound_ledger";
    pub(crate) const MESSAGE_MARKS: &str = "message_marks";
    pub(crate) const MESSAGE_TEXTS: &str = "message_texts";
    pub(crate) const OPEN_QUESTIONS: &str = "open_questions";
    pub(crate) const ADMIN_REQUESTS: &str = "admin_requests";
    pub(crate) const DEAD_LETTERS: &str = "dead_letters";
    pub(crate) const TIMERS: &str = "timers";
    pub(crate) const SCENARIO_VERSIONS: &str = "scenario_versions";
    pub(crate) const CAMPAIGNS: &str = "campaigns";
    pub(crate) const CAMPAIGN_CHUNKS: &str = "campaign_chunks";
    pub(crate) const RESULT_COUNTERS: &str = "result_counters";
    pub(crate) const NOTICES: &str = "notices";
    pub(crate) const INSTANCES: &str = "instances";
    pub(crate) const FOLLOWER_SYNCS: &str = "follower_syncs";
    pub(crate) const RICH_MENUS: &str = "rich_menus";
    pub(crate) const RICH_MENU_DEPLOYS: &str = "rich_menu_deploys";
    pub(crate) const RICH_MENU_LINKS: &str = "rich_menu_links";
    pub(crate) const USER_SOURCES: &str = "user_sources";
    pub(crate) const LOGIN_STATES: &str = "login_states";
    pub(crate) const SOURCE_COUNTERS: &str = "source_counters";
    pub(crate) const OPERATORS: &str = "operators";
    pub(crate) const CONSOLE_SESSIONS: &str = "console_sessions";
    pub(crate) const API_TOKENS: &str = "api_tokens";
    pub(crate) const AUDIT_LOG: &str = "audit_log";
    pub(crate) const MIGRATIONS: &str = "migrations";
}

/// `survey_responses/{answerId}`: one user's answer to one survey node.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AnswerDoc {
    pub(crate) scenario_id: String,
    pub(crate) node_id: String,
    pub(crate) line_user_id: String,
    /// Typed: a number stays a number; a date is an ISO 8601 string. Removed
    /// (and `redacted` set) once the user unsent the message that typed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<AnswerValue>,
    /// `choice`, `text`, `number`, `date`, `time` or `datetime`.
    pub(crate) value_type: String,
    pub(crate) tags: Vec<String>,
    pub(crate) scenario_version: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) answered_at: FirestoreInstant,
    /// The event that recorded it, for tracing an answer back to LINE's delivery.
    pub(crate) webhook_event_id: String,
    /// The arm of the A/B split the question is behind; absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) variant: Option<String>,
    /// The campaign whose run the question was asked in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) campaign_id: Option<String>,
}

/// `scenario_answers/{markerId}`: one user and one scenario. `lastAnswerId` set
/// means "answered this scenario"; `lastStartedAt` is when a trigger or a card
/// last started it. The tap and trigger guards read this one document and make
/// their commit conditional on its version, so the read and the write are one
/// decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScenarioMarkerDoc {
    pub(crate) scenario_id: String,
    pub(crate) line_user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_answer_id: Option<String>,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) last_answered_at: Option<FirestoreInstant>,
    /// The event time of the last start (not when it was processed), so a double
    /// tap processed late is still seen as a double tap.
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) last_started_at: Option<FirestoreInstant>,
    /// The inbox record of the event that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_started_by: Option<String>,
    /// The A/B arm the user's runs of the scenario take (written by a start,
    /// a manual send or an answer behind a split).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) variant: Option<String>,
}

/// `webhook_inbox/{inboxId}`: a webhook event, stored before LINE gets its 200.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InboxDoc {
    pub(crate) destination: String,
    pub(crate) webhook_event_id: String,
    pub(crate) event_type: String,
    /// Whose event it is, when it came from a user: a user's timeline finds the
    /// events by it. Absent on records stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) line_user_id: Option<String>,
    /// What processing needs, decided at ingest (JSON): never the message text.
    /// Removed once the event is done (it holds the reply token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) plan: Option<String>,
    pub(crate) state: InboxState,
    pub(crate) lease_owner: String,
    /// Until then the owner works on it; afterwards any instance may take it over.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) lease_until: FirestoreInstant,
    /// Processing attempts started.
    pub(crate) attempts: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) received_at: FirestoreInstant,
    /// For a Firestore TTL policy on this field; see the README.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) expire_at: FirestoreInstant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_error: Option<String>,
    /// Put back until then (ms) to wait for something other than a retry (a
    /// follow waiting for a source link's login): the user's next event does
    /// not poll it meanwhile. Stale once past.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deferred_until_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum InboxState {
    /// Stored and acknowledged; a worker holds or will take its lease.
    Pending,
    /// Its effects committed (or it had none); it must never run again.
    Done,
    /// Failed too often: parked in `dead_letters` until an operator replays it.
    Dead,
}

impl InboxState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            InboxState::Pending => "pending",
            InboxState::Done => "done",
            InboxState::Dead => "dead",
        }
    }
}

/// `outbound_ledger/{ledgerId}`: one outbound action, recorded before it is sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LedgerDoc {
    /// SHA-256 of the action's NUL-separated parts (e.g. `answer`, answer id); the
    /// ledger id and the push retry key are both derived from it.
    pub(crate) action_key: String,
    pub(crate) line_user_id: String,
    /// The messages, as JSON (scenario text only, never the user's text).
    pub(crate) messages: String,
    pub(crate) route: RouteDoc,
    /// Present while a reply may still be attempted; removed once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reply_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) event_time_ms: Option<i64>,
    pub(crate) retry_key: String,
    pub(crate) state: LedgerState,
    /// LINE calls made (as far as recorded).
    pub(crate) attempts: u32,
    /// A reply call got no answer (timeout, 5xx): it may have been accepted, so
    /// the action may only be retried with the same token, never pushed.
    #[serde(default)]
    pub(crate) reply_outcome_unknown: bool,
    /// Set just before a reply call, in a write of its own, and cleared when the
    /// call's outcome is recorded: while set, a call may have reached LINE
    /// without its outcome being recorded (the process died), so a 400 "Invalid
    /// reply token" means our call used the token. Absent on entries written
    /// before it existed, which count as set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reply_call_pending: Option<bool>,
    /// The instance that took the lease last, written by owners that record
    /// reply calls before making them. An owner of an older version (during a
    /// rolling deploy) takes the lease without changing it: then this names
    /// someone else, and `reply_call_pending` says nothing about that owner's
    /// calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reply_marks_by: Option<String>,
    pub(crate) lease_owner: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) lease_until: FirestoreInstant,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) created_at: FirestoreInstant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_error: Option<String>,
    pub(crate) scenario_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) webhook_event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) inbox_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) answer_id: Option<String>,
    /// The question node the messages ask: its "sent" count rose with this
    /// entry's create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asks: Option<AsksDoc>,
    /// The split arm the run took in this entry's chain: its "runs" count rose
    /// with this entry's create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) split: Option<SplitDoc>,
    /// What the messages' placeholders render with (the user's name, fields,
    /// answers), decided with the step: kept while the action may be sent and
    /// removed when it is settled, so no personal value stays at rest here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) personal: Option<crate::values::PersonalValues>,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) expire_at: FirestoreInstant,
}

impl LedgerDoc {
    /// Whether a reply call may have reached LINE with no outcome recorded: its
    /// outcome was lost, or a call was about to be made when the process died,
    /// or the entry's owner does not record its calls (an older version).
    pub(crate) fn earlier_reply_call_unknown(&self) -> bool {
        reply_call_unknown(
            self.reply_outcome_unknown,
            self.reply_call_pending,
            self.reply_marks_by.as_deref(),
            &self.lease_owner,
        )
    }
}

fn reply_call_unknown(outcome_unknown: bool, call_pending: Option<bool>, marks_by: Option<&str>, owner: &str) -> bool {
    outcome_unknown || call_pending != Some(false) || marks_by != Some(owner)
}

/// What a question's ledger entry counts as "sent": this node, on this day
/// (`store::results` raises the counter with the entry's create).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AsksDoc {
    pub(crate) node: String,
    /// `YYYY-MM-DD` in the scenario's time zone when the entry was recorded.
    pub(crate) day: String,
    /// The A/B arm the question is asked in (counted by arm as well).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) variant: Option<String>,
}

/// A run that took an arm of a split, counted with its first ledger entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SplitDoc {
    pub(crate) node: String,
    pub(crate) label: String,
    pub(crate) day: String,
}

/// What a ledger entry's create counts in the results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EntryCounts {
    pub(crate) asks: Option<AsksDoc>,
    pub(crate) split: Option<SplitDoc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RouteDoc {
    Reply,
    Push,
    /// No message: the user's rich menu made so on LINE as their record
    /// (`users/{id}.richMenu`) says, whatever it says when the call is made.
    RichMenu,
}

impl RouteDoc {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RouteDoc::Reply => "reply",
            RouteDoc::Push => "push",
            RouteDoc::RichMenu => "rich_menu",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LedgerState {
    /// Recorded, not yet known to be delivered.
    Pending,
    /// LINE accepted it (200; 409 for a push retry key it had accepted; 400
    /// "Invalid reply token" to the retry of a reply whose earlier attempt was lost).
    Sent,
    /// Dry run (`LINE_DRY_RUN`): printed, never sent.
    Logged,
    /// A reply that could not be settled while its token was fresh: it may or may
    /// not have arrived. Never resent automatically; listed with the dead letters.
    Uncertain,
    /// LINE refused it, or retries ran out: parked in `dead_letters`.
    Failed,
}

impl LedgerState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LedgerState::Pending => "pending",
            LedgerState::Sent => "sent",
            LedgerState::Logged => "logged",
            LedgerState::Uncertain => "uncertain",
            LedgerState::Failed => "failed",
        }
    }
}

/// `message_marks/{id}`, id from (destination, messageId): which came first for a
/// text message, its effect or its unsend. Both create this document, so only one
/// of them can happen.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MessageMarkDoc {
    pub(crate) state: MessageMarkState,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) at: FirestoreInstant,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) expire_at: FirestoreInstant,
    /// The answer this message's text recorded (a typed answer): an unsend that
    /// comes later removes the text from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) answer_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MessageMarkState {
    /// The message had its effect (a trigger started a scenario).
    Processed,
    /// The user unsent the message first: it must have no effect.
    Unsent,
}

/// `admin_requests/{id}`, id from the `Idempotency-Key`: what the first call with
/// that key asked for, so a reuse with another body is refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AdminRequestDoc {
    pub(crate) operation: String,
    /// SHA-256 (hex) of the request as understood (scenario and users).
    pub(crate) body_hash: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) created_at: FirestoreInstant,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) expire_at: FirestoreInstant,
}

/// `dead_letters/{id}`: something that kept failing, with what to find it by.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeadLetterDoc {
    pub(crate) kind: DeadLetterKind,
    /// The id of the parked `webhook_inbox` or `outbound_ledger` document.
    pub(crate) target_id: String,
    pub(crate) reason: String,
    pub(crate) attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) webhook_event_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) line_user_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) action_key: Option<String>,
    /// A campaign chunk's campaign, and how many users the chunk holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) campaign_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user_count: Option<u32>,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) parked_at: FirestoreInstant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DeadLetterKind {
    /// A webhook event whose processing kept failing.
    Event,
    /// An outbound action LINE refused or that ran out of retries.
    Outbound,
    /// A reply with an unknown outcome.
    UncertainReply,
    /// A campaign chunk LINE refused, or that ran out of retries.
    CampaignChunk,
}

impl DeadLetterKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DeadLetterKind::Event => "event",
            DeadLetterKind::Outbound => "outbound",
            DeadLetterKind::UncertainReply => "uncertain_reply",
            DeadLetterKind::CampaignChunk => "campaign_chunk",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reply_call_unknown;

    #[test]
    fn a_reply_call_counts_as_unknown_unless_its_owner_recorded_none() {
        // (outcome unknown, call pending, marks by, owner, unknown?)
        let cases = [
            (false, Some(false), Some("a"), "a", false),
            // A call was about to be made, or made with no answer.
            (false, Some(true), Some("a"), "a", true),
            (true, Some(false), Some("a"), "a", true),
            // Written before the mark existed.
            (false, None, None, "a", true),
            // Taken over by an older version, which calls without marking.
            (false, Some(false), Some("a"), "old", true),
            (false, Some(false), None, "a", true),
        ];
        for (outcome_unknown, pending, marks_by, owner, expected) in cases {
            assert_eq!(
                reply_call_unknown(outcome_unknown, pending, marks_by, owner),
                expected,
                "{outcome_unknown} {pending:?} {marks_by:?} {owner}"
            );
        }
    }
}
