//! Driving one campaign: its lease kept alive by a heartbeat, then plan ->
//! send -> end. A driver that loses the lease stops at once (its chunk calls in
//! flight are dropped; their claims run out and are sent again, with the same
//! retry keys, by the new holder).

use super::chunk::{ChunkTurn, Pace, Runs, TurnOutcome};
use super::members::Members;
use super::{Campaigns, Stop};
use crate::engine::campaign::{AudienceRequest, CHUNK_SIZE};
use crate::ids::ScenarioId;
use crate::line::messages::Message;
use crate::pipeline::PipelineError;
use crate::store::{
    CampaignChange, CampaignDoc, CampaignState, ChunkCounts, ChunkDoc, ChunkEnd, ChunkState, Stored, Version, chunk_id,
};
use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Chunks written per commit while planning (each holds up to 500 ids).
const CHUNKS_PER_COMMIT: usize = 10;
/// Chunk calls in flight at once; the pace spaces their starts.
const CALLS_IN_FLIGHT: usize = 8;
/// Pending chunks looked at per round (read without their users).
const CHUNK_PAGE: u32 = 1000;
/// Progress is logged every this many chunks.
const PROGRESS_EVERY: u32 = 5;
/// A round with nothing due waits at most this long before looking again.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// Rounds of read and conditional write of a campaign before giving up.
const ROUNDS: usize = 4;

/// The campaign as its driver last wrote or read it.
struct Held {
    doc: CampaignDoc,
    version: Version,
}

/// A campaign this instance holds, shared by its driver and its heartbeat.
pub(super) struct Lease {
    id: String,
    held: tokio::sync::Mutex<Held>,
    /// Cancelled when another instance holds the campaign now.
    lost: CancellationToken,
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Lease {
    async fn doc(&self) -> CampaignDoc {
        self.held.lock().await.doc.clone()
    }
}

impl Campaigns {
    /// Takes the campaign's lease, then carries it to its end.
    pub(super) async fn drive(&self, stored: Stored<CampaignDoc>) {
        let attempts = stored.doc.attempts.saturating_add(1);
        let version = match self
            .inner
            .store
            .lease_campaign(&stored.id, stored.version, attempts)
            .await
        {
            Ok(Some(version)) => version,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(error = %error, "cannot take the campaign's lease");
                return;
            }
        };
        let mut doc = stored.doc;
        doc.attempts = attempts;
        doc.lease_owner = Some(self.inner.store.instance_id().to_owned());
        let lease = Arc::new(Lease {
            id: stored.id,
            held: tokio::sync::Mutex::new(Held { doc, version }),
            lost: CancellationToken::new(),
        });
        // Stopped with the driver, however it ends (a shutdown drops it).
        let _heartbeat = AbortOnDrop(tokio::spawn(
            self.clone()
                .heartbeat(lease.clone())
                .instrument(tracing::Span::current()),
        ));
        let result = tokio::select! {
            _ = lease.lost.cancelled() => Err(Stop::Lost),
            result = self.phases(&lease) => result,
        };
        match result {
            Ok(()) => {}
            Err(Stop::Lost) => tracing::info!(outcome = "superseded", "another instance holds the campaign"),
            Err(Stop::Failed(error)) => {
                tracing::warn!(error = %error, outcome = "retry_later", "campaign interrupted; it goes on from where it stopped");
            }
        }
    }

    /// Renews the lease every third of it, whatever the driver is doing (a long
    /// audience read, a round of slow calls); a lost lease stops the driver.
    async fn heartbeat(self, lease: Arc<Lease>) {
        let every = self.inner.store.lease() / 3;
        loop {
            tokio::time::sleep(every).await;
            let mut held = lease.held.lock().await;
            match self.refresh(&lease.id, &mut held).await {
                Ok(()) => {}
                Err(Stop::Lost) => {
                    lease.lost.cancel();
                    return;
                }
                // The next beat tries again; a lease that ran out meanwhile
                // and was taken over reads as lost then.
                Err(Stop::Failed(error)) => tracing::warn!(error = %error, "cannot renew the campaign's lease"),
            }
        }
    }

    async fn phases(&self, lease: &Lease) -> Result<(), Stop> {
        loop {
            match lease.doc().await.state {
                CampaignState::Scheduled => {
                    if !self.fire(lease).await? {
                        return Ok(());
                    }
                }
                CampaignState::Planning => self.plan(lease).await?,
                CampaignState::Sending => self.send(lease).await?,
                CampaignState::Cancelling => self.skip_rest(lease).await?,
                CampaignState::Done | CampaignState::Cancelled => return Ok(()),
            }
        }
    }

    /// Reads the campaign again and renews the lease from what it read (a
    /// cancel by an operator is kept); another holder makes it `Lost`.
    async fn refresh(&self, id: &str, held: &mut Held) -> Result<(), Stop> {
        let store = &self.inner.store;
        for _ in 0..ROUNDS {
            let Some(stored) = store.campaign(id).await? else {
                return Err(Stop::Lost);
            };
            if stored.doc.lease_owner.as_deref() != Some(store.instance_id())
                || stored.doc.attempts != held.doc.attempts
            {
                return Err(Stop::Lost);
            }
            if let Some(version) = store.lease_campaign(id, stored.version, held.doc.attempts).await? {
                held.doc = stored.doc;
                held.version = version;
                return Ok(());
            }
        }
        Err(Stop::Failed(PipelineError::Contention(
            "the campaign kept changing while its lease was renewed".into(),
        )))
    }

    /// Applies `change` if the campaign is still `from` as last read, and
    /// unchanged since: a cancel read by the heartbeat, or one that lands
    /// meanwhile, is never overwritten. `Ok(false)`: not applied.
    async fn change(&self, lease: &Lease, from: CampaignState, change: CampaignChange) -> Result<bool, Stop> {
        self.change_if(lease, from, change, |_| true).await
    }

    /// [`Self::change`], only if `allowed` holds for the campaign as last
    /// read (under the same lock as the write, so a heartbeat's fresher read
    /// is what it judges).
    async fn change_if(
        &self,
        lease: &Lease,
        from: CampaignState,
        change: CampaignChange,
        allowed: impl Fn(&CampaignDoc) -> bool,
    ) -> Result<bool, Stop> {
        let mut held = lease.held.lock().await;
        if held.doc.state != from || !allowed(&held.doc) {
            return Ok(false);
        }
        match self
            .inner
            .store
            .change_campaign(&lease.id, held.version, &change)
            .await?
        {
            Some(version) => {
                held.version = version;
                let doc = &mut held.doc;
                doc.state = change.state.unwrap_or(doc.state);
                doc.plan_id = change.plan_id.or(doc.plan_id.take());
                doc.planned = change.planned.unwrap_or(doc.planned);
                doc.chunks = change.chunks.unwrap_or(doc.chunks);
                doc.counts = change.counts.or(doc.counts);
                Ok(true)
            }
            None => {
                self.refresh(&lease.id, &mut held).await?;
                Ok(false)
            }
        }
    }

    /// Ends a campaign that cannot go on (a scenario it names was removed, its
    /// record cannot be read): what is not sent yet is not sent.
    async fn abandon(&self, lease: &Lease, from: CampaignState, problem: &str) -> Result<(), Stop> {
        tracing::error!(problem, outcome = "cancelled", "the campaign cannot go on");
        self.finish(lease, from, CampaignState::Cancelled).await
    }

    /// Fires a scheduled campaign whose time came: its one move to `planning`,
    /// conditional on the campaign as this lease holder read it, so across
    /// instances and restarts it fires once; its audience is read from now
    /// on. `Ok(false)`: not its time yet.
    async fn fire(&self, lease: &Lease) -> Result<bool, Stop> {
        let doc = lease.doc().await;
        let now = self.now();
        if doc
            .starts_at
            .is_some_and(|at| at.as_millisecond() > now.as_millisecond())
        {
            return Ok(false);
        }
        let change = CampaignChange {
            state: Some(CampaignState::Planning),
            ..CampaignChange::default()
        };
        if self.change(lease, CampaignState::Scheduled, change).await? {
            tracing::info!(outcome = "fired", "a scheduled campaign's time came");
        }
        Ok(true)
    }

    /// Snapshots the audience into chunks of one plan, then starts sending it.
    async fn plan(&self, lease: &Lease) -> Result<(), Stop> {
        let store = &self.inner.store;
        let doc = lease.doc().await;
        let scenario = match ScenarioId::parse(doc.scenario_id.clone()) {
            Ok(scenario) => scenario,
            Err(error) => return self.abandon(lease, CampaignState::Planning, &error.to_string()).await,
        };
        let audience = serde_json::from_str::<AudienceRequest>(&doc.audience)
            .map_err(|error| error.to_string())
            .and_then(|request| self.audience(&request, &scenario).map_err(|error| error.to_string()));
        let audience = match audience {
            Ok(audience) => audience,
            Err(problem) => return self.abandon(lease, CampaignState::Planning, &problem).await,
        };
        let plan_id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        let chunk_size = doc
            .chunk_size
            .map_or(CHUNK_SIZE, |size| usize::try_from(size).unwrap_or(CHUNK_SIZE))
            .clamp(1, CHUNK_SIZE);
        let started = Instant::now();
        let skip = doc.skip_answered.then_some(&scenario);
        let mut members = Members::read(store, audience, skip);
        let mut buffer: Vec<String> = Vec::new();
        let mut staged: Vec<(String, ChunkDoc)> = Vec::new();
        let mut planned = 0u64;
        let mut index = 0u32;
        loop {
            // Cancelled meanwhile (the heartbeat read it): no plan is sent.
            if lease.doc().await.state != CampaignState::Planning {
                return Ok(());
            }
            let page = members.next_page().await?;
            let last = page.is_none();
            buffer.extend(page.unwrap_or_default());
            while buffer.len() >= chunk_size || (last && !buffer.is_empty()) {
                let users: Vec<String> = buffer.drain(..buffer.len().min(chunk_size)).collect();
                planned += users.len() as u64;
                staged.push(new_chunk(&lease.id, &plan_id, index, users));
                index += 1;
                if staged.len() >= CHUNKS_PER_COMMIT {
                    store.write_chunks(&std::mem::take(&mut staged)).await?;
                }
            }
            if last {
                break;
            }
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
        if self.change(lease, CampaignState::Planning, change).await? {
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

    /// Sends the plan's pending chunks, then ends the campaign.
    async fn send(&self, lease: &Lease) -> Result<(), Stop> {
        let store = &self.inner.store;
        let doc = lease.doc().await;
        let (plan_id, messages) = match sendable(&doc) {
            Ok(sendable) => sendable,
            Err(problem) => return self.abandon(lease, CampaignState::Sending, &problem).await,
        };
        let runs = match Runs::of(&lease.id, &doc) {
            Ok(runs) => runs,
            Err(problem) => return self.abandon(lease, CampaignState::Sending, &problem).await,
        };
        let delivery = super::delivery_of(&doc);
        let pace = Pace::new(chunk_rate(delivery, doc.calls_per_second));
        let started = Instant::now();
        let mut sent_users = 0u64;
        let mut settled_chunks = 0u32;
        loop {
            if lease.doc().await.state != CampaignState::Sending {
                return Ok(());
            }
            let pending = store.pending_chunks(&lease.id, &plan_id, CHUNK_PAGE).await?;
            if pending.is_empty() {
                return self.finish(lease, CampaignState::Sending, CampaignState::Done).await;
            }
            let due = match due_now(pending, self.now().as_millisecond()) {
                Ok(due) => due,
                Err(wait) => {
                    tokio::time::sleep(wait).await;
                    continue;
                }
            };
            let turn = ChunkTurn {
                campaigns: self,
                campaign_id: &lease.id,
                delivery,
                messages: &messages,
                unit: &doc.aggregation_unit,
                scenario_id: &doc.scenario_id,
                asks_node: doc.asks_node.as_deref(),
                runs: runs.as_ref(),
                pace: &pace,
                resolving: false,
            };
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
                            log_progress(doc.planned, sent_users, started);
                        }
                    }
                    // The rest of the round runs out: each turn claims, reads
                    // the cancel and skips. Dropping them instead would leave
                    // claimed chunks marked uncertain, which a cancel sends.
                    Ok(TurnOutcome::Cancelled) => cancelled = true,
                    Ok(TurnOutcome::NotSettled) => {}
                    Err(error) => tracing::warn!(error = %error, outcome = "retry_later", "a chunk's turn failed"),
                }
            }
            drop(turns);
            if cancelled {
                let mut held = lease.held.lock().await;
                self.refresh(&lease.id, &mut held).await?;
            }
        }
    }

    /// Skips the chunks a cancel left, then ends the campaign as cancelled.
    async fn skip_rest(&self, lease: &Lease) -> Result<(), Stop> {
        let store = &self.inner.store;
        let doc = lease.doc().await;
        let Some(plan_id) = doc.plan_id.clone() else {
            // Cancelled before its plan: no chunk was sent, no run began.
            return self
                .finish(lease, CampaignState::Cancelling, CampaignState::Cancelled)
                .await;
        };
        let (messages, runs) = match sendable(&doc).and_then(|(_, messages)| Ok((messages, Runs::of(&lease.id, &doc)?)))
        {
            Ok(sendable) => sendable,
            Err(problem) => return self.abandon(lease, CampaignState::Cancelling, &problem).await,
        };
        let delivery = super::delivery_of(&doc);
        let pace = Pace::new(chunk_rate(delivery, doc.calls_per_second));
        let resolve = ChunkTurn {
            campaigns: self,
            campaign_id: &lease.id,
            delivery,
            messages: &messages,
            unit: &doc.aggregation_unit,
            scenario_id: &doc.scenario_id,
            asks_node: doc.asks_node.as_deref(),
            runs: runs.as_ref(),
            pace: &pace,
            resolving: true,
        };
        loop {
            let pending = store.pending_chunks(&lease.id, &plan_id, CHUNK_PAGE).await?;
            if pending.is_empty() {
                let swept = self.cancel_timers(lease).await?;
                // A cancel asking for the timers that landed after the sweep
                // decided: not cancelled yet; the next round sweeps.
                return self
                    .finish_if(lease, CampaignState::Cancelling, CampaignState::Cancelled, |doc| {
                        !doc.cancel_timers || swept
                    })
                    .await;
            }
            // Claimed, perhaps on its way to LINE, or waiting for a retry: its
            // claim or its retry time decides first.
            let due = match due_now(pending, self.now().as_millisecond()) {
                Ok(due) => due,
                Err(wait) => {
                    tokio::time::sleep(wait).await;
                    continue;
                }
            };
            for chunk in &due {
                if chunk.doc.uncertain {
                    // Claimed before the cancel, and LINE may have taken it:
                    // the same retry key finds out (409) or sends it once.
                    resolve.run(chunk).await?;
                } else {
                    // Not claimed and due: skipped conditional on the version
                    // read, without a claim (which would mark it uncertain).
                    if store
                        .settle_chunk(chunk, chunk.version, &ChunkEnd::Skipped, None, &[])
                        .await?
                    {
                        crate::metrics::series::campaign_chunk("skipped", chunk.doc.count);
                    }
                }
            }
        }
    }

    /// With `cancelTimers`, cancels the timers of the recipients' runs that
    /// have not fired: once no chunk is left to settle, so none that a chunk
    /// in flight scheduled is missed.
    /// `Ok(true)` when the campaign as read asked for it (and it was done).
    async fn cancel_timers(&self, lease: &Lease) -> Result<bool, Stop> {
        let doc = lease.doc().await;
        if !doc.cancel_timers {
            return Ok(false);
        }
        if doc.recipient.is_none() {
            // A campaign from before runs: it scheduled nothing.
            return Ok(true);
        }
        let cancelled = self
            .inner
            .store
            .cancel_run_timers(&doc.run, "campaign_cancelled")
            .await?;
        tracing::info!(
            timers = cancelled,
            outcome = "timers_cancelled",
            "the campaign's timers were cancelled"
        );
        Ok(true)
    }

    /// Records the campaign's end and its final counts.
    async fn finish(&self, lease: &Lease, from: CampaignState, to: CampaignState) -> Result<(), Stop> {
        self.finish_if(lease, from, to, |_| true).await
    }

    /// [`Self::finish`], only if `allowed` holds for the campaign as last read.
    async fn finish_if(
        &self,
        lease: &Lease,
        from: CampaignState,
        to: CampaignState,
        allowed: impl Fn(&CampaignDoc) -> bool,
    ) -> Result<(), Stop> {
        let doc = lease.doc().await;
        let counts = match &doc.plan_id {
            Some(plan_id) => self.inner.store.chunk_counts(&lease.id, plan_id).await?,
            None => ChunkCounts::default(),
        };
        let change = CampaignChange {
            state: Some(to),
            counts: Some(counts),
            ended_at: Some(self.now()),
            ..CampaignChange::default()
        };
        if self.change_if(lease, from, change, allowed).await? {
            tracing::info!(
                planned = doc.planned,
                sent = counts.sent,
                failed = counts.failed,
                skipped = counts.skipped,
                outcome = to.as_str(),
                "campaign ended"
            );
        }
        Ok(())
    }
}

/// Chunks a second: the campaign's calls a second, a push campaign's at
/// most LINE's push rate in chunks.
fn chunk_rate(delivery: crate::engine::campaign::Delivery, calls_per_second: u32) -> u32 {
    match delivery {
        crate::engine::campaign::Delivery::Multicast => calls_per_second,
        crate::engine::campaign::Delivery::Push => calls_per_second.min(super::push::PUSH_CHUNKS_PER_SECOND),
    }
}

/// The plan and the messages of a campaign that sends.
fn sendable(doc: &CampaignDoc) -> Result<(String, Vec<Message>), String> {
    let plan_id = doc.plan_id.clone().ok_or("a sending campaign without a plan")?;
    let messages = serde_json::from_str(&doc.messages)
        .map_err(|error| format!("the campaign's messages cannot be read: {error}"))?;
    Ok((plan_id, messages))
}

/// The chunks that may be claimed at `now_ms`, or how long to wait for the first.
fn due_now(pending: Vec<Stored<ChunkDoc>>, now_ms: i64) -> Result<Vec<Stored<ChunkDoc>>, Duration> {
    let first_wake = pending.iter().map(|chunk| chunk.doc.wake_at_ms).min().unwrap_or(now_ms);
    let due: Vec<Stored<ChunkDoc>> = pending
        .into_iter()
        .filter(|chunk| chunk.doc.wake_at_ms <= now_ms)
        .collect();
    if due.is_empty() {
        let wait = u64::try_from(first_wake.saturating_sub(now_ms)).unwrap_or(0);
        Err(Duration::from_millis(wait).clamp(Duration::from_millis(20), IDLE_WAIT))
    } else {
        Ok(due)
    }
}

fn new_chunk(campaign_id: &str, plan_id: &str, index: u32, users: Vec<String>) -> (String, ChunkDoc) {
    let count = u32::try_from(users.len()).unwrap_or(u32::MAX);
    (
        chunk_id(campaign_id, plan_id, index),
        ChunkDoc {
            campaign_id: campaign_id.to_owned(),
            plan_id: plan_id.to_owned(),
            index,
            users,
            count,
            state: ChunkState::Pending,
            lease_owner: None,
            wake_at_ms: 0,
            attempts: 0,
            first_attempt_ms: None,
            uncertain_since: None,
            last_error: None,
            line_status: None,
            failed_users: 0,
            skipped_users: 0,
            pushes: None,
            uncertain: false,
            settled_at: None,
        },
    )
}

fn log_progress(planned: u64, sent: u64, started: Instant) {
    let elapsed = started.elapsed().as_secs_f64().max(0.001);
    let rate = sent as f64 / elapsed;
    let eta_s = if rate > 0.0 {
        (planned.saturating_sub(sent) as f64 / rate).round() as u64
    } else {
        0
    };
    tracing::info!(
        sent,
        planned,
        recipients_per_s = rate.round() as u64,
        eta_s,
        "campaign progress"
    );
}
