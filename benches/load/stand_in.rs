//! A minimal, fast LINE stand-in for the benchmark (the tests' wiremock one keeps
//! every request and is built for checks, not for thousands of calls a second).
//! It behaves like LINE where it matters: single-use reply tokens, 409 for a push
//! retry key it accepted before (pushes and multicasts). It counts what each
//! user received, and notes when each user's first follow-up arrived.

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub const INTRO: &str = "A quick survey about today's lunch.";
pub const FOLLOW_UP: &str = "Coffee or tea?";
pub const NEWS: &str = "Today's news: the cafeteria has a new menu.";

/// What one user received.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub starts: u32,
    pub follow_ups: u32,
    pub news: u32,
    pub cards: u32,
    /// Steps of a timer (`--timers`).
    pub steps: u32,
}

#[derive(Default)]
struct State {
    used_tokens: HashSet<String>,
    accepted_keys: HashSet<String>,
    /// Reply token -> user, registered by the driver before it sends an event.
    token_users: HashMap<String, String>,
    received: HashMap<String, Received>,
    /// When the stand-in first accepted a follow-up for each user.
    first_follow_up: HashMap<String, Instant>,
    accepted_calls: u64,
    /// Timer steps accepted, users who got one more than once, the last one's arrival.
    steps: u64,
    repeated_steps: u64,
    last_step: Option<Instant>,
    multicast: Multicasts,
    /// Multicasts each user received (`--campaign`).
    multicast_received: HashMap<String, u32>,
    /// Profile calls (`GET /v2/bot/profile/{userId}`), answered 404.
    profile_calls: u64,
    /// Each user's follow-up text when it was personalised (not exactly
    /// `FOLLOW_UP`): `--decisions` checks the name in it.
    personal_follow_ups: HashMap<String, String>,
}

/// What the multicasts accepted so far add up to (`--campaign`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Multicasts {
    /// Calls accepted (a repeated retry key gets 409 and is not counted).
    pub calls: u64,
    /// Calls answered 409: their retry key was accepted before.
    pub repeated_keys: u64,
    /// Users over all accepted calls.
    pub recipients: u64,
    /// Users named twice within one call.
    pub duplicates_in_call: u64,
    /// Calls naming no user or more than 500 (LINE answers 400; accepted here, counted).
    pub oversized: u64,
    /// Accepted calls whose messages did not start with the lunch survey's intro.
    pub unexpected_messages: u64,
    pub largest: usize,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

#[derive(Clone, Default)]
pub struct StandIn {
    state: Arc<Mutex<State>>,
}

impl StandIn {
    pub fn register_token(&self, token: &str, user: &str) {
        self.state
            .lock()
            .unwrap()
            .token_users
            .insert(token.to_owned(), user.to_owned());
    }

    pub fn steps(&self) -> u64 {
        self.state.lock().unwrap().steps
    }

    pub fn repeated_steps(&self) -> u64 {
        self.state.lock().unwrap().repeated_steps
    }

    pub fn last_step(&self) -> Option<Instant> {
        self.state.lock().unwrap().last_step
    }

    pub fn multicasts(&self) -> Multicasts {
        self.state.lock().unwrap().multicast
    }

    /// How many multicasts named each user, for every user named at least once.
    pub fn multicast_received(&self) -> HashMap<String, u32> {
        self.state.lock().unwrap().multicast_received.clone()
    }

    pub fn profile_calls(&self) -> u64 {
        self.state.lock().unwrap().profile_calls
    }

    /// The personalised follow-up text `user` received, if any.
    pub fn personal_follow_up(&self, user: &str) -> Option<String> {
        self.state.lock().unwrap().personal_follow_ups.get(user).cloned()
    }

    pub fn accepted_calls(&self) -> u64 {
        self.state.lock().unwrap().accepted_calls
    }

    pub fn received(&self, user: &str) -> Received {
        self.state
            .lock()
            .unwrap()
            .received
            .get(user)
            .copied()
            .unwrap_or_default()
    }

    /// When the first follow-up ("Coffee or tea?") for `user` arrived.
    pub fn first_follow_up(&self, user: &str) -> Option<Instant> {
        self.state.lock().unwrap().first_follow_up.get(user).copied()
    }

    /// Serves on a free local port in a thread of its own; returns its base URL.
    pub fn serve(&self) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = web::Data::new(self.clone());
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                HttpServer::new(move || {
                    App::new()
                        .app_data(state.clone())
                        .route("/v2/bot/message/quota", web::get().to(quota))
                        .route("/v2/bot/message/quota/consumption", web::get().to(quota))
                        .route("/v2/bot/message/{kind}", web::post().to(handle))
                        .route("/v2/bot/profile/{user}", web::get().to(profile))
                })
                .workers(1)
                .listen(listener)
                .unwrap()
                .run()
                .await
                .unwrap();
            });
        });
        url
    }
}

/// Every profile is unknown (404): a benchmark's names come from the cache.
async fn profile(stand_in: web::Data<StandIn>) -> HttpResponse {
    stand_in.state.lock().unwrap().profile_calls += 1;
    HttpResponse::NotFound().json(serde_json::json!({"message": "Not found"}))
}

async fn handle(request: HttpRequest, body: web::Json<Value>, stand_in: web::Data<StandIn>) -> HttpResponse {
    let arrived = Instant::now();
    let mut guard = stand_in.state.lock().unwrap();
    let state = &mut *guard;
    let user = match request.match_info().get("kind") {
        Some("reply") => {
            let token = body["replyToken"].as_str().unwrap_or_default().to_owned();
            if !state.used_tokens.insert(token.clone()) {
                return HttpResponse::BadRequest().json(serde_json::json!({"message": "Invalid reply token"}));
            }
            state.token_users.get(&token).cloned().unwrap_or_default()
        }
        Some("push") => {
            let key = request
                .headers()
                .get("x-line-retry-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !key.is_empty() && !state.accepted_keys.insert(key.to_owned()) {
                return HttpResponse::Conflict().json(serde_json::json!({"message": "already accepted"}));
            }
            body["to"].as_str().unwrap_or_default().to_owned()
        }
        Some("multicast") => {
            let key = request
                .headers()
                .get("x-line-retry-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !key.is_empty() && !state.accepted_keys.insert(key.to_owned()) {
                state.multicast.repeated_keys += 1;
                return HttpResponse::Conflict().json(serde_json::json!({"message": "already accepted"}));
            }
            state.accepted_calls += 1;
            multicast(state, &body, arrived);
            return HttpResponse::Ok().json(serde_json::json!({}));
        }
        _ => return HttpResponse::NotFound().finish(),
    };
    state.accepted_calls += 1;
    let received = state.received.entry(user.clone()).or_default();
    let follow_ups_before = received.follow_ups;
    for message in body["messages"].as_array().into_iter().flatten() {
        match (message["type"].as_str(), message["text"].as_str()) {
            // Personalised texts end the same way (`--decisions`).
            (Some("text"), Some(text)) if text.ends_with(INTRO) => received.starts += 1,
            (Some("text"), Some(NEWS)) => received.news += 1,
            (Some("template"), _)
                if message["template"]["text"]
                    .as_str()
                    .is_some_and(|text| text.ends_with(FOLLOW_UP)) =>
            {
                received.follow_ups += 1;
                if let Some(text) = message["template"]["text"].as_str().filter(|text| *text != FOLLOW_UP) {
                    state.personal_follow_ups.insert(user.clone(), text.to_owned());
                }
            }
            (Some("flex"), _) => received.cards += 1,
            (Some("text"), Some(crate::timers::STEP_TEXT)) => {
                received.steps += 1;
                state.steps += 1;
                state.last_step = Some(arrived);
                if received.steps > 1 {
                    state.repeated_steps += 1;
                }
            }
            _ => {}
        }
    }
    if received.follow_ups > follow_ups_before {
        state.first_follow_up.entry(user).or_insert(arrived);
    }
    HttpResponse::Ok().json(serde_json::json!({"sentMessages": []}))
}

/// Counts an accepted multicast: one receipt per user it names.
fn multicast(state: &mut State, body: &Value, arrived: Instant) {
    let users: Vec<&str> = body["to"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let counts = &mut state.multicast;
    counts.calls += 1;
    counts.recipients += users.len() as u64;
    counts.largest = counts.largest.max(users.len());
    if users.is_empty() || users.len() > 500 {
        counts.oversized += 1;
    }
    if body["messages"][0]["text"].as_str() != Some(INTRO) {
        counts.unexpected_messages += 1;
    }
    counts.first.get_or_insert(arrived);
    counts.last = Some(arrived);
    let mut named = HashSet::with_capacity(users.len());
    for user in users {
        if !named.insert(user) {
            counts.duplicates_in_call += 1;
        }
        *state.multicast_received.entry(user.to_owned()).or_default() += 1;
    }
}

/// The month's quota: no limit (`GET /v2/bot/message/quota`), nothing used
/// (`.../consumption`): the benchmark measures sends, not the quota check.
async fn quota(request: HttpRequest) -> HttpResponse {
    if request.path().ends_with("/consumption") {
        HttpResponse::Ok().json(serde_json::json!({"totalUsage": 0}))
    } else {
        HttpResponse::Ok().json(serde_json::json!({"type": "none"}))
    }
}
