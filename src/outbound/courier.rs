//! Taking one recorded action to its end state: sent, uncertain or failed.
//!
//! - A reply is tried only while its token is fresh and only by the run that
//!   recorded it. LINE refusing it (4xx) means nothing was sent: the action is
//!   pushed instead. No answer (timeout, 5xx) means it may have arrived: the action
//!   is marked uncertain and never resent automatically.
//! - A push carries the action's retry key, so it is retried after 5xx, timeouts
//!   and 429 (with backoff, honouring `Retry-After`) without risk: 409 means LINE
//!   had accepted it. Other 4xx are final. Retries are bounded; then it is parked.

use crate::line::client::{Delivered, LineClient, SendError};
use crate::line::messages::Message;
use crate::store::{LedgerDoc, RouteDoc, Settlement, Store};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Push attempts before the action is parked as failed.
    pub max_attempts: u32,
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Longer waits than this are left to the sweeper instead of holding a worker.
    pub max_inline_wait: Duration,
    /// Reply tokens live about a minute; past this age a push is used instead.
    pub reply_token_max_age: Duration,
}

impl RetryPolicy {
    pub fn backoff(&self, attempts: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(16));
        self.first_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Whether the run holding the action recorded it just now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Recorded by this run: nothing was attempted yet.
    Fresh,
    /// Taken over after its lease ran out: an earlier run may have tried it.
    Recovered,
}

#[derive(Clone)]
pub struct Courier {
    client: LineClient,
    store: Store,
    policy: RetryPolicy,
    shutdown: CancellationToken,
}

impl Courier {
    pub fn new(client: LineClient, store: Store, policy: RetryPolicy, shutdown: CancellationToken) -> Self {
        Self {
            client,
            store,
            policy,
            shutdown,
        }
    }

    pub fn client(&self) -> &LineClient {
        &self.client
    }

    /// Sends the action and records how it ended. Store errors while settling are
    /// logged: the lease then runs out and the sweeper settles it again.
    #[tracing::instrument(skip_all, fields(ledger.id = ledger_id, user.id = %doc.line_user_id))]
    pub async fn deliver(&self, ledger_id: &str, doc: &LedgerDoc, origin: Origin) -> Settlement {
        let (settlement, route, attempts) = self.attempt(doc, origin).await;
        match &settlement {
            Settlement::Sent => tracing::info!(
                send.route = route_name(route),
                send.attempts = attempts,
                outcome = "sent",
                "outbound settled"
            ),
            Settlement::RetryAt { after, error, .. } => {
                tracing::warn!(send.route = route_name(route), send.attempts = attempts, retry_in_ms = after.as_millis() as u64, error = %error, outcome = "retry_later", "outbound postponed")
            }
            Settlement::Uncertain(reason) | Settlement::Failed(reason) => {
                tracing::error!(send.route = route_name(route), send.attempts = attempts, reason = %reason, outcome = settlement_name(&settlement), "outbound parked")
            }
        }
        if let Err(error) = self
            .store
            .settle_outbound(ledger_id, doc, attempts, route, &settlement)
            .await
        {
            tracing::error!(error = %error, "could not record the send outcome; the sweeper will settle it");
        }
        settlement
    }

    async fn attempt(&self, doc: &LedgerDoc, origin: Origin) -> (Settlement, RouteDoc, u32) {
        let messages: Vec<Message> = match serde_json::from_str(&doc.messages) {
            Ok(messages) => messages,
            Err(error) => {
                return (
                    Settlement::Failed(format!("stored messages unreadable: {error}")),
                    doc.route,
                    doc.attempts,
                );
            }
        };
        if doc.route == RouteDoc::Reply {
            match (origin, &doc.reply_token, doc.event_time_ms) {
                (Origin::Recovered, _, _) => {
                    let reason = "a reply was due when the previous run stopped; it may have been sent".to_owned();
                    return (Settlement::Uncertain(reason), RouteDoc::Reply, doc.attempts);
                }
                (Origin::Fresh, Some(token), Some(event_time_ms)) if self.reply_is_fresh(event_time_ms) => {
                    match self.client.reply(token, &messages).await {
                        Ok(_) => return (Settlement::Sent, RouteDoc::Reply, doc.attempts + 1),
                        Err(error) if error.certainly_not_sent() => {
                            tracing::warn!(error = %error, "reply refused; pushing instead");
                        }
                        Err(error) => {
                            return (
                                Settlement::Uncertain(error.to_string()),
                                RouteDoc::Reply,
                                doc.attempts + 1,
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        self.push(doc, &messages).await
    }

    async fn push(&self, doc: &LedgerDoc, messages: &[Message]) -> (Settlement, RouteDoc, u32) {
        let retry_key = match doc.retry_key.parse() {
            Ok(key) => key,
            Err(_) => {
                return (
                    Settlement::Failed("stored retry key unreadable".into()),
                    RouteDoc::Push,
                    doc.attempts,
                );
            }
        };
        let mut attempts = doc.attempts;
        loop {
            attempts += 1;
            let error = match self.client.push(&doc.line_user_id, messages, retry_key).await {
                Ok(Delivered::Sent | Delivered::AlreadyAccepted | Delivered::LoggedOnly) => {
                    return (Settlement::Sent, RouteDoc::Push, attempts);
                }
                Err(error @ SendError::Rejected { .. }) => {
                    return (Settlement::Failed(error.to_string()), RouteDoc::Push, attempts);
                }
                Err(error) => error,
            };
            if attempts >= self.policy.max_attempts {
                let reason = format!("gave up after {attempts} attempts: {error}");
                return (Settlement::Failed(reason), RouteDoc::Push, attempts);
            }
            let wait = match &error {
                SendError::RateLimited {
                    retry_after: Some(after),
                } => (*after).max(self.policy.backoff(attempts)),
                _ => self.policy.backoff(attempts),
            };
            tracing::warn!(error = %error, send.attempts = attempts, retry_in_ms = wait.as_millis() as u64, "push failed; retrying with the same retry key");
            if wait > self.policy.max_inline_wait || self.shutdown.is_cancelled() {
                return (
                    Settlement::RetryAt {
                        after: wait,
                        error: error.to_string(),
                    },
                    RouteDoc::Push,
                    attempts,
                );
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.cancelled() => {
                    return (Settlement::RetryAt { after: Duration::ZERO, error: error.to_string() }, RouteDoc::Push, attempts);
                }
            }
        }
    }

    /// Whether a reply token issued at `event_time_ms` is still safe to use.
    pub fn reply_is_fresh(&self, event_time_ms: i64) -> bool {
        let age_ms = super::now_ms().saturating_sub(event_time_ms).max(0);
        u128::from(age_ms.unsigned_abs()) < self.policy.reply_token_max_age.as_millis()
    }
}

fn route_name(route: RouteDoc) -> &'static str {
    match route {
        RouteDoc::Reply => "reply",
        RouteDoc::Push => "push",
    }
}

fn settlement_name(settlement: &Settlement) -> &'static str {
    match settlement {
        Settlement::Sent => "sent",
        Settlement::Uncertain(_) => "uncertain",
        Settlement::Failed(_) => "failed",
        Settlement::RetryAt { .. } => "retry_later",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RetryPolicy {
            max_attempts: 6,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            max_inline_wait: Duration::from_secs(1),
            reply_token_max_age: Duration::from_secs(50),
        };
        let waits: Vec<_> = (1..=5).map(|attempt| policy.backoff(attempt).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
    }
}
