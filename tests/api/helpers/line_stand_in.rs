//! A local stand-in for the LINE Messaging API. It behaves like LINE where the
//! service depends on it:
//!
//! - Reply tokens are issued, single use and expiring. [`issue_reply_token`]
//!   registers a token with the time its event happened (the event builders in
//!   `events.rs` do this for every event they make). A reply answers 400
//!   `{"message": "Invalid reply token"}` when its token was never issued, was
//!   already used (the first accepted reply consumes it), or is older than the
//!   token lifetime (60 s from issue unless [`LineStandIn::set_reply_token_lifetime`]).
//!   The service relies on that exact 400 to fall back to a push.
//! - A push whose `X-Line-Retry-Key` was accepted before answers 409 with an
//!   `x-line-accepted-request-id` header, and delivers nothing again.
//! - A multicast (up to 500 users, `customAggregationUnits` as LINE checks it)
//!   keeps retry keys like a push: a repeat of an accepted key answers 409.
//! - A wrong access token answers 401.
//! - `GET /v2/bot/profile/{userId}` answers LINE's `UserProfileResponse` for the
//!   users a test named ([`LineStandIn::set_profile`]), 404 for anyone else (a
//!   user who blocked the account, or never added it); its faults are queued
//!   ([`LineStandIn::fail_next_profiles`]: 500s, slow answers) or random
//!   ([`LineStandIn::fail_profiles_randomly`]). Profile calls are counted
//!   apart from the send calls.
//! - A message over one of LINE's limits, counted as LINE counts them, answers
//!   400 and delivers nothing (see `line_limits`).
//! - `GET /v2/bot/followers/ids?start=..&limit=..` pages through the friends a
//!   test set ([`LineStandIn::set_followers`]), `limit` (at most 1,000) at a
//!   time with an opaque `next` token, 403 for an account that may not list
//!   them ([`LineStandIn::refuse_followers`]), and queued faults (429 with
//!   `Retry-After`, 500s: [`LineStandIn::fail_next_follower_pages`]).
//! - `GET /v2/bot/message/quota` answers `{"type": "none"}` unless a test set a
//!   monthly limit ([`LineStandIn::set_quota`]); `/v2/bot/message/quota/consumption`
//!   answers what was used: the month's usage a test set, plus one per push and
//!   per multicast recipient accepted (replies are free, as on LINE).
//! - LINE's rich menu endpoints (menus, images on the data host, aliases, the
//!   default menu, per-user links, bulk calls and batches) answer as LINE does,
//!   with their own call record and faults: see `line_rich_menus`.
//!
//! It records every call, with the status it answered, whether the message went
//! out, and how long the answer was held back. It can inject faults: queued ones
//! for the next calls of a kind (lost acknowledgements, slow answers, 429 with
//! `Retry-After`, refusals) and random 500s for a share of all calls
//! ([`LineStandIn::fail_randomly`]); queued faults come first. A refused, rate
//! limited or randomly failed call delivers nothing: its reply token stays
//! usable and its retry key is not remembered. A lost acknowledgement
//! ([`Fault::AcceptThenFail`]) or a slow answer ([`Fault::AcceptSlowly`]) did
//! deliver: the token is consumed and the retry key remembered.

use serde_json::Value;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const ACCESS_TOKEN: &str = "test-channel-access-token";

/// How long a reply token stays usable after its event, unless changed.
pub const DEFAULT_REPLY_TOKEN_LIFETIME: Duration = Duration::from_secs(60);

const REPLY_PATH: &str = "/v2/bot/message/reply";
const PUSH_PATH: &str = "/v2/bot/message/push";
const MULTICAST_PATH: &str = "/v2/bot/message/multicast";

/// Every reply token issued in this test process, with its issue time (ms since
/// the epoch). Process-wide, like LINE's own: events are built apart from the
/// stand-in that later answers their replies. Tokens are random, so tests
/// running side by side do not meet each other's.
static ISSUED_REPLY_TOKENS: OnceLock<Mutex<HashMap<String, i64>>> = OnceLock::new();

fn issued_reply_tokens() -> std::sync::MutexGuard<'static, HashMap<String, i64>> {
    ISSUED_REPLY_TOKENS
        .get_or_init(Default::default)
        .lock()
        // One test panicking must not break the registry for all the others.
        .unwrap_or_else(PoisonError::into_inner)
}

/// Issues `token` as LINE does with a webhook event: usable once, for the token
/// lifetime from `issued_at_ms` (ms since the epoch, the event's `timestamp`).
/// Issuing a token again moves its issue time (used tokens stay used).
pub fn issue_reply_token(token: &str, issued_at_ms: i64) {
    issued_reply_tokens().insert(token.to_owned(), issued_at_ms);
}

fn reply_token_issued_at(token: &str) -> Option<i64> {
    issued_reply_tokens().get(token).copied()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A uniform number in `[0, 1)` from the 53 low bits of a v4 UUID (all random).
fn random_unit() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 & ((1 << 53) - 1);
    bits as f64 / (1u64 << 53) as f64
}

#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    pub body: Value,
    pub retry_key: Option<String>,
    pub status: u16,
    /// When the stand-in got the call.
    pub at: Instant,
    /// How long the answer was held back after `at` (latency or a slow fault).
    pub delay: Duration,
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
    /// 429 "You have reached your monthly limit." (no `Retry-After`); nothing goes out.
    MonthlyLimit,
    /// This status; nothing goes out.
    Refuse(u16),
    /// This status with this error body (a `message` and LINE's `details`);
    /// nothing goes out.
    RefuseWith(u16, Value),
    /// 500 after this long; nothing goes out (a caller killed meanwhile never
    /// learns the outcome).
    FailSlowly(Duration),
}

impl Call {
    /// The `to` of a push, or `None` for a reply.
    pub fn to(&self) -> Option<&str> {
        self.body.get("to").and_then(Value::as_str)
    }

    /// The users of a multicast (empty for other calls).
    pub fn recipients(&self) -> Vec<String> {
        self.body["to"]
            .as_array()
            .map(|users| users.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default()
    }

    pub fn is_multicast(&self) -> bool {
        self.path == MULTICAST_PATH
    }

    /// The `replyToken` of a reply, or `None` for a push.
    pub fn reply_token(&self) -> Option<&str> {
        self.body.get("replyToken").and_then(Value::as_str)
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

    /// When the stand-in let the answer go (`at + delay`).
    pub fn answered_at(&self) -> Instant {
        self.at + self.delay
    }
}

struct State {
    calls: Vec<Call>,
    used_reply_tokens: HashSet<String>,
    accepted_retry_keys: HashSet<String>,
    push_faults: VecDeque<Fault>,
    reply_faults: VecDeque<Fault>,
    multicast_faults: VecDeque<Fault>,
    /// Shares of multicasts answered 429 (nothing sent) and 500 after accepting.
    multicast_random: (f64, f64),
    /// Pushes' random faults: 429 and accepted-then-500 shares.
    push_random: (f64, f64),
    latency: Duration,
    reply_token_lifetime: Duration,
    /// Share of reply and push calls that fail with a random 500.
    random_failure_share: f64,
    /// Display names by user id; anyone else is 404.
    profiles: HashMap<String, String>,
    profile_faults: VecDeque<Fault>,
    /// Shares of profile calls answered 500 and answered after two seconds.
    profile_random: (f64, f64),
    /// The user id of every profile call, in arrival order.
    profile_calls: Vec<String>,
    /// The month's message limit (`None`: `{"type": "none"}`) and what was
    /// used before the test began.
    quota: (Option<u64>, u64),
    /// The account's friends, in LINE's order.
    followers: Vec<String>,
    /// The account may not list them (not verified nor premium): 403.
    followers_refused: bool,
    follower_faults: VecDeque<Fault>,
    /// The `start` of every followers call, in arrival order.
    follower_calls: Vec<Option<String>>,
    /// When each followers call arrived.
    follower_call_times: Vec<Instant>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            calls: Vec::new(),
            used_reply_tokens: HashSet::new(),
            accepted_retry_keys: HashSet::new(),
            push_faults: VecDeque::new(),
            reply_faults: VecDeque::new(),
            multicast_faults: VecDeque::new(),
            multicast_random: (0.0, 0.0),
            push_random: (0.0, 0.0),
            latency: Duration::ZERO,
            reply_token_lifetime: DEFAULT_REPLY_TOKEN_LIFETIME,
            random_failure_share: 0.0,
            profiles: HashMap::new(),
            profile_faults: VecDeque::new(),
            profile_random: (0.0, 0.0),
            profile_calls: Vec::new(),
            quota: (None, 0),
            followers: Vec::new(),
            followers_refused: false,
            follower_faults: VecDeque::new(),
            follower_calls: Vec::new(),
            follower_call_times: Vec::new(),
        }
    }
}

impl State {
    /// Whether `token` may be used now: issued, unused and not expired.
    fn reply_token_is_valid(&self, token: &str) -> bool {
        let Some(issued_at_ms) = reply_token_issued_at(token) else {
            return false;
        };
        let age_ms = now_ms() - issued_at_ms;
        !self.used_reply_tokens.contains(token) && age_ms <= self.reply_token_lifetime.as_millis() as i64
    }
}

/// With probability `rate_limited` a 429 with `Retry-After: 1`, with
/// `accepted_then_500` a delivery whose answer is a 500, else none.
fn random_fault((rate_limited, accepted_then_500): (f64, f64)) -> Option<Fault> {
    let draw = random_unit();
    if draw < rate_limited {
        Some(Fault::RateLimit { retry_after_secs: 1 })
    } else if draw < rate_limited + accepted_then_500 {
        Some(Fault::AcceptThenFail)
    } else {
        None
    }
}

fn invalid_reply_token() -> (u16, Value, bool) {
    (400, serde_json::json!({"message": "Invalid reply token"}), false)
}

struct LineResponder {
    state: Arc<Mutex<State>>,
}

impl Respond for LineResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let at = Instant::now();
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
        let queued = match path.as_str() {
            REPLY_PATH => state.reply_faults.pop_front(),
            PUSH_PATH => state
                .push_faults
                .pop_front()
                .or_else(|| random_fault(state.push_random)),
            MULTICAST_PATH => state
                .multicast_faults
                .pop_front()
                .or_else(|| random_fault(state.multicast_random)),
            _ => None,
        };
        // Queued faults first; otherwise, maybe, a random one.
        let randomly_failed = queued.is_none()
            && matches!(path.as_str(), REPLY_PATH | PUSH_PATH)
            && state.random_failure_share > 0.0
            && random_unit() < state.random_failure_share;
        let (mut status, answer, accepted) = match (&queued, authorized) {
            (_, false) => (401, serde_json::json!({"message": "Authentication failed"}), false),
            (_, true) if randomly_failed => (
                500,
                serde_json::json!({"message": "Internal server error (stand-in)"}),
                false,
            ),
            (Some(Fault::RateLimit { .. }), true) => (429, serde_json::json!({"message": "Too many requests"}), false),
            (Some(Fault::MonthlyLimit), true) => (
                429,
                serde_json::json!({"message": "You have reached your monthly limit."}),
                false,
            ),
            (_, true) if path == MULTICAST_PATH && multicast_problem(&body).is_some() => (
                400,
                serde_json::json!({"message": "The request body has 1 error(s)",
                    "details": [{"message": multicast_problem(&body)}]}),
                false,
            ),
            (_, true) if super::line_limits::problem(&body["messages"]).is_some() => (
                400,
                serde_json::json!({"message": "The request body has 1 error(s)",
                    "details": [{"message": super::line_limits::problem(&body["messages"])}]}),
                false,
            ),
            (Some(Fault::Refuse(status)), true) => (
                *status,
                serde_json::json!({"message": "Refused by the stand-in"}),
                false,
            ),
            (Some(Fault::RefuseWith(status, body)), true) => (*status, body.clone(), false),
            (Some(Fault::FailSlowly(_)), true) => (
                500,
                serde_json::json!({"message": "Internal server error (stand-in)"}),
                false,
            ),
            (_, true) => match path.as_str() {
                REPLY_PATH => match body["replyToken"].as_str() {
                    Some(token) if state.reply_token_is_valid(token) => {
                        state.used_reply_tokens.insert(token.to_owned());
                        (200, serde_json::json!({"sentMessages": []}), true)
                    }
                    _ => invalid_reply_token(),
                },
                PUSH_PATH | MULTICAST_PATH => match &retry_key {
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
        if accepted && matches!(queued, Some(Fault::AcceptThenFail)) {
            status = 500;
        }
        let mut template = ResponseTemplate::new(status).set_body_json(answer);
        let delay = match queued {
            Some(Fault::AcceptSlowly(delay) | Fault::FailSlowly(delay)) => delay,
            Some(Fault::RateLimit { retry_after_secs }) => {
                if status == 429 {
                    template = template.insert_header("retry-after", retry_after_secs.to_string().as_str());
                }
                Duration::ZERO
            }
            _ => state.latency,
        };
        if !delay.is_zero() {
            template = template.set_delay(delay);
        }
        if status == 409 {
            template = template.insert_header("x-line-accepted-request-id", "accepted-request-id");
        }
        state.calls.push(Call {
            path,
            body,
            retry_key,
            status,
            at,
            delay,
            accepted,
        });
        template
    }
}

/// `GET /v2/bot/followers/ids`.
struct FollowersResponder {
    state: Arc<Mutex<State>>,
}

impl Respond for FollowersResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let query: HashMap<String, String> = request.url.query_pairs().into_owned().collect();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.follower_calls.push(query.get("start").cloned());
        state.follower_call_times.push(Instant::now());
        match state.follower_faults.pop_front() {
            Some(Fault::RateLimit { retry_after_secs }) => {
                return ResponseTemplate::new(429)
                    .insert_header("retry-after", retry_after_secs.to_string().as_str())
                    .set_body_json(serde_json::json!({"message": "The API rate limit has been exceeded."}));
            }
            Some(Fault::Refuse(status)) => {
                return ResponseTemplate::new(status)
                    .set_body_json(serde_json::json!({"message": "Refused by the stand-in"}));
            }
            _ => {}
        }
        if state.followers_refused {
            return ResponseTemplate::new(403).set_body_json(serde_json::json!({
                "message": "Access to this API is not available for your account"
            }));
        }
        let limit: usize = query
            .get("limit")
            .and_then(|limit| limit.parse().ok())
            .unwrap_or(300)
            .clamp(1, 1000);
        // LINE's tokens are opaque: this one is "p" and the index of the next id.
        let from: usize = match query.get("start") {
            None => 0,
            Some(start) => match start.strip_prefix('p').and_then(|index| index.parse().ok()) {
                Some(index) => index,
                None => {
                    return ResponseTemplate::new(400).set_body_json(serde_json::json!({"message": "Invalid start"}));
                }
            },
        };
        let to = (from + limit).min(state.followers.len());
        let ids: Vec<String> = state
            .followers
            .get(from..to)
            .map(<[String]>::to_vec)
            .unwrap_or_default();
        let mut body = serde_json::json!({"userIds": ids});
        if to < state.followers.len() {
            body["next"] = serde_json::json!(format!("p{to}"));
        }
        ResponseTemplate::new(200).set_body_json(body)
    }
}

/// `GET /v2/bot/message/quota` and `.../quota/consumption`.
struct QuotaResponder {
    state: Arc<Mutex<State>>,
}

impl Respond for QuotaResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let authorized = request
            .headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            == Some(&format!("Bearer {ACCESS_TOKEN}"));
        if !authorized {
            return ResponseTemplate::new(401).set_body_json(serde_json::json!({"message": "Authentication failed"}));
        }
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (limit, used_before) = state.quota;
        if request.url.path().ends_with("/consumption") {
            let sent: usize = state
                .calls
                .iter()
                .filter(|call| call.accepted)
                .map(|call| match (call.is_multicast(), call.to()) {
                    (true, _) => call.recipients().len(),
                    (false, Some(_)) => 1,
                    (false, None) => 0,
                })
                .sum();
            return ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"totalUsage": used_before + sent as u64}));
        }
        ResponseTemplate::new(200).set_body_json(match limit {
            Some(limit) => serde_json::json!({"type": "limited", "value": limit}),
            None => serde_json::json!({"type": "none"}),
        })
    }
}

const PROFILE_PATH: &str = "/v2/bot/profile/";

/// `GET /v2/bot/profile/{userId}`.
struct ProfileResponder {
    state: Arc<Mutex<State>>,
}

impl Respond for ProfileResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let user = request.url.path().trim_start_matches(PROFILE_PATH).to_owned();
        let authorized = request
            .headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            == Some(&format!("Bearer {ACCESS_TOKEN}"));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.profile_calls.push(user.clone());
        let fault = state.profile_faults.pop_front().or_else(|| {
            let (failing, slow) = state.profile_random;
            let draw = random_unit();
            if draw < failing {
                Some(Fault::Refuse(500))
            } else if draw < failing + slow {
                Some(Fault::AcceptSlowly(Duration::from_secs(2)))
            } else {
                None
            }
        });
        let refused = match &fault {
            Some(Fault::Refuse(status)) => Some(*status),
            _ => None,
        };
        let answer = match (authorized, refused, state.profiles.get(&user)) {
            (false, _, _) => {
                ResponseTemplate::new(401).set_body_json(serde_json::json!({"message": "Authentication failed"}))
            }
            (true, Some(status), _) => {
                ResponseTemplate::new(status).set_body_json(serde_json::json!({"message": "Refused by the stand-in"}))
            }
            (true, None, Some(name)) => ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "displayName": name, "userId": user, "language": "ja"
            })),
            (true, None, None) => ResponseTemplate::new(404).set_body_json(serde_json::json!({"message": "Not found"})),
        };
        match fault {
            Some(Fault::AcceptSlowly(delay)) => answer.set_delay(delay),
            _ => answer,
        }
    }
}

/// What LINE refuses in a multicast beyond its messages: 1 to 500 users, at
/// most one aggregation unit named `[a-zA-Z0-9_]{1,30}`.
fn multicast_problem(body: &Value) -> Option<String> {
    let users = body["to"].as_array().map_or(0, Vec::len);
    if !(1..=500).contains(&users) {
        return Some(format!("to: {users} users; 1 to 500 are allowed"));
    }
    let units = body.get("customAggregationUnits").and_then(Value::as_array);
    let bad_unit = units.is_some_and(|units| {
        units.len() > 1
            || units.iter().any(|unit| {
                unit.as_str().is_none_or(|name| {
                    name.is_empty() || name.len() > 30 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                })
            })
    });
    bad_unit.then(|| "customAggregationUnits: at most one name of [a-zA-Z0-9_]{1,30}".to_owned())
}

pub struct LineStandIn {
    server: MockServer,
    state: Arc<Mutex<State>>,
    /// The rich menu endpoints' state (`line_rich_menus`).
    rich_menus: Arc<Mutex<super::line_rich_menus::RichMenuState>>,
}

impl LineStandIn {
    pub async fn start() -> Self {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State::default()));
        Mock::given(method("POST"))
            .respond_with(LineResponder { state: state.clone() })
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(wiremock::matchers::path_regex("^/v2/bot/profile/[^/]+$"))
            .respond_with(ProfileResponder { state: state.clone() })
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(wiremock::matchers::path("/v2/bot/followers/ids"))
            .respond_with(FollowersResponder { state: state.clone() })
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(wiremock::matchers::path_regex("^/v2/bot/message/quota(/consumption)?$"))
            .respond_with(QuotaResponder { state: state.clone() })
            .mount(&server)
            .await;
        // Rich menus, their images (LINE's data host: the same URI here),
        // aliases and links, ahead of the catch-all POST (`line_rich_menus`).
        let rich_menus = super::line_rich_menus::mount(&server).await;
        Self {
            server,
            state,
            rich_menus,
        }
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// The rich menu endpoints' state, for `line_rich_menus`' accessors.
    pub(super) fn rich_menu_state_cell(&self) -> &Mutex<super::line_rich_menus::RichMenuState> {
        &self.rich_menus
    }

    /// The account's friends, in the order LINE lists them.
    pub fn set_followers(&self, followers: Vec<String>) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).followers = followers;
    }

    /// The account may not list its friends: 403, as LINE answers accounts
    /// that are neither verified nor premium.
    pub fn refuse_followers(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .followers_refused = true;
    }

    /// Faults for the next followers pages, in order.
    pub fn fail_next_follower_pages(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .follower_faults
            .extend(faults);
    }

    /// The `start` of every followers call, in arrival order.
    pub fn follower_calls(&self) -> Vec<Option<String>> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .follower_calls
            .clone()
    }

    /// When each followers call arrived, in arrival order.
    pub fn follower_call_times(&self) -> Vec<Instant> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .follower_call_times
            .clone()
    }

    /// The month's message limit (`None`: none) and what was used before.
    pub fn set_quota(&self, limit: Option<u64>, used: u64) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).quota = (limit, used);
    }

    /// Faults for the next pushes, in order.
    pub fn fail_next_pushes(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().unwrap().push_faults.extend(faults);
    }

    /// Faults for the next replies, in order.
    pub fn fail_next_replies(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().unwrap().reply_faults.extend(faults);
    }

    /// From now on each reply or push, with probability `share` (0 to 1) and
    /// independently of the others, answers 500 `{"message": "Internal server
    /// error (stand-in)"}` without delivering anything: the reply token stays
    /// usable and the retry key is not remembered. `0.0` turns it off. Queued
    /// faults ([`Self::fail_next_pushes`], [`Self::fail_next_replies`]) come first.
    pub fn fail_randomly(&self, share: f64) {
        assert!(
            (0.0..=1.0).contains(&share),
            "the share of failing calls is between 0 and 1, not {share}"
        );
        self.state.lock().unwrap().random_failure_share = share;
    }

    /// Faults for the next multicasts, in order.
    pub fn fail_next_multicasts(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().unwrap().multicast_faults.extend(faults);
    }

    /// From now on each multicast, independently, answers 429 with
    /// `Retry-After: 1` (nothing sent) with probability `rate_limited`, or is
    /// accepted and then answered 500 with probability `accepted_then_500`.
    /// Queued faults come first.
    pub fn fail_multicasts_randomly(&self, rate_limited: f64, accepted_then_500: f64) {
        assert!(rate_limited >= 0.0 && accepted_then_500 >= 0.0 && rate_limited + accepted_then_500 <= 1.0);
        self.state.lock().unwrap().multicast_random = (rate_limited, accepted_then_500);
    }

    /// As [`Self::fail_multicasts_randomly`], for pushes.
    pub fn fail_pushes_randomly(&self, rate_limited: f64, accepted_then_500: f64) {
        assert!(rate_limited >= 0.0 && accepted_then_500 >= 0.0 && rate_limited + accepted_then_500 <= 1.0);
        self.state.lock().unwrap().push_random = (rate_limited, accepted_then_500);
    }

    /// How many accepted multicasts reached each user.
    pub fn multicast_deliveries(&self) -> HashMap<String, usize> {
        let mut received: HashMap<String, usize> = HashMap::new();
        for call in self.accepted().iter().filter(|call| call.is_multicast()) {
            for user in call.recipients() {
                *received.entry(user).or_default() += 1;
            }
        }
        received
    }

    /// Every answer takes this long (the message goes out at once).
    pub fn set_latency(&self, latency: Duration) {
        self.state.lock().unwrap().latency = latency;
    }

    /// How long a reply token stays usable after it was issued (default 60 s).
    pub fn set_reply_token_lifetime(&self, lifetime: Duration) {
        self.state.lock().unwrap().reply_token_lifetime = lifetime;
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The most calls that were being answered at the same time.
    ///
    /// An approximation from the recorded intervals `[at, at + delay)`: wiremock
    /// holds the answer back only after the responder returned, so the stand-in
    /// cannot count calls as they finish. The network and the time before the
    /// responder runs are not counted, and a call without delay counts as an
    /// instant (it overlaps only calls held back across its arrival). So this is
    /// a lower bound of the caller's real concurrency, close to it once there is
    /// a latency ([`Self::set_latency`]) that dwarfs the rest.
    pub fn in_flight_max(&self) -> usize {
        let mut intervals: Vec<(Instant, Instant)> =
            self.calls().iter().map(|call| (call.at, call.answered_at())).collect();
        intervals.sort();
        let mut ends: BinaryHeap<Reverse<Instant>> = BinaryHeap::new();
        let mut most = 0;
        for (start, end) in intervals {
            while ends.peek().is_some_and(|Reverse(earliest)| *earliest <= start) {
                ends.pop();
            }
            ends.push(Reverse(end));
            most = most.max(ends.len());
        }
        most
    }

    /// Every call that carried a retry key (pushes), by key, in arrival order.
    pub fn calls_by_retry_key(&self) -> HashMap<String, Vec<Call>> {
        let mut grouped: HashMap<String, Vec<Call>> = HashMap::new();
        for call in self.calls() {
            if let Some(key) = call.retry_key.clone() {
                grouped.entry(key).or_default().push(call);
            }
        }
        grouped
    }

    /// Every call that carried a reply token (replies), by token, in arrival order.
    pub fn calls_by_reply_token(&self) -> HashMap<String, Vec<Call>> {
        let mut grouped: HashMap<String, Vec<Call>> = HashMap::new();
        for call in self.calls() {
            if let Some(token) = call.reply_token().map(str::to_owned) {
                grouped.entry(token).or_default().push(call);
            }
        }
        grouped
    }

    /// Calls LINE accepted (200): what users actually received.
    pub fn accepted(&self) -> Vec<Call> {
        self.calls().into_iter().filter(Call::is_accepted).collect()
    }

    /// Accepted calls with the user each reached: a push names its user, a
    /// reply is matched to its user through the reply tokens of `events`
    /// (calls matching neither are left out).
    pub fn accepted_by_user(&self, events: &[Value]) -> Vec<(String, Call)> {
        let users: HashMap<&str, &str> = events
            .iter()
            .filter_map(|event| Some((event["replyToken"].as_str()?, event["source"]["userId"].as_str()?)))
            .collect();
        self.accepted()
            .into_iter()
            .filter_map(|call| {
                let user = call
                    .to()
                    .or_else(|| call.reply_token().and_then(|token| users.get(token).copied()))?
                    .to_owned();
                Some((user, call))
            })
            .collect()
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

    /// `user`'s profile answers 200 with `name` as its display name.
    pub fn set_profile(&self, user: &str, name: &str) {
        self.state
            .lock()
            .unwrap()
            .profiles
            .insert(user.to_owned(), name.to_owned());
    }

    /// Faults for the next profile calls, in order (`Refuse(status)`,
    /// `AcceptSlowly(delay)`).
    pub fn fail_next_profiles(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.lock().unwrap().profile_faults.extend(faults);
    }

    /// From now on each profile call, independently, answers 500 with
    /// probability `failing` or takes two seconds with probability `slow`.
    pub fn fail_profiles_randomly(&self, failing: f64, slow: f64) {
        assert!(failing >= 0.0 && slow >= 0.0 && failing + slow <= 1.0);
        self.state.lock().unwrap().profile_random = (failing, slow);
    }

    /// The user id of every profile call so far.
    pub fn profile_calls(&self) -> Vec<String> {
        self.state.lock().unwrap().profile_calls.clone()
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
