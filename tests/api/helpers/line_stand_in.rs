//! A local stand-in for the LINE Messaging API. It behaves like LINE where the
//! service depends on it: reply tokens are single use, a push retry key that was
//! accepted before answers 409, a wrong access token answers 401. It records
//! every call, with the status it answered and whether the message went out, and
//! can inject faults: lost acknowledgements, slow answers, 429, refusals.

use serde_json::Value;
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const ACCESS_TOKEN: &str = "test-channel-access-token";

#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    pub body: Value,
    pub retry_key: Option<String>,
    pub status: u16,
    pub at: std::time::Instant,
    /// Whether the message went out to the user (true for a 500 after accepting).
    pub accepted: bool,
}

/// A fault for the next call of a kind.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The message goes out, then LINE answers 500: a lost acknowledgement.
    AcceptThenFail,
    /// The message goes out, but the answer comes only after this long.
    AcceptSlowly(Duration),
    /// 429 with `Retry-After`; nothing goes out.
    RateLimit { retry_after_secs: u64 },
    /// This status; nothing goes out.
    Refuse(u16),
}

impl Call {
    /// The `to` of a push, or `None` for a reply.
    pub fn to(&self) -> Option<&str> {
        self.body.get("to").and_then(Value::as_str)
    }

    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"].as_array().cloned().unwrap_or_default()
    }

    pub fn texts(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter_map(|message| message.get("text").and_then(Value::as_str).map(str::to_owned))
            .collect()
    }

    pub fn is_accepted(&self) -> bool {
        self.accepted
    }
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    used_reply_tokens: HashSet<String>,
    accepted_retry_keys: HashSet<String>,
    push_faults: VecDeque<Fault>,
    reply_faults: VecDeque<Fault>,
    latency: Duration,
}

struct LineResponder {
    state: Arc<Mutex<State>>,
}

impl Respond for LineResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let path = request.url.path().to_owned();
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let retry_key = request
            .headers
            .get("x-line-retry-key")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let authorized = request
            .headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            == Some(&format!("Bearer {ACCESS_TOKEN}"));
        let mut state = self.state.lock().unwrap();
        let fault = match path.as_str() {
            "/v2/bot/message/reply" => state.reply_faults.pop_front(),
            "/v2/bot/message/push" => state.push_faults.pop_front(),
            _ => None,
        };
        let (mut status, answer, accepted) = match (&fault, authorized) {
            (_, false) => (401, serde_json::json!({"message": "Authentication failed"}), false),
            (Some(Fault::RateLimit { .. }), true) => (429, serde_json::json!({"message": "Too many requests"}), false),
            (Some(Fault::Refuse(status)), true) => (
                *status,
                serde_json::json!({"message": "Refused by the stand-in"}),
                false,
            ),
            (_, true) => match path.as_str() {
                "/v2/bot/message/reply" => {
                    let token = body["replyToken"].as_str().unwrap_or_default().to_owned();
                    if state.used_reply_tokens.insert(token) {
                        (200, serde_json::json!({"sentMessages": []}), true)
                    } else {
                        (400, serde_json::json!({"message": "Invalid reply token"}), false)
                    }
                }
                "/v2/bot/message/push" => match &retry_key {
                    Some(key) if !state.accepted_retry_keys.insert(key.clone()) => (
                        409,
                        serde_json::json!({"message": "The retry key is already accepted"}),
                        false,
                    ),
                    _ => (200, serde_json::json!({"sentMessages": []}), true),
                },
                _ => (404, serde_json::json!({"message": "Not found"}), false),
            },
        };
        if accepted && matches!(fault, Some(Fault::AcceptThenFail)) {
            status = 500;
        }
        state.calls.push(Call {
            path,
            body,
            retry_key,
            status,
            at: std::time::Instant::now(),
            accepted,
        });
        let mut template = ResponseTemplate::new(status).set_body_json(answer);
        match fault {
            Some(Fault::AcceptSlowly(delay)) => template = template.set_delay(delay),
            Some(Fault::RateLimit { retry_after_secs }) => {
                template = template.insert_header("retry-after", retry_after_secs.to_string().as_str())
            }
            _ if !state.latency.is_zero() => template = template.set_delay(state.latency),
            _ => {}
        }
        if status == 409 {
            template = template.insert_header("x-line-accepted-request-id", "accepted-request-id");
        }
        template
    }
}

pub struct LineStandIn {
    server: MockServer,
    state: Arc<Mutex<State>>,
}

impl LineStandIn {
    pub async fn start() -> Self {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State::default()));
        Mock::given(method("POST"))
            .respond_with(LineResponder { state: state.clone() })
            .mount(&server)
            .await;
        Self { server, state }
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// Faults for the next pushes, in order.
    pub fn fail_next_pushes(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().unwrap().push_faults.extend(faults);
    }

    /// Faults for the next replies, in order.
    pub fn fail_next_replies(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().unwrap().reply_faults.extend(faults);
    }

    /// Every answer takes this long (the message goes out at once).
    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().unwrap().latency = latency;
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Calls LINE accepted (200): what users actually received.
    pub fn accepted(&self) -> Vec<Call> {
        self.calls().into_iter().filter(Call::is_accepted).collect()
    }

    /// Accepted calls that carried `text` in one of their messages.
    pub fn accepted_with_text(&self, text: &str) -> usize {
        self.accepted()
            .iter()
            .filter(|call| call.texts().iter().any(|sent| sent == text))
            .count()
    }

    /// Accepted calls that carried a message of `kind` (`template`, `flex`, ...).
    pub fn accepted_of_kind(&self, kind: &str) -> usize {
        self.accepted()
            .iter()
            .filter(|call| call.messages().iter().any(|message| message["type"] == kind))
            .count()
    }

    /// Calls as `[{"method", "path", "body"}]`, the input of line_contract.py.
    pub fn calls_for_contract(&self) -> Value {
        Value::Array(
            self.calls()
                .into_iter()
                .map(|call| serde_json::json!({"method": "POST", "path": call.path, "body": call.body}))
                .collect(),
        )
    }
}
