//! Webhook bodies built from the fixtures in `tests/fixtures/webhook/`, which the
//! contract test checks against LINE's schema.
//!
//! Every reply token these builders put into an event is issued to the LINE
//! stand-in ([`issue_reply_token`]) with the event's timestamp, as LINE issues
//! it with the webhook: usable once, for a minute. To make an event old, use
//! [`with_timestamp`], not `event["timestamp"] = ...`: only it moves the token's
//! issue time too. The raw [`fixture`]s carry tokens that were never issued.

use super::line_stand_in::issue_reply_token;
use line_survey::ids::{NodeId, ScenarioId};
use line_survey::scenario::postback::Postback;
use serde_json::Value;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

pub const DESTINATION: &str = "Ud000000000000000000000000000000d";

pub fn fixture_path(name: &str) -> PathBuf {
    crate::helpers::repo_path("tests/fixtures/webhook").join(name)
}

pub fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture_path(name)).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// A fresh LINE user id: `U` + 32 hex digits.
pub fn new_user() -> String {
    format!("U{}", uuid::Uuid::new_v4().simple())
}

/// A fresh ULID-shaped webhook event id (26 Crockford base32 characters).
pub fn new_event_id() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let random = uuid::Uuid::new_v4().as_u128();
    (0..26)
        .map(|i| ALPHABET[((random >> (i * 5)) & 31) as usize] as char)
        .collect()
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The single event of a fixture, re-addressed to `user` with fresh ids.
fn event_from(fixture_name: &str, user: &str) -> Value {
    let mut event = fixture(fixture_name)["events"][0].clone();
    let timestamp = now_ms();
    event["webhookEventId"] = Value::from(new_event_id());
    event["timestamp"] = Value::from(timestamp);
    if event.get("replyToken").is_some() {
        let token = uuid::Uuid::new_v4().simple().to_string();
        issue_reply_token(&token, timestamp);
        event["replyToken"] = Value::from(token);
    }
    event["source"]["userId"] = Value::from(user);
    event
}

/// A copy of `event` that happened at `timestamp_ms` (ms since the epoch), its
/// reply token (if any) issued again at that time: an old event's token is
/// expired at the stand-in too. The token is shared with `event` and any copy
/// of it, so their token moves as well.
pub fn with_timestamp(event: &Value, timestamp_ms: i64) -> Value {
    let mut moved = event.clone();
    moved["timestamp"] = Value::from(timestamp_ms);
    if let Some(token) = moved.get("replyToken").and_then(Value::as_str) {
        issue_reply_token(token, timestamp_ms);
    }
    moved
}

pub fn text(user: &str, text: &str) -> Value {
    let mut event = event_from("text_message.json", user);
    event["message"]["text"] = Value::from(text);
    event["message"]["id"] = Value::from(format!("{}", uuid::Uuid::new_v4().as_u64_pair().0 >> 1));
    event
}

pub fn postback(user: &str, data: &str) -> Value {
    let mut event = event_from("postback.json", user);
    event["postback"]["data"] = Value::from(data);
    event
}

pub fn unsend(user: &str, message_id: &str) -> Value {
    let mut event = event_from("unsend.json", user);
    event["unsend"]["messageId"] = Value::from(message_id);
    event
}

pub fn follow(user: &str) -> Value {
    event_from("follow.json", user)
}

pub fn unfollow(user: &str) -> Value {
    event_from("unfollow.json", user)
}

/// Postback data of a survey button, as the service renders it.
pub fn answer_data(scenario: &str, node: &str, choice: &str) -> String {
    Postback::Answer {
        scenario: ScenarioId::parse(scenario).unwrap(),
        node: NodeId::parse(node).unwrap(),
        choice: choice.to_owned(),
    }
    .encode()
}

/// Postback data of a Flex card tap.
pub fn card_tap_data(scenario: &str, node: &str) -> String {
    Postback::CardTap {
        scenario: ScenarioId::parse(scenario).unwrap(),
        node: NodeId::parse(node).unwrap(),
    }
    .encode()
}

/// The same event as LINE redelivers it: same id, `isRedelivery` set.
pub fn redelivered(event: &Value) -> Value {
    let mut again = event.clone();
    again["deliveryContext"]["isRedelivery"] = Value::from(true);
    again
}

pub fn envelope(events: Vec<Value>) -> Value {
    serde_json::json!({ "destination": DESTINATION, "events": events })
}

/// A value picked in date question `node`'s datetime picker; `params` as LINE
/// sends them, e.g. `{"date": "2027-03-14"}`.
pub fn date_pick(user: &str, scenario: &str, node: &str, params: Value) -> Value {
    let data = Postback::Date {
        scenario: ScenarioId::parse(scenario).unwrap(),
        node: NodeId::parse(node).unwrap(),
    }
    .encode();
    let mut event = postback(user, &data);
    event["postback"]["params"] = params;
    event
}
