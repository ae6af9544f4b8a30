//! A push campaign's chunk: the scenario takes a split, a branch or personal
//! text before its first question or wait, so each recipient's start is
//! decided on their own, as a manual send decides it (the split's arm by
//! user, the branch on their record, their name and fields), by the scenario
//! version the run is pinned to, then pushed with a retry key from the
//! campaign and the user.
//!
//! Decide, record, then send: a chunk's turn decides the start of each user
//! who has none yet, writes the decisions on the chunk (`pushes`,
//! conditional on its claim) before any push, and every push (the first, or
//! a repeat after a crash or a lost answer) sends the decision's bytes; the
//! settle records that decision for each user LINE took. A push repeated with
//! its key is refused with 409 if LINE took it, so a recipient gets the
//! campaign at most once, across turns, instances and crashes, and their run
//! is what they received. After a cancel, only pushes that may have reached
//! LINE are repeated (to find out); the rest are skipped.

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

/// Pushes of one chunk in flight (the driver's chunks in flight times this
/// stays well under LINE's 2,000 pushes a second).
const PUSHES_IN_FLIGHT: usize = 8;

/// The largest progress kept on a chunk: Firestore's documents hold 1 MiB,
/// and the chunk's other fields (its 50 user ids, its counts) take little.
const MAX_PROGRESS_BYTES: usize = 900 * 1024;

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

/// A recipient's start, decided before their first push and kept on the
/// chunk: every repeat of the push sends what was decided (the templates
/// with the values they were decided with) and the settle records it,
/// whatever the user did meanwhile.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Decided {
    pub(super) start: Taken,
    /// Its messages before their placeholders are filled: an index into the
    /// chunk's `templates` (one copy of each distinct set, so 50 users of a
    /// split's two arms keep two).
    template: usize,
    /// What the placeholders render with (names too: dropped with the
    /// progress when the chunk settles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    personal: Option<crate::values::PersonalValues>,
    /// A push of it may have reached LINE: set before the push is made, so a
    /// crash during it leaves it set; cleared only when LINE's answer says
    /// no push of it was taken.
    #[serde(default)]
    maybe_sent: bool,
}

impl Decided {
    /// Its bytes: the template filled with its values (`None`: the progress
    /// names no such template, a defect).
    fn rendered(&self, templates: &[Vec<Message>]) -> Option<Vec<Message>> {
        let mut messages = templates.get(self.template)?.clone();
        crate::engine::personal::render(&mut messages, self.personal.as_ref());
        Some(messages)
    }
}

/// What a push chunk's turns learnt so far (kept on the chunk as JSON until
/// it settles).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Progress {
    #[serde(default)]
    pub(super) taken: Vec<Taken>,
    /// LINE refused these (or their start cannot be rendered): never pushed again.
    #[serde(default)]
    pub(super) refused: Vec<String>,
    /// Decided, not yet known to be taken.
    #[serde(default)]
    pub(super) decided: Vec<Decided>,
    /// The distinct message sets the decisions send.
    #[serde(default)]
    templates: Vec<Vec<Message>>,
}

impl Progress {
    /// The chunk's progress as stored. Unreadable progress is a defect (a
    /// deploy that changed its shape mid-campaign): the chunk fails loudly
    /// rather than push its users again on no record.
    fn of(chunk: &ChunkDoc) -> Result<Self, String> {
        match chunk.pushes.as_deref() {
            None => Ok(Self::default()),
            // Where it broke, never what it holds (names, texts): the error
            // outlives the progress, in the chunk and its dead letter.
            Some(raw) => serde_json::from_str(raw).map_err(|error| {
                format!(
                    "{:?} error at line {} column {}",
                    error.classify(),
                    error.line(),
                    error.column()
                )
            }),
        }
    }

    /// The index of `messages` among the templates, added when new.
    fn template(&mut self, messages: Vec<Message>) -> usize {
        match self.templates.iter().position(|known| *known == messages) {
            Some(index) => index,
            None => {
                self.templates.push(messages);
                self.templates.len() - 1
            }
        }
    }

    /// Users whose push may have reached LINE and is not settled.
    fn maybe_sent(&self) -> usize {
        self.decided.iter().filter(|decided| decided.maybe_sent).count()
    }

    /// Its users' pushes may have reached them: a cancel must not skip the
    /// chunk (its settle records their runs), nor LINE's retry window pass
    /// unnoticed. Refused users count too, so a cancel counts them failed,
    /// not skipped.
    fn any_outcome(&self) -> bool {
        !self.taken.is_empty() || !self.refused.is_empty() || self.maybe_sent() > 0
    }
}

/// What became of one recipient's push this turn.
enum Pushed {
    Taken(String),
    /// LINE refused it (a user who blocked the account, say): counted
    /// failed, never tried again.
    Refused {
        user: String,
        error: String,
    },
    /// Not known to be taken: the chunk's turn is tried again.
    Later {
        user: String,
        error: String,
        /// This push may have reached LINE.
        uncertain: bool,
        /// LINE asked to wait this long (429).
        rate_limited: Option<Duration>,
    },
}

/// What one turn's pushes share: LINE asked the chunk to wait (429), said
/// the month's quota is used up, and when the turn stops starting pushes.
struct Flags<'a> {
    waiting: AtomicBool,
    refusing: AtomicBool,
    until: std::time::Instant,
    /// Users an earlier turn's push may have reached: never refused
    /// without asking LINE (the repeat's 409 says it took them).
    was_maybe_sent: &'a HashSet<String>,
    templates: &'a [Vec<Message>],
}

/// What became of one recipient's decision this turn.
enum Decision {
    /// Decided, with its messages before their placeholders are filled.
    Made(Box<Decided>, Vec<Message>),
    /// Their start cannot be rendered (a defect): counted failed.
    Refused { user: String, error: String },
    /// Not now (Firestore): the chunk's turn is tried again.
    Later(String),
}

/// A push chunk's turn: how it ends, who LINE took (with what was decided
/// for them), how many it refused and how many a cancel skipped.
pub(super) struct PushRound {
    pub(super) end: ChunkEnd,
    pub(super) taken: Vec<Taken>,
    pub(super) refused: u32,
    pub(super) skipped: u32,
}

impl PushRound {
    /// The chunk fails with `error`: nobody's run is recorded.
    fn failed(error: String) -> Self {
        Self {
            end: ChunkEnd::Failed { error, status: None },
            taken: Vec::new(),
            refused: 0,
            skipped: 0,
        }
    }
}

/// One recipient's start in `run` as `engine` decides it for them (a
/// manual send's decision: their arm, the branch on their record), and the
/// values its placeholders render with.
async fn decide(
    campaigns: &Campaigns,
    engine: &Engine,
    scenario: &ScenarioId,
    run: &RunId,
    user: &LineUserId,
) -> Result<(Rendered, Option<crate::values::PersonalValues>), PipelineError> {
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
    Ok((chain, values))
}

/// One recipient's start decided (see [`decide`]), its messages rendered.
pub(super) async fn decide_start(
    campaigns: &Campaigns,
    engine: &Engine,
    scenario: &ScenarioId,
    run: &RunId,
    user: &LineUserId,
) -> Result<(Rendered, Vec<Message>), PipelineError> {
    let (chain, values) = decide(campaigns, engine, scenario, run, user).await?;
    let mut messages = chain.messages.clone();
    crate::engine::personal::render(&mut messages, values.as_ref());
    Ok((chain, messages))
}

impl ChunkTurn<'_> {
    /// Decides the start of each of `chunk`'s users no earlier turn settled
    /// (once: a decision is kept), records the decisions on the chunk
    /// (conditional on the claim, which moves to `claimed`), then pushes
    /// them, and says how the chunk ends. `sending`: the campaign still
    /// sends; after a cancel only the pushes that may have reached LINE are
    /// repeated, to find out (LINE answers 409 if it took them).
    pub(super) async fn push_all(
        &self,
        runs: &super::chunk::Runs,
        chunk: &Stored<ChunkDoc>,
        (claimed, claimed_at): (&mut crate::store::Version, std::time::Instant),
        sending: bool,
    ) -> PushRound {
        // Half the claim's lease: a turn slowed by Firestore or LINE stops
        // starting pushes before another instance may take the chunk over.
        let until = claimed_at + self.campaigns.inner.store.lease() / 2;
        let mut progress = match Progress::of(&chunk.doc) {
            Ok(progress) => progress,
            Err(problem) => {
                return PushRound::failed(format!(
                    "the chunk's record of its pushes cannot be read (a defect): {problem}"
                ));
            }
        };
        let settled: HashSet<&str> = progress
            .taken
            .iter()
            .map(|taken| taken.user.as_str())
            .chain(progress.refused.iter().map(String::as_str))
            .collect();
        let maybe_sent: HashSet<&str> = progress
            .decided
            .iter()
            .filter(|decided| decided.maybe_sent)
            .map(|decided| decided.start.user.as_str())
            .collect();
        let (to_push, skipped): (Vec<String>, Vec<String>) = chunk
            .doc
            .users
            .iter()
            .filter(|user| !settled.contains(user.as_str()))
            .cloned()
            .partition(|user| sending || maybe_sent.contains(user.as_str()));
        let skipped = u32::try_from(skipped.len()).unwrap_or(u32::MAX);
        let was_maybe_sent: HashSet<String> = maybe_sent.into_iter().map(str::to_owned).collect();

        // Each user's start, decided once.
        let mut later = Vec::new();
        let mut progressed = false;
        let undecided: Vec<&String> = {
            let decided: HashSet<&str> = progress
                .decided
                .iter()
                .map(|decided| decided.start.user.as_str())
                .collect();
            to_push.iter().filter(|user| !decided.contains(user.as_str())).collect()
        };
        if !undecided.is_empty() {
            match self
                .campaigns
                .inner
                .versions
                .engine_for(runs.scenario(), runs.version())
                .await
            {
                Ok(engine) => {
                    let run = RunId::of_campaign(self.campaign_id);
                    let deciding: Vec<_> = undecided
                        .iter()
                        .map(|user| self.decide_one(&engine, runs.scenario(), &run, user.as_str()))
                        .collect();
                    let decisions: Vec<Decision> = futures::stream::iter(deciding)
                        .buffer_unordered(PUSHES_IN_FLIGHT)
                        .collect()
                        .await;
                    for decision in decisions {
                        match decision {
                            Decision::Made(mut decided, messages) => {
                                decided.template = progress.template(messages);
                                progress.decided.push(*decided);
                            }
                            Decision::Refused { user, error } => {
                                tracing::warn!(chunk.id = %chunk.id, error = %error, outcome = "refused", "campaign push not decided");
                                progressed = true;
                                progress.refused.push(user);
                            }
                            Decision::Later(error) => later.push((error, None)),
                        }
                    }
                }
                Err(error) => {
                    let error = format!("the run's scenario version cannot be read: {error}");
                    later.extend(undecided.iter().map(|_| (error.clone(), None)));
                }
            }
        }

        // Recorded before any push: a push made is one whose decision is kept.
        let pushing: HashSet<&str> = to_push.iter().map(String::as_str).collect();
        let mut marked = progress.clone();
        for decided in &mut marked.decided {
            if pushing.contains(decided.start.user.as_str()) {
                decided.maybe_sent = true;
            }
        }
        if std::time::Instant::now() >= until {
            return self.unrecorded(chunk, "deciding the pushes took half the chunk's lease".into());
        }
        let json = match serde_json::to_string(&marked) {
            Ok(json) if json.len() <= MAX_PROGRESS_BYTES => json,
            Ok(json) => {
                return PushRound::failed(format!(
                    "the chunk's decided pushes take {} bytes, more than a Firestore document holds with the chunk ({MAX_PROGRESS_BYTES}): shorten the scenario's texts",
                    json.len()
                ));
            }
            Err(error) => {
                return self.unrecorded(chunk, format!("the chunk's pushes cannot be encoded: {error}"));
            }
        };
        let recorded = self
            .campaigns
            .inner
            .store
            .record_chunk_pushes(&chunk.id, *claimed, &json)
            .await;
        match recorded {
            Ok(Some(version)) => *claimed = version,
            // Another instance holds the chunk now: this turn changes nothing
            // more (its settle, conditional on the claim, does not land).
            Ok(None) => return self.unrecorded(chunk, "another instance took the chunk over".into()),
            Err(error) => {
                return self.unrecorded(chunk, format!("the chunk's decisions could not be recorded: {error}"));
            }
        }
        progress = marked;

        // The pushes, each with its decision's bytes and the user's retry key.
        let flags = Flags {
            waiting: AtomicBool::new(false),
            refusing: AtomicBool::new(false),
            until,
            was_maybe_sent: &was_maybe_sent,
            templates: &progress.templates,
        };
        let pushes: Vec<_> = progress
            .decided
            .iter()
            .filter(|decided| pushing.contains(decided.start.user.as_str()))
            .map(|decided| self.push_one(decided, &flags))
            .collect();
        let results: Vec<Pushed> = futures::stream::iter(pushes)
            .buffer_unordered(PUSHES_IN_FLIGHT)
            .collect()
            .await;
        let mut taken_now = HashSet::new();
        let mut refused_now = HashSet::new();
        let mut unsent_now = HashSet::new();
        for result in results {
            match result {
                Pushed::Taken(user) => {
                    progressed = true;
                    taken_now.insert(user);
                }
                Pushed::Refused { user, error } => {
                    tracing::info!(chunk.id = %chunk.id, error = %error, outcome = "refused", "campaign push");
                    progressed = true;
                    refused_now.insert(user);
                }
                Pushed::Later {
                    user,
                    error,
                    uncertain,
                    rate_limited,
                } => {
                    // Maybe sent once, maybe sent until LINE answers for it.
                    if !uncertain && !was_maybe_sent.contains(&user) {
                        unsent_now.insert(user);
                    }
                    later.push((error, rate_limited));
                }
            }
        }
        let decided = std::mem::take(&mut progress.decided);
        for mut decided in decided {
            let user = decided.start.user.clone();
            if taken_now.contains(&user) {
                progress.taken.push(decided.start);
            } else if refused_now.contains(&user) {
                progress.refused.push(user);
            } else {
                if unsent_now.contains(&user) {
                    decided.maybe_sent = false;
                }
                progress.decided.push(decided);
            }
        }
        self.round_end(chunk, progress, &later, progressed, skipped)
    }

    /// A turn whose decisions could not be recorded: nothing was pushed; it
    /// is tried again with the chunk's progress as stored.
    fn unrecorded(&self, chunk: &Stored<ChunkDoc>, error: String) -> PushRound {
        let wait = self
            .campaigns
            .inner
            .policy
            .backoff(chunk.doc.attempts.saturating_add(1));
        PushRound {
            end: ChunkEnd::Retry {
                wake_at_ms: self.wake_after(wait),
                error,
                counted: true,
                uncertain: false,
                pushes: None,
            },
            taken: Vec::new(),
            refused: 0,
            skipped: 0,
        }
    }

    fn wake_after(&self, wait: Duration) -> i64 {
        self.campaigns
            .now()
            .as_millisecond()
            .saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX))
    }

    /// One recipient's start, decided as a manual send decides it.
    async fn decide_one(&self, engine: &Engine, scenario: &ScenarioId, run: &RunId, raw: &str) -> Decision {
        let Ok(user) = LineUserId::parse(raw.to_owned()) else {
            return Decision::Refused {
                user: raw.to_owned(),
                error: "not a LINE user id".into(),
            };
        };
        match decide(self.campaigns, engine, scenario, run, &user).await {
            Ok((chain, personal)) => {
                let messages = chain.messages.clone();
                let decided = Decided {
                    start: Taken::of(&user, chain),
                    template: 0,
                    personal,
                    maybe_sent: false,
                };
                Decision::Made(Box::new(decided), messages)
            }
            Err(PipelineError::Defect(problem)) => Decision::Refused {
                user: raw.to_owned(),
                error: problem,
            },
            Err(error) => Decision::Later(error.to_string()),
        }
    }

    /// One recipient's push of what was decided for them, unless LINE asked
    /// this chunk to wait meanwhile, or said the month's quota is used up
    /// (the rest wait for the chunk's next turn, or are refused the same).
    async fn push_one(&self, decided: &Decided, flags: &Flags<'_>) -> Pushed {
        let raw = decided.start.user.as_str();
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
        // A start that sends nothing (a branch straight into a wait) begins
        // the run all the same.
        let Some(messages) = decided.rendered(flags.templates) else {
            return Pushed::Refused {
                user: raw.to_owned(),
                error: "its decision names no recorded messages (a defect)".into(),
            };
        };
        if messages.is_empty() {
            return Pushed::Taken(raw.to_owned());
        }
        let maybe_sent_before = flags.was_maybe_sent.contains(raw);
        if flags.refusing.load(Ordering::Relaxed) && !maybe_sent_before {
            return Pushed::Refused {
                user: raw.to_owned(),
                error: "the month's message quota is used up".into(),
            };
        }
        if flags.waiting.load(Ordering::Relaxed) {
            let error = "LINE is rate limiting requests (429)".to_owned();
            return later(error, false, Some(Duration::from_secs(1)));
        }
        if std::time::Instant::now() >= flags.until {
            // Not tried: the chunk's next turn, at once, pushes the rest.
            let error = "the turn ran out of its time; the rest go in the next turn".to_owned();
            return later(error, false, Some(Duration::ZERO));
        }
        let retry_key = ActionKey::campaign_push(self.campaign_id, &user).retry_key();
        match self
            .campaigns
            .inner
            .line
            .push(user.as_str(), &messages, retry_key)
            .await
        {
            Ok(_) => Pushed::Taken(raw.to_owned()),
            // The month's quota is used up: the chunk's other users are
            // refused without asking, except one an earlier push may have
            // reached (LINE may check its quota before the retry key): that
            // one stays unsure, to be asked again.
            Err(error @ SendError::Rejected { status: 429, .. }) => {
                flags.refusing.store(true, Ordering::Relaxed);
                if maybe_sent_before {
                    later(error.to_string(), true, None)
                } else {
                    Pushed::Refused {
                        user: raw.to_owned(),
                        error: error.to_string(),
                    }
                }
            }
            Err(error @ (SendError::Rejected { .. } | SendError::InvalidReplyToken)) => Pushed::Refused {
                user: raw.to_owned(),
                error: error.to_string(),
            },
            Err(error @ SendError::RateLimited { retry_after }) => {
                let wait = retry_after.unwrap_or(Duration::from_secs(1));
                flags.waiting.store(true, Ordering::Relaxed);
                self.pace.back_off(wait);
                later(error.to_string(), false, Some(wait))
            }
            Err(error) => later(error.to_string(), !error.certainly_not_sent(), None),
        }
    }

    /// A push chunk LINE's retry-key window passed on: the users LINE took
    /// keep their runs; everyone else counts failed (a repeat now could reach
    /// them twice).
    pub(super) fn out_of_window(&self, chunk: &Stored<ChunkDoc>) -> PushRound {
        let error = "not settled within LINE's 24-hour retry key window; some pushes may have reached their users";
        let taken = match Progress::of(&chunk.doc) {
            Ok(progress) => progress.taken,
            Err(problem) => {
                return PushRound::failed(format!(
                    "the chunk's record of its pushes cannot be read (a defect): {problem}"
                ));
            }
        };
        let refused = u32::try_from(chunk.doc.users.len().saturating_sub(taken.len())).unwrap_or(u32::MAX);
        if taken.is_empty() {
            return PushRound {
                end: ChunkEnd::Failed {
                    error: error.into(),
                    status: None,
                },
                taken,
                refused: 0,
                skipped: 0,
            };
        }
        tracing::warn!(chunk.id = %chunk.id, failed = refused, outcome = "partly_failed", "{error}");
        PushRound {
            end: ChunkEnd::Sent,
            taken,
            refused,
            skipped: 0,
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
            let maybe_sent = progress.maybe_sent();
            let error = if maybe_sent == 0 {
                format!("gave up after {attempts} attempts without progress: {error}")
            } else {
                format!(
                    "gave up after {attempts} attempts without progress: {error}; {maybe_sent} of them may have reached their users"
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
        PushRound {
            end: ChunkEnd::Retry {
                wake_at_ms: self.wake_after(wait),
                error,
                counted,
                uncertain: progress.any_outcome(),
                pushes: serde_json::to_string(&progress).ok(),
            },
            taken: Vec::new(),
            refused: 0,
            skipped: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(said: &str) -> Vec<Message> {
        vec![Message::Text {
            text: said.to_owned(),
            quick_reply: None,
        }]
    }

    #[test]
    fn each_distinct_message_set_is_kept_once() {
        let mut progress = Progress::default();
        // (messages, the template index they get)
        let cases = [("A: {name}さん", 0), ("B", 1), ("A: {name}さん", 0), ("B", 1), ("C", 2)];
        for (said, index) in cases {
            assert_eq!(progress.template(text(said)), index, "{said}");
        }
        assert_eq!(progress.templates.len(), 3);
    }

    #[test]
    fn a_decision_renders_its_template_with_its_own_values_or_nothing_when_it_names_none() {
        let templates = vec![text("{name}さん、こんにちは")];
        let decided = |template: usize, name: Option<&str>| Decided {
            start: Taken {
                user: "U0123456789abcdef0123456789abcdef".into(),
                start: RecipientStart {
                    opens: None,
                    timers: Vec::new(),
                    changes: Default::default(),
                },
                took: None,
                asks: None,
                asks_variant: None,
            },
            template,
            personal: Some(crate::values::PersonalValues {
                name: name.map(str::to_owned),
                ..Default::default()
            }),
            maybe_sent: false,
        };
        assert_eq!(
            decided(0, Some("花子")).rendered(&templates),
            Some(text("花子さん、こんにちは"))
        );
        assert_eq!(decided(1, Some("花子")).rendered(&templates), None);
    }

    #[test]
    fn unreadable_progress_says_where_it_broke_never_what_it_holds() {
        let chunk: ChunkDoc = serde_json::from_value(serde_json::json!({
            "campaignId": "c", "planId": "p", "index": 0, "users": [], "count": 0,
            "state": "pending", "wakeAtMs": 0,
            "pushes": "{\"taken\": \"山田花子さんの秘密\"}",
        }))
        .expect("a chunk");
        let error = Progress::of(&chunk).expect_err("unreadable");
        assert!(!error.contains("山田"), "{error}");
        assert!(error.contains("line 1"), "{error}");
    }
}
