//! Taking one recorded action a step towards its end state: one LINE call per
//! turn, then the outcome recorded from the version the sender holds. A retry is
//! a later turn (the entry's lease runs out at the retry time and any instance's
//! sweeper takes it), so a backing-off send never holds a worker.
//!
//! - A reply uses the event's single-use token while it is fresh. Its outcome
//!   may be unknown (timeout, 5xx, or a process that died while it was due): then
//!   it is retried with the SAME token. A token can be used once, so a retry
//!   cannot double it, and a 400 "Invalid reply token" to such a retry, while the
//!   token is fresh, means the earlier attempt was accepted: `sent`. Only a reply
//!   that could not be settled before its token may have expired is `uncertain`;
//!   it is never switched to a push automatically. A reply LINE refuses before
//!   any attempt could have reached it is pushed instead.
//! - Whether an attempt could have reached LINE is recorded, not guessed: the
//!   entry says a reply call is about to be made (`replyCallPending`, written
//!   before the call) until the call's outcome is recorded. An instance that
//!   takes over an entry whose dead owner committed it but never got to the call
//!   finds no such record, so a 400 then means the token was refused (expired
//!   sooner than we allow for, or never valid), not used: the reply falls back
//!   to a push. Costs one write before each reply's first call; a recovered or
//!   retried call whose entry already says "pending" or "unknown" reuses it.
//! - A push carries the action's retry key, so it is retried after 5xx, timeouts
//!   and 429 (honouring `Retry-After`) without risk: 409 means LINE had accepted
//!   it. Other 4xx are final. Retries are bounded; then it is parked.

use crate::clock::Clock;
use crate::line::client::{Delivered, LineClient, SendError};
use crate::line::messages::Message;
use crate::store::{Attempted, LedgerDoc, RouteDoc, SettleWrite, Settlement, Store, Version};
use std::time::Duration;
use tokio::sync::mpsc;

#[derive(Debug, Clone)]
pub(crate) struct RetryPolicy {
    /// Push attempts before the action is parked as failed.
    pub(crate) max_attempts: u32,
    pub(crate) first_backoff: Duration,
    pub(crate) max_backoff: Duration,
    /// Reply tokens live about a minute; past this age a reply is not attempted.
    pub(crate) reply_token_max_age: Duration,
}

/// A retry waits here at most this long (a Retry-After is capped at an hour).
const MAX_LOCAL_WAIT: Duration = Duration::from_secs(3600);

/// Rich menu links are retried at least this often: twelve attempts span
/// about six minutes (a deploy at start-up may still be making the menu).
const MAX_MENU_BACKOFF: Duration = Duration::from_secs(60);

/// Replies are retried at least this often, so their retries fit in the token's life.
const MAX_REPLY_BACKOFF: Duration = Duration::from_secs(5);

impl RetryPolicy {
    pub(crate) fn backoff(&self, attempts: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(16));
        self.first_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Where a courier stops for good, for the tests that kill a process at an
/// exact point of a send (`FAULT_PAUSE`, only with the Firestore emulator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PauseAt {
    /// Before a reply's call is recorded as about to be made (right after the
    /// commit that recorded the action).
    BeforeReplyCall,
    /// After LINE answered a reply call, before its outcome is recorded.
    AfterReplyCall,
}

#[derive(Clone)]
pub(crate) struct Courier {
    client: LineClient,
    store: Store,
    policy: RetryPolicy,
    /// Where retries go to wait for their time (the pipeline's retry timer).
    retries: mpsc::UnboundedSender<ScheduledRetry>,
    /// The service's clock: a reply token's age is event time to now.
    clock: Clock,
    pause: Option<PauseAt>,
    /// Makes users' rich menus so (`rich_menu` entries); `None` in a dry run.
    menus: Option<super::MenuSync>,
}

/// The outcome of one turn and how it is to be recorded.
struct Turn {
    settlement: Settlement,
    attempted: Attempted,
}

/// A send to try again at `due`, from `version`, as its entry now stands. This
/// instance holds the entry meanwhile (its lease runs a lease beyond `due`), so
/// retries do not wait for a sweep of a collection that may hold thousands of
/// pending pushes; if this instance dies, any sweeper takes it after the lease.
#[derive(Debug)]
pub(crate) struct ScheduledRetry {
    pub(crate) due: tokio::time::Instant,
    pub(crate) ledger_id: String,
    pub(crate) doc: LedgerDoc,
    pub(crate) version: Version,
}

/// What became of a delivery.
#[derive(Debug, Clone)]
pub(crate) enum Delivery {
    /// The turn ended in this settlement (recorded, or left to the sweeper when
    /// Firestore did not take it).
    Settled(Settlement),
    /// Another instance holds the action now, or Firestore did not answer before
    /// a push could safely follow a refused reply: nothing was sent this turn,
    /// and its lease decides who goes on.
    NotSettled,
}

impl Courier {
    pub(crate) fn new(
        client: LineClient,
        store: Store,
        policy: RetryPolicy,
        retries: mpsc::UnboundedSender<ScheduledRetry>,
        clock: Clock,
    ) -> Self {
        Self {
            client,
            store,
            policy,
            retries,
            clock,
            pause: None,
            menus: None,
        }
    }

    /// A courier that carries out `rich_menu` entries with `menus` (without
    /// it, as in a dry run, they are `logged`).
    pub(crate) fn with_menus(self, menus: Option<super::MenuSync>) -> Self {
        Self { menus, ..self }
    }

    /// A courier that stops for good at `pause` (see [`PauseAt`]).
    pub(crate) fn pausing_at(self, pause: Option<PauseAt>) -> Self {
        Self { pause, ..self }
    }

    async fn pause_if(&self, point: PauseAt) {
        if self.pause == Some(point) {
            tracing::warn!(pause = ?point, "FAULT_PAUSE: this send stops here");
            std::future::pending::<()>().await;
        }
    }

    /// Makes one call for the action and records the outcome, conditional on
    /// `version` (the version this sender holds). Store errors while recording are logged: the lease then runs out
    /// and the sweeper settles the entry again.
    #[tracing::instrument(skip_all, fields(ledger.id = ledger_id, user.id = %crate::log_ids::logged(&doc.line_user_id)))]
    pub(crate) async fn deliver(&self, ledger_id: &str, doc: &LedgerDoc, version: Version) -> Delivery {
        let Some((Turn { settlement, attempted }, version)) = self.turn(ledger_id, doc, version).await else {
            tracing::info!(
                outcome = "superseded",
                "the action moved on (or Firestore did not answer) before a call could be made"
            );
            return Delivery::NotSettled;
        };
        let route = attempted.route.as_str();
        match &settlement {
            Settlement::Sent | Settlement::Logged => tracing::info!(
                send.route = route,
                send.attempts = attempted.attempts,
                outcome = settlement.as_str(),
                "outbound settled"
            ),
            Settlement::RetryAt { after, error } => {
                tracing::warn!(send.route = route, send.attempts = attempted.attempts, retry_in_ms = after.as_millis() as u64, error = %error, outcome = "retry_later", "outbound postponed");
            }
            Settlement::Uncertain(reason) | Settlement::Failed(reason) => {
                tracing::error!(send.route = route, send.attempts = attempted.attempts, reason = %reason, outcome = settlement.as_str(), "outbound parked");
            }
        }
        match self
            .store
            .settle_outbound(ledger_id, version, doc, &attempted, &settlement)
            .await
        {
            Ok(SettleWrite::Written(Some(version))) => {
                if let Settlement::RetryAt { after, .. } = &settlement {
                    self.schedule_retry(ledger_id, doc, &attempted, version, *after);
                }
            }
            Ok(SettleWrite::Queued | SettleWrite::Written(None)) => {}
            Ok(SettleWrite::Superseded) => tracing::info!(
                outcome = "superseded",
                "another instance took the action over; this outcome is not recorded"
            ),
            Err(error) => {
                tracing::error!(error = %error, "could not record the send outcome; the sweeper will settle it");
            }
        }
        Delivery::Settled(settlement)
    }

    fn schedule_retry(
        &self,
        ledger_id: &str,
        doc: &LedgerDoc,
        attempted: &Attempted,
        version: Version,
        after: Duration,
    ) {
        let mut doc = doc.clone();
        doc.attempts = attempted.attempts;
        doc.route = attempted.route;
        doc.reply_outcome_unknown = attempted.reply_outcome_unknown;
        // As the settle wrote it.
        doc.reply_call_pending = Some(false);
        let retry = ScheduledRetry {
            due: tokio::time::Instant::now() + after.min(MAX_LOCAL_WAIT),
            ledger_id: ledger_id.to_owned(),
            doc,
            version,
        };
        // Without a retry timer (an ingest-only instance, or stopping) the lease
        // runs out and a sweeper retries it.
        let _ = self.retries.send(retry);
    }

    /// One turn, and the version to record its outcome from; `None` when the
    /// action moved on and this turn must not go on.
    async fn turn(&self, ledger_id: &str, doc: &LedgerDoc, version: Version) -> Option<(Turn, Version)> {
        if doc.route == RouteDoc::RichMenu {
            return Some((self.rich_menu(doc).await, version));
        }
        let messages: Vec<Message> = match serde_json::from_str(&doc.messages) {
            // Rendered with the values decided with the step: the same bytes on
            // every attempt, whichever instance makes it.
            Ok::<Vec<Message>, _>(mut messages) => {
                crate::engine::personal::render(&mut messages, doc.personal.as_ref());
                messages
            }
            Err(error) => {
                let turn = Turn {
                    settlement: Settlement::Failed(format!(
                        "stored messages unreadable: {}",
                        crate::line::webhook::describe_error(&error)
                    )),
                    attempted: Attempted::unchanged(doc),
                };
                return Some((turn, version));
            }
        };
        if doc.route == RouteDoc::Reply
            && let (Some(token), Some(event_time_ms)) = (&doc.reply_token, doc.event_time_ms)
        {
            // Could an earlier call have reached LINE? Then only the same token may
            // be used again, never a push.
            let earlier_call_unknown = doc.earlier_reply_call_unknown();
            let mut version = version;
            if self.reply_is_fresh(event_time_ms) {
                // No call may go out before the entry says one may have; what
                // follows (the outcome, or the switch to a push) is written from
                // the version that says so.
                if !earlier_call_unknown {
                    self.pause_if(PauseAt::BeforeReplyCall).await;
                    version = match self.store.mark_reply_call(ledger_id, version).await {
                        Ok(Some(version)) => version,
                        Ok(None) => return None,
                        Err(error) => {
                            tracing::warn!(error = %error, "could not record the reply call; the sweeper retries the action");
                            return None;
                        }
                    };
                }
                if let Some(turn) = self
                    .reply(doc, token, event_time_ms, &messages, earlier_call_unknown)
                    .await
                {
                    self.pause_if(PauseAt::AfterReplyCall).await;
                    return Some((turn, version));
                }
                // Refused (or rate limited past the token's life) before any
                // attempt of ours reached LINE: a push cannot double it.
                tracing::warn!("the reply cannot be sent; pushing instead");
            } else if earlier_call_unknown {
                let turn = Turn {
                    settlement: Settlement::Uncertain(
                        "a reply attempt's outcome is unknown and its token may have expired".into(),
                    ),
                    attempted: Attempted {
                        route: RouteDoc::Reply,
                        // Recorded as unknown: a replay must name that risk.
                        reply_outcome_unknown: true,
                        ..Attempted::unchanged(doc)
                    },
                };
                return Some((turn, version));
            }
            // Never replied, and no reply will be: a push, once the entry says so
            // (then no one replies again, and a recovered turn pushes too).
            let version = match self.store.switch_to_push(ledger_id, version).await {
                Ok(Some(version)) => version,
                Ok(None) => return None,
                Err(error) => {
                    tracing::warn!(error = %error, "could not record the switch to a push; the sweeper retries the action");
                    return None;
                }
            };
            return Some((self.push(doc, &messages).await, version));
        }
        Some((self.push(doc, &messages).await, version))
    }

    /// One reply call. `None`: LINE refused it and no call of ours can have
    /// reached it, so a push cannot double it.
    async fn reply(
        &self,
        doc: &LedgerDoc,
        token: &str,
        event_time_ms: i64,
        messages: &[Message],
        earlier_call_unknown: bool,
    ) -> Option<Turn> {
        let attempts = doc.attempts + 1;
        let attempted = |outcome_unknown: bool| Attempted {
            attempts,
            route: RouteDoc::Reply,
            reply_outcome_unknown: outcome_unknown,
        };
        let settlement = match self.client.reply(token, messages).await {
            Ok(Delivered::Logged) => Settlement::Logged,
            Ok(Delivered::Sent | Delivered::AlreadyAccepted) => Settlement::Sent,
            // The token was used: by our earlier call, whose answer was lost.
            Err(SendError::InvalidReplyToken) if earlier_call_unknown => Settlement::Sent,
            Err(SendError::InvalidReplyToken | SendError::Rejected { .. }) if !earlier_call_unknown => return None,
            Err(error @ SendError::Rejected { .. }) => Settlement::Failed(error.to_string()),
            Err(error) => {
                let wait = match &error {
                    SendError::RateLimited {
                        retry_after: Some(after),
                    } => (*after).max(self.policy.backoff(attempts)),
                    _ => self.policy.backoff(attempts).min(MAX_REPLY_BACKOFF),
                };
                let outcome_unknown = earlier_call_unknown || !error.certainly_not_sent();
                // Rate limited past the token's life, and nothing of ours can have
                // reached LINE: push instead rather than let it expire.
                let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                if !outcome_unknown && !self.reply_is_fresh(event_time_ms.saturating_sub(wait_ms)) {
                    return None;
                }
                return Some(Turn {
                    settlement: Settlement::RetryAt {
                        after: wait,
                        error: error.to_string(),
                    },
                    attempted: attempted(outcome_unknown),
                });
            }
        };
        Some(Turn {
            settlement,
            attempted: attempted(earlier_call_unknown),
        })
    }

    async fn push(&self, doc: &LedgerDoc, messages: &[Message]) -> Turn {
        let attempted = |attempts| Attempted {
            attempts,
            route: RouteDoc::Push,
            reply_outcome_unknown: doc.reply_outcome_unknown,
        };
        let Ok(retry_key) = doc.retry_key.parse() else {
            return Turn {
                settlement: Settlement::Failed("stored retry key unreadable".into()),
                attempted: attempted(doc.attempts),
            };
        };
        let attempts = doc.attempts + 1;
        let settlement = match self.client.push(&doc.line_user_id, messages, retry_key).await {
            Ok(Delivered::Sent | Delivered::AlreadyAccepted) => Settlement::Sent,
            Ok(Delivered::Logged) => Settlement::Logged,
            Err(error @ (SendError::Rejected { .. } | SendError::InvalidReplyToken)) => {
                Settlement::Failed(error.to_string())
            }
            Err(error) if attempts >= self.policy.max_attempts => {
                Settlement::Failed(format!("gave up after {attempts} attempts: {error}"))
            }
            Err(error) => {
                let wait = match &error {
                    SendError::RateLimited {
                        retry_after: Some(after),
                    } => (*after).max(self.policy.backoff(attempts)),
                    _ => self.policy.backoff(attempts),
                };
                Settlement::RetryAt {
                    after: wait,
                    error: error.to_string(),
                }
            }
        };
        Turn {
            settlement,
            attempted: attempted(attempts),
        }
    }

    /// A `rich_menu` entry: the user's menu made so on LINE, retried like a
    /// push (LINE's link and unlink calls are safe to repeat).
    async fn rich_menu(&self, doc: &LedgerDoc) -> Turn {
        let attempts = doc.attempts + 1;
        let attempted = Attempted {
            attempts,
            route: RouteDoc::RichMenu,
            reply_outcome_unknown: false,
        };
        let Some(menus) = &self.menus else {
            return Turn {
                settlement: Settlement::Logged,
                attempted,
            };
        };
        let settlement = match menus.apply(&doc.line_user_id).await {
            Ok(()) => Settlement::Sent,
            Err(error @ super::menu_sync::SyncError::Line(SendError::Rejected { .. })) => {
                Settlement::Failed(error.to_string())
            }
            Err(error) if attempts >= self.policy.max_attempts => {
                Settlement::Failed(format!("gave up after {attempts} attempts: {error}"))
            }
            Err(error) => {
                // A link is one small call that is safe to repeat: retried
                // sooner than a push, so a user is not left on the wrong menu
                // for minutes (LINE's Retry-After still rules).
                let wait = match &error {
                    super::menu_sync::SyncError::Line(SendError::RateLimited {
                        retry_after: Some(after),
                    }) => (*after).max(self.policy.backoff(attempts)),
                    _ => self.policy.backoff(attempts).min(MAX_MENU_BACKOFF),
                };
                Settlement::RetryAt {
                    after: wait,
                    error: error.to_string(),
                }
            }
        };
        Turn { settlement, attempted }
    }

    /// Whether a reply token issued at `event_time_ms` is still safe to use.
    pub(crate) fn reply_is_fresh(&self, event_time_ms: i64) -> bool {
        let age_ms = self.clock.now_ms().saturating_sub(event_time_ms).max(0);
        u128::from(age_ms.unsigned_abs()) < self.policy.reply_token_max_age.as_millis()
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
            reply_token_max_age: Duration::from_secs(50),
        };
        let waits: Vec<_> = (1..=5).map(|attempt| policy.backoff(attempt).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
    }
}
