//! Campaigns: a scenario sent to every following user, or to a segment, once
//! per user, at LINE's limits.
//!
//! - `POST /admin/campaigns` checks the request, renders the messages once and
//!   creates `campaigns/{id}`, the id derived from the `Idempotency-Key` (a
//!   retry is the same campaign; another body with the key is refused).
//! - One instance at a time holds a campaign's lease and drives it: it
//!   snapshots the audience into chunks of at most 500 users (one plan; only
//!   the plan recorded when sending starts is ever sent), then sends each chunk
//!   with one multicast call carrying a retry key derived from the chunk, at the
//!   campaign's rate, honouring 429 and `Retry-After`. A chunk is claimed before
//!   its call and settled conditional on the claim, so after a crash another
//!   instance sends it again with the same retry key and LINE answers 409: each
//!   user gets the campaign at most once.
//! - A cancel marks the campaign; a chunk claimed after it is skipped, not sent.

use crate::engine::Engine;
use crate::engine::campaign::{
    AnsweredBy, Audience, AudienceError, AudienceRequest, CHUNK_SIZE, CampaignStartError, Candidate, Scan,
    aggregation_unit, campaign_id,
};
use crate::ids::ScenarioId;
use crate::line::client::{Delivered, LineClient, SendError};
use crate::line::messages::Message;
use crate::outbound::{ActionKey, RetryPolicy};
use crate::store::{
    CampaignChange, CampaignCreate, CampaignDoc, CampaignState, ChunkCounts, ChunkDoc, ChunkEnd, ChunkState, Store,
    StoreError, Stored, UserScan, Version, chunk_id,
};
use firestore::FirestoreInstant;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Users a dry run shows.
const SAMPLE_SIZE: usize = 20;
/// Chunks written per commit while planning (each holds up to 500 ids).
const CHUNKS_PER_COMMIT: usize = 10;
/// Chunk calls in flight at once; the rate limiter paces their starts.
const CALLS_IN_FLIGHT: usize = 4;
/// Pending chunks read per round.
const CHUNK_PAGE: u32 = 50;
/// Progress is logged every this many chunks.
const PROGRESS_EVERY: u32 = 5;
/// A chunk waiting for its retry time is looked at again after at most this.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// Rounds of read and conditional write of a campaign before giving up.
const ROUNDS: usize = 4;

/// A campaign as asked for, before its id.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignRequest {
    pub(crate) scenario_id: ScenarioId,
    pub(crate) audience: AudienceRequest,
    pub(crate) skip_answered: bool,
    pub(crate) calls_per_second: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CampaignError {
    #[error(transparent)]
    Audience(#[from] AudienceError),
    #[error(transparent)]
    Scenario(#[from] CampaignStartError),
    #[error("callsPerSecond must be 1 to {0} (LINE's multicast rate limit)")]
    BadRate(u32),
    #[error("the Idempotency-Key cannot be used: it contains NUL")]
    BadKey,
    #[error("this Idempotency-Key was used for a different campaign; use a new key")]
    KeyReused,
    #[error("no campaign with id {0:?}")]
    UnknownCampaign(String),
    #[error("the campaign is {0} and cannot be cancelled")]
    Finished(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a dry run found.
#[derive(Debug)]
pub(crate) struct DryRun {
    pub(crate) count: u64,
    pub(crate) sample: Vec<String>,
}

/// A campaign's state and counts, as reported.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignStatus {
    pub(crate) campaign_id: String,
    pub(crate) scenario_id: String,
    pub(crate) state: &'static str,
    pub(crate) planned: u64,
    pub(crate) sent: u64,
    pub(crate) failed: u64,
    pub(crate) skipped: u64,
    /// Planned users not sent, failed or skipped yet.
    pub(crate) pending: u64,
    pub(crate) chunks: u32,
    pub(crate) skip_answered: bool,
    pub(crate) calls_per_second: u32,
    pub(crate) aggregation_unit: String,
    pub(crate) audience: serde_json::Value,
    pub(crate) created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ended_at: Option<String>,
}

/// Paces a campaign's calls: one start per interval, pushed back by a 429.
struct Pace {
    interval: Duration,
    next: Mutex<Instant>,
}

impl Pace {
    fn new(calls_per_second: u32) -> Self {
        Self {
            interval: Duration::from_secs(1) / calls_per_second.max(1),
            next: Mutex::new(Instant::now()),
        }
    }

    /// Waits for the next free slot and takes it.
    async fn slot(&self) {
        let slot = match self.next.lock() {
            Ok(mut next) => {
                let slot = (*next).max(Instant::now());
                *next = slot + self.interval;
                slot
            }
            Err(_) => Instant::now(),
        };
        tokio::time::sleep_until(slot.into()).await;
    }

    /// LINE asked to wait: no call starts before `wait` has passed.
    fn back_off(&self, wait: Duration) {
        if let Ok(mut next) = self.next.lock() {
            *next = (*next).max(Instant::now() + wait);
        }
    }
}

#[derive(Clone)]
pub(crate) struct Campaigns {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    store: Store,
    line: LineClient,
    policy: RetryPolicy,
    default_rate: u32,
    wake: Notify,
    /// Campaigns this instance drives now.
    driving: Mutex<HashSet<String>>,
}

/// The campaign a driver holds: its document and the version it last wrote.
struct Held {
    id: String,
    doc: CampaignDoc,
    version: Version,
    renewed: Instant,
}

/// Why a driver stopped before the campaign ended.
#[derive(Debug)]
enum Stop {
    /// Another instance holds the campaign now.
    Lost,
    Store(StoreError),
}

impl From<StoreError> for Stop {
    fn from(error: StoreError) -> Self {
        Stop::Store(error)
    }
}

impl Campaigns {
    pub(crate) fn new(engine: Engine, store: Store, line: LineClient, policy: RetryPolicy, default_rate: u32) -> Self {
        Self {
            inner: Arc::new(Inner {
                engine,
                store,
                line,
                policy,
                default_rate,
                wake: Notify::new(),
                driving: Mutex::new(HashSet::new()),
            }),
        }
    }

    fn rate(&self, request: &CampaignRequest) -> Result<u32, CampaignError> {
        let ceiling = crate::config::LINE_MULTICAST_CALLS_PER_SECOND;
        match request.calls_per_second {
            None => Ok(self.inner.default_rate),
            Some(rate) if (1..=ceiling).contains(&rate) => Ok(rate),
            Some(_) => Err(CampaignError::BadRate(ceiling)),
        }
    }

    /// Counts the audience and shows some of it; sends and stores nothing.
    pub(crate) async fn dry_run(&self, request: &CampaignRequest) -> Result<DryRun, CampaignError> {
        let engine = &self.inner.engine;
        engine.campaign_start(&request.scenario_id, "dry-run")?;
        self.rate(request)?;
        let audience = engine.audience(&request.audience, &request.scenario_id)?;
        let skip = request.skip_answered.then_some(&request.scenario_id);
        let mut members = Members::read(&self.inner.store, audience, skip).await?;
        let mut count = 0u64;
        let mut sample = Vec::new();
        while let Some(page) = members.next_page().await? {
            count += page.len() as u64;
            sample.extend(page.into_iter().take(SAMPLE_SIZE.saturating_sub(sample.len())));
        }
        Ok(DryRun { count, sample })
    }

    /// Creates the campaign (or finds the one this key created) and returns its id.
    pub(crate) async fn create(&self, key: &str, request: &CampaignRequest) -> Result<String, CampaignError> {
        let id = campaign_id(key).ok_or(CampaignError::BadKey)?;
        let engine = &self.inner.engine;
        let start = engine.campaign_start(&request.scenario_id, &id)?;
        let rate = self.rate(request)?;
        engine.audience(&request.audience, &request.scenario_id)?;
        let messages = serde_json::to_string(&start.messages)
            .map_err(|error| StoreError::Unavailable(format!("messages cannot be written: {error}")))?;
        let audience = serde_json::to_string(&request.audience)
            .map_err(|error| StoreError::Unavailable(format!("the audience cannot be written: {error}")))?;
        let doc = CampaignDoc {
            scenario_id: request.scenario_id.to_string(),
            scenario_version: start.version,
            run: start.run.to_string(),
            idempotency_key: key.to_owned(),
            request_hash: request_hash(request),
            audience,
            skip_answered: request.skip_answered,
            calls_per_second: rate,
            messages,
            aggregation_unit: aggregation_unit(&id),
            state: CampaignState::Planning,
            plan_id: None,
            planned: 0,
            chunks: 0,
            counts: None,
            lease_owner: None,
            lease_until: None,
            attempts: 0,
            created_at: FirestoreInstant::now(),
            ended_at: None,
        };
        match self.inner.store.create_campaign(&id, &doc).await? {
            CampaignCreate::Created => {
                tracing::info!(campaign.id = %id, scenario.id = %request.scenario_id, outcome = "created", "campaign created");
                self.inner.wake.notify_one();
                Ok(id)
            }
            CampaignCreate::Existing(existing) if existing.doc.request_hash == doc.request_hash => Ok(id),
            CampaignCreate::Existing(_) => Err(CampaignError::KeyReused),
        }
    }

    pub(crate) async fn status(&self, id: &str) -> Result<Option<CampaignStatus>, StoreError> {
        match self.inner.store.campaign(id).await? {
            Some(stored) => Ok(Some(self.report(stored).await?)),
            None => Ok(None),
        }
    }

    /// The newest campaigns first.
    pub(crate) async fn list(&self, limit: u32) -> Result<Vec<CampaignStatus>, StoreError> {
        let mut listed = Vec::new();
        for stored in self.inner.store.campaigns(limit).await? {
            listed.push(self.report(stored).await?);
        }
        Ok(listed)
    }

    async fn report(&self, stored: Stored<CampaignDoc>) -> Result<CampaignStatus, StoreError> {
        let doc = stored.doc;
        let counts = match (&doc.counts, &doc.plan_id) {
            (Some(counts), _) => *counts,
            (None, Some(plan)) => self.inner.store.chunk_counts(&stored.id, plan).await?,
            (None, None) => ChunkCounts::default(),
        };
        Ok(CampaignStatus {
            campaign_id: stored.id,
            scenario_id: doc.scenario_id,
            state: doc.state.as_str(),
            planned: doc.planned,
            sent: counts.sent,
            failed: counts.failed,
            skipped: counts.skipped,
            pending: counts.pending,
            chunks: doc.chunks,
            skip_answered: doc.skip_answered,
            calls_per_second: doc.calls_per_second,
            aggregation_unit: doc.aggregation_unit,
            audience: serde_json::from_str(&doc.audience).unwrap_or(serde_json::Value::Null),
            created_at: doc.created_at.to_string(),
            ended_at: doc.ended_at.map(|at| at.to_string()),
        })
    }

    /// Stops the campaign: chunks not yet claimed are not sent.
    pub(crate) async fn cancel(&self, id: &str) -> Result<&'static str, CampaignError> {
        let store = &self.inner.store;
        for _ in 0..ROUNDS {
            let stored = store
                .campaign(id)
                .await?
                .ok_or_else(|| CampaignError::UnknownCampaign(id.to_owned()))?;
            match stored.doc.state {
                CampaignState::Cancelling | CampaignState::Cancelled => return Ok(stored.doc.state.as_str()),
                CampaignState::Done => return Err(CampaignError::Finished("done")),
                CampaignState::Planning | CampaignState::Sending => {}
            }
            let change = CampaignChange {
                state: Some(CampaignState::Cancelling),
                ..CampaignChange::default()
            };
            if store.change_campaign(id, stored.version, &change).await?.is_some() {
                tracing::info!(campaign.id = %id, outcome = "cancelling", "campaign cancelled by an operator");
                self.inner.wake.notify_one();
                return Ok(CampaignState::Cancelling.as_str());
            }
        }
        Err(StoreError::Unavailable("the campaign kept changing; try again".into()).into())
    }

    /// Looks for campaigns to drive until `shutdown`: at every `interval`, and
    /// when one is created or cancelled here.
    pub(crate) async fn run(self, interval: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
            let active = match self.inner.store.active_campaigns().await {
                Ok(active) => active,
                Err(error) => {
                    tracing::warn!(error = %error, "cannot look for campaigns");
                    continue;
                }
            };
            let now = FirestoreInstant::now();
            for stored in active {
                let free = stored.doc.lease_until.is_none_or(|until| until < now)
                    || stored.doc.lease_owner.as_deref() == Some(self.inner.store.instance_id());
                if !free || !self.start_driving(&stored.id) {
                    continue;
                }
                let campaigns = self.clone();
                let shutdown = shutdown.clone();
                let span = tracing::info_span!("campaign", campaign.id = %stored.id);
                tokio::spawn(
                    async move {
                        let id = stored.id.clone();
                        tokio::select! {
                            _ = shutdown.cancelled() => {}
                            _ = campaigns.drive(stored) => {}
                        }
                        campaigns.stop_driving(&id);
                    }
                    .instrument(span),
                );
            }
        }
    }

    fn start_driving(&self, id: &str) -> bool {
        self.inner
            .driving
            .lock()
            .map(|mut driving| driving.insert(id.to_owned()))
            .unwrap_or(false)
    }

    fn stop_driving(&self, id: &str) {
        if let Ok(mut driving) = self.inner.driving.lock() {
            driving.remove(id);
        }
    }

    /// Takes the campaign's lease, then carries it to its end.
    async fn drive(&self, stored: Stored<CampaignDoc>) {
        let store = &self.inner.store;
        let version = match store
            .lease_campaign(&stored.id, stored.version, stored.doc.attempts.saturating_add(1))
            .await
        {
            Ok(Some(version)) => version,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(error = %error, "cannot take the campaign's lease");
                return;
            }
        };
        let mut held = Held {
            id: stored.id,
            doc: stored.doc,
            version,
            renewed: Instant::now(),
        };
        held.doc.attempts = held.doc.attempts.saturating_add(1);
        let result = async {
            loop {
                match held.doc.state {
                    CampaignState::Planning => self.plan(&mut held).await?,
                    CampaignState::Sending => self.send(&mut held).await?,
                    CampaignState::Cancelling => self.skip_rest(&mut held).await?,
                    CampaignState::Done | CampaignState::Cancelled => return Ok::<(), Stop>(()),
                }
            }
        }
        .await;
        match result {
            Ok(()) => {}
            Err(Stop::Lost) => tracing::info!(outcome = "superseded", "another instance holds the campaign"),
            Err(Stop::Store(error)) => {
                tracing::warn!(error = %error, outcome = "retry_later", "campaign interrupted; its lease will run out")
            }
        }
    }

    /// Renews the lease once a third of it has passed. A change by an operator
    /// (a cancel) is read and kept; another holder stops this one.
    async fn renew(&self, held: &mut Held) -> Result<(), Stop> {
        if held.renewed.elapsed() < self.inner.store.lease() / 3 {
            return Ok(());
        }
        self.refresh(held).await
    }

    /// Reads the campaign again and renews the lease from what it read.
    async fn refresh(&self, held: &mut Held) -> Result<(), Stop> {
        let store = &self.inner.store;
        for _ in 0..ROUNDS {
            let Some(stored) = store.campaign(&held.id).await? else {
                return Err(Stop::Lost);
            };
            if stored.doc.lease_owner.as_deref() != Some(store.instance_id())
                || stored.doc.attempts != held.doc.attempts
            {
                return Err(Stop::Lost);
            }
            if let Some(version) = store
                .lease_campaign(&held.id, stored.version, held.doc.attempts)
                .await?
            {
                held.doc = stored.doc;
                held.version = version;
                held.renewed = Instant::now();
                return Ok(());
            }
        }
        Err(Stop::Store(StoreError::Unavailable(
            "the campaign kept changing".into(),
        )))
    }

    /// Applies `change` to the held campaign; a cancel that landed first is read
    /// and the change is not made.
    async fn change(&self, held: &mut Held, change: CampaignChange) -> Result<bool, Stop> {
        let store = &self.inner.store;
        match store.change_campaign(&held.id, held.version, &change).await? {
            Some(version) => {
                held.version = version;
                if let Some(state) = change.state {
                    held.doc.state = state;
                }
                if let Some(plan) = change.plan_id {
                    held.doc.plan_id = Some(plan);
                }
                held.doc.planned = change.planned.unwrap_or(held.doc.planned);
                held.doc.chunks = change.chunks.unwrap_or(held.doc.chunks);
                Ok(true)
            }
            None => {
                self.refresh(held).await?;
                Ok(false)
            }
        }
    }

    /// Snapshots the audience into chunks of one plan, then starts sending it.
    async fn plan(&self, held: &mut Held) -> Result<(), Stop> {
        let store = &self.inner.store;
        let scenario = ScenarioId::parse(held.doc.scenario_id.clone()).map_err(|_| Stop::Lost)?;
        let audience = serde_json::from_str::<AudienceRequest>(&held.doc.audience)
            .map_err(|error| error.to_string())
            .and_then(|request| {
                self.inner
                    .engine
                    .audience(&request, &scenario)
                    .map_err(|error| error.to_string())
            });
        let audience = match audience {
            Ok(audience) => audience,
            Err(problem) => {
                // A scenario it names was removed since: nobody is sent anything.
                tracing::error!(problem = %problem, outcome = "cancelled", "the campaign's audience no longer holds");
                let change = CampaignChange {
                    state: Some(CampaignState::Cancelled),
                    counts: Some(ChunkCounts::default()),
                    ended_at: Some(FirestoreInstant::now()),
                    ..CampaignChange::default()
                };
                self.change(held, change).await?;
                return Ok(());
            }
        };
        let plan_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        let started = Instant::now();
        let skip = held.doc.skip_answered.then_some(&scenario);
        let mut members = Members::read(store, audience, skip).await?;
        let mut buffer: Vec<String> = Vec::new();
        let mut staged: Vec<(String, ChunkDoc)> = Vec::new();
        let mut planned = 0u64;
        let mut index = 0u32;
        loop {
            let page = members.next_page().await?;
            let last = page.is_none();
            buffer.extend(page.unwrap_or_default());
            while buffer.len() >= CHUNK_SIZE || (last && !buffer.is_empty()) {
                let users: Vec<String> = buffer.drain(..buffer.len().min(CHUNK_SIZE)).collect();
                planned += users.len() as u64;
                staged.push(self.chunk(held, &plan_id, index, users));
                index += 1;
                if staged.len() >= CHUNKS_PER_COMMIT {
                    store.write_chunks(&std::mem::take(&mut staged)).await?;
                }
            }
            if last {
                break;
            }
            self.renew(held).await?;
        }
        if !staged.is_empty() {
            store.write_chunks(&staged).await?;
        }
        let change = CampaignChange {
            state: Some(CampaignState::Sending),
            plan_id: Some(plan_id.clone()),
            planned: Some(planned),
            chunks: Some(index),
            ..CampaignChange::default()
        };
        if self.change(held, change).await? {
            tracing::info!(
                plan.id = %plan_id,
                planned,
                chunks = index,
                elapsed_ms = started.elapsed().as_millis() as u64,
                outcome = "planned",
                "campaign audience snapshotted"
            );
        }
        Ok(())
    }

    fn chunk(&self, held: &Held, plan_id: &str, index: u32, users: Vec<String>) -> (String, ChunkDoc) {
        let count = u32::try_from(users.len()).unwrap_or(u32::MAX);
        (
            chunk_id(&held.id, plan_id, index),
            ChunkDoc {
                campaign_id: held.id.clone(),
                plan_id: plan_id.to_owned(),
                index,
                users,
                count,
                state: ChunkState::Pending,
                lease_owner: None,
                wake_at_ms: 0,
                attempts: 0,
                last_error: None,
                line_status: None,
                uncertain: false,
                settled_at: None,
            },
        )
    }

    /// Sends the plan's pending chunks, then ends the campaign.
    async fn send(&self, held: &mut Held) -> Result<(), Stop> {
        let store = &self.inner.store;
        let Some(plan_id) = held.doc.plan_id.clone() else {
            return Err(Stop::Store(StoreError::Unavailable(
                "a sending campaign without a plan".into(),
            )));
        };
        let messages = campaign_messages(held)?;
        let pace = Pace::new(held.doc.calls_per_second);
        let started = Instant::now();
        let mut sent_users = 0u64;
        let mut settled_chunks = 0u32;
        loop {
            self.renew(held).await?;
            if held.doc.state != CampaignState::Sending {
                return Ok(());
            }
            let pending = store.pending_chunks(&held.id, &plan_id, CHUNK_PAGE).await?;
            if pending.is_empty() {
                return self.finish(held, &plan_id, CampaignState::Done).await;
            }
            let now_ms = FirestoreInstant::now().as_millisecond();
            let due: Vec<Stored<ChunkDoc>> = pending
                .into_iter()
                .filter(|chunk| chunk.doc.wake_at_ms <= now_ms)
                .collect();
            if due.is_empty() {
                tokio::time::sleep(IDLE_WAIT).await;
                continue;
            }
            let turn = ChunkTurn::new(self, held, &messages, &pace, false);
            // Collected first: a lazy map's closure would not be `Send` for
            // every lifetime, which `tokio::spawn` requires.
            let calls: Vec<_> = due.iter().map(|chunk| turn.run(chunk)).collect();
            let mut turns = futures::stream::iter(calls).buffer_unordered(CALLS_IN_FLIGHT);
            let mut cancelled = false;
            while let Some(outcome) = turns.next().await {
                match outcome {
                    Ok(TurnOutcome::Settled { sent }) => {
                        settled_chunks += 1;
                        sent_users += sent;
                        if settled_chunks.is_multiple_of(PROGRESS_EVERY) {
                            log_progress(held, sent_users, started);
                        }
                    }
                    Ok(TurnOutcome::Cancelled) => cancelled = true,
                    Ok(TurnOutcome::NotSettled) => {}
                    Err(error) => tracing::warn!(error = %error, outcome = "retry_later", "a chunk's turn failed"),
                }
            }
            drop(turns);
            if cancelled {
                self.refresh(held).await?;
            }
        }
    }

    /// Skips the chunks a cancel left, then ends the campaign as cancelled.
    async fn skip_rest(&self, held: &mut Held) -> Result<(), Stop> {
        let store = &self.inner.store;
        let Some(plan_id) = held.doc.plan_id.clone() else {
            return self.finish(held, "", CampaignState::Cancelled).await;
        };
        let messages = campaign_messages(held)?;
        let pace = Pace::new(held.doc.calls_per_second);
        loop {
            self.renew(held).await?;
            let pending = store.pending_chunks(&held.id, &plan_id, CHUNK_PAGE).await?;
            if pending.is_empty() {
                return self.finish(held, &plan_id, CampaignState::Cancelled).await;
            }
            let resolve = ChunkTurn::new(self, held, &messages, &pace, true);
            let now_ms = FirestoreInstant::now().as_millisecond();
            let mut waiting = false;
            for chunk in &pending {
                // Claimed, perhaps on its way to LINE, or waiting for a retry:
                // its claim or its retry time decides first.
                if chunk.doc.wake_at_ms > now_ms {
                    waiting = true;
                    continue;
                }
                if chunk.doc.uncertain {
                    // Claimed before the cancel, and LINE may have taken it:
                    // the same retry key finds out (409) or sends it once.
                    resolve.run(chunk).await?;
                } else if let Some(claimed) = store.claim_chunk(chunk).await? {
                    store.settle_chunk(chunk, claimed, &ChunkEnd::Skipped).await?;
                }
            }
            if waiting {
                tokio::time::sleep(IDLE_WAIT).await;
            }
        }
    }

    /// Records the campaign's end and its final counts.
    async fn finish(&self, held: &mut Held, plan_id: &str, state: CampaignState) -> Result<(), Stop> {
        let counts = if plan_id.is_empty() {
            ChunkCounts::default()
        } else {
            self.inner.store.chunk_counts(&held.id, plan_id).await?
        };
        let change = CampaignChange {
            state: Some(state),
            counts: Some(counts),
            ended_at: Some(FirestoreInstant::now()),
            ..CampaignChange::default()
        };
        if self.change(held, change).await? {
            tracing::info!(
                planned = held.doc.planned,
                sent = counts.sent,
                failed = counts.failed,
                skipped = counts.skipped,
                outcome = state.as_str(),
                "campaign ended"
            );
        }
        Ok(())
    }
}

fn campaign_messages(held: &Held) -> Result<Vec<Message>, StoreError> {
    serde_json::from_str(&held.doc.messages)
        .map_err(|error| StoreError::Unavailable(format!("the campaign's messages cannot be read: {error}")))
}

fn log_progress(held: &Held, sent: u64, started: Instant) {
    let elapsed = started.elapsed().as_secs_f64().max(0.001);
    let rate = sent as f64 / elapsed;
    let left = held.doc.planned.saturating_sub(sent);
    let eta_s = if rate > 0.0 {
        (left as f64 / rate).round() as u64
    } else {
        0
    };
    tracing::info!(
        sent,
        planned = held.doc.planned,
        recipients_per_s = rate.round() as u64,
        eta_s,
        "campaign progress"
    );
}

/// How one chunk's turn ended.
enum TurnOutcome {
    /// Settled; `sent` users received it.
    Settled { sent: u64 },
    /// The campaign was cancelled: the chunk was skipped.
    Cancelled,
    /// Another instance holds it, or it waits for a retry.
    NotSettled,
}

/// What every chunk's turn of one sending round shares.
struct ChunkTurn<'a> {
    campaigns: &'a Campaigns,
    campaign_id: &'a str,
    messages: &'a [Message],
    unit: &'a str,
    pace: &'a Pace,
    /// Sending an uncertain chunk of a cancelled campaign again, to settle it.
    resolving: bool,
}

impl<'a> ChunkTurn<'a> {
    fn new(campaigns: &'a Campaigns, held: &'a Held, messages: &'a [Message], pace: &'a Pace, resolving: bool) -> Self {
        Self {
            campaigns,
            campaign_id: &held.id,
            messages,
            unit: &held.doc.aggregation_unit,
            pace,
            resolving,
        }
    }

    /// Claims the chunk, checks the campaign still sends, makes its one call
    /// and settles it conditional on the claim.
    async fn run(&self, chunk: &Stored<ChunkDoc>) -> Result<TurnOutcome, StoreError> {
        let inner = &self.campaigns.inner;
        let store = &inner.store;
        self.pace.slot().await;
        let Some(claimed) = store.claim_chunk(chunk).await? else {
            return Ok(TurnOutcome::NotSettled);
        };
        // A cancel that landed before this claim stops the chunk here.
        let sending = self.resolving
            || store
                .campaign(self.campaign_id)
                .await?
                .is_some_and(|campaign| campaign.doc.state == CampaignState::Sending);
        if !sending {
            store.settle_chunk(chunk, claimed, &ChunkEnd::Skipped).await?;
            return Ok(TurnOutcome::Cancelled);
        }
        let retry_key = ActionKey::campaign_chunk(&chunk.id).retry_key();
        let result = inner
            .line
            .multicast(&chunk.doc.users, self.messages, Some(self.unit), retry_key)
            .await;
        let end = self.end_of(chunk, result);
        let outcome = match &end {
            ChunkEnd::Sent => "sent",
            ChunkEnd::Failed { .. } => "failed",
            ChunkEnd::Retry { .. } => "retry_later",
            ChunkEnd::Skipped => "skipped",
        };
        tracing::info!(chunk.id = %chunk.id, chunk.users = chunk.doc.count, outcome, "campaign chunk");
        if !store.settle_chunk(chunk, claimed, &end).await? {
            return Ok(TurnOutcome::NotSettled);
        }
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
            wake_at_ms: FirestoreInstant::now()
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
                error: format!("gave up after {attempts} attempts: {error}"),
                status: None,
            },
            Err(error) => retry(policy.backoff(attempts), &error, true),
        }
    }
}

/// The audience, page by page: users Firestore finds for the scan, kept when
/// the whole filter holds.
struct Members<'a> {
    store: &'a Store,
    audience: Audience,
    scan: UserScan,
    answered_by: AnsweredBy,
    /// The campaign's own scenario when `skipAnswered`: its answerers are left out.
    skip: Option<ScenarioId>,
    after: Option<String>,
    done: bool,
}

impl<'a> Members<'a> {
    async fn read(store: &'a Store, audience: Audience, skip: Option<&ScenarioId>) -> Result<Self, StoreError> {
        let mut answered_by = AnsweredBy::new();
        for scenario in audience.needs_answers().chain(skip) {
            if !answered_by.contains_key(scenario) {
                answered_by.insert(scenario.clone(), store.answered_users(scenario.as_str()).await?);
            }
        }
        let scan = match audience.scan() {
            Scan::All => UserScan::All,
            Scan::AnyTag(tags) => UserScan::AnyTag(tags),
            Scan::Tag(tag) => UserScan::Tag(tag),
        };
        Ok(Self {
            store,
            audience,
            scan,
            answered_by,
            skip: skip.cloned(),
            after: None,
            done: false,
        })
    }

    /// The next page's members (perhaps none), or `None` at the end.
    async fn next_page(&mut self) -> Result<Option<Vec<String>>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let (users, next) = self.store.users_page(&self.scan, self.after.as_deref()).await?;
        self.done = next.is_none();
        self.after = next;
        let skipped = self.skip.as_ref().and_then(|scenario| self.answered_by.get(scenario));
        Ok(Some(
            users
                .into_iter()
                .filter(|user| {
                    let candidate = Candidate {
                        id: &user.id,
                        following: user.following,
                        tags: &user.tags,
                        first_seen_ms: user.first_seen_ms.or(user.followed_at.map(|at| at.as_millisecond())),
                    };
                    self.audience.includes(&candidate, &self.answered_by)
                        && !skipped.is_some_and(|answered| answered.contains(&user.id))
                })
                .map(|user| user.id)
                .collect(),
        ))
    }
}

/// The request as understood, for comparing a retried call with the first.
fn request_hash(request: &CampaignRequest) -> String {
    let canonical = serde_json::to_vec(request).unwrap_or_default();
    hex::encode(Sha256::digest(&canonical))
}
