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

mod chunk;
mod driver;
pub(crate) mod members;
mod push;
mod quota;
mod test_send;

pub(crate) use quota::QuotaFigures;
pub(crate) use test_send::MAX_TEST_RECIPIENTS;

pub(crate) use crate::engine::campaign::{AudienceRequest, CampaignStartError};

use crate::clock::Clock;
use crate::engine::Engine;
use crate::engine::campaign::{AudienceError, Delivery, SendAtError, aggregation_unit, campaign_id};
use crate::ids::ScenarioId;
use crate::line::client::LineClient;
use crate::outbound::RetryPolicy;
use crate::pipeline::PipelineError;
use crate::store::{
    CampaignChange, CampaignCreate, CampaignDoc, CampaignState, ChunkCounts, Store, StoreError, Stored,
};
use firestore::FirestoreInstant;
use members::Members;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Users a dry run shows.
const SAMPLE_SIZE: usize = 20;
/// Scheduled campaigns looked at per look, the soonest first (a hundred due
/// at once fire in turns).
const DUE_PER_LOOK: u32 = 101;
/// Rounds of read and conditional write of a campaign before giving up.
const ROUNDS: usize = 4;

/// A campaign as asked for, before its id.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignRequest {
    pub(crate) scenario_id: ScenarioId,
    pub(crate) audience: AudienceRequest,
    pub(crate) skip_answered: bool,
    pub(crate) calls_per_second: Option<u32>,
    /// When to send it (absent: now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) send_at: Option<chrono::DateTime<chrono::FixedOffset>>,
    /// Create it even when it would go beyond the month's message quota.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) allow_over_quota: bool,
}

impl CampaignRequest {
    /// The audit log's name for creating it: a campaign with a send time is
    /// scheduled, one without is created to go now.
    pub(crate) fn audit_action(&self) -> &'static str {
        if self.send_at.is_some() {
            "campaign_schedule"
        } else {
            "campaign_create"
        }
    }

    /// The audience as the audit log records it (see
    /// [`AudienceRequest::audit_summary`]).
    pub(crate) fn audit_audience(&self) -> String {
        self.audience.audit_summary()
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum CampaignError {
    #[error(transparent)]
    Audience(#[from] AudienceError),
    #[error(transparent)]
    Scenario(#[from] CampaignStartError),
    #[error(transparent)]
    SendAt(#[from] SendAtError),
    #[error("callsPerSecond must be 1 to {0} (LINE's multicast rate limit)")]
    BadRate(u32),
    #[error("the Idempotency-Key cannot be used: it contains NUL")]
    BadKey,
    #[error("this Idempotency-Key was used for a different campaign; use a new key")]
    KeyReused,
    #[error("no campaign with id {0:?}")]
    UnknownCampaign(String),
    /// It would send more messages than the month's quota has left.
    #[error(
        "the campaign would send {} messages and the month's quota has {} left; send to fewer users, or set \"allowOverQuota\": true",
        .0.messages,
        .0.remaining.unwrap_or(0)
    )]
    OverQuota(QuotaFigures),
    /// LINE did not say what is left of the quota.
    #[error("LINE's message quota could not be read ({0}); try again, or set \"allowOverQuota\": true")]
    QuotaUnknown(String),
    #[error(
        "the campaign is {0} and cannot be cancelled: everything was sent (with {{\"cancelTimers\": true}} a cancel still stops its recipients' reminders, expiries and steps)"
    )]
    Finished(&'static str),
    /// Firestore failed, the campaign kept changing, or what it would store
    /// cannot be encoded: the kinds the admin API maps to statuses.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

impl From<StoreError> for CampaignError {
    fn from(error: StoreError) -> Self {
        CampaignError::Pipeline(PipelineError::Store(error))
    }
}

/// What a dry run found.
#[derive(Debug)]
pub(crate) struct DryRun {
    pub(crate) count: u64,
    pub(crate) sample: Vec<String>,
    /// How its messages would go out (see [`CampaignStatus::delivery`]).
    pub(crate) delivery: &'static str,
    /// What it would send against the month's quota.
    pub(crate) quota: QuotaFigures,
    /// When a campaign with this `sendAt` would fire (after quiet hours).
    pub(crate) starts_at: Option<String>,
}

/// A campaign's state and counts, as reported.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignStatus {
    pub(crate) campaign_id: String,
    pub(crate) scenario_id: String,
    /// The run all its recipients share (`k` and 15 hex digits).
    pub(crate) run: String,
    pub(crate) state: &'static str,
    pub(crate) planned: u64,
    pub(crate) sent: u64,
    pub(crate) failed: u64,
    pub(crate) skipped: u64,
    /// Planned users not sent, failed or skipped yet.
    pub(crate) pending: u64,
    pub(crate) chunks: u32,
    /// `multicast`: one call per chunk, every recipient the same bytes;
    /// `push`: one push per recipient, each decided on their own (a split,
    /// a branch or personal text before the first question or wait).
    pub(crate) delivery: &'static str,
    /// Recipients per chunk (fewer than 500 when each recipient's run takes
    /// several writes of the chunk's settle).
    pub(crate) chunk_size: u32,
    pub(crate) cancel_timers: bool,
    /// Once planned: what it sends against the month's quota (LINE's figures
    /// read within the last minute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) quota: Option<QuotaFigures>,
    pub(crate) skip_answered: bool,
    pub(crate) calls_per_second: u32,
    pub(crate) aggregation_unit: String,
    pub(crate) audience: serde_json::Value,
    pub(crate) created_at: String,
    /// The send time asked for, when scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) send_at: Option<String>,
    /// When it fires (after the scenario's quiet hours), when scheduled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) starts_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ended_at: Option<String>,
}

#[derive(Clone)]
pub(crate) struct Campaigns {
    inner: Arc<Inner>,
}

struct Inner {
    /// The loaded scenarios decide requests; a run pinned to an older
    /// version schedules its recipients' timers by that version.
    versions: Arc<crate::pipeline::Versions>,
    store: Store,
    line: LineClient,
    /// A push campaign's text personal to each recipient.
    personal: crate::pipeline::personal::Personaliser,
    policy: RetryPolicy,
    default_rate: u32,
    quota: quota::QuotaReader,
    /// Users with this tag are in no audience (`CAMPAIGN_OPT_OUT_TAG`).
    opt_out_tag: String,
    /// Creation and end times, lease checks and chunk wake times read it.
    clock: Clock,
    wake: Notify,
    /// Campaigns this instance drives now.
    driving: Mutex<HashSet<String>>,
}

/// Why a driver stopped before the campaign ended.
#[derive(Debug)]
enum Stop {
    /// Another instance holds the campaign now.
    Lost,
    /// Firestore failed, or the campaign kept changing: a later turn goes on.
    Failed(PipelineError),
}

impl From<StoreError> for Stop {
    fn from(error: StoreError) -> Self {
        Stop::Failed(PipelineError::Store(error))
    }
}

impl From<PipelineError> for Stop {
    fn from(error: PipelineError) -> Self {
        Stop::Failed(error)
    }
}

/// What campaigns are sent with, as configured.
pub(crate) struct CampaignSettings {
    pub(crate) policy: RetryPolicy,
    /// Calls a second when a campaign does not say (`CAMPAIGN_CALLS_PER_SECOND`).
    pub(crate) default_rate: u32,
    /// `CAMPAIGN_OPT_OUT_TAG`.
    pub(crate) opt_out_tag: String,
}

impl Campaigns {
    pub(crate) fn new(
        versions: Arc<crate::pipeline::Versions>,
        store: Store,
        line: LineClient,
        personal: crate::pipeline::personal::Personaliser,
        settings: CampaignSettings,
        clock: Clock,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                versions,
                store,
                quota: quota::QuotaReader::new(line.clone()),
                line,
                personal,
                policy: settings.policy,
                default_rate: settings.default_rate,
                opt_out_tag: settings.opt_out_tag,
                clock,
                wake: Notify::new(),
                driving: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// The loaded scenarios.
    fn engine(&self) -> &Engine {
        self.inner.versions.current()
    }

    /// The audience `request` asks for, without the users who opted out.
    fn audience(
        &self,
        request: &AudienceRequest,
        scenario: &crate::ids::ScenarioId,
    ) -> Result<crate::engine::campaign::Audience, AudienceError> {
        Ok(self
            .engine()
            .audience(request, scenario)?
            .without_tag(&self.inner.opt_out_tag))
    }

    /// Now, as the service's clock sees it.
    fn now(&self) -> FirestoreInstant {
        crate::store::firestore_now(&self.inner.clock)
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
        let engine = self.engine();
        let start = engine.campaign_start(&request.scenario_id, "dry-run")?;
        self.rate(request)?;
        let starts_at = request
            .send_at
            .map(|at| engine.campaign_starts_at(&request.scenario_id, at.to_utc(), self.inner.clock.now()))
            .transpose()?;
        let audience = self.audience(&request.audience, &request.scenario_id)?;
        let (count, sample) = self.count(request, audience).await?;
        let quota = self.inner.quota.for_status().await;
        Ok(DryRun {
            count,
            sample,
            delivery: start.delivery.as_str(),
            quota: QuotaFigures::of(count.saturating_mul(u64::from(start.messages_per_recipient)), quota),
            starts_at: starts_at.map(|at| at.to_rfc3339()),
        })
    }

    /// The audience's size now, and up to [`SAMPLE_SIZE`] of its users.
    async fn count(
        &self,
        request: &CampaignRequest,
        audience: crate::engine::campaign::Audience,
    ) -> Result<(u64, Vec<String>), CampaignError> {
        let skip = request.skip_answered.then_some(&request.scenario_id);
        let mut members = Members::read(&self.inner.store, audience, skip);
        let mut count = 0u64;
        let mut sample = Vec::new();
        while let Some(page) = members.next_page().await? {
            count += page.len() as u64;
            sample.extend(page.into_iter().take(SAMPLE_SIZE.saturating_sub(sample.len())));
        }
        Ok((count, sample))
    }

    /// Refuses a campaign that would send more than the month's quota has
    /// left, counting its audience now (a dry run's reads), unless the
    /// request allows it.
    async fn check_quota(&self, request: &CampaignRequest, per_recipient: u32) -> Result<(), CampaignError> {
        if request.allow_over_quota {
            return Ok(());
        }
        let quota = self
            .inner
            .quota
            .now()
            .await
            .map_err(|error| CampaignError::QuotaUnknown(error.to_string()))?;
        // No limit (or a dry run): nothing to count against.
        if quota.is_none_or(|quota| quota.limit.is_none()) {
            return Ok(());
        }
        let audience = self.audience(&request.audience, &request.scenario_id)?;
        let (count, _) = self.count(request, audience).await?;
        let figures = QuotaFigures::of(count.saturating_mul(u64::from(per_recipient)), quota);
        if figures.over() {
            return Err(CampaignError::OverQuota(figures));
        }
        Ok(())
    }

    /// Creates the campaign (or finds the one this key created) and returns its
    /// id. `audit`, the operator's entry in the audit log, is created in the
    /// campaign's own commit: both land or neither does.
    pub(crate) async fn create(
        &self,
        key: &str,
        request: &CampaignRequest,
        audit: Option<&crate::store::AuditEntry>,
    ) -> Result<String, CampaignError> {
        let id = campaign_id(key).ok_or(CampaignError::BadKey)?;
        // The key first: a retry of a created campaign is the same campaign,
        // even once its send time has passed or its messages used the quota.
        if let Some(existing) = self.inner.store.campaign(&id).await? {
            return if existing.doc.request_hash == request_hash(request) {
                Ok(id)
            } else {
                Err(CampaignError::KeyReused)
            };
        }
        let engine = self.engine();
        let starts_at = request
            .send_at
            .map(|at| engine.campaign_starts_at(&request.scenario_id, at.to_utc(), self.inner.clock.now()))
            .transpose()?;
        let start = engine.campaign_start(&request.scenario_id, &id)?;
        let rate = self.rate(request)?;
        self.audience(&request.audience, &request.scenario_id)?;
        let messages = serde_json::to_string(&start.messages)
            .map_err(|error| PipelineError::Encoding(format!("the campaign's messages cannot be encoded: {error}")))?;
        let audience = serde_json::to_string(&request.audience)
            .map_err(|error| PipelineError::Encoding(format!("the campaign's audience cannot be encoded: {error}")))?;
        let recipient = serde_json::to_string(&start.recipient).map_err(|error| {
            PipelineError::Encoding(format!(
                "what the campaign records per recipient cannot be encoded: {error}"
            ))
        })?;
        self.check_quota(request, start.messages_per_recipient).await?;
        let chunk_size = match start.delivery {
            Delivery::Multicast => start.recipient.chunk_size(),
            Delivery::Push => crate::engine::campaign::PUSH_CHUNK_SIZE,
        };
        let chunk_size = u32::try_from(chunk_size).unwrap_or(1);
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
            asks_node: start.asks.as_ref().map(ToString::to_string),
            recipient: Some(recipient),
            delivery: (start.delivery == Delivery::Push).then(|| start.delivery.as_str().to_owned()),
            chunk_size: Some(chunk_size),
            messages_per_recipient: Some(start.messages_per_recipient),
            cancel_timers: false,
            send_at: request.send_at.map(|at| super::instant(at.to_utc())),
            starts_at: starts_at.map(super::instant),
            fire_at_ms: starts_at.map(|at| at.timestamp_millis()),
            state: if starts_at.is_some() {
                CampaignState::Scheduled
            } else {
                CampaignState::Planning
            },
            plan_id: None,
            planned: 0,
            chunks: 0,
            counts: None,
            lease_owner: None,
            lease_until: None,
            attempts: 0,
            created_at: self.now(),
            ended_at: None,
        };
        match self.inner.store.create_campaign(&id, &doc, audit).await? {
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

    /// Campaigns waiting for their send time first (soonest first), then the
    /// others, newest first; `limit` in all.
    pub(crate) async fn list(&self, limit: u32) -> Result<Vec<CampaignStatus>, StoreError> {
        let store = &self.inner.store;
        let scheduled = store.scheduled_campaigns(limit).await?;
        let mut listed = Vec::new();
        for stored in scheduled {
            listed.push(self.report(stored).await?);
        }
        let room = limit.saturating_sub(u32::try_from(listed.len()).unwrap_or(limit));
        if room > 0 {
            // Scheduled ones are listed already; a campaign that fired between
            // the two reads shows up in the second read only.
            for stored in store.campaigns(limit).await? {
                if listed.len() >= limit as usize {
                    break;
                }
                if stored.doc.state != CampaignState::Scheduled
                    && !listed.iter().any(|shown| shown.campaign_id == stored.id)
                {
                    listed.push(self.report(stored).await?);
                }
            }
        }
        Ok(listed)
    }

    async fn report(&self, stored: Stored<CampaignDoc>) -> Result<CampaignStatus, StoreError> {
        let doc = stored.doc;
        let delivery = delivery_of(&doc);
        let quota = match (doc.messages_per_recipient, doc.plan_id.is_some()) {
            (Some(per), true) => Some(QuotaFigures::of(
                doc.planned.saturating_mul(u64::from(per)),
                self.inner.quota.for_status().await,
            )),
            _ => None,
        };
        let counts = match (&doc.counts, &doc.plan_id) {
            (Some(counts), _) => *counts,
            (None, Some(plan)) => self.inner.store.chunk_counts(&stored.id, plan).await?,
            (None, None) => ChunkCounts::default(),
        };
        Ok(CampaignStatus {
            campaign_id: stored.id,
            scenario_id: doc.scenario_id,
            run: doc.run,
            state: doc.state.as_str(),
            planned: doc.planned,
            sent: counts.sent,
            failed: counts.failed,
            skipped: counts.skipped,
            pending: counts.pending,
            chunks: doc.chunks,
            delivery: delivery.as_str(),
            chunk_size: doc
                .chunk_size
                .unwrap_or(u32::try_from(crate::engine::campaign::CHUNK_SIZE).unwrap_or(500)),
            cancel_timers: doc.cancel_timers,
            quota,
            skip_answered: doc.skip_answered,
            calls_per_second: doc.calls_per_second,
            aggregation_unit: doc.aggregation_unit,
            audience: serde_json::from_str(&doc.audience).unwrap_or(serde_json::Value::Null),
            created_at: doc.created_at.to_string(),
            send_at: doc.send_at.map(|at| at.to_string()),
            starts_at: doc.starts_at.map(|at| at.to_string()),
            ended_at: doc.ended_at.map(|at| at.to_string()),
        })
    }

    /// Stops the campaign: chunks not yet claimed are not sent; with
    /// `cancel_timers`, neither are the reminders, expiries and steps of the
    /// recipients' runs that have not fired yet (cancelled once every chunk
    /// is settled, so none that a chunk in flight schedules is missed).
    pub(crate) async fn cancel(&self, id: &str, cancel_timers: bool) -> Result<&'static str, CampaignError> {
        let store = &self.inner.store;
        for _ in 0..ROUNDS {
            let stored = store
                .campaign(id)
                .await?
                .ok_or_else(|| CampaignError::UnknownCampaign(id.to_owned()))?;
            if stored.doc.state == CampaignState::Scheduled {
                // Not fired: nothing planned, nothing sent, no run begun.
                let change = CampaignChange {
                    state: Some(CampaignState::Cancelled),
                    counts: Some(ChunkCounts::default()),
                    ended_at: Some(self.now()),
                    cancel_timers: cancel_timers.then_some(true),
                    ..CampaignChange::default()
                };
                if store.change_campaign(id, stored.version, &change).await?.is_some() {
                    tracing::info!(campaign.id = %id, outcome = "cancelled", "a scheduled campaign was cancelled before its time");
                    return Ok(CampaignState::Cancelled.as_str());
                }
                continue;
            }
            match stored.doc.state {
                CampaignState::Scheduled => {}
                // A second cancel asking for the timers too, while the first
                // is still under way, adds them.
                CampaignState::Cancelling | CampaignState::Cancelled if cancel_timers && !stored.doc.cancel_timers => {}
                CampaignState::Cancelling | CampaignState::Cancelled => return Ok(stored.doc.state.as_str()),
                // Sent to everyone, its reminders and expiries still to come:
                // the driver takes it up again to cancel them.
                CampaignState::Done if cancel_timers => {}
                CampaignState::Done => return Err(CampaignError::Finished("done")),
                CampaignState::Planning | CampaignState::Sending => {}
            }
            let change = CampaignChange {
                state: Some(CampaignState::Cancelling),
                cancel_timers: cancel_timers.then_some(true),
                ..CampaignChange::default()
            };
            if store.change_campaign(id, stored.version, &change).await?.is_some() {
                tracing::info!(campaign.id = %id, outcome = "cancelling", "campaign cancelled by an operator");
                self.inner.wake.notify_one();
                return Ok(CampaignState::Cancelling.as_str());
            }
        }
        Err(PipelineError::Contention("the campaign kept changing; try again".into()).into())
    }

    /// Looks for campaigns to drive until `shutdown`: at every `interval`
    /// (sooner when a scheduled one's time comes first), and when one is
    /// created or cancelled here.
    pub(crate) async fn run(self, interval: Duration, shutdown: CancellationToken) {
        let mut wait = interval;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            wait = interval;
            let now = self.now();
            let store = &self.inner.store;
            // The active ones, and the scheduled ones soonest first: those due,
            // and the first still to come (back at its time, if before the
            // interval).
            let found =
                futures::future::try_join(store.active_campaigns(), store.scheduled_campaigns(DUE_PER_LOOK)).await;
            let active = match found {
                Ok((mut active, scheduled)) => {
                    for stored in scheduled {
                        match not_yet(&stored.doc, now) {
                            Some(until) => {
                                wait = wait.min(until);
                                break;
                            }
                            None => active.push(stored),
                        }
                    }
                    active
                }
                Err(error) => {
                    tracing::warn!(error = %error, "cannot look for campaigns");
                    continue;
                }
            };
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
            .is_ok_and(|mut driving| driving.insert(id.to_owned()))
    }

    fn stop_driving(&self, id: &str) {
        if let Ok(mut driving) = self.inner.driving.lock() {
            driving.remove(id);
        }
    }
}

/// How long until a scheduled campaign's time comes, as of `now`; `None` when
/// it came (or the campaign is not scheduled).
fn not_yet(doc: &CampaignDoc, now: FirestoreInstant) -> Option<Duration> {
    if doc.state != CampaignState::Scheduled {
        return None;
    }
    let left = doc.starts_at?.as_millisecond().saturating_sub(now.as_millisecond());
    (left > 0).then(|| Duration::from_millis(u64::try_from(left).unwrap_or(u64::MAX)))
}

/// How a stored campaign's messages go out (absent: multicast, as every
/// campaign went before push campaigns).
fn delivery_of(doc: &CampaignDoc) -> Delivery {
    match doc.delivery.as_deref() {
        Some("push") => Delivery::Push,
        _ => Delivery::Multicast,
    }
}

/// The request as understood, for comparing a retried call with the first.
fn request_hash(request: &CampaignRequest) -> String {
    let canonical = serde_json::to_vec(request).unwrap_or_default();
    hex::encode(Sha256::digest(&canonical))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_summary_names_fields_and_tests_never_their_values() {
        let cases = [
            (serde_json::json!({}), serde_json::json!({})),
            (
                serde_json::json!({"tags": {"anyOf": ["vip"]}, "firstSeenFrom": "2026-09-01"}),
                serde_json::json!({"tags": {"anyOf": ["vip"]}, "firstSeenFrom": "2026-09-01"}),
            ),
            (
                serde_json::json!({"fields": {"phone": {"equals": "09012345678"}, "age": {"min": 20, "max": 29}, "plan": {"in": ["gold"], "exists": true}}}),
                serde_json::json!({"fields": {"phone": ["equals"], "age": ["min", "max"], "plan": ["in", "exists"]}}),
            ),
        ];
        for (audience, summary) in cases {
            let request = CampaignRequest {
                scenario_id: ScenarioId::parse("news").expect("an id"),
                audience: serde_json::from_value(audience.clone()).expect("an audience"),
                skip_answered: false,
                calls_per_second: None,
                send_at: None,
                allow_over_quota: false,
            };
            let written: serde_json::Value = serde_json::from_str(&request.audit_audience()).expect("JSON");
            assert_eq!(written, summary, "{audience}");
        }
    }
}
