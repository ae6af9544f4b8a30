//! HTTP client for the two send endpoints: reply and push.
//!
//! With no channel access token configured (local runs), messages are logged by
//! count instead of sent, so the whole flow can be exercised without a channel.

use super::messages::{Message, PushRequest, ReplyRequest};
use std::time::Duration;
use uuid::Uuid;

/// How a send ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// LINE accepted the request (200).
    Sent,
    /// LINE had already accepted a push with this retry key (409): sent earlier.
    AlreadyAccepted,
    /// No access token is configured: the messages were logged, not sent.
    LoggedOnly,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
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
    pub fn certainly_not_sent(&self) -> bool {
        matches!(
            self,
            SendError::Rejected { .. } | SendError::RateLimited { .. } | SendError::Unreachable(_)
        )
    }
}

#[derive(Clone)]
pub struct LineClient {
    transport: Transport,
}

#[derive(Clone)]
enum Transport {
    Http {
        http: reqwest::Client,
        base_url: String,
        access_token: String,
    },
    LogOnly,
}

impl LineClient {
    /// A client that sends to `base_url`, or only logs when `access_token` is `None`.
    pub fn new(base_url: &str, access_token: Option<&str>, timeout: Duration) -> anyhow::Result<Self> {
        let transport = match access_token {
            None => Transport::LogOnly,
            Some(token) => Transport::Http {
                http: reqwest::Client::builder()
                    .timeout(timeout)
                    .connect_timeout(Duration::from_secs(2))
                    .build()?,
                base_url: base_url.trim_end_matches('/').to_owned(),
                access_token: token.to_owned(),
            },
        };
        Ok(Self { transport })
    }

    pub fn sends_for_real(&self) -> bool {
        matches!(self.transport, Transport::Http { .. })
    }

    /// Replies with a single-use reply token. Never retried here: a reply whose
    /// answer was lost cannot be repeated safely.
    pub async fn reply(&self, reply_token: &str, messages: &[Message]) -> Result<Delivered, SendError> {
        let body = ReplyRequest { reply_token, messages };
        self.post("/v2/bot/message/reply", &body, None, messages.len()).await
    }

    /// Pushes to one user. LINE remembers `retry_key` for 24 hours and answers 409
    /// to a repeat, so the same action may be pushed again safely.
    pub async fn push(&self, to: &str, messages: &[Message], retry_key: Uuid) -> Result<Delivered, SendError> {
        let body = PushRequest { to, messages };
        self.post("/v2/bot/message/push", &body, Some(retry_key), messages.len())
            .await
    }

    async fn post<B: serde::Serialize>(
        &self,
        path: &str,
        body: &B,
        retry_key: Option<Uuid>,
        message_count: usize,
    ) -> Result<Delivered, SendError> {
        let (http, base_url, access_token) = match &self.transport {
            Transport::LogOnly => {
                tracing::info!(
                    line.endpoint = path,
                    line.message_count = message_count,
                    "no LINE_CHANNEL_ACCESS_TOKEN: messages logged, not sent"
                );
                return Ok(Delivered::LoggedOnly);
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
        let response = request.send().await.map_err(|error| {
            if error.is_connect() {
                SendError::Unreachable(error.to_string())
            } else {
                SendError::NoAnswer(error.to_string())
            }
        })?;
        let status = response.status().as_u16();
        match status {
            200..=299 => Ok(Delivered::Sent),
            409 if retry_key.is_some() => Ok(Delivered::AlreadyAccepted),
            429 => Err(SendError::RateLimited {
                retry_after: response
                    .headers()
                    .get("retry-after")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.parse().ok())
                    .map(Duration::from_secs),
            }),
            400..=499 => Err(SendError::Rejected {
                status,
                reason: line_error_message(response).await,
            }),
            _ => Err(SendError::ServerError { status }),
        }
    }
}

/// LINE's error body is `{"message": "...", "details": [...]}`; its message names
/// the problem (never our message text), so it is safe to log.
async fn line_error_message(response: reqwest::Response) -> String {
    #[derive(serde::Deserialize)]
    struct LineError {
        message: String,
    }
    match response.json::<LineError>().await {
        Ok(error) => error.message,
        Err(_) => "no error message".to_owned(),
    }
}
