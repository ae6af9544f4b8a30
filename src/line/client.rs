//! HTTP client for LINE's send endpoints (reply, push, multicast) and the
//! user profile.
//!
//! In a dry run (`LINE_DRY_RUN`, or a local run against the emulator without an
//! access token) nothing is sent: what the bot would say is printed to standard
//! output (scenario text, buttons, card titles; never a user's text) and the
//! send counts as `logged`, never `sent`.

use super::messages::{Message, MulticastRequest, PushRequest, ReplyRequest, describe};
use crate::metrics::series::{self, LineStatus};
use std::time::Duration;
use uuid::Uuid;

/// How a send ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// LINE accepted the request (200).
    Sent,
    /// LINE had already accepted a push with this retry key (409): sent earlier.
    AlreadyAccepted,
    /// Dry run: the messages were printed, not sent.
    Logged,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    /// A reply token LINE does not accept: used already (perhaps by an earlier
    /// attempt whose answer was lost), expired, or never issued.
    #[error("LINE refused the reply token (400 Invalid reply token)")]
    InvalidReplyToken,
    /// LINE answered 4xx (other than 409 and 429): nothing was sent, and resending
    /// the same request will not help.
    #[error("LINE rejected the request with status {status}: {reason}")]
    Rejected { status: u16, reason: String },
    /// 429: nothing was sent; try again later.
    #[error("LINE is rate limiting requests (429)")]
    RateLimited { retry_after: Option<Duration> },
    /// 5xx: LINE may or may not have acted on the request.
    #[error("LINE answered with server error {status}")]
    ServerError { status: u16 },
    /// The connection failed before the request was sent: nothing was sent.
    #[error("could not reach LINE: {0}")]
    Unreachable(String),
    /// The request may have left and its answer never came (timeout, reset): the
    /// outcome is unknown.
    #[error("no answer from LINE: {0}")]
    NoAnswer(String),
}

impl SendError {
    /// True when LINE certainly did not act on the request, so sending it again by
    /// another route (push instead of reply) cannot double it.
    pub(crate) fn certainly_not_sent(&self) -> bool {
        matches!(
            self,
            SendError::Rejected { .. }
                | SendError::InvalidReplyToken
                | SendError::RateLimited { .. }
                | SendError::Unreachable(_)
        )
    }
}

/// One page of the account's friends.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FollowersPage {
    pub(crate) user_ids: Vec<String>,
    /// The token of the next page; absent on the last.
    #[serde(default)]
    pub(crate) next: Option<String>,
}

/// The account's monthly message quota as LINE reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quota {
    /// Messages the account may send this month; `None`: no limit.
    pub(crate) limit: Option<u64>,
    /// Messages sent this month.
    pub(crate) used: u64,
}

impl Quota {
    /// What is left this month; `None`: no limit.
    pub(crate) fn remaining(&self) -> Option<u64> {
        self.limit.map(|limit| limit.saturating_sub(self.used))
    }
}

#[derive(Clone)]
pub(crate) struct LineClient {
    transport: Transport,
}

#[derive(Clone)]
enum Transport {
    Http {
        http: reqwest::Client,
        base_url: String,
        access_token: String,
    },
    DryRun,
}

impl LineClient {
    /// A client that sends to `base_url` with `access_token`, or, with `None`,
    /// a dry run that prints instead.
    pub(crate) fn new(base_url: &str, access_token: Option<&str>, timeout: Duration) -> anyhow::Result<Self> {
        let transport = match access_token {
            None => Transport::DryRun,
            Some(token) => Transport::Http {
                http: http_client(timeout)?,
                base_url: base_url.trim_end_matches('/').to_owned(),
                access_token: token.to_owned(),
            },
        };
        Ok(Self { transport })
    }

    pub(crate) fn is_dry_run(&self) -> bool {
        matches!(self.transport, Transport::DryRun)
    }

    /// Replies with a single-use reply token. A token can be used once, so a reply
    /// repeated after a lost answer cannot double: LINE refuses the repeat with
    /// [`SendError::InvalidReplyToken`].
    pub(crate) async fn reply(&self, reply_token: &str, messages: &[Message]) -> Result<Delivered, SendError> {
        let body = ReplyRequest { reply_token, messages };
        self.post("/v2/bot/message/reply", &body, None, None, messages).await
    }

    /// Pushes to one user. LINE remembers `retry_key` for 24 hours and answers 409
    /// to a repeat, so the same action may be pushed again safely.
    pub(crate) async fn push(&self, to: &str, messages: &[Message], retry_key: Uuid) -> Result<Delivered, SendError> {
        let body = PushRequest { to, messages };
        self.post("/v2/bot/message/push", &body, Some(retry_key), Some(to), messages)
            .await
    }

    /// Sends the same messages to up to 500 users in one call. Like a push, it
    /// carries a retry key, so a repeat after a lost answer is refused with 409.
    pub(crate) async fn multicast(
        &self,
        to: &[String],
        messages: &[Message],
        aggregation_unit: Option<&str>,
        retry_key: Uuid,
    ) -> Result<Delivered, SendError> {
        let units: Vec<String> = aggregation_unit.map(str::to_owned).into_iter().collect();
        let body = MulticastRequest {
            to,
            messages,
            custom_aggregation_units: &units,
        };
        let label = format!("{} users", to.len());
        self.post(
            "/v2/bot/message/multicast",
            &body,
            Some(retry_key),
            Some(&label),
            messages,
        )
        .await
    }

    /// The user's display name from `GET /v2/bot/profile/{userId}`: `Ok(None)`
    /// when LINE has no profile for us (404: the user blocked the account or
    /// never added it), `Err` when it could not be asked (the caller falls back).
    /// A dry run knows no names. The name is personal data: never logged.
    pub(crate) async fn display_name(&self, user: &str) -> Result<Option<String>, SendError> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Profile {
            #[serde(default)]
            display_name: Option<String>,
        }
        let (http, base_url, access_token) = match &self.transport {
            Transport::DryRun => return Ok(None),
            Transport::Http {
                http,
                base_url,
                access_token,
            } => (http, base_url, access_token),
        };
        // A user id is `U` and hex (checked at ingest); encoded all the same.
        let path = format!(
            "/v2/bot/profile/{}",
            percent_encoding::utf8_percent_encode(user, percent_encoding::NON_ALPHANUMERIC)
        );
        let started = std::time::Instant::now();
        let sent = http
            .get(format!("{base_url}{path}"))
            .bearer_auth(access_token)
            .send()
            .await;
        let response = answered("/v2/bot/profile", sent, started)?;
        match response.status().as_u16() {
            200 => match response.json::<Profile>().await {
                Ok(profile) => Ok(profile.display_name),
                Err(error) => Err(SendError::NoAnswer(format!("the profile could not be read: {error}"))),
            },
            404 => Ok(None),
            429 => Err(SendError::RateLimited {
                retry_after: retry_after(&response),
            }),
            status @ 400..=499 => Err(SendError::Rejected {
                status,
                reason: line_error_message(response).await,
            }),
            status => Err(SendError::ServerError { status }),
        }
    }

    /// The account's message quota this month (`GET /v2/bot/message/quota`
    /// and `/v2/bot/message/quota/consumption`); `Ok(None)` in a dry run.
    pub(crate) async fn message_quota(&self) -> Result<Option<Quota>, SendError> {
        #[derive(serde::Deserialize)]
        struct Target {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            value: Option<u64>,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Consumption {
            total_usage: u64,
        }
        let Some(target) = self.get_json::<Target>("/v2/bot/message/quota").await? else {
            return Ok(None);
        };
        let Some(used) = self
            .get_json::<Consumption>("/v2/bot/message/quota/consumption")
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(Quota {
            limit: (target.kind == "limited").then_some(target.value.unwrap_or(0)),
            used: used.total_usage,
        }))
    }

    /// One page of the account's friends (`GET /v2/bot/followers/ids`, up to
    /// 1,000 ids), from LINE's continuation token `start`; `Ok(None)` in a dry
    /// run (no friends to list). LINE answers 403 to accounts that are neither
    /// verified nor premium.
    pub(crate) async fn followers_page(&self, start: Option<&str>) -> Result<Option<FollowersPage>, SendError> {
        let mut path = "/v2/bot/followers/ids?limit=1000".to_owned();
        if let Some(start) = start {
            path.push_str("&start=");
            path.push_str(
                &percent_encoding::utf8_percent_encode(start, percent_encoding::NON_ALPHANUMERIC).to_string(),
            );
        }
        self.get_json::<FollowersPage>(&path).await
    }

    /// A GET of `path` read as JSON; `Ok(None)` in a dry run.
    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<Option<T>, SendError> {
        let (http, base_url, access_token) = match &self.transport {
            Transport::DryRun => return Ok(None),
            Transport::Http {
                http,
                base_url,
                access_token,
            } => (http, base_url, access_token),
        };
        let started = std::time::Instant::now();
        let sent = http
            .get(format!("{base_url}{path}"))
            .bearer_auth(access_token)
            .send()
            .await;
        let response = answered(path, sent, started)?;
        match response.status().as_u16() {
            200 => response
                .json::<T>()
                .await
                .map(Some)
                .map_err(|error| SendError::NoAnswer(format!("LINE's answer to {path} could not be read: {error}"))),
            429 => Err(SendError::RateLimited {
                retry_after: retry_after(&response),
            }),
            status @ 400..=499 => Err(SendError::Rejected {
                status,
                reason: line_error_message(response).await,
            }),
            status => Err(SendError::ServerError { status }),
        }
    }

    async fn post<B: serde::Serialize>(
        &self,
        path: &str,
        body: &B,
        retry_key: Option<Uuid>,
        to: Option<&str>,
        messages: &[Message],
    ) -> Result<Delivered, SendError> {
        let (http, base_url, access_token) = match &self.transport {
            Transport::DryRun => {
                // Standard output, not the log: this is the bot's own scenario text,
                // shown on purpose in a local dry run.
                match to {
                    Some(user) => println!("[dry run] push to {user}:\n{}", describe(messages)),
                    None => println!("[dry run] reply:\n{}", describe(messages)),
                }
                return Ok(Delivered::Logged);
            }
            Transport::Http {
                http,
                base_url,
                access_token,
            } => (http, base_url, access_token),
        };
        let mut request = http
            .post(format!("{base_url}{path}"))
            .bearer_auth(access_token)
            .json(body);
        if let Some(key) = retry_key {
            request = request.header("X-Line-Retry-Key", key.to_string());
        }
        let started = std::time::Instant::now();
        let response = answered(path, request.send().await, started)?;
        let status = response.status().as_u16();
        match status {
            200..=299 => Ok(Delivered::Sent),
            409 if retry_key.is_some() => Ok(Delivered::AlreadyAccepted),
            429 => {
                let retry_after = retry_after(&response);
                let refusal = line_refusal(response).await;
                // LINE answers 429 too when the month's message quota is used
                // up: that lasts until next month, so it is a refusal.
                if refusal.message.to_ascii_lowercase().contains("monthly limit") {
                    Err(SendError::Rejected {
                        status,
                        reason: refusal.reason,
                    })
                } else {
                    Err(SendError::RateLimited { retry_after })
                }
            }
            400..=499 => {
                let refusal = line_refusal(response).await;
                if status == 400 && retry_key.is_none() && refusal.message.eq_ignore_ascii_case("Invalid reply token") {
                    Err(SendError::InvalidReplyToken)
                } else {
                    Err(SendError::Rejected {
                        status,
                        reason: refusal.reason,
                    })
                }
            }
            _ => Err(SendError::ServerError { status }),
        }
    }
}

/// What LINE said when it refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LineRefusal {
    /// LINE's top-level `message` alone, which the checks for a monthly
    /// limit or an invalid reply token read.
    message: String,
    /// The message with its `details` (which property, what is wrong; e.g.
    /// `to: The user hasn't added the LINE Official Account as a friend`),
    /// kept as the failure's reason so an operator sees it.
    reason: String,
}

/// Details kept of one refusal, and characters of each part: LINE names the
/// problem and the property (never our message text), so it is safe to log,
/// and bounded so a long answer cannot fill a record.
const KEPT_DETAILS: usize = 5;
const KEPT_CHARS: usize = 200;

fn bounded(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(KEPT_CHARS).collect()
}

/// LINE's error body, `{"message": "...", "details": [{"message", "property"}]}`,
/// read part by part: a `details` of another shape (null, an object, a
/// number for a message) never costs the `message`, which the monthly-limit
/// and reply-token checks read.
fn refusal_of(body: &[u8]) -> LineRefusal {
    let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let message = parsed
        .get("message")
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| "no error message".to_owned(), bounded);
    let all: &[serde_json::Value] = parsed
        .get("details")
        .and_then(serde_json::Value::as_array)
        .map_or(&[], Vec::as_slice);
    let part = |detail: &serde_json::Value, key: &str| detail.get(key).and_then(serde_json::Value::as_str).map(bounded);
    let details: Vec<String> = all
        .iter()
        .take(KEPT_DETAILS)
        .filter_map(|detail| match (part(detail, "property"), part(detail, "message")) {
            (Some(property), Some(text)) => Some(format!("{property}: {text}")),
            (None, Some(text)) => Some(text),
            (Some(property), None) => Some(property),
            (None, None) => None,
        })
        .collect();
    let mut reason = message.clone();
    if !details.is_empty() {
        reason.push_str(" (");
        reason.push_str(&details.join("; "));
        if all.len() > KEPT_DETAILS {
            reason.push_str(&format!("; and {} more", all.len() - KEPT_DETAILS));
        }
        reason.push(')');
    }
    LineRefusal { message, reason }
}

/// The most of an error body read: LINE's are small; a larger one is cut.
const ERROR_BODY_BYTES: usize = 64 * 1024;

async fn line_refusal(mut response: reqwest::Response) -> LineRefusal {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() >= ERROR_BODY_BYTES {
            // Cut: not JSON any more, so "no error message".
            break;
        }
    }
    refusal_of(&body)
}

/// The reason of a refusal: LINE's message with its details.
async fn line_error_message(response: reqwest::Response) -> String {
    line_refusal(response).await.reason
}

/// The HTTP client of LINE's endpoints: rustls with the process's ring
/// provider (`tls.rs`), whatever other backend the dependencies compile in.
pub(super) fn http_client(timeout: Duration) -> anyhow::Result<reqwest::Client> {
    crate::tls::install_crypto_provider();
    Ok(reqwest::Client::builder()
        .tls_backend_rustls()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(2))
        .build()?)
}

/// A call's answer, counted in the LINE call metrics under `endpoint`; a
/// connection that failed before the request left is `Unreachable` (nothing
/// was sent), any other failure `NoAnswer` (the outcome is unknown).
pub(super) fn answered(
    endpoint: &str,
    response: Result<reqwest::Response, reqwest::Error>,
    started: std::time::Instant,
) -> Result<reqwest::Response, SendError> {
    let called = match &response {
        Ok(response) => LineStatus::Http(response.status().as_u16()),
        Err(error) if error.is_timeout() => LineStatus::Timeout,
        Err(_) => LineStatus::Error,
    };
    series::line_call(endpoint, called, started.elapsed());
    response.map_err(|error| {
        if error.is_connect() {
            SendError::Unreachable(error.without_url().to_string())
        } else {
            SendError::NoAnswer(error.without_url().to_string())
        }
    })
}

/// LINE's `Retry-After` on a 429, in seconds; an hour at most, so a wild
/// value cannot park a send for ever.
pub(super) fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(|seconds| Duration::from_secs(seconds.min(3600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_lines_details_bounded() {
        let many: Vec<serde_json::Value> = (0..7)
            .map(|i| serde_json::json!({"message": "May not be empty", "property": format!("messages[{i}].text")}))
            .collect();
        let cases: Vec<(Vec<u8>, &str, String)> = vec![
            (br#"{"message":"Invalid reply token"}"#.to_vec(), "Invalid reply token", "Invalid reply token".into()),
            (
                br#"{"message":"Failed to send messages","details":[{"message":"The user hasn't added the LINE Official Account as a friend.","property":"to"}]}"#.to_vec(),
                "Failed to send messages",
                "Failed to send messages (to: The user hasn't added the LINE Official Account as a friend.)".into(),
            ),
            (
                br#"{"message":"The request body has 2 error(s)","details":[{"message":"May not be empty","property":"messages[0].text"},{"message":"Must be one of the following values: [text]"}]}"#.to_vec(),
                "The request body has 2 error(s)",
                "The request body has 2 error(s) (messages[0].text: May not be empty; Must be one of the following values: [text])".into(),
            ),
            (
                serde_json::to_vec(&serde_json::json!({"message": "The request body has 7 error(s)", "details": many})).unwrap(),
                "The request body has 7 error(s)",
                format!(
                    "The request body has 7 error(s) ({}; and 2 more)",
                    (0..5).map(|i| format!("messages[{i}].text: May not be empty")).collect::<Vec<_>>().join("; ")
                ),
            ),
            (b"<html>bad gateway</html>".to_vec(), "no error message", "no error message".into()),
            (br#"{"details":[{}]}"#.to_vec(), "no error message", "no error message".into()),
            (
                br#"{"message":"You have reached your monthly limit.","details":null}"#.to_vec(),
                "You have reached your monthly limit.",
                "You have reached your monthly limit.".into(),
            ),
            (
                br#"{"message":"Invalid reply token","details":{"x":1}}"#.to_vec(),
                "Invalid reply token",
                "Invalid reply token".into(),
            ),
            (
                br#"{"message":"Bad","details":[{"message":7,"property":"to"},"text",{"message":"ok"}]}"#.to_vec(),
                "Bad",
                "Bad (to; ok)".into(),
            ),
            (br#"{"message":42}"#.to_vec(), "no error message", "no error message".into()),
            (
                br#"{"message":"a\nb"}"#.to_vec(),
                "ab",
                "ab".into(),
            ),
        ];
        for (body, message, reason) in cases {
            let refusal = refusal_of(&body);
            assert_eq!(refusal.message, message, "{}", String::from_utf8_lossy(&body));
            assert_eq!(refusal.reason, reason, "{}", String::from_utf8_lossy(&body));
        }
        let long = serde_json::json!({"message": "x".repeat(1000), "details": [{"message": "y".repeat(1000), "property": "z".repeat(1000)}]});
        assert!(refusal_of(&serde_json::to_vec(&long).unwrap()).reason.chars().count() <= KEPT_CHARS * 3 + 10);
    }
}
