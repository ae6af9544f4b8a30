//! One chunk's turn: claim it, check the campaign still sends, make its one
//! multicast call, settle it conditional on the claim. And the pace that spaces
//! a campaign's calls.

use super::Campaigns;
use crate::line::client::{Delivered, SendError};
use crate::line::messages::Message;
use crate::outbound::ActionKey;
use crate::store::{CampaignState, ChunkDoc, ChunkEnd, StoreError, Stored};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// LINE keeps a retry key for 24 hours; an uncertain chunk is not sent again
/// after this long, or a repeat could reach its users twice.
const RETRY_KEY_WINDOW_MS: i64 = 23 * 60 * 60 * 1000;

/// Paces a campaign's calls: one start per interval, pushed back by a 429.
pub(super) struct Pace {
    interval: Duration,
    /// The next free slot, and how many back-offs there were.
    next: Mutex<(Instant, u64)>,
}

impl Pace {
    pub(super) fn new(calls_per_second: u32) -> Self {
        Self {
            interval: Duration::from_secs(1) / calls_per_second.max(1),
            next: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Waits for the next free slot and takes it; a 429 that comes meanwhile
    /// sends the turn to a slot after its back-off.
    async fn slot(&self) {
        loop {
            // The guard lives in this block only: it must not be held across the sleep.
            let (slot, back_offs) = {
                let Ok(mut next) = self.next.lock() else {
                    return;
                };
                let slot = next.0.max(Instant::now());
                next.0 = slot + self.interval;
                (slot, next.1)
            };
            tokio::time::sleep_until(slot.into()).await;
            if self.next.lock().map_or(true, |next| next.1 == back_offs) {
                return;
            }
        }
    }

    /// LINE asked to wait: no call starts before `wait` has passed.
    fn back_off(&self, wait: Duration) {
        if let Ok(mut next) = self.next.lock() {
            next.0 = next.0.max(Instant::now() + wait);
            next.1 += 1;
        }
    }
}

/// How one chunk's turn ended.
pub(super) enum TurnOutcome {
    /// Settled; `sent` users received it.
    Settled { sent: u64 },
    /// The campaign was cancelled: the chunk was skipped.
    Cancelled,
    /// Another instance holds it, or it waits for a retry.
    NotSettled,
}

/// What every chunk's turn of one sending round shares.
pub(super) struct ChunkTurn<'a> {
    pub(super) campaigns: &'a Campaigns,
    pub(super) campaign_id: &'a str,
    pub(super) messages: &'a [Message],
    pub(super) unit: &'a str,
    pub(super) scenario_id: &'a str,
    /// The question node the messages ask (counted as sent per recipient).
    pub(super) asks_node: Option<&'a str>,
    pub(super) pace: &'a Pace,
    /// Sending an uncertain chunk of a cancelled campaign again, to settle it.
    pub(super) resolving: bool,
}

impl ChunkTurn<'_> {
    /// Claims the chunk, checks the campaign still sends, makes its one call
    /// and settles it conditional on the claim.
    pub(super) async fn run(&self, chunk: &Stored<ChunkDoc>) -> Result<TurnOutcome, StoreError> {
        let store = &self.campaigns.inner.store;
        self.pace.slot().await;
        let Some(claimed) = store.claim_chunk(chunk).await? else {
            return Ok(TurnOutcome::NotSettled);
        };
        // A cancel that landed before this claim stops the chunk here, unless
        // an earlier call of it may have reached LINE: then the same retry key
        // finds out (409) or sends it once, as a claim before the cancel would.
        let sending = self.resolving
            || chunk.doc.uncertain
            || store
                .campaign(self.campaign_id)
                .await?
                .is_some_and(|campaign| campaign.doc.state == CampaignState::Sending);
        if !sending {
            if store.settle_chunk(chunk, claimed, &ChunkEnd::Skipped, None).await? {
                crate::metrics::series::campaign_chunk("skipped", chunk.doc.count);
            }
            return Ok(TurnOutcome::Cancelled);
        }
        let now_ms = self.campaigns.now().as_millisecond();
        let first_attempt = chunk.doc.first_attempt_ms.unwrap_or(now_ms);
        let end = if chunk.doc.uncertain && now_ms - first_attempt > RETRY_KEY_WINDOW_MS {
            ChunkEnd::Failed {
                error: "not settled within LINE's 24-hour retry key window; it may have reached its users".into(),
                status: None,
            }
        } else {
            let Some(users) = store.chunk_users(&chunk.id).await? else {
                return Ok(TurnOutcome::NotSettled);
            };
            let retry_key = ActionKey::campaign_chunk(&chunk.id).retry_key();
            let result = self
                .campaigns
                .inner
                .line
                .multicast(&users, self.messages, Some(self.unit), retry_key)
                .await;
            self.end_of(chunk, result)
        };
        let outcome = match &end {
            ChunkEnd::Sent => "sent",
            ChunkEnd::Failed { .. } => "failed",
            ChunkEnd::Retry { .. } => "retry_later",
            ChunkEnd::Skipped => "skipped",
        };
        tracing::info!(chunk.id = %chunk.id, chunk.users = chunk.doc.count, outcome, "campaign chunk");
        // Campaigns refuse scenarios with splits: no arm to count.
        let asks = self.asks_node.and_then(|node| {
            let scenario = crate::ids::ScenarioId::parse(self.scenario_id).ok()?;
            let node = crate::ids::NodeId::parse(node).ok()?;
            super::super::asked_on(
                &self.campaigns.inner.engine,
                &scenario,
                Some(&node),
                &crate::engine::Arms::default(),
                self.campaigns.inner.clock.now(),
            )
            .asks
        });
        let sent_count = asks.as_ref().map(|asks| (self.scenario_id, asks));
        if !store.settle_chunk(chunk, claimed, &end, sent_count).await? {
            return Ok(TurnOutcome::NotSettled);
        }
        crate::metrics::series::campaign_chunk(outcome, chunk.doc.count);
        Ok(match end {
            ChunkEnd::Sent => TurnOutcome::Settled {
                sent: u64::from(chunk.doc.count),
            },
            ChunkEnd::Failed { .. } | ChunkEnd::Skipped => TurnOutcome::Settled { sent: 0 },
            ChunkEnd::Retry { .. } => TurnOutcome::NotSettled,
        })
    }

    fn end_of(&self, chunk: &Stored<ChunkDoc>, result: Result<Delivered, SendError>) -> ChunkEnd {
        let policy = &self.campaigns.inner.policy;
        let attempts = chunk.doc.attempts.saturating_add(1);
        let retry = |wait: Duration, error: &SendError, counted: bool| ChunkEnd::Retry {
            wake_at_ms: self
                .campaigns
                .now()
                .as_millisecond()
                .saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)),
            error: error.to_string(),
            counted,
            uncertain: !error.certainly_not_sent(),
        };
        match result {
            Ok(Delivered::Sent | Delivered::AlreadyAccepted | Delivered::Logged) => ChunkEnd::Sent,
            Err(error @ SendError::RateLimited { retry_after }) => {
                let wait = retry_after.unwrap_or(Duration::from_secs(1));
                self.pace.back_off(wait);
                retry(wait, &error, false)
            }
            Err(SendError::Rejected { status, reason }) => ChunkEnd::Failed {
                error: format!("LINE rejected the multicast with status {status}: {reason}"),
                status: Some(status),
            },
            Err(SendError::InvalidReplyToken) => ChunkEnd::Failed {
                error: SendError::InvalidReplyToken.to_string(),
                status: Some(400),
            },
            Err(error) if attempts >= policy.max_attempts => ChunkEnd::Failed {
                error: if error.certainly_not_sent() && !chunk.doc.uncertain {
                    format!("gave up after {attempts} attempts: {error}")
                } else {
                    format!("gave up after {attempts} attempts: {error}; it may have reached its users")
                },
                status: None,
            },
            Err(error) => retry(policy.backoff(attempts), &error, true),
        }
    }
}
