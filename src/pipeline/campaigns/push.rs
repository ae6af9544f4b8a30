//! A push campaign's chunk: the scenario takes a split, a branch or personal
//! text before its first question or wait, so each recipient's start is
//! decided on their own, as a manual send decides it (the split's arm by
//! user, the branch on their record, their name and fields), by the scenario
//! version the run is pinned to, then pushed with a retry key from the
//! campaign and the user.
//!
//! A chunk's turn pushes those of its users no earlier turn settled, and
//! keeps what it learnt on the chunk with its retry (`pushes`): who LINE took
//! with what was decided and sent to them, who it refused, whose push may
//! have reached it. A push repeated with its key after a lost answer is
//! refused with 409 if LINE took it, so a recipient gets the campaign at
//! most once, across turns, instances and crashes; the settle records for
//! each recipient what was pushed to them. After a cancel, only pushes that
//! may have reached LINE are repeated (to find out); the rest are skipped.

use super::Campaigns;
use super::chunk::ChunkTurn;
use crate::engine::campaign::RecipientStart;
use crate::engine::{Engine, Rendered, Variant};
use crate::ids::{LineUserId, NodeId, RunId, ScenarioId};
use crate::line::client::SendError;
use crate::line::messages::Message;
use crate::outbound::ActionKey;
use crate::pipeline::PipelineError;
use crate::pipeline::branches::StepSoFar;
use crate::store::{ChunkDoc, ChunkEnd, Stored};
use futures::StreamExt;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Pushes of one chunk in flight (chunks in flight times this stays well
/// under LINE's 2,000 pushes a second).
const PUSHES_IN_FLIGHT: usize = 8;

/// A push campaign's chunks a second at most: 40 chunks of 50 are LINE's
/// 2,000 pushes a second.
pub(super) const PUSH_CHUNKS_PER_SECOND: u32 = 40;

/// What was decided and pushed to a recipient LINE took: what the settle
/// records for them and counts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Taken {
    pub(super) user: String,
    pub(super) start: RecipientStart,
    /// The split arm their start took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) took: Option<Variant>,
    /// The question their messages ask, and the arm it is counted in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) asks: Option<NodeId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) asks_variant: Option<String>,
}

impl Taken {
    fn of(user: &LineUserId, chain: Rendered) -> Self {
        Self {
            user: user.as_str().to_owned(),
            start: RecipientStart {
                opens: chain.opens,
                timers: chain.timers,
                changes: chain.changes,
            },
            took: chain.variant,
            asks: chain.asks,
            asks_variant: chain.asks_variant,
        }
    }
}

/// What a push chunk's turns learnt so far (kept on the chunk as JSON).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Progress {
    #[serde(default)]
    pub(super) taken: Vec<Taken>,
    /// LINE refused these (or their start cannot be rendered): never pushed again.
    #[serde(default)]
    pub(super) refused: Vec<String>,
    /// Their last push may have reached LINE (a 5xx, no answer).
    #[serde(default)]
    pub(super) unsure: Vec<String>,
}

impl Progress {
    /// The chunk's progress as stored; an unreadable one counts as none (its
    /// users are pushed again with their keys: LINE refuses a repeat).
    fn of(chunk: &ChunkDoc) -> Self {
        chunk
            .pushes
            .as_deref()
            .and_then(|raw| serde_json::from_str(raw).ok())
            .unwrap_or_default()
    }
}

/// What became of one recipient's push this turn.
enum Pushed {
    Taken(Box<Taken>),
    /// LINE refused it (a user who blocked the account, say), or their start
    /// cannot be rendered: counted failed, never tried again.
    Refused {
        user: String,
        error: String,
    },
    /// Not known to be taken: the chunk's turn is tried again.
    Later {
        user: String,
        error: String,
        /// It may have reached LINE.
        uncertain: bool,
        /// LINE asked to wait this long (429).
        rate_limited: Option<Duration>,
    },
}

/// A push chunk's turn: how it ends, who LINE took (with what was decided
/// for them), how many it refused and how many a cancel skipped.
pub(super) struct PushRound {
    pub(super) end: ChunkEnd,
    pub(super) taken: Vec<Taken>,
    pub(super) refused: u32,
    pub(super) skipped: u32,
}

/// One recipient's start in `run` as `engine` decides it for them, and its
/// messages rendered with their values.
pub(super) async fn decide_start(
    campaigns: &Campaigns,
    engine: &Engine,
    scenario: &ScenarioId,
    run: &RunId,
    user: &LineUserId,
) -> Result<(Rendered, Vec<Message>), PipelineError> {
    let (rendered, _) = engine
        .manual_start_in_run(scenario, run, user)
        .map_err(|error| PipelineError::Defect(format!("scenario {scenario}: {error}")))?;
    let store = &campaigns.inner.store;
    let decided =
        crate::pipeline::branches::decide(store, engine, scenario, user, rendered, Some(run), StepSoFar::default())
            .await?;
    let chain = decided.chain;
    let step = StepSoFar {
        changes: chain.changes.clone(),
        answer: None,
        read: decided.read,
    };
    let (values, _) = campaigns
        .inner
        .personal
        .values_for(user, scenario, &chain.messages, engine, &step)
        .await?;
    let mut messages = chain.messages.clone();
    crate::engine::personal::render(&mut messages, values.as_ref());
    Ok((chain, messages))
}

impl ChunkTurn<'_> {
    /// Decides and pushes the start of each of `chunk`'s users no earlier
    /// turn settled, then how the chunk ends. `sending`: the campaign still
    /// sends (after a cancel, only pushes that may have reached LINE are
    /// repeated). `interrupted`: the last turn stopped half-way, so any push
    /// it did not record may have reached LINE.
    pub(super) async fn push_all(
        &self,
        runs: &super::chunk::Runs,
        chunk: &Stored<ChunkDoc>,
        sending: bool,
        interrupted: bool,
    ) -> PushRound {
        let mut progress = Progress::of(&chunk.doc);
        if interrupted {
            let recorded: HashSet<&str> = progress
                .taken
                .iter()
                .map(|taken| taken.user.as_str())
                .chain(progress.refused.iter().map(String::as_str))
                .chain(progress.unsure.iter().map(String::as_str))
                .collect();
            let unknown: Vec<String> = chunk
                .doc
                .users
                .iter()
                .filter(|user| !recorded.contains(user.as_str()))
                .cloned()
                .collect();
            progress.unsure.extend(unknown);
        }
        let settled: HashSet<&str> = progress
            .taken
            .iter()
            .map(|taken| taken.user.as_str())
            .chain(progress.refused.iter().map(String::as_str))
            .collect();
        let unsure: HashSet<&str> = progress.unsure.iter().map(String::as_str).collect();
        let (to_push, skipped): (Vec<&String>, Vec<&String>) = chunk
            .doc
            .users
            .iter()
            .filter(|user| !settled.contains(user.as_str()))
            .partition(|user| sending || unsure.contains(user.as_str()));
        let skipped = u32::try_from(skipped.len()).unwrap_or(u32::MAX);
        let results: Vec<Pushed> = match self
            .campaigns
            .inner
            .versions
            .engine_for(runs.scenario(), runs.version())
            .await
        {
            Ok(engine) => {
                let run = RunId::of_campaign(self.campaign_id);
                let waiting = AtomicBool::new(false);
                let pushes: Vec<_> = to_push
                    .iter()
                    .map(|user| self.push_one(&engine, runs.scenario(), &run, user, &waiting))
                    .collect();
                futures::stream::iter(pushes)
                    .buffer_unordered(PUSHES_IN_FLIGHT)
                    .collect()
                    .await
            }
            Err(error) => to_push
                .iter()
                .map(|user| Pushed::Later {
                    user: (*user).clone(),
                    error: format!("the run's scenario version cannot be read: {error}"),
                    uncertain: false,
                    rate_limited: None,
                })
                .collect(),
        };
        let was_unsure = std::mem::take(&mut progress.unsure);
        let mut later = Vec::new();
        let mut progressed = false;
        for result in results {
            match result {
                Pushed::Taken(taken) => {
                    progressed = true;
                    progress.taken.push(*taken);
                }
                Pushed::Refused { user, error } => {
                    tracing::info!(chunk.id = %chunk.id, error = %error, outcome = "refused", "campaign push");
                    progressed = true;
                    progress.refused.push(user);
                }
                Pushed::Later {
                    user,
                    error,
                    uncertain,
                    rate_limited,
                } => {
                    // Unsure once, unsure until LINE answers for it.
                    if uncertain || was_unsure.contains(&user) {
                        progress.unsure.push(user);
                    }
                    later.push((error, rate_limited));
                }
            }
        }
        self.round_end(chunk, progress, &later, progressed, skipped)
    }

    /// One recipient: decided, then pushed, unless LINE asked this chunk to
    /// wait meanwhile (the rest wait for the chunk's next turn).
    async fn push_one(
        &self,
        engine: &Engine,
        scenario: &ScenarioId,
        run: &RunId,
        raw: &str,
        waiting: &AtomicBool,
    ) -> Pushed {
        let later = |error: String, uncertain: bool, rate_limited: Option<Duration>| Pushed::Later {
            user: raw.to_owned(),
            error,
            uncertain,
            rate_limited,
        };
        let Ok(user) = LineUserId::parse(raw.to_owned()) else {
            return Pushed::Refused {
                user: raw.to_owned(),
                error: "not a LINE user id".into(),
            };
        };
        if waiting.load(Ordering::Relaxed) {
            let error = "LINE is rate limiting requests (429)".to_owned();
            return later(error, false, Some(Duration::from_secs(1)));
        }
        let (chain, messages) = match decide_start(self.campaigns, engine, scenario, run, &user).await {
            Ok(decided) => decided,
            Err(PipelineError::Defect(problem)) => {
                return Pushed::Refused {
                    user: raw.to_owned(),
                    error: problem,
                };
            }
            Err(error) => return later(error.to_string(), false, None),
        };
        // A start that sends nothing (a branch straight into a wait) begins
        // the run all the same.
        if messages.is_empty() {
            return Pushed::Taken(Box::new(Taken::of(&user, chain)));
        }
        let retry_key = ActionKey::campaign_push(self.campaign_id, &user).retry_key();
        match self
            .campaigns
            .inner
            .line
            .push(user.as_str(), &messages, retry_key)
            .await
        {
            Ok(_) => Pushed::Taken(Box::new(Taken::of(&user, chain))),
            Err(error @ (SendError::Rejected { .. } | SendError::InvalidReplyToken)) => Pushed::Refused {
                user: raw.to_owned(),
                error: error.to_string(),
            },
            Err(error @ SendError::RateLimited { retry_after }) => {
                let wait = retry_after.unwrap_or(Duration::from_secs(1));
                waiting.store(true, Ordering::Relaxed);
                self.pace.back_off(wait);
                later(error.to_string(), false, Some(wait))
            }
            Err(error) => later(error.to_string(), !error.certainly_not_sent(), None),
        }
    }

    /// How a push chunk's turn ends: sent when every push was taken, refused
    /// or skipped; else tried again with the progress kept (after LINE's
    /// wait, or the back-off). Turns without progress count as attempts; after
    /// the last, the chunk is sent for those taken (the rest counted failed)
    /// or, with none taken, failed.
    fn round_end(
        &self,
        chunk: &Stored<ChunkDoc>,
        progress: Progress,
        later: &[(String, Option<Duration>)],
        progressed: bool,
        skipped: u32,
    ) -> PushRound {
        let refused = u32::try_from(progress.refused.len()).unwrap_or(u32::MAX);
        let Some((first_error, _)) = later.first() else {
            return PushRound {
                end: ChunkEnd::Sent,
                taken: progress.taken,
                refused,
                skipped,
            };
        };
        let error = format!(
            "{} of {} pushes not taken yet: {first_error}",
            later.len(),
            chunk.doc.count
        );
        let rate_limited_only = later.iter().all(|(_, wait)| wait.is_some());
        let counted = !rate_limited_only && !progressed;
        let attempts = chunk.doc.attempts.saturating_add(1);
        let policy = &self.campaigns.inner.policy;
        if counted && attempts >= policy.max_attempts {
            let error = if progress.unsure.is_empty() {
                format!("gave up after {attempts} attempts without progress: {error}")
            } else {
                format!(
                    "gave up after {attempts} attempts without progress: {error}; some may have reached their users"
                )
            };
            let not_taken = u32::try_from(later.len()).unwrap_or(u32::MAX);
            // Those LINE took keep their runs; the rest count failed.
            if !progress.taken.is_empty() {
                tracing::warn!(chunk.id = %chunk.id, error = %error, outcome = "partly_failed", "campaign push chunk");
                return PushRound {
                    end: ChunkEnd::Sent,
                    taken: progress.taken,
                    refused: refused.saturating_add(not_taken),
                    skipped,
                };
            }
            return PushRound {
                end: ChunkEnd::Failed { error, status: None },
                taken: Vec::new(),
                refused,
                skipped,
            };
        }
        // LINE's longest wait, and the back-off when anything else failed.
        let backoff = (!rate_limited_only).then(|| policy.backoff(attempts));
        let wait = later
            .iter()
            .filter_map(|(_, wait)| *wait)
            .chain(backoff)
            .max()
            .unwrap_or(Duration::from_secs(1));
        // Users LINE took have it, and an unsure one may: a cancel must not
        // skip the chunk, whose settle records their runs.
        let uncertain = !progress.taken.is_empty() || !progress.unsure.is_empty();
        PushRound {
            end: ChunkEnd::Retry {
                wake_at_ms: self
                    .campaigns
                    .now()
                    .as_millisecond()
                    .saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)),
                error,
                counted,
                uncertain,
                pushes: serde_json::to_string(&progress).ok(),
            },
            taken: Vec::new(),
            refused: 0,
            skipped: 0,
        }
    }
}
