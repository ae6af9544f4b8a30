//! What Firestore holds about one user, for `GET /admin/users/{id}/timeline`:
//! their events, answers, messages, dead letters, timers, open question and
//! user record, each collection read by `lineUserId` in one query, all of the
//! queries at once.
//!
//! The queries filter on `lineUserId` only, so the automatic single-field index
//! serves them (the inbox and the ledger have no composite index; see
//! `firestore.indexes.json`). Without an order they return documents in id
//! order, so at most `cap` per collection are read and the caller is told when
//! a collection had more: the records read are then not necessarily the newest.

use super::docs::collections::{
    DEAD_LETTERS, OPEN_QUESTIONS, OUTBOUND_LEDGER, SCENARIO_ANSWERS, SURVEY_RESPONSES, TIMERS, USERS, WEBHOOK_INBOX,
};
use super::docs::{AsksDoc, DeadLetterDoc, InboxState, LedgerState, RouteDoc};
use super::lease::document_id;
use super::questions::OpenQuestionDoc;
use super::round_trips::Timed;
use super::timers::TimerDoc;
use super::{Store, StoreError, classify};
use crate::values::AnswerValue;
use firestore::FirestoreInstant;
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// A webhook event as the timeline shows it (the plan, with its reply token,
/// is never read).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserEvent {
    pub(crate) event_type: String,
    pub(crate) webhook_event_id: String,
    pub(crate) state: InboxState,
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) received_at: FirestoreInstant,
    #[serde(default)]
    pub(crate) last_error: Option<String>,
}

const EVENT_FIELDS: [&str; 6] = [
    "eventType",
    "webhookEventId",
    "state",
    "attempts",
    "receivedAt",
    "lastError",
];

/// An answer as the timeline shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserAnswer {
    pub(crate) scenario_id: String,
    pub(crate) node_id: String,
    #[serde(default)]
    pub(crate) value: Option<AnswerValue>,
    pub(crate) value_type: String,
    #[serde(default)]
    pub(crate) tags: Vec<String>,
    pub(crate) scenario_version: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) answered_at: FirestoreInstant,
    pub(crate) webhook_event_id: String,
}

const ANSWER_FIELDS: [&str; 8] = [
    "scenarioId",
    "nodeId",
    "value",
    "valueType",
    "tags",
    "scenarioVersion",
    "answeredAt",
    "webhookEventId",
];

/// An outbound ledger entry as the timeline shows it (neither its messages nor
/// its reply token are read).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserMessage {
    pub(crate) scenario_id: String,
    pub(crate) route: RouteDoc,
    pub(crate) state: LedgerState,
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) created_at: FirestoreInstant,
    #[serde(default)]
    pub(crate) webhook_event_id: Option<String>,
    #[serde(default)]
    pub(crate) inbox_id: Option<String>,
    #[serde(default)]
    pub(crate) answer_id: Option<String>,
    #[serde(default)]
    pub(crate) asks: Option<AsksDoc>,
    #[serde(default)]
    pub(crate) last_error: Option<String>,
    /// The messages as JSON: the scenario's text, placeholders unrendered
    /// (the values they take are kept apart and dropped once settled).
    #[serde(default)]
    pub(crate) messages: Option<String>,
}

const MESSAGE_FIELDS: [&str; 11] = [
    "scenarioId",
    "route",
    "state",
    "attempts",
    "createdAt",
    "webhookEventId",
    "inboxId",
    "answerId",
    "asks",
    "lastError",
    "messages",
];

/// `users/{id}`: whether the user follows the account, and when they were seen.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserRecord {
    #[serde(default)]
    pub(crate) following: Option<bool>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    pub(crate) followed_at: Option<FirestoreInstant>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    pub(crate) unfollowed_at: Option<FirestoreInstant>,
    #[serde(default)]
    pub(crate) first_seen_ms: Option<i64>,
    #[serde(default)]
    pub(crate) last_seen_ms: Option<i64>,
    #[serde(default)]
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pub(crate) fields: std::collections::BTreeMap<String, crate::values::FieldValue>,
    /// The LINE display name cached for `{name}` (removed at unfollow).
    #[serde(default)]
    pub(crate) display_name: Option<String>,
    /// When LINE's profile was last fetched (ms since the epoch).
    #[serde(default)]
    pub(crate) profile_fetched_ms: Option<i64>,
    /// The rich menu asked for (a menu file's id, or `default`) and its
    /// sequence number.
    #[serde(default)]
    pub(crate) rich_menu: Option<String>,
    #[serde(default)]
    pub(crate) rich_menu_seq: Option<i64>,
    /// The menus whose scenario areas the user tapped.
    #[serde(default)]
    pub(crate) rich_menu_taps: Vec<String>,
}

/// A user's scenario marker, as the user page shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserMarker {
    pub(crate) scenario_id: String,
    #[serde(default)]
    pub(crate) last_answer_id: Option<String>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    pub(crate) last_answered_at: Option<FirestoreInstant>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    pub(crate) last_started_at: Option<FirestoreInstant>,
}

const MARKER_FIELDS: [&str; 4] = ["scenarioId", "lastAnswerId", "lastAnsweredAt", "lastStartedAt"];

/// Scenario markers read for one user's page, at most (one per scenario the
/// user met: far fewer than scenarios an account runs).
const MARKERS_READ: u32 = 500;

/// A user's record and scenario markers (`GET /admin/users/{id}`).
#[derive(Debug, Default)]
pub(crate) struct UserProfileRecords {
    pub(crate) user: Option<UserRecord>,
    pub(crate) markers: Vec<UserMarker>,
    /// More markers exist than were read.
    pub(crate) capped: bool,
}
#[derive(Debug, Default)]
pub(crate) struct UserRecords {
    pub(crate) user: Option<UserRecord>,
    pub(crate) open_question: Option<OpenQuestionDoc>,
    pub(crate) events: Vec<(String, UserEvent)>,
    pub(crate) answers: Vec<(String, UserAnswer)>,
    pub(crate) messages: Vec<(String, UserMessage)>,
    pub(crate) dead_letters: Vec<(String, DeadLetterDoc)>,
    pub(crate) timers: Vec<(String, TimerDoc)>,
    /// Some collection held more than `cap` of the user's records: the rest
    /// were not read.
    pub(crate) capped: bool,
}

impl Store {
    /// Everything stored about `user`, at most `cap` records per collection.
    /// Seven reads at once: one round trip of waiting.
    pub(crate) async fn user_records(&self, user: &str, cap: u32) -> Result<UserRecords, StoreError> {
        let (facts, events, answers, messages, letters, timers) = tokio::try_join!(
            self.get_many(vec![
                self.document_path(USERS, user),
                self.document_path(OPEN_QUESTIONS, user),
            ]),
            self.of_user::<UserEvent>(WEBHOOK_INBOX, &EVENT_FIELDS, user, cap),
            self.of_user::<UserAnswer>(SURVEY_RESPONSES, &ANSWER_FIELDS, user, cap),
            self.of_user::<UserMessage>(OUTBOUND_LEDGER, &MESSAGE_FIELDS, user, cap),
            self.of_user::<DeadLetterDoc>(DEAD_LETTERS, &[], user, cap),
            self.of_user::<TimerDoc>(TIMERS, &[], user, cap),
        )?;
        let mut facts = facts.into_iter();
        let user_record = facts.next().flatten().and_then(|document| readable(&document));
        let open_question = facts.next().flatten().and_then(|document| readable(&document));
        let capped = [events.found, answers.found, messages.found, letters.found, timers.found]
            .iter()
            .any(|&found| found >= cap as usize);
        Ok(UserRecords {
            user: user_record,
            open_question,
            events: events.readable,
            answers: answers.readable,
            messages: messages.readable,
            dead_letters: letters.readable,
            timers: timers.readable,
            capped,
        })
    }

    /// `users/{user}` and the user's scenario markers, both reads at once.
    pub(crate) async fn user_profile(&self, user: &str) -> Result<UserProfileRecords, StoreError> {
        let (facts, markers) = tokio::try_join!(
            self.get_many(vec![self.document_path(USERS, user)]),
            self.of_user::<UserMarker>(SCENARIO_ANSWERS, &MARKER_FIELDS, user, MARKERS_READ),
        )?;
        Ok(UserProfileRecords {
            user: facts
                .into_iter()
                .next()
                .flatten()
                .and_then(|document| readable(&document)),
            capped: markers.found >= MARKERS_READ as usize,
            markers: markers.readable.into_iter().map(|(_, marker)| marker).collect(),
        })
    }

    /// The documents of `collection` whose `lineUserId` is `user` (`fields`
    /// only; all when empty), at most `cap`. One that cannot be read is logged
    /// and left out rather than hiding the others.
    async fn of_user<T: DeserializeOwned>(
        &self,
        collection: &str,
        fields: &[&str],
        user: &str,
        cap: u32,
    ) -> Result<Found<T>, StoreError> {
        super::round_trips::count();
        let mut query = self.db.fluent().select();
        if !fields.is_empty() {
            query = query.fields(fields.iter().copied());
        }
        let documents = query
            .from(collection)
            .filter(|q| q.for_all([q.field("lineUserId").eq(user)]))
            .limit(cap)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(Found {
            found: documents.len(),
            readable: documents
                .iter()
                .filter_map(|document| {
                    readable(document).map(|record| (document_id(&document.name).to_owned(), record))
                })
                .collect(),
        })
    }
}

/// What one query found: how many documents (the cap counts them all), and
/// those that could be read, with their ids.
struct Found<T> {
    found: usize,
    readable: Vec<(String, T)>,
}

fn readable<T: DeserializeOwned>(document: &gcloud_sdk::google::firestore::v1::Document) -> Option<T> {
    match firestore::FirestoreDb::deserialize_doc_to(document) {
        Ok(record) => Some(record),
        Err(error) => {
            // The id of a user's own documents is their LINE id: logged as the log shows users.
            let error = StoreError::from(error);
            tracing::warn!(document = %crate::log_ids::logged(document_id(&document.name)), error = %error, "a user's record cannot be read");
            None
        }
    }
}
