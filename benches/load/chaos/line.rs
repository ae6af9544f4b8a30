//! The chaos run's LINE stand-in: LINE's semantics where the promise depends on
//! them (single-use reply tokens, 409 for a retry key it accepted before), faults
//! while the chaos lasts, and a count of every message each user received, by its
//! text (every text of the chaos scenarios is unique).
//!
//! Faults, drawn per message call while `faulty` is on: 10% answer 500 (half of
//! them after accepting the call, as a LINE that sent the message and lost its
//! answer: a retry must then find its token used or its key taken), 2% answer
//! 429 with `Retry-After: 1` (not accepted), 5% are accepted 3 s late.

use crate::soak::Rng;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use line_survey::scenario::postback::Postback;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one user received, by message kind (`kind_of`), and when the first of
/// each kind arrived.
#[derive(Debug, Default, Clone)]
pub struct Inbox {
    pub counts: BTreeMap<&'static str, u32>,
    pub first: HashMap<&'static str, Instant>,
    /// Multicasts received, by campaign (its `customAggregationUnits` name).
    pub campaigns: BTreeMap<String, u32>,
}

impl Inbox {
    pub fn count(&self, kind: &str) -> u32 {
        self.counts.get(kind).copied().unwrap_or(0)
    }
}

/// Faults injected so far.
#[derive(Debug, Default, Clone, Copy)]
pub struct Injected {
    pub calls: u64,
    pub refused_500: u64,
    pub accepted_then_500: u64,
    pub rate_limited: u64,
    pub slow: u64,
    /// Answered 400 "Invalid reply token": a token used before.
    pub used_tokens: u64,
    /// Answered 409: a retry key accepted before.
    pub repeated_keys: u64,
}

#[derive(Default)]
struct State {
    used_tokens: HashSet<String>,
    accepted_keys: HashSet<String>,
    token_users: HashMap<String, String>,
    inboxes: HashMap<String, Inbox>,
    /// The postback data of the last answer button each user received, by
    /// (user, question, choice): taps send what the buttons carry (their run).
    buttons: HashMap<(String, String, String), String>,
    /// Texts no kind matched (a defect of the run or of the service).
    unknown_texts: BTreeMap<String, u32>,
    injected: Injected,
    last_call: Option<Instant>,
}

#[derive(Clone)]
pub struct ChaosLine {
    state: Arc<Mutex<State>>,
    faulty: Arc<AtomicBool>,
    rng: Arc<Mutex<Rng>>,
}

/// Every text the chaos scenarios send, by the kind the run counts it as.
pub const KINDS: &[(&str, &str)] = &[
    ("intro", "Chaos survey: four short steps."),
    ("ask_food", "How was the food?"),
    ("ask_name", "What should we call you?"),
    ("got_name", "Thank you, noted."),
    ("ask_drink", "Coffee or tea?"),
    ("reminder", "Still there? One tap left."),
    ("thanks", "Thank you for answering!"),
    ("closed", "This question has closed."),
    ("news", "Campaign news for every follower."),
];

fn kind_of(text: &str) -> Option<&'static str> {
    KINDS.iter().find(|(_, known)| *known == text).map(|(kind, _)| *kind)
}

/// Every postback action's data inside a message, at any depth.
fn postback_data<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(fields) => {
            if let (Some("postback"), Some(data)) = (
                fields.get("type").and_then(Value::as_str),
                fields.get("data").and_then(Value::as_str),
            ) {
                found.push(data);
            }
            fields.values().for_each(|inner| postback_data(inner, found));
        }
        Value::Array(items) => items.iter().for_each(|inner| postback_data(inner, found)),
        _ => {}
    }
}

/// The text a message shows: a text's, a template's, or a Flex message's alt text.
fn text_of(message: &Value) -> Option<&str> {
    message["text"]
        .as_str()
        .or_else(|| message["template"]["text"].as_str())
        .or_else(|| message["altText"].as_str())
}

impl ChaosLine {
    pub fn new() -> ChaosLine {
        ChaosLine {
            state: Arc::default(),
            faulty: Arc::new(AtomicBool::new(false)),
            rng: Arc::new(Mutex::new(Rng::new())),
        }
    }

    pub fn set_faulty(&self, on: bool) {
        self.faulty.store(on, Ordering::SeqCst);
    }

    pub fn register_token(&self, token: &str, user: &str) {
        let mut state = self.state.lock().unwrap();
        state.token_users.insert(token.to_owned(), user.to_owned());
    }

    pub fn inbox(&self, user: &str) -> Inbox {
        self.state
            .lock()
            .unwrap()
            .inboxes
            .get(user)
            .cloned()
            .unwrap_or_default()
    }

    /// How many messages of `kind` `user` has received so far.
    pub fn count(&self, user: &str, kind: &str) -> u32 {
        let state = self.state.lock().unwrap();
        state.inboxes.get(user).map_or(0, |inbox| inbox.count(kind))
    }

    /// The data of the button for `choice` of `question` that `user` received
    /// last, as a tap on it sends.
    pub fn button(&self, user: &str, question: &str, choice: &str) -> Option<String> {
        let state = self.state.lock().unwrap();
        let key = (user.to_owned(), question.to_owned(), choice.to_owned());
        state.buttons.get(&key).cloned()
    }

    pub fn injected(&self) -> Injected {
        self.state.lock().unwrap().injected
    }

    pub fn unknown_texts(&self) -> BTreeMap<String, u32> {
        self.state.lock().unwrap().unknown_texts.clone()
    }

    /// When LINE last accepted or refused a message call.
    pub fn last_call(&self) -> Option<Instant> {
        self.state.lock().unwrap().last_call
    }

    /// Serves on a free local port in a thread of its own; returns its base URL.
    pub fn serve(&self) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let line = web::Data::new(self.clone());
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                HttpServer::new(move || {
                    App::new()
                        .app_data(line.clone())
                        .app_data(web::JsonConfig::default().limit(4 * 1024 * 1024))
                        .route("/v2/bot/message/quota", web::get().to(quota))
                        .route("/v2/bot/message/quota/consumption", web::get().to(quota))
                        .route("/v2/bot/message/{kind}", web::post().to(message))
                        .route("/v2/bot/profile/{user}", web::get().to(profile))
                })
                .workers(2)
                .listen(listener)
                .unwrap()
                .run()
                .await
                .unwrap();
            });
        });
        url
    }

    /// The fault for one call, drawn while the chaos lasts.
    fn draw(&self) -> Fault {
        if !self.faulty.load(Ordering::SeqCst) {
            return Fault::None;
        }
        match self.rng.lock().unwrap().below(100) {
            0..5 => Fault::Refuse500,
            5..10 => Fault::AcceptThen500,
            10..12 => Fault::RateLimit,
            12..17 => Fault::Slow,
            _ => Fault::None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Refuse500,
    AcceptThen500,
    RateLimit,
    Slow,
}

async fn profile() -> HttpResponse {
    HttpResponse::NotFound().json(serde_json::json!({"message": "Not found"}))
}

async fn message(request: HttpRequest, body: web::Json<Value>, line: web::Data<ChaosLine>) -> HttpResponse {
    let fault = line.draw();
    if fault == Fault::Slow {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let kind = request.match_info().get("kind").unwrap_or_default().to_owned();
    let retry_key = request
        .headers()
        .get("x-line-retry-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut guard = line.state.lock().unwrap();
    let state = &mut *guard;
    state.last_call = Some(Instant::now());
    state.injected.calls += 1;
    match fault {
        Fault::Refuse500 => {
            state.injected.refused_500 += 1;
            return HttpResponse::InternalServerError().json(serde_json::json!({"message": "stand-in fault"}));
        }
        Fault::RateLimit => {
            state.injected.rate_limited += 1;
            return HttpResponse::TooManyRequests()
                .insert_header(("Retry-After", "1"))
                .json(serde_json::json!({"message": "The API rate limit has been exceeded. Try again later."}));
        }
        Fault::Slow => state.injected.slow += 1,
        Fault::None | Fault::AcceptThen500 => {}
    }
    let recipients: Vec<String> = match kind.as_str() {
        "reply" => {
            let token = body["replyToken"].as_str().unwrap_or_default().to_owned();
            if !state.used_tokens.insert(token.clone()) {
                state.injected.used_tokens += 1;
                return HttpResponse::BadRequest().json(serde_json::json!({"message": "Invalid reply token"}));
            }
            state.token_users.get(&token).cloned().into_iter().collect()
        }
        "push" | "multicast" => {
            if !retry_key.is_empty() && !state.accepted_keys.insert(retry_key) {
                state.injected.repeated_keys += 1;
                return HttpResponse::Conflict()
                    .json(serde_json::json!({"message": "The retry key is already accepted"}));
            }
            match &body["to"] {
                Value::String(user) => vec![user.clone()],
                Value::Array(users) => users.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                _ => Vec::new(),
            }
        }
        _ => return HttpResponse::NotFound().finish(),
    };
    let unit = body["customAggregationUnits"][0].as_str().map(str::to_owned);
    let arrived = Instant::now();
    for user in recipients {
        if let (Some(unit), "multicast") = (&unit, kind.as_str()) {
            let inbox = state.inboxes.entry(user.clone()).or_default();
            *inbox.campaigns.entry(unit.clone()).or_default() += 1;
        }
        for message in body["messages"].as_array().into_iter().flatten() {
            let mut data = Vec::new();
            postback_data(message, &mut data);
            for data in data {
                if let Ok(Postback::Answer { node, choice, .. }) = Postback::decode(data) {
                    let key = (user.clone(), node.to_string(), choice);
                    state.buttons.insert(key, data.to_owned());
                }
            }
            let inbox = state.inboxes.entry(user.clone()).or_default();
            let text = text_of(message).unwrap_or_default();
            match kind_of(text) {
                Some(kind) => {
                    *inbox.counts.entry(kind).or_default() += 1;
                    inbox.first.entry(kind).or_insert(arrived);
                }
                None => *state.unknown_texts.entry(text.to_owned()).or_default() += 1,
            }
        }
    }
    if fault == Fault::AcceptThen500 {
        state.injected.accepted_then_500 += 1;
        return HttpResponse::InternalServerError()
            .json(serde_json::json!({"message": "stand-in fault after accepting"}));
    }
    HttpResponse::Ok().json(serde_json::json!({"sentMessages": []}))
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
