//! Webhook events for the benchmark, shaped like the test fixtures.

use line_survey::ids::{NodeId, ScenarioId};
use line_survey::scenario::postback::Postback;
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

pub fn new_user() -> String {
    format!("U{}", uuid::Uuid::new_v4().simple())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn base(user: &str) -> Value {
    json!({
        "webhookEventId": uuid::Uuid::new_v4().simple().to_string()[..26].to_uppercase(),
        "deliveryContext": {"isRedelivery": false},
        "timestamp": now_ms(),
        "source": {"type": "user", "userId": user},
        "replyToken": uuid::Uuid::new_v4().simple().to_string(),
        "mode": "active",
    })
}

pub fn text(user: &str, text: &str) -> Value {
    let mut event = base(user);
    event["type"] = "message".into();
    event["message"] = json!({"type": "text", "id": (uuid::Uuid::new_v4().as_u64_pair().0 >> 1).to_string(), "quoteToken": "q", "text": text});
    event
}

pub fn postback(user: &str, data: &str) -> Value {
    let mut event = base(user);
    event["type"] = "postback".into();
    event["postback"] = json!({ "data": data });
    event
}

pub fn answer(user: &str) -> Value {
    let data = Postback::Answer {
        scenario: ScenarioId::parse("lunch").unwrap(),
        node: NodeId::parse("ask_food").unwrap(),
        choice: "good".to_owned(),
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
