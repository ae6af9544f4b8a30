//! Webhook events for the benchmark, shaped like the test fixtures.

use line_survey::ids::{NodeId, ScenarioId};
use line_survey::scenario::postback::Postback;
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

pub fn new_user() -> String {
    format!("U{}", uuid::Uuid::new_v4().simple())
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The fields every event carries, a reply token included (events whose schema
/// has none drop it).
pub fn base(user: &str) -> Value {
    json!({
        "webhookEventId": uuid::Uuid::new_v4().simple().to_string()[..26].to_uppercase(),
        "deliveryContext": {"isRedelivery": false},
        "timestamp": now_ms(),
        "source": {"type": "user", "userId": user},
        "replyToken": uuid::Uuid::new_v4().simple().to_string(),
        "mode": "active",
    })
}

/// A numeric message id, as LINE's.
pub fn message_id() -> String {
    (uuid::Uuid::new_v4().as_u64_pair().0 >> 1).to_string()
}

pub fn text(user: &str, text: &str) -> Value {
    let mut event = base(user);
    event["type"] = "message".into();
    event["message"] = json!({"type": "text", "id": message_id(), "quoteToken": "q", "text": text});
    event
}

pub fn postback(user: &str, data: &str) -> Value {
    let mut event = base(user);
    event["type"] = "postback".into();
    event["postback"] = json!({ "data": data });
    event
}

/// The first choice of the lunch survey's first question.
pub fn answer(user: &str) -> Value {
    answer_with(user, "ask_food", "good")
}

/// A tap on `choice` of the lunch survey's question `node`.
pub fn answer_with(user: &str, node: &str, choice: &str) -> Value {
    answer_in(user, "lunch", node, choice)
}

/// A tap on `choice` of question `node` of `scenario`.
pub fn answer_in(user: &str, scenario: &str, node: &str, choice: &str) -> Value {
    let data = Postback::Answer {
        scenario: ScenarioId::parse(scenario).unwrap(),
        node: NodeId::parse(node).unwrap(),
        choice: choice.to_owned(),
    };
    postback(user, &data.encode())
}

pub fn card_tap(user: &str) -> Value {
    let data = Postback::CardTap {
        scenario: ScenarioId::parse("welcome").unwrap(),
        node: NodeId::parse("card").unwrap(),
    };
    postback(user, &data.encode())
}

pub fn follow(user: &str) -> Value {
    let mut event = base(user);
    event["type"] = "follow".into();
    event["follow"] = json!({"isUnblocked": false});
    event
}

/// The user takes back the message `message_id` (no reply token).
pub fn unsend(user: &str, message_id: &str) -> Value {
    let mut event = base(user);
    event.as_object_mut().unwrap().remove("replyToken");
    event["type"] = "unsend".into();
    event["unsend"] = json!({ "messageId": message_id });
    event
}

pub fn redelivered(event: &Value) -> Value {
    let mut again = event.clone();
    again["deliveryContext"]["isRedelivery"] = true.into();
    again
}

pub fn shuffle(values: &mut [Value]) {
    let mut keyed: Vec<(u128, Value)> = values
        .iter()
        .map(|v| (uuid::Uuid::new_v4().as_u128(), v.clone()))
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    for (slot, (_, value)) in values.iter_mut().zip(keyed) {
        *slot = value;
    }
}
