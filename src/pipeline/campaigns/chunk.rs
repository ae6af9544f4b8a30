//! One chunk's turn: claim it, check the campaign still sends, make its one
//! multicast call, settle it conditional on the claim. And the pace that spaces
//! a campaign's calls.

use super::Campaigns;
use crate::engine::campaign::{Delivery, RecipientStart};
use crate::ids::{LineUserId, ScenarioId, scenario_marker_id};
use crate::line::client::{Delivered, SendError};
use crate::line::messages::Message;
use crate::outbound::ActionKey;
use crate::pipeline::PipelineError;
use crate::store::{
    CampaignDoc, CampaignState, ChunkDoc, ChunkEnd, ChunkSent, RecipientPart, RecipientRead, RunRecord, Stored, Version,
};
use std::collections::BTreeMap;
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
    pub(super) fn back_off(&self, wait: Duration) {
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
    /// One multicast a chunk, or one push a recipient.
    pub(super) delivery: Delivery,
    /// A multicast campaign's messages (a push campaign's are decided per user).
    pub(super) messages: &'a [Message],
    pub(super) unit: &'a str,
    pub(super) scenario_id: &'a str,
    /// The question node the messages ask (counted as sent per recipient).
    pub(super) asks_node: Option<&'a str>,
    /// What a sent chunk records for each of its recipients (`None`: a
    /// campaign created before campaigns started runs).
    pub(super) runs: Option<&'a Runs>,
    pub(super) pace: &'a Pace,
    /// Sending an uncertain chunk of a cancelled campaign again, to settle it.
    pub(super) resolving: bool,
}

impl ChunkTurn<'_> {
    /// Claims the chunk, checks the campaign still sends, makes its one call
    /// and settles it conditional on the claim.
    pub(super) async fn run(&self, chunk: &Stored<ChunkDoc>) -> Result<TurnOutcome, PipelineError> {
        let store = &self.campaigns.inner.store;
        self.pace.slot().await;
        let Some(claimed) = store.claim_chunk(chunk).await? else {
            return Ok(TurnOutcome::NotSettled);
        };
        let claimed_at = Instant::now();
        // A cancel that landed before this claim stops the chunk here, unless
        // an earlier call of it may have reached LINE: then the same retry key
        // finds out (409) or sends it once, as a claim before the cancel would.
        let campaign_sends = !self.resolving
            && store
                .campaign(self.campaign_id)
                .await?
                .is_some_and(|campaign| campaign.doc.state == CampaignState::Sending);
        if !(campaign_sends || chunk.doc.uncertain) {
            if store
                .settle_chunk(chunk, claimed, &ChunkEnd::Skipped, None, &[])
                .await?
            {
                crate::metrics::series::campaign_chunk("skipped", chunk.doc.count);
            }
            return Ok(TurnOutcome::Cancelled);
        }
        let now_ms = self.campaigns.now().as_millisecond();
        let first_attempt = chunk.doc.first_attempt_ms.unwrap_or(now_ms);
        let mut users = Vec::new();
        // A push chunk's recipients LINE took, with what was decided for each,
        // and how many it refused.
        let mut taken = Vec::new();
        let (mut refused, mut skipped) = (0u32, 0u32);
        // Since when its users may have it (Firestore's time), and whether they
        // may have had time to act on it before the settle lands.
        let mut window = Window::default();
        // The claim's version: a push chunk's turn moves it when it records
        // its decisions, and the settle is conditional on the latest.
        let mut claimed = claimed;
        let end = if chunk.doc.uncertain && now_ms - first_attempt > RETRY_KEY_WINDOW_MS {
            match self.delivery {
                Delivery::Push => {
                    // Its progress is on the chunk itself (the listing leaves
                    // it out); its users had all this time to act, so the
                    // settle reads what they did first.
                    let Some(read) = store.chunk(&chunk.id).await? else {
                        return Ok(TurnOutcome::NotSettled);
                    };
                    let round = self.out_of_window(&read);
                    (taken, refused, skipped) = (round.taken, round.refused, round.skipped);
                    window = Window {
                        since_ms: read.doc.uncertain_since.map(firestore::jiff::Timestamp::as_millisecond),
                        recovering: true,
                        slow_call: true,
                    };
                    round.end
                }
                Delivery::Multicast => ChunkEnd::Failed {
                    error: "not settled within LINE's 24-hour retry key window; it may have reached its users".into(),
                    status: None,
                },
            }
        } else {
            // Read with the claim's version: the chunk as this turn holds it.
            let Some(read) = store.chunk(&chunk.id).await? else {
                return Ok(TurnOutcome::NotSettled);
            };
            let called = std::time::Instant::now();
            let end = match (self.delivery, self.runs) {
                (Delivery::Push, Some(runs)) => {
                    let round = self
                        .push_all(runs, &read, (&mut claimed, claimed_at), campaign_sends)
                        .await;
                    (taken, refused, skipped) = (round.taken, round.refused, round.skipped);
                    round.end
                }
                (Delivery::Push, None) => ChunkEnd::Failed {
                    error: "a push campaign without what it records per recipient".into(),
                    status: None,
                },
                (Delivery::Multicast, _) => {
                    users.clone_from(&read.doc.users);
                    let retry_key = ActionKey::campaign_chunk(&chunk.id).retry_key();
                    let result = self
                        .campaigns
                        .inner
                        .line
                        .multicast(&users, self.messages, Some(self.unit), retry_key)
                        .await;
                    self.end_of(chunk, result)
                }
            };
            window = Window {
                since_ms: read.doc.uncertain_since.map(firestore::jiff::Timestamp::as_millisecond),
                recovering: chunk.doc.uncertain,
                slow_call: called.elapsed() > REACTION_TIME,
            };
            end
        };
        let outcome = match &end {
            ChunkEnd::Sent => "sent",
            ChunkEnd::Failed { .. } => "failed",
            ChunkEnd::Retry { .. } => "retry_later",
            ChunkEnd::Skipped => "skipped",
        };
        tracing::info!(
            chunk.id = %chunk.id,
            chunk.users = chunk.doc.count,
            chunk.refused = refused,
            delivery = self.delivery.as_str(),
            outcome,
            "campaign chunk"
        );
        let day = crate::ids::ScenarioId::parse(self.scenario_id)
            .map(|scenario| {
                self.campaigns
                    .engine()
                    .day_of(&scenario, self.campaigns.inner.clock.now())
            })
            .unwrap_or_default();
        let (sent, recipients) = match self.delivery {
            Delivery::Multicast => {
                let asks = self
                    .asks_node
                    .map(|node| (node.to_owned(), None, u32::try_from(users.len()).unwrap_or(u32::MAX)));
                let recipients = self.runs.map(|runs| runs.recipients(&users)).unwrap_or_default();
                let sent = ChunkSent {
                    scenario_id: self.scenario_id,
                    day: &day,
                    asks: asks.into_iter().collect(),
                    runs: Vec::new(),
                    failed_users: 0,
                    skipped_users: 0,
                };
                (sent, recipients)
            }
            Delivery::Push => {
                let mut sent = ChunkSent {
                    scenario_id: self.scenario_id,
                    day: &day,
                    failed_users: refused,
                    skipped_users: skipped,
                    ..ChunkSent::default()
                };
                let recipients = self
                    .runs
                    .map(|runs| runs.pushed_recipients(taken, &mut sent))
                    .unwrap_or_default();
                (sent, recipients)
            }
        };
        if !self.settle(chunk, claimed, &end, &sent, &recipients, window).await? {
            return Ok(TurnOutcome::NotSettled);
        }
        crate::metrics::series::campaign_chunk(outcome, chunk.doc.count);
        Ok(match end {
            ChunkEnd::Sent => TurnOutcome::Settled {
                sent: u64::from(chunk.doc.count.saturating_sub(refused).saturating_sub(skipped)),
            },
            ChunkEnd::Failed { .. } | ChunkEnd::Skipped => TurnOutcome::Settled { sent: 0 },
            ChunkEnd::Retry { .. } => TurnOutcome::NotSettled,
        })
    }

    /// Settles the chunk conditional on the claim, with its recipients' runs
    /// when LINE took it. When its users may have had time to act on it first
    /// (an earlier turn's call may have reached them, or this call was slow),
    /// it reads their markers and open questions: one who started the
    /// scenario anew since keeps that run, an open question that changed
    /// since stays, and each part written names the marker as read, so a
    /// change that lands meanwhile makes the settle read again. Timers are
    /// scheduled by the scenario version the run is pinned to.
    /// `Ok(false)`: the chunk moved on.
    async fn settle(
        &self,
        chunk: &Stored<ChunkDoc>,
        claimed: Version,
        end: &ChunkEnd,
        sent: &ChunkSent<'_>,
        recipients: &[Recipient],
        window: Window,
    ) -> Result<bool, PipelineError> {
        let store = &self.campaigns.inner.store;
        let (ChunkEnd::Sent, Some(runs)) = (end, self.runs) else {
            return Ok(store.settle_chunk(chunk, claimed, end, Some(sent), &[]).await?);
        };
        let engine = self
            .campaigns
            .inner
            .versions
            .engine_for(&runs.scenario, runs.version)
            .await?;
        let now = self.campaigns.inner.clock.now();
        let reads_first = window.recovering || window.slow_call;
        let any_opens = recipients.iter().any(|recipient| recipient.start(runs).opens.is_some());
        for _ in 0..SETTLE_ROUNDS {
            let reads = if reads_first {
                let ids: Vec<&str> = recipients.iter().map(|recipient| recipient.user.as_str()).collect();
                let markers: Vec<String> = recipients.iter().map(|recipient| recipient.marker_id.clone()).collect();
                let read = store.recipients_read(&ids, &markers, any_opens).await?;
                Some(read)
            } else {
                None
            };
            let parts: Vec<RecipientPart<'_>> = recipients
                .iter()
                .enumerate()
                .filter_map(|(index, recipient)| {
                    let part = match &reads {
                        None => Part::Whole(None),
                        Some(reads) => still_ours(reads.get(index)?, &runs.run, window.since_ms),
                    };
                    match part {
                        Part::Skip => None,
                        Part::Whole(marker) => Some(runs.part(&engine, recipient, marker, true, now)),
                        Part::KeepingQuestion(marker) => Some(runs.part(&engine, recipient, marker, false, now)),
                    }
                })
                .collect();
            if store.settle_chunk(chunk, claimed, end, Some(sent), &parts).await? {
                return Ok(true);
            }
            // Did the chunk move on, or a recipient's marker change since it was read?
            let held = store.chunk(&chunk.id).await?.is_some_and(|now| now.version == claimed);
            if !held || reads.is_none() {
                return Ok(false);
            }
        }
        Err(PipelineError::Contention(
            "the recipients' records kept changing while the chunk was settled".into(),
        ))
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
            pushes: None,
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

/// Rounds of read and settle of a chunk whose recipients' markers keep
/// changing under a recovering settle.
const SETTLE_ROUNDS: usize = 3;

/// One recipient of a chunk, with the id of their marker.
pub(super) struct Recipient {
    user: String,
    marker_id: String,
    /// A push campaign's recipient: their own start, and the split arm it
    /// took (a multicast's share the campaign's).
    own: Option<(RecipientStart, Option<String>)>,
}

impl Recipient {
    /// What the settle records for them.
    fn start<'a>(&'a self, runs: &'a Runs) -> &'a RecipientStart {
        self.own.as_ref().map_or(&runs.start, |(start, _)| start)
    }

    fn variant(&self) -> Option<&str> {
        self.own.as_ref().and_then(|(_, variant)| variant.as_deref())
    }
}

/// What a campaign's sent chunks record for each recipient: the run the
/// engine decided once for everyone ([`RecipientStart`]), begun for each.
pub(super) struct Runs {
    start: RecipientStart,
    scenario: ScenarioId,
    version: u32,
    run: String,
    campaign_id: String,
}

impl Runs {
    /// `None` for a campaign created before campaigns started runs.
    pub(super) fn of(campaign_id: &str, doc: &CampaignDoc) -> Result<Option<Self>, String> {
        let Some(raw) = &doc.recipient else {
            return Ok(None);
        };
        let start: RecipientStart = serde_json::from_str(raw)
            .map_err(|error| format!("what the campaign records per recipient cannot be read: {error}"))?;
        let scenario = ScenarioId::parse(doc.scenario_id.clone()).map_err(|error| error.to_string())?;
        Ok(Some(Self {
            start,
            scenario,
            version: doc.scenario_version,
            run: doc.run.clone(),
            campaign_id: campaign_id.to_owned(),
        }))
    }

    pub(super) fn scenario(&self) -> &ScenarioId {
        &self.scenario
    }

    /// The scenario version the run is pinned to.
    pub(super) fn version(&self) -> u32 {
        self.version
    }

    /// The chunk's users that are LINE user ids (the planner keeps no other).
    fn recipients(&self, users: &[String]) -> Vec<Recipient> {
        users
            .iter()
            .filter_map(|user| {
                let id = LineUserId::parse(user.clone()).ok()?;
                Some(Recipient {
                    marker_id: scenario_marker_id(&self.scenario, &id),
                    user: user.clone(),
                    own: None,
                })
            })
            .collect()
    }

    /// A push chunk's recipients LINE took, each with the start pushed to
    /// them, and what they count in `sent`: the question each was asked (by
    /// arm), the split arm each took.
    fn pushed_recipients(&self, taken: Vec<super::push::Taken>, sent: &mut ChunkSent<'_>) -> Vec<Recipient> {
        let mut asks: BTreeMap<(String, Option<String>), u32> = BTreeMap::new();
        let mut arms: BTreeMap<(String, String), u32> = BTreeMap::new();
        let mut recipients = Vec::with_capacity(taken.len());
        for taken in taken {
            let Ok(user) = LineUserId::parse(taken.user) else {
                continue;
            };
            if let Some(node) = &taken.asks {
                *asks.entry((node.to_string(), taken.asks_variant.clone())).or_default() += 1;
            }
            if let Some(took) = &taken.took {
                *arms.entry((took.node.to_string(), took.label.clone())).or_default() += 1;
            }
            recipients.push(Recipient {
                marker_id: scenario_marker_id(&self.scenario, &user),
                user: user.as_str().to_owned(),
                own: Some((taken.start, taken.took.map(|took| took.label))),
            });
        }
        sent.asks = asks.into_iter().map(|((node, arm), n)| (node, arm, n)).collect();
        sent.runs = arms.into_iter().map(|((node, label), n)| (node, label, n)).collect();
        recipients
    }

    /// One recipient's part: their marker naming the run and the campaign,
    /// the question the messages open, their timers due from `now`, what the
    /// first nodes do to their record.
    fn part<'a>(
        &'a self,
        engine: &crate::engine::Engine,
        recipient: &'a Recipient,
        marker_read: Option<crate::store::Expect>,
        opens: bool,
        now: chrono::DateTime<chrono::Utc>,
    ) -> RecipientPart<'a> {
        let start = recipient.start(self);
        let timers = LineUserId::parse(recipient.user.clone())
            .map(|user| crate::pipeline::timers::schedule(engine, &user, &start.timers, now))
            .unwrap_or_default();
        RecipientPart {
            run: RunRecord {
                marker_id: &recipient.marker_id,
                scenario_id: self.scenario.as_str(),
                user: &recipient.user,
                run: &self.run,
                run_version: self.version,
                variant: recipient.variant(),
                campaign_id: Some(&self.campaign_id),
            },
            question: start
                .opens
                .as_ref()
                .filter(|_| opens)
                .map(|opens| crate::pipeline::typed::opening(&recipient.user, opens, None, now)),
            timers,
            changes: &start.changes,
            marker_read,
        }
    }
}

/// How long a user takes at least to act on a message that reached them: a
/// settle landing within it of the call cannot have been overtaken.
const REACTION_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// When a chunk's users may have had its message.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    /// From this claim's commit on (Firestore's time), or an earlier one's
    /// whose call may have reached LINE.
    since_ms: Option<i64>,
    /// An earlier turn's call may have reached them.
    recovering: bool,
    /// This turn's call took longer than [`REACTION_TIME`].
    slow_call: bool,
}

/// What a settle that read a recipient writes for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Nothing: they already hold this run, or started the scenario anew
    /// since the message may have reached them (that newer run wins).
    Skip,
    /// Their whole part, on the marker as read.
    Whole(Option<crate::store::Expect>),
    /// Their part without opening the question: their open question changed
    /// since the message may have reached them, and stays.
    KeepingQuestion(Option<crate::store::Expect>),
}

/// What a settle that read `read` writes for one recipient of `run`, whose
/// message may have reached them from `since` on (ms, Firestore's time; no
/// time known: any change counts as after). A marker that changed since
/// without a new start (an answer to the campaign's buttons, say) gets the
/// run, so the answer's follow-ups in it go on.
fn still_ours(read: &RecipientRead, run: &str, since: Option<i64>) -> Part {
    let after = |ms: i64| since.is_none_or(|since| ms > since);
    if let Some(marker) = &read.marker {
        if marker.run.as_deref() == Some(run) {
            return Part::Skip;
        }
        if after(marker.version.as_millis()) && marker.last_started_ms.is_some_and(after) {
            return Part::Skip;
        }
    }
    let marker = Some(match &read.marker {
        Some(marker) => crate::store::Expect::At(marker.version),
        None => crate::store::Expect::Absent,
    });
    if read.question.is_some_and(|version| after(version.as_millis())) {
        Part::KeepingQuestion(marker)
    } else {
        Part::Whole(marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Expect, MarkerRead};

    fn at(ms: i64) -> Version {
        Version::new_for_tests(gcloud_sdk::prost_types::Timestamp {
            seconds: ms / 1000,
            nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap_or(0),
        })
    }

    #[test]
    fn a_settle_that_read_keeps_what_users_did_since_the_message_may_have_reached_them() {
        const RUN: &str = "kabc";
        let since = Some(10_000);
        let marker = |run: &str, changed, started: Option<i64>| {
            Some(MarkerRead {
                run: Some(run.to_owned()),
                last_started_ms: started,
                version: at(changed),
            })
        };
        // (marker, open question, what is written)
        let cases = [
            (None, None, Part::Whole(Some(Expect::Absent))),
            (
                marker("older", 9_000, Some(8_000)),
                None,
                Part::Whole(Some(Expect::At(at(9_000)))),
            ),
            // Already in this run.
            (marker(RUN, 9_000, None), None, Part::Skip),
            (marker(RUN, 11_000, None), None, Part::Skip),
            // Started anew after the message may have reached them: that run wins.
            (marker("newer", 11_000, Some(10_500)), None, Part::Skip),
            // Answered since (no new start): the run is written, on that marker.
            (
                marker("older", 11_000, Some(8_000)),
                None,
                Part::Whole(Some(Expect::At(at(11_000)))),
            ),
            (
                marker("older", 11_000, None),
                None,
                Part::Whole(Some(Expect::At(at(11_000)))),
            ),
            // A question opened for them since stays open.
            (None, Some(at(12_000)), Part::KeepingQuestion(Some(Expect::Absent))),
            (
                marker("older", 9_000, None),
                Some(at(12_000)),
                Part::KeepingQuestion(Some(Expect::At(at(9_000)))),
            ),
            (
                marker("older", 9_000, None),
                Some(at(9_500)),
                Part::Whole(Some(Expect::At(at(9_000)))),
            ),
        ];
        for (marker, question, expected) in cases {
            let read = RecipientRead {
                marker: marker.clone(),
                question,
            };
            assert_eq!(still_ours(&read, RUN, since), expected, "{marker:?} {question:?}");
        }
        // No time known (an older chunk): a start at any time counts as after.
        let read = RecipientRead {
            marker: marker("older", 1, Some(1)),
            question: None,
        };
        assert_eq!(still_ours(&read, RUN, None), Part::Skip);
    }
}
