//! A storm of duplicate deliveries and the per-user count of its effects.
//!
//! Every user first starts the lunch survey with a text message; then taps the
//! first choice three times (three events) and LINE redelivers the first tap.
//! Exactly once per user, whatever the interleaving: one answer, its tags, one
//! start message and one follow-up (the next question).

use super::firestore_rest::{FirestoreRest, string_array, string_field};
use super::line_stand_in::LineStandIn;
use super::{CHANNEL_SECRET, events, sorted};
use futures::StreamExt;
use line_survey::line::signature;
use serde_json::Value;
use std::collections::HashMap;

pub const INTRO: &str = "A quick survey about today's lunch.";
pub const FOLLOW_UP: &str = "Coffee or tea?";

pub struct Storm {
    pub users: Vec<String>,
    /// One text event per user.
    pub starts: Vec<Value>,
    /// Three taps and one redelivery per user, shuffled.
    pub taps: Vec<Value>,
}

impl Storm {
    pub fn new(user_count: usize) -> Self {
        let users: Vec<String> = (0..user_count).map(|_| events::new_user()).collect();
        let starts = users.iter().map(|user| events::text(user, "lunch")).collect();
        let mut taps = Vec::new();
        for user in &users {
            let data = events::answer_data("lunch", "ask_food", "good");
            let first = events::postback(user, &data);
            taps.push(events::redelivered(&first));
            taps.push(first);
            taps.push(events::postback(user, &data));
            taps.push(events::postback(user, &data));
        }
        shuffle(&mut taps);
        Self { users, starts, taps }
    }

    /// Which user each reply token was issued to.
    pub fn reply_tokens(&self) -> HashMap<String, String> {
        self.starts
            .iter()
            .chain(&self.taps)
            .filter_map(|event| {
                Some((
                    event["replyToken"].as_str()?.to_owned(),
                    event["source"]["userId"].as_str()?.to_owned(),
                ))
            })
            .collect()
    }
}

fn shuffle(values: &mut [Value]) {
    let mut keyed: Vec<(u128, Value)> = values
        .iter()
        .map(|value| (uuid::Uuid::new_v4().as_u128(), value.clone()))
        .collect();
    keyed.sort_by_key(|(key, _)| *key);
    for (slot, (_, value)) in values.iter_mut().zip(keyed) {
        *slot = value;
    }
}

/// Posts one event, signed, to `address`. `Err` when the service did not answer.
pub async fn post_event(client: &reqwest::Client, address: &str, event: &Value) -> Result<u16, reqwest::Error> {
    let body = serde_json::to_vec(&events::envelope(vec![event.clone()])).unwrap();
    let signature = signature::sign(CHANNEL_SECRET.as_bytes(), &body);
    let response = client
        .post(format!("{address}/webhook"))
        .header("content-type", "application/json")
        .header("x-line-signature", signature)
        .body(body)
        .send()
        .await?;
    Ok(response.status().as_u16())
}

/// Requests in flight when a test plays LINE.
pub const IN_FLIGHT: usize = 16;

/// Sends every event (to the address `route` picks), at most [`IN_FLIGHT`] at
/// once, and returns the events the service did not acknowledge with 200.
pub async fn send_all(events: &[Value], route: impl Fn(usize) -> String) -> Vec<Value> {
    send_each(events, route, Value::clone).await
}

/// Like [`send_all`], with each event made by `prepare` just before it is sent.
async fn send_each(events: &[Value], route: impl Fn(usize) -> String, prepare: impl Fn(&Value) -> Value) -> Vec<Value> {
    let client = reqwest::Client::new();
    let prepare = &prepare;
    let unacknowledged: Vec<_> = futures::stream::iter(events.iter().enumerate())
        .map(|(index, event)| {
            let (client, address) = (&client, route(index));
            async move {
                let event = prepare(event);
                match post_event(client, &address, &event).await {
                    Ok(200) => None,
                    _ => Some(event),
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    unacknowledged.into_iter().flatten().collect()
}

/// Sends every event as LINE does: each as it happens (its timestamp, and its
/// reply token's, is the moment of the first delivery), and what is not
/// acknowledged with 200 is redelivered (same event, `isRedelivery`) until it
/// is, for at most `limit`. Returns how many redeliveries it took.
pub async fn deliver_like_line(events: &[Value], route: impl Fn(usize) -> String, limit: std::time::Duration) -> usize {
    let deadline = std::time::Instant::now() + limit;
    let mut pending = send_each(events, &route, |event| events::with_timestamp(event, events::now_ms())).await;
    let mut redeliveries = 0;
    while !pending.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} events still unacknowledged after {limit:?}",
            pending.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        redeliveries += pending.len();
        let again: Vec<Value> = pending.iter().map(events::redelivered).collect();
        pending = send_all(&again, &route).await;
    }
    redeliveries
}

/// What each user got, counted from Firestore and the LINE stand-in.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UserEffects {
    pub answers: usize,
    pub tags: Vec<String>,
    pub starts_received: usize,
    pub follow_ups_received: usize,
    /// Ledger entries marked uncertain (replies in flight when a process died).
    pub uncertain: usize,
}

pub async fn effects(storm: &Storm, firestore: &FirestoreRest, line: &LineStandIn) -> HashMap<String, UserEffects> {
    let mut effects: HashMap<String, UserEffects> = storm
        .users
        .iter()
        .map(|user| (user.clone(), UserEffects::default()))
        .collect();
    for answer in firestore.list("survey_responses").await {
        let user = string_field(&answer, "lineUserId").unwrap();
        effects.get_mut(&user).expect("answers come from storm users").answers += 1;
    }
    for user in firestore.list("users").await {
        let id = string_field(&user, "lineUserId").unwrap();
        effects.get_mut(&id).unwrap().tags = sorted(string_array(&user, "tags"));
    }
    for entry in firestore.list("outbound_ledger").await {
        if string_field(&entry, "state").as_deref() == Some("uncertain") {
            let user = string_field(&entry, "lineUserId").unwrap();
            effects.get_mut(&user).unwrap().uncertain += 1;
        }
    }
    let tokens = storm.reply_tokens();
    for call in line.accepted() {
        let user = match call.to() {
            Some(to) => to.to_owned(),
            None => tokens[call.body["replyToken"].as_str().unwrap()].clone(),
        };
        let entry = effects.get_mut(&user).unwrap();
        if call.texts().iter().any(|text| text == INTRO) {
            entry.starts_received += 1;
        }
        if call
            .messages()
            .iter()
            .any(|message| message["template"]["text"] == FOLLOW_UP)
        {
            entry.follow_ups_received += 1;
        }
    }
    effects
}

/// The effects every user must have once the storm settled.
pub fn exactly_once() -> UserEffects {
    UserEffects {
        answers: 1,
        tags: vec!["answered:lunch".into(), "foodie".into(), "lunch_good".into()],
        starts_received: 1,
        follow_ups_received: 1,
        uncertain: 0,
    }
}
