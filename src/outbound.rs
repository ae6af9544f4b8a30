//! Choosing reply or push for a set of messages, and deriving push retry keys.
//!
//! Reply is free of message quota, so it is preferred while the event's reply
//! token is fresh. Otherwise, or when LINE certainly refused the reply, the
//! messages are pushed with an `X-Line-Retry-Key` derived from the action: the same
//! action always carries the same key, so LINE accepts it at most once.

use crate::ids::LineUserId;
use crate::line::client::{Delivered, LineClient, SendError};
use crate::line::messages::Message;
use std::time::Duration;
use uuid::Uuid;

/// Namespace of the version-5 UUIDs used as retry keys (a fixed random UUID).
const RETRY_KEY_NAMESPACE: Uuid = Uuid::from_u128(0x6c1e_5b7a_1f0d_4d8e_9a3c_2b4f_8e71_d093);

/// The retry key of an action, e.g. `answer:{answerId}` or `event:{inboxId}`.
pub fn retry_key(action_key: &str) -> Uuid {
    Uuid::new_v5(&RETRY_KEY_NAMESPACE, action_key.as_bytes())
}

/// The reply token of the event that caused a send, and when the event happened.
#[derive(Debug, Clone, Copy)]
pub struct ReplyContext<'a> {
    pub token: &'a str,
    pub event_time_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Reply,
    Push,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Reply => "reply",
            Route::Push => "push",
        }
    }
}

#[derive(Debug)]
pub struct SendFailure {
    pub route: Route,
    pub error: SendError,
}

impl SendFailure {
    /// Whether sending the same action again cannot double it: a push carries its
    /// retry key, and a refused request was never acted on. A reply whose outcome
    /// is unknown is the one case that must not be repeated.
    pub fn safe_to_repeat(&self) -> bool {
        self.route == Route::Push || self.error.certainly_not_sent()
    }
}

#[derive(Clone)]
pub struct Outbound {
    client: LineClient,
    /// Reply tokens live about a minute; past this age a push is used instead, so
    /// a token that might expire in flight is never spent.
    reply_token_max_age: Duration,
}

impl Outbound {
    pub fn new(client: LineClient, reply_token_max_age: Duration) -> Self {
        Self {
            client,
            reply_token_max_age,
        }
    }

    pub fn client(&self) -> &LineClient {
        &self.client
    }

    pub async fn send(
        &self,
        to: &LineUserId,
        reply: Option<ReplyContext<'_>>,
        messages: &[Message],
        action_key: &str,
    ) -> Result<(Route, Delivered), SendFailure> {
        if let Some(reply) = reply.filter(|reply| self.is_fresh(reply)) {
            match self.client.reply(reply.token, messages).await {
                Ok(delivered) => return Ok((Route::Reply, delivered)),
                Err(error) if error.certainly_not_sent() => {
                    tracing::warn!(error = %error, "reply refused; pushing instead");
                }
                Err(error) => {
                    return Err(SendFailure {
                        route: Route::Reply,
                        error,
                    });
                }
            }
        }
        self.client
            .push(to.as_str(), messages, retry_key(action_key))
            .await
            .map(|delivered| (Route::Push, delivered))
            .map_err(|error| SendFailure {
                route: Route::Push,
                error,
            })
    }

    fn is_fresh(&self, reply: &ReplyContext<'_>) -> bool {
        let now_ms = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or(i64::MAX);
        let age_ms = now_ms.saturating_sub(reply.event_time_ms).max(0);
        u128::from(age_ms.unsigned_abs()) < self.reply_token_max_age.as_millis()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_keys_are_stable_per_action_and_distinct_across_actions() {
        assert_eq!(retry_key("answer:abc"), retry_key("answer:abc"));
        assert_ne!(retry_key("answer:abc"), retry_key("answer:abd"));
        assert_eq!(retry_key("answer:abc").get_version_num(), 5);
    }
}
