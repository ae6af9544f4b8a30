//! Webhook request bodies: the envelope and the event types the service acts on.
//!
//! Events are parsed one by one from the envelope's raw values, so one malformed or
//! new kind of event cannot make the whole batch fail: it becomes
//! [`EventParse::Malformed`] or [`EventKind::Unknown`] and is acknowledged.

use serde::Deserialize;
use serde_json::Value;

/// The request body: `{ "destination": "U...", "events": [ ... ] }`.
#[derive(Debug, Deserialize)]
pub struct Envelope {
    /// The bot's own user id. Part of the inbox key, so two channels sharing one
    /// deployment never take each other's events for duplicates.
    pub destination: String,
    pub events: Vec<Value>,
}

/// One event, as far as this service needs to understand it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// ULID that stays the same across redeliveries of this event.
    pub webhook_event_id: String,
    /// Milliseconds since the epoch at which the event happened.
    pub timestamp: i64,
    pub mode: Mode,
    pub delivery_context: DeliveryContext,
    #[serde(default)]
    pub source: Option<Source>,
    /// Single use, valid for about a minute after `timestamp`.
    #[serde(default)]
    pub reply_token: Option<String>,
    #[serde(flatten)]
    pub kind: EventKind,
    /// The raw `type` string, kept for logs about events we do not handle.
    #[serde(skip)]
    pub type_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    Active,
    /// Another channel module owns the chat: no messages may be sent.
    Standby,
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryContext {
    pub is_redelivery: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Source {
    User {
        #[serde(default)]
        user_id: Option<String>,
    },
    Group {
        group_id: String,
        #[serde(default)]
        user_id: Option<String>,
    },
    Room {
        room_id: String,
        #[serde(default)]
        user_id: Option<String>,
    },
    #[serde(other)]
    Unknown,
}

impl Source {
    /// The user behind the event; `None` for group or room events LINE sends without one.
    pub fn user_id(&self) -> Option<&str> {
        match self {
            Source::User { user_id } | Source::Group { user_id, .. } | Source::Room { user_id, .. } => {
                user_id.as_deref()
            }
            Source::Unknown => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum EventKind {
    Message {
        message: MessageContent,
    },
    Postback {
        postback: PostbackContent,
    },
    Follow,
    Unfollow,
    Unsend {
        unsend: UnsendDetail,
    },
    /// Any event type this service does not act on (join, beacon, ...): not an error.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum MessageContent {
    Text {
        id: String,
        text: String,
    },
    /// Stickers, images and the like: acknowledged, never acted on.
    #[serde(other)]
    Other,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PostbackContent {
    pub data: String,
    /// What a datetime picker returned.
    #[serde(default)]
    pub params: Option<PostbackParams>,
}

/// A datetime picker's value: one of the three, by its mode.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PostbackParams {
    #[serde(default)]
    pub date: Option<String>,
    #[serde(default)]
    pub time: Option<String>,
    #[serde(default)]
    pub datetime: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnsendDetail {
    pub message_id: String,
}

/// The outcome of reading one raw event.
#[derive(Debug)]
pub enum EventParse {
    Parsed(Box<Event>),
    /// The value is not an event object we can read: logged and skipped.
    Malformed {
        webhook_event_id: Option<String>,
        reason: String,
    },
}

impl Event {
    pub fn parse(raw: &Value) -> EventParse {
        match Event::deserialize(raw) {
            Ok(mut event) => {
                event.type_name = raw.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
                EventParse::Parsed(Box::new(event))
            }
            Err(error) => EventParse::Malformed {
                webhook_event_id: raw.get("webhookEventId").and_then(Value::as_str).map(str::to_owned),
                reason: describe_error(&error),
            },
        }
    }

    pub fn user_id(&self) -> Option<&str> {
        self.source.as_ref().and_then(Source::user_id)
    }
}

/// What is wrong with a webhook body, fit for a log line. serde's own message
/// quotes the offending value ("invalid type: string \"...\""), which may be a
/// user's message text; only a missing field (its name is ours) is named.
pub fn describe_error(error: &serde_json::Error) -> String {
    let message = error.to_string();
    match error.classify() {
        serde_json::error::Category::Data if message.starts_with("missing field") => message,
        serde_json::error::Category::Data => "a field has an unexpected type or value".to_owned(),
        // Syntax and end-of-input errors give only a position.
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base(kind: Value) -> Value {
        let mut event = json!({
            "webhookEventId": "01HZZZZZZZZZZZZZZZZZZZZZZZ",
            "timestamp": 1_700_000_000_000i64,
            "mode": "active",
            "deliveryContext": {"isRedelivery": false},
            "source": {"type": "user", "userId": "U1"},
            "replyToken": "token",
        });
        event.as_object_mut().unwrap().extend(kind.as_object().unwrap().clone());
        event
    }

    fn parsed(raw: Value) -> Event {
        match Event::parse(&raw) {
            EventParse::Parsed(event) => *event,
            EventParse::Malformed { reason, .. } => panic!("did not parse: {reason}"),
        }
    }

    #[test]
    fn text_and_postback_events_are_typed() {
        let event = parsed(base(
            json!({"type": "message", "message": {"type": "text", "id": "1", "text": "hi", "quoteToken": "q"}}),
        ));
        assert!(
            matches!(event.kind, EventKind::Message { message: MessageContent::Text { ref text, .. } } if text == "hi")
        );
        let event = parsed(base(json!({"type": "postback", "postback": {"data": "x"}})));
        assert!(matches!(event.kind, EventKind::Postback { ref postback } if postback.data == "x"));
        assert_eq!(event.user_id(), Some("U1"));
    }

    #[test]
    fn new_event_types_and_message_types_are_unknown_not_errors() {
        let event = parsed(base(
            json!({"type": "beacon", "beacon": {"hwid": "x", "type": "enter"}}),
        ));
        assert!(matches!(event.kind, EventKind::Unknown));
        assert_eq!(event.type_name, "beacon");
        let event = parsed(base(
            json!({"type": "message", "message": {"type": "sticker", "id": "1"}}),
        ));
        assert!(matches!(
            event.kind,
            EventKind::Message {
                message: MessageContent::Other
            }
        ));
    }

    #[test]
    fn a_group_source_may_lack_a_user() {
        let mut raw = base(json!({"type": "follow"}));
        raw["source"] = json!({"type": "group", "groupId": "C1"});
        assert_eq!(parsed(raw).user_id(), None);
    }

    #[test]
    fn malformed_events_are_described_without_their_values() {
        let mut raw = base(json!({"type": "message", "message": {"type": "text", "id": "1", "text": "hi"}}));
        raw["timestamp"] = json!("my secret words");
        let EventParse::Malformed { reason, .. } = Event::parse(&raw) else {
            panic!("parsed")
        };
        assert!(!reason.contains("secret"), "{reason}");
        raw.as_object_mut().unwrap().remove("timestamp");
        let EventParse::Malformed { reason, .. } = Event::parse(&raw) else {
            panic!("parsed")
        };
        assert!(reason.contains("timestamp"), "{reason}");
    }

    #[test]
    fn an_event_without_its_id_is_malformed() {
        let mut raw = base(json!({"type": "follow"}));
        raw.as_object_mut().unwrap().remove("webhookEventId");
        assert!(matches!(Event::parse(&raw), EventParse::Malformed { .. }));
    }
}
