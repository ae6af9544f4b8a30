//! One user's story (`GET /admin/users/{id}/timeline`): their events, answers,
//! messages, dead letters and timers in one list, newest first, each naming the
//! ids of the records it is linked to, so an operator can follow an event to
//! the answer it recorded and the message that answer sent (or see why none was).

use crate::ids::LineUserId;
use crate::log_ids::UserIdHasher;
use crate::scenario::typed::AnswerValue;
use crate::store::{
    DeadLetterDoc, OpenQuestionDoc, Store, StoreError, TimerDoc, UserAnswer, UserEvent, UserMessage, UserRecord,
};
use chrono::{DateTime, SecondsFormat};
use firestore::FirestoreInstant;
use serde::Serialize;
use std::collections::{HashMap, HashSet};

/// Records read per collection, at most. Inbox records expire after 8 days and
/// ledger entries after 90, so most users stay well below it; beyond it the
/// timeline says it is truncated (the records read are then in id order, not
/// necessarily the newest).
const READ_PER_COLLECTION: u32 = 500;

/// Entries listed when the call names no `limit`, and the most it may ask.
pub(crate) const DEFAULT_ENTRIES: usize = 100;
pub(crate) const MAX_ENTRIES: usize = 500;

/// What `GET /admin/users/{id}/timeline` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Timeline {
    pub(crate) user_id: String,
    /// What the log shows for this user (`LOG_USER_IDS=hashed`, the default):
    /// search the log for it to find the user's lines.
    pub(crate) user_id_hash: String,
    /// `users/{id}`; absent when the service never saw the user.
    pub(crate) user: Option<UserSummary>,
    pub(crate) open_question: Option<OpenQuestion>,
    pub(crate) entries: Vec<Entry>,
    /// More records exist than are listed: the list was cut at `limit`, or a
    /// collection held more of the user's records than are read at once.
    pub(crate) truncated: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserSummary {
    following: Option<bool>,
    followed_at: Option<String>,
    unfollowed_at: Option<String>,
    first_seen_at: Option<String>,
    last_seen_at: Option<String>,
    tags: Vec<String>,
    fields: std::collections::BTreeMap<String, crate::values::FieldValue>,
    /// The rich menu a step or an operator asked for (`default`: none of
    /// their own), absent when none ever was.
    #[serde(skip_serializing_if = "Option::is_none")]
    rich_menu: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rich_menu_seq: Option<i64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rich_menu_taps: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OpenQuestion {
    scenario_id: String,
    scenario_version: u32,
    node_id: String,
    opened_at: String,
    /// Invalid answers so far.
    attempts: u32,
    run: Option<String>,
}

/// One line of the story. `at` is RFC 3339 in UTC; `id` is the document's id,
/// which other entries name in their links.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Entry {
    /// A webhook event: `outcome` is `pending`, `done` or `dead`.
    #[serde(rename_all = "camelCase")]
    Event {
        at: String,
        id: String,
        webhook_event_id: String,
        kind: String,
        outcome: &'static str,
        attempts: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_error: Option<String>,
        /// What it caused: the answers it recorded and the messages it sent.
        #[serde(flatten)]
        caused: Caused,
    },
    #[serde(rename_all = "camelCase")]
    Answer {
        at: String,
        id: String,
        scenario_id: String,
        scenario_version: u32,
        node_id: String,
        value_type: String,
        /// Absent once the user unsent the message that typed it.
        value: Option<AnswerValue>,
        tags: Vec<String>,
        /// The event that recorded it.
        webhook_event_id: String,
        /// That event's entry, when it is still stored.
        event_id: Option<String>,
    },
    /// An outbound message (ledger entry): `state` is `pending`, `sent`,
    /// `logged`, `uncertain` or `failed`; `route` is `reply` or `push`.
    #[serde(rename_all = "camelCase")]
    Message {
        at: String,
        id: String,
        scenario_id: String,
        state: &'static str,
        route: &'static str,
        attempts: u32,
        /// The question node it asks, if any.
        asks: Option<String>,
        /// The entry of the event that sent it, when that event is listed.
        event_id: Option<String>,
        /// The inbox id it was recorded for, whether or not still stored.
        inbox_id: Option<String>,
        webhook_event_id: Option<String>,
        answer_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        last_error: Option<String>,
        /// What the messages said, as the scenario wrote them (never the
        /// user's text, placeholders such as `{name}` unrendered).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        said: Vec<String>,
    },
    #[serde(rename_all = "camelCase")]
    DeadLetter {
        at: String,
        id: String,
        kind: &'static str,
        /// The parked event's or message's id.
        target_id: String,
        reason: String,
        attempts: u32,
        webhook_event_id: Option<String>,
    },
    /// A scheduled step, reminder or expiry: `at` is when it is (or was) due.
    #[serde(rename_all = "camelCase")]
    Timer {
        at: String,
        id: String,
        kind: &'static str,
        scenario_id: String,
        node_id: String,
        run: String,
        state: &'static str,
        outcome: Option<String>,
        /// The message its firing sent.
        message_id: Option<String>,
    },
}

/// The answers and messages an event caused, by id.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Caused {
    answer_ids: Vec<String>,
    message_ids: Vec<String>,
}

#[derive(Clone)]
pub(crate) struct Timelines {
    store: Store,
    user_ids: UserIdHasher,
}

impl Timelines {
    pub(crate) fn new(store: Store, user_ids: UserIdHasher) -> Self {
        Self { store, user_ids }
    }

    /// The story of `user`, newest first, at most `limit` entries.
    pub(crate) async fn user(&self, user: &LineUserId, limit: usize) -> Result<Timeline, StoreError> {
        let records = self.store.user_records(user.as_str(), READ_PER_COLLECTION).await?;
        // Answers and messages name the event by its LINE id or its id; each
        // event's entry lists what it caused, so a `done` event with nothing
        // listed is one that changed nothing (a duplicate tap, say).
        let events_by_line_id: HashMap<String, String> = records
            .events
            .iter()
            .map(|(id, event)| (event.webhook_event_id.clone(), id.clone()))
            .collect();
        let listed_events: HashSet<String> = records.events.iter().map(|(id, _)| id.clone()).collect();
        let mut entries: Vec<Entry> = records
            .answers
            .into_iter()
            .map(|(id, answer)| answer_entry(id, answer, &events_by_line_id))
            .chain(
                records
                    .messages
                    .into_iter()
                    .map(|(id, message)| message_entry(id, message, &listed_events)),
            )
            .collect();
        let mut caused: HashMap<String, Caused> = HashMap::new();
        for entry in &entries {
            match entry {
                Entry::Answer {
                    id,
                    event_id: Some(event),
                    ..
                } => caused.entry(event.clone()).or_default().answer_ids.push(id.clone()),
                Entry::Message {
                    id,
                    event_id: Some(event),
                    ..
                } => caused.entry(event.clone()).or_default().message_ids.push(id.clone()),
                _ => {}
            }
        }
        for (id, event) in records.events {
            let effects = caused.remove(&id).unwrap_or_default();
            entries.push(event_entry(id, event, effects));
        }
        for (id, letter) in records.dead_letters {
            entries.push(dead_letter_entry(id, letter));
        }
        for (id, timer) in records.timers {
            entries.push(timer_entry(id, timer));
        }
        let (entries, cut) = newest_first(entries, limit);
        Ok(Timeline {
            user_id: user.as_str().to_owned(),
            user_id_hash: self.user_ids.hash(user.as_str()),
            user: records.user.map(summary),
            open_question: records.open_question.map(open_question),
            entries,
            truncated: cut || records.capped,
        })
    }
}

/// Sorted newest first (ties in a fixed order, so the list is stable), cut at
/// `limit`; `true` when something was cut.
fn newest_first(mut entries: Vec<Entry>, limit: usize) -> (Vec<Entry>, bool) {
    entries.sort_by(|a, b| b.at().cmp(a.at()).then_with(|| a.id().cmp(b.id())));
    let cut = entries.len() > limit;
    entries.truncate(limit);
    (entries, cut)
}

impl Entry {
    /// RFC 3339 in UTC with a fixed number of digits: ordered as text.
    fn at(&self) -> &str {
        match self {
            Entry::Event { at, .. }
            | Entry::Answer { at, .. }
            | Entry::Message { at, .. }
            | Entry::DeadLetter { at, .. }
            | Entry::Timer { at, .. } => at,
        }
    }

    fn id(&self) -> &str {
        match self {
            Entry::Event { id, .. }
            | Entry::Answer { id, .. }
            | Entry::Message { id, .. }
            | Entry::DeadLetter { id, .. }
            | Entry::Timer { id, .. } => id,
        }
    }
}

pub(super) fn rfc3339_ms(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

pub(crate) fn time(at: &FirestoreInstant) -> String {
    rfc3339_ms(at.as_millisecond())
}

fn event_entry(id: String, event: UserEvent, caused: Caused) -> Entry {
    Entry::Event {
        at: time(&event.received_at),
        id,
        webhook_event_id: event.webhook_event_id,
        kind: event.event_type,
        outcome: event.state.as_str(),
        attempts: event.attempts,
        last_error: event.last_error,
        caused,
    }
}

fn answer_entry(id: String, answer: UserAnswer, events_by_line_id: &HashMap<String, String>) -> Entry {
    Entry::Answer {
        at: time(&answer.answered_at),
        event_id: events_by_line_id.get(&answer.webhook_event_id).cloned(),
        id,
        scenario_id: answer.scenario_id,
        scenario_version: answer.scenario_version,
        node_id: answer.node_id,
        value_type: answer.value_type,
        value: answer.value,
        tags: answer.tags,
        webhook_event_id: answer.webhook_event_id,
    }
}

fn message_entry(id: String, message: UserMessage, listed_events: &HashSet<String>) -> Entry {
    Entry::Message {
        at: time(&message.created_at),
        id,
        scenario_id: message.scenario_id,
        state: message.state.as_str(),
        route: message.route.as_str(),
        attempts: message.attempts,
        asks: message.asks.map(|asks| asks.node),
        // Linked only to an event that is listed (inbox records expire long
        // before ledger entries); `inboxId` keeps the stored reference.
        event_id: message.inbox_id.clone().filter(|event| listed_events.contains(event)),
        inbox_id: message.inbox_id,
        webhook_event_id: message.webhook_event_id,
        answer_id: message.answer_id,
        last_error: message.last_error,
        said: message.messages.as_deref().map(said_of).unwrap_or_default(),
    }
}

/// Messages a timeline entry shows, at most.
const SAID_MESSAGES: usize = 5;
/// Characters of one message a timeline entry shows, at most.
const SAID_CHARS: usize = 200;

/// What a message entry said, from its stored messages (LINE's message
/// objects as the scenario wrote them, placeholders unrendered): a text's
/// text, a card's alternative text, otherwise its type in brackets; each
/// cut to [`SAID_CHARS`]. Stored messages that do not read say nothing.
fn said_of(messages: &str) -> Vec<String> {
    /// Only what is shown is kept: a card's contents are skipped, not built.
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Said {
        #[serde(rename = "type", default)]
        kind: Option<String>,
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        alt_text: Option<String>,
    }
    let Ok(messages) = serde_json::from_str::<Vec<Said>>(messages) else {
        return Vec::new();
    };
    messages
        .into_iter()
        .take(SAID_MESSAGES)
        .map(|message| {
            let text = message
                .text
                .or(message.alt_text)
                .unwrap_or_else(|| format!("[{}]", message.kind.as_deref().unwrap_or("message")));
            if text.chars().count() > SAID_CHARS {
                let mut cut: String = text.chars().take(SAID_CHARS).collect();
                cut.push('…');
                cut
            } else {
                text
            }
        })
        .collect()
}

fn dead_letter_entry(id: String, letter: DeadLetterDoc) -> Entry {
    Entry::DeadLetter {
        at: time(&letter.parked_at),
        id,
        kind: letter.kind.as_str(),
        target_id: letter.target_id,
        reason: letter.reason,
        attempts: letter.attempts,
        webhook_event_id: letter.webhook_event_id,
    }
}

fn timer_entry(id: String, timer: TimerDoc) -> Entry {
    Entry::Timer {
        at: time(&timer.due_at),
        id,
        kind: timer.kind.as_str(),
        scenario_id: timer.scenario_id,
        node_id: timer.node_id,
        run: timer.run,
        state: timer.state.as_str(),
        outcome: timer.outcome,
        message_id: timer.ledger_id,
    }
}

fn summary(user: UserRecord) -> UserSummary {
    UserSummary {
        following: user.following,
        followed_at: user.followed_at.as_ref().map(time),
        unfollowed_at: user.unfollowed_at.as_ref().map(time),
        first_seen_at: user.first_seen_ms.map(rfc3339_ms),
        last_seen_at: user.last_seen_ms.map(rfc3339_ms),
        tags: user.tags,
        fields: user.fields,
        rich_menu: user.rich_menu,
        rich_menu_seq: user.rich_menu_seq,
        rich_menu_taps: user.rich_menu_taps,
    }
}

fn open_question(question: OpenQuestionDoc) -> OpenQuestion {
    OpenQuestion {
        scenario_id: question.scenario_id,
        scenario_version: question.scenario_version,
        node_id: question.node_id,
        opened_at: time(&question.opened_at),
        attempts: question.attempts,
        run: question.run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_says_what_the_scenario_wrote() {
        let long = "あ".repeat(SAID_CHARS + 5);
        let cases: [(String, Vec<String>); 5] = [
            (
                r#"[{"type":"text","text":"{name}さん、ご来店ありがとうございます"},{"type":"flex","altText":"満足度は？","contents":{}}]"#.to_owned(),
                vec!["{name}さん、ご来店ありがとうございます".to_owned(), "満足度は？".to_owned()],
            ),
            (r#"[{"type":"image","originalContentUrl":"https://x"}]"#.to_owned(), vec!["[image]".to_owned()]),
            (format!(r#"[{{"type":"text","text":"{long}"}}]"#), vec![format!("{}…", "あ".repeat(SAID_CHARS))]),
            ("not json".to_owned(), Vec::new()),
            (
                serde_json::to_string(&vec![serde_json::json!({"type": "text", "text": "x"}); 9]).unwrap_or_default(),
                vec!["x".to_owned(); SAID_MESSAGES],
            ),
        ];
        for (messages, said) in cases {
            assert_eq!(said_of(&messages), said, "{messages}");
        }
    }

    fn event(at_ms: i64, id: &str) -> Entry {
        event_entry(
            id.to_owned(),
            UserEvent {
                event_type: "message".into(),
                webhook_event_id: format!("W{id}"),
                state: crate::store::InboxState::Done,
                attempts: 1,
                received_at: FirestoreInstant::from_millisecond(at_ms).expect("a valid time"),
                last_error: None,
            },
            Caused::default(),
        )
    }

    #[test]
    fn entries_are_listed_newest_first_and_cut_at_the_limit() {
        // (entries' times and ids, limit, ids expected, cut)
        type Case<'a> = (&'a [(i64, &'a str)], usize, &'a [&'a str], bool);
        let cases: [Case; 4] = [
            (&[], 10, &[], false),
            (&[(1_000, "a"), (3_000, "b"), (2_000, "c")], 10, &["b", "c", "a"], false),
            (&[(1_000, "a"), (3_000, "b"), (2_000, "c")], 2, &["b", "c"], true),
            // Same time: ordered by id, so the list is the same on every call.
            (&[(5_000, "z"), (5_000, "m"), (900, "x")], 3, &["m", "z", "x"], false),
        ];
        for (entries, limit, expected, expected_cut) in cases {
            let built = entries.iter().map(|(at, id)| event(*at, id)).collect();
            let (listed, cut) = newest_first(built, limit);
            let ids: Vec<&str> = listed.iter().map(Entry::id).collect();
            assert_eq!(ids, expected, "{entries:?} limit {limit}");
            assert_eq!(cut, expected_cut, "{entries:?} limit {limit}");
        }
    }

    #[test]
    fn times_before_2001_and_after_2286_still_sort_as_text() {
        // Fixed width (years 1970 to 9999, milliseconds always written).
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(10_000_000_000_000), "2286-11-20T17:46:40.000Z");
        assert!(rfc3339_ms(999_999_999_999) < rfc3339_ms(1_000_000_000_000));
    }
}
