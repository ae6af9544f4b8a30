//! What the chaos run's users do, one task per user, and what each must end up
//! with. A user acts on what they received, as a person would: the tap comes
//! after the question arrived. Duplicates are sent on purpose (double taps, a
//! second "chaos", LINE's redeliveries, a second typed text, a re-tap of an old
//! card with another choice); none may add an effect.

use super::Webhook;
use super::line::ChaosLine;
use crate::events;
use crate::soak::Rng;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// How long a user waits for the next message before giving up on the survey
/// (counted as late; the final count decides whether it was lost).
const PATIENCE: Duration = Duration::from_secs(240);

/// The kinds of users the run starts, out of 20: 17 take the survey, 2 only
/// follow (and some unfollow again), 1 sends a text and takes it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Surveyed,
    FollowerOnly,
    Texter,
}

/// What one user did, for the final count.
#[derive(Debug, Clone)]
pub struct Journey {
    pub user: String,
    pub role: Role,
    /// The survey's start was acknowledged.
    pub started: bool,
    /// The food choice, once the tap was acknowledged.
    pub food: Option<&'static str>,
    /// Typed the name (acknowledged).
    pub typed: bool,
    /// The texts that may have become the typed answer: the name, and "yes"
    /// when it raced the name.
    pub answer_texts: Vec<String>,
    /// Took the typed name back after it was answered.
    pub unsent_name: bool,
    /// The drink choice, once acknowledged; `None` with `drink_skipped` for a
    /// user who leaves the question to its reminder and expiry.
    pub drink: Option<&'static str>,
    pub drink_skipped: bool,
    /// The step the user stopped waiting at (its message did not come within
    /// `PATIENCE`).
    pub gave_up_at: Option<&'static str>,
    /// When the user was first known to the service for sure (the answer of a
    /// survey taker was followed by the next question, or a follow was
    /// acknowledged: its record may still be written a little later).
    pub known_at: Option<Instant>,
    /// When an unfollow was first sent.
    pub unfollowed_at: Option<Instant>,
    /// Webhook requests sent, and those answered 200 only after a retry.
    pub requests: u32,
    pub retried: u32,
    /// Webhook events that never got a 200 (LINE would have given up).
    pub unacknowledged: u32,
}

impl Journey {
    fn new(user: String, role: Role) -> Journey {
        Journey {
            user,
            role,
            started: false,
            food: None,
            typed: false,
            answer_texts: Vec::new(),
            unsent_name: false,
            drink: None,
            drink_skipped: false,
            gave_up_at: None,
            known_at: None,
            unfollowed_at: None,
            requests: 0,
            retried: 0,
            unacknowledged: 0,
        }
    }
}

pub fn role(rng: &mut Rng) -> Role {
    match rng.below(20) {
        0 | 1 => Role::FollowerOnly,
        2 => Role::Texter,
        _ => Role::Surveyed,
    }
}

/// One user's whole journey.
pub async fn run(webhook: Webhook, line: ChaosLine, role: Role) -> Journey {
    let mut rng = Rng::new();
    let mut journey = Journey::new(events::new_user(), role);
    let mut user = User {
        webhook,
        line,
        journey: &mut journey,
    };
    match role {
        Role::Surveyed => user.survey(&mut rng).await,
        Role::FollowerOnly => user.follow_only(&mut rng).await,
        Role::Texter => user.text_and_take_back(&mut rng).await,
    }
    journey
}

struct User<'a> {
    webhook: Webhook,
    line: ChaosLine,
    journey: &'a mut Journey,
}

impl User<'_> {
    fn id(&self) -> String {
        self.journey.user.clone()
    }

    /// Sends one event until some instance acknowledges it (as LINE redelivers).
    async fn send(&mut self, event: Value) -> bool {
        if let (Some(token), Some(user)) = (event["replyToken"].as_str(), event["source"]["userId"].as_str()) {
            self.line.register_token(token, user);
        }
        let delivery = self.webhook.deliver(event).await;
        self.journey.requests += delivery.requests;
        if delivery.requests > 1 {
            self.journey.retried += 1;
        }
        if !delivery.acknowledged {
            self.journey.unacknowledged += 1;
        }
        delivery.acknowledged
    }

    /// Sends `event` and, with probability `percent`/100, LINE's redelivery of
    /// it at the same time or a moment later.
    async fn send_maybe_twice(&mut self, event: Value, percent: usize, rng: &mut Rng) -> bool {
        if rng.below(100) >= percent {
            return self.send(event).await;
        }
        let again = events::redelivered(&event);
        let delay = Duration::from_millis(rng.below(3000) as u64);
        let webhook = self.webhook.clone();
        let late = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            webhook.deliver(again).await
        });
        let acknowledged = self.send(event).await;
        if let Ok(delivery) = late.await {
            self.journey.requests += delivery.requests;
        }
        acknowledged
    }

    /// A tap on the button for `choice` of `question` the user received last:
    /// the data the service put on it (its run), or a button of before runs
    /// when none arrived (the old card format; it must still count once).
    fn tap(&self, user: &str, question: &str, choice: &str) -> Value {
        match self.line.button(user, question, choice) {
            Some(data) => events::postback(user, &data),
            None => events::answer_in(user, "chaos", question, choice),
        }
    }

    /// Waits until `count` messages of `kind` arrived; false after `PATIENCE`.
    async fn until_received(&mut self, kind: &'static str, count: u32) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while self.line.count(&self.journey.user, kind) < count {
            if Instant::now() > deadline {
                self.journey.gave_up_at = Some(kind);
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }

    async fn survey(&mut self, rng: &mut Rng) {
        let user = self.id();
        if rng.below(10) < 3 {
            let follow = events::follow(&user);
            self.send(follow).await;
        }
        // The start, sometimes redelivered, sometimes typed twice.
        let start = events::text(&user, "chaos");
        if rng.below(10) == 0 {
            let second = events::text(&user, "chaos");
            let (line, webhook) = (self.line.clone(), self.webhook.clone());
            if let Some(token) = second["replyToken"].as_str() {
                line.register_token(token, &user);
            }
            tokio::spawn(async move { webhook.deliver(second).await });
        }
        if !self.send_maybe_twice(start, 10, rng).await {
            return;
        }
        self.journey.started = true;
        if !self.until_received("ask_food", 1).await {
            return;
        }

        // The food question: a tap, sometimes a double tap or a redelivery.
        let food = if rng.below(4) == 0 { "bad" } else { "good" };
        let tap = self.tap(&user, "ask_food", food);
        if rng.below(5) == 0 {
            let double = self.tap(&user, "ask_food", food);
            let webhook = self.webhook.clone();
            if let Some(token) = double["replyToken"].as_str() {
                self.line.register_token(token, &user);
            }
            tokio::spawn(async move { webhook.deliver(double).await });
        }
        if !self.send_maybe_twice(tap, 10, rng).await {
            return;
        }
        self.journey.food = Some(food);
        if !self.until_received("ask_name", 1).await {
            return;
        }
        // The answer's commit (tags on the user's record) came before this
        // message: the user is in every campaign audience snapshotted from now.
        self.journey.known_at = Some(Instant::now());
        // An old card tapped again with the other choice: must change nothing.
        if rng.below(10) == 0 {
            let other = if food == "good" { "bad" } else { "good" };
            self.send(self.tap(&user, "ask_food", other)).await;
        }

        // The typed answer, sometimes with a second text right behind it.
        let name_text = format!("name {}", &user[1..9]);
        let name = events::text(&user, &name_text);
        self.journey.answer_texts.push(name_text);
        let name_id = name["message"]["id"].as_str().unwrap_or_default().to_owned();
        let doubled_text = rng.below(100) < 15;
        if doubled_text {
            self.journey.answer_texts.push("yes".to_owned());
            let yes = events::text(&user, "yes");
            let webhook = self.webhook.clone();
            if let Some(token) = yes["replyToken"].as_str() {
                self.line.register_token(token, &user);
            }
            tokio::spawn(async move { webhook.deliver(yes).await });
        }
        if !self.send_maybe_twice(name, 10, rng).await {
            return;
        }
        self.journey.typed = true;
        if !self.until_received("got_name", 1).await {
            return;
        }
        if !doubled_text && rng.below(10) == 0 {
            self.journey.unsent_name = self.send(events::unsend(&user, &name_id)).await;
        }

        // The step timer brings the last question; most answer it.
        if !self.until_received("ask_drink", 1).await {
            return;
        }
        if rng.below(10) < 3 {
            self.journey.drink_skipped = true;
            // Left to its reminder and expiry.
            if !self.until_received("reminder", 1).await || !self.until_received("closed", 1).await {
                return;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(rng.below(10_000) as u64)).await;
            let drink = if rng.coin() { "coffee" } else { "tea" };
            let tap = self.tap(&user, "ask_drink", drink);
            if rng.below(10) == 0 {
                let double = self.tap(&user, "ask_drink", drink);
                if let Some(token) = double["replyToken"].as_str() {
                    self.line.register_token(token, &user);
                }
                let webhook = self.webhook.clone();
                tokio::spawn(async move { webhook.deliver(double).await });
            }
            if !self.send_maybe_twice(tap, 10, rng).await {
                return;
            }
            self.journey.drink = Some(drink);
            if !self.until_received("thanks", 1).await {
                return;
            }
        }
        if rng.below(10) == 0 {
            self.journey.unfollowed_at = Some(Instant::now());
            self.send(unfollow(&user)).await;
        }
    }

    async fn follow_only(&mut self, rng: &mut Rng) {
        let user = self.id();
        if self.send(events::follow(&user)).await {
            self.journey.known_at = Some(Instant::now());
        }
        if rng.below(10) < 3 {
            tokio::time::sleep(Duration::from_secs(1 + rng.below(60) as u64)).await;
            self.journey.unfollowed_at = Some(Instant::now());
            self.send(unfollow(&user)).await;
        }
    }

    /// A text no scenario answers, taken back at once or a little later.
    async fn text_and_take_back(&mut self, rng: &mut Rng) {
        let user = self.id();
        let text = events::text(&user, "see you at noon");
        let message_id = text["message"]["id"].as_str().unwrap_or_default().to_owned();
        let unsend = events::unsend(&user, &message_id);
        if rng.coin() {
            let webhook = self.webhook.clone();
            tokio::spawn(async move { webhook.deliver(unsend).await });
            self.send(text).await;
        } else {
            self.send(text).await;
            tokio::time::sleep(Duration::from_secs(rng.below(5) as u64)).await;
            self.send(unsend).await;
        }
    }
}

fn unfollow(user: &str) -> Value {
    let mut event = events::base(user);
    event.as_object_mut().map(|event| event.remove("replyToken"));
    event["type"] = "unfollow".into();
    event
}
