//! The followers sync (`POST /admin/followers/sync`): pages through LINE's
//! list of the account's friends and records each as following, so campaigns
//! reach friends the service never saw (see `store::follower_sync` for what a
//! page writes).
//!
//! - One sync at a time: a start while one runs is that one. One instance at a
//!   time drives it, holding its lease, renewed with each page's progress; an
//!   instance that dies is followed by another from the stored page token.
//! - Writes ramp up as Firestore asks of new write traffic (500 a second, half
//!   as many more every 5 minutes: `FOLLOWER_SYNC_WRITES_PER_SECOND` is the
//!   start), whatever LINE's pages would allow.
//! - LINE's 429 waits its `Retry-After`; a 5xx or no answer is tried again a
//!   few times, then left to the next look; a 403 (the account is neither
//!   verified nor premium) or another refusal ends the sync `failed` with that
//!   reason, and nothing else changes.

use crate::clock::Clock;
use crate::ids::is_line_user_id;
use crate::line::client::{FollowersPage, LineClient, SendError};
use crate::pipeline::PipelineError;
use crate::store::{
    Expect, FollowerSyncDoc, FollowerSyncState, Following, PageCounts, Store, StoreError, Stored, SyncProgress,
    SyncStart, Version,
};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Tries of one page's call before the sync waits for the next look.
const PAGE_TRIES: u32 = 4;
/// Rounds of read and conditional write of one page's users.
const PAGE_ROUNDS: usize = 3;
/// Firestore's ramp for new write traffic: half as many more every 5 minutes.
const RAMP_EVERY: Duration = Duration::from_secs(300);
/// Takes of the sync in a row that got no page further (LINE failing, or the
/// instances holding it dying) before it ends `failed`.
const MAX_TAKES: u32 = 30;
/// LINE's 429s for one page within a take before the take ends (and counts
/// towards `MAX_TAKES`): a sync LINE never serves again ends too.
const MAX_WAITS_PER_TAKE: u32 = 20;

/// What `GET /admin/followers/sync` shows.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FollowerSyncStatus {
    pub(crate) state: &'static str,
    pub(crate) started_at: String,
    pub(crate) pages: u64,
    /// Ids LINE listed so far.
    pub(crate) listed: u64,
    /// Recorded as following by this sync.
    pub(crate) recorded: u64,
    /// Known to be following already.
    pub(crate) already_following: u64,
    /// Unfollowed after the sync began: left unfollowed.
    pub(crate) kept_unfollowed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ended_at: Option<String>,
}

impl From<&FollowerSyncDoc> for FollowerSyncStatus {
    fn from(doc: &FollowerSyncDoc) -> Self {
        Self {
            state: doc.state.as_str(),
            started_at: doc.started_at.to_string(),
            pages: doc.pages,
            listed: doc.listed,
            recorded: doc.recorded,
            already_following: doc.already_following,
            kept_unfollowed: doc.kept_unfollowed,
            reason: doc.reason.clone(),
            ended_at: doc.ended_at.map(|at| at.to_string()),
        }
    }
}

#[derive(Clone)]
pub(crate) struct FollowerSync {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    line: LineClient,
    /// Lease checks read it.
    clock: Clock,
    /// Writes a second the sync starts at.
    writes_per_second: u32,
    wake: Notify,
}

/// What the sync does with one listed user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listed {
    /// Recorded following, on the record as read.
    Record(Expect),
    AlreadyFollowing,
    /// Unfollowed after the sync began: stays unfollowed.
    KeptUnfollowed,
}

/// What to do with a user LINE lists, given their record as read (and its
/// version) and when the sync began (ms).
fn listed(record: Option<&(Following, Version)>, started_ms: i64) -> Listed {
    match record {
        None => Listed::Record(Expect::Absent),
        Some((following, _)) if following.following == Some(true) => Listed::AlreadyFollowing,
        Some((following, _))
            if following
                .unfollowed_at
                .is_some_and(|at| at.as_millisecond() > started_ms) =>
        {
            Listed::KeptUnfollowed
        }
        Some((_, version)) => Listed::Record(Expect::At(*version)),
    }
}

/// Writes a second allowed `elapsed` after the sync's writes began.
fn ramped(base: u32, elapsed: Duration) -> f64 {
    let steps = (elapsed.as_secs() / RAMP_EVERY.as_secs()).min(40);
    f64::from(base.max(1)) * 1.5_f64.powi(i32::try_from(steps).unwrap_or(40))
}

/// How a page's call ended.
enum Fetched {
    Page(FollowersPage),
    /// LINE refused: the sync fails with this reason.
    Refused(String),
    /// LINE asked to wait this long (a 429) before asking again.
    Wait(Duration),
    /// Not now (LINE failing, no answer): the next look tries again.
    Later(String),
}

/// The sync as this instance holds it: its version after the last write of
/// its lease, and when that was.
struct Held {
    version: Version,
    renewed: Instant,
}

impl FollowerSync {
    pub(crate) fn new(store: Store, line: LineClient, clock: Clock, writes_per_second: u32) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                line,
                clock,
                writes_per_second,
                wake: Notify::new(),
            }),
        }
    }

    /// Starts a sync, or finds the one under way; `true` when it began now.
    pub(crate) async fn start(&self) -> Result<(FollowerSyncStatus, bool), PipelineError> {
        let (stored, began) = match self.inner.store.start_follower_sync().await? {
            SyncStart::Started(stored) => (stored, true),
            SyncStart::Running(stored) => (stored, false),
        };
        if began {
            tracing::info!(outcome = "started", "followers sync started");
            self.inner.wake.notify_one();
        }
        Ok((FollowerSyncStatus::from(&stored.doc), began))
    }

    pub(crate) async fn status(&self) -> Result<Option<FollowerSyncStatus>, StoreError> {
        Ok(self
            .inner
            .store
            .follower_sync()
            .await?
            .map(|stored| FollowerSyncStatus::from(&stored.doc)))
    }

    /// Looks for a sync to drive until `shutdown`: at every `interval`, and
    /// when one is started here.
    pub(crate) async fn run(self, interval: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
            let stored = match self.inner.store.follower_sync().await {
                Ok(Some(stored)) if stored.doc.state == FollowerSyncState::Running => stored,
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(error = %error, "cannot look for a followers sync");
                    continue;
                }
            };
            let now = crate::store::firestore_now(&self.inner.clock);
            let free = stored.doc.lease_until.is_none_or(|until| until < now)
                || stored.doc.lease_owner.as_deref() == Some(self.inner.store.instance_id());
            if !free {
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                result = self.drive(stored) => {
                    if let Err(error) = result {
                        tracing::warn!(error = %error, outcome = "retry_later", "followers sync interrupted; it goes on from its last page");
                    }
                }
            }
        }
    }

    /// Takes the sync's lease, then writes its pages until LINE has no more,
    /// the sync fails, or another instance holds it. Every wait (LINE's
    /// `Retry-After`, the write ramp) is cut into pieces shorter than a third
    /// of the lease, the lease renewed after each, and a page's users are
    /// written only under a lease renewed within that third: an instance
    /// that lost the sync stops before it writes.
    async fn drive(&self, stored: Stored<FollowerSyncDoc>) -> Result<(), PipelineError> {
        let store = &self.inner.store;
        let attempts = stored.doc.attempts.saturating_add(1);
        let Some(version) = store.lease_follower_sync(stored.version, attempts).await? else {
            return Ok(());
        };
        let mut held = Held {
            version,
            renewed: Instant::now(),
        };
        let mut doc = stored.doc;
        doc.attempts = attempts;
        if attempts > MAX_TAKES {
            let reason = format!(
                "taken {MAX_TAKES} times in a row without getting a page further (LINE kept failing or the instances holding it stopped); start it again"
            );
            tracing::warn!(attempts, outcome = "failed", "followers sync gave up");
            let progress = self.progress(&doc, doc.next.as_deref(), FollowerSyncState::Failed, Some(&reason));
            store.advance_follower_sync(held.version, &progress).await?;
            return Ok(());
        }
        let started_ms = doc.started_at.as_millisecond();
        let began = Instant::now();
        let mut written = 0u64;
        let mut waits = 0u32;
        loop {
            let page = match self.fetch(doc.next.as_deref()).await {
                Fetched::Page(page) => page,
                Fetched::Wait(_) if waits >= MAX_WAITS_PER_TAKE => {
                    return Err(PipelineError::Store(StoreError::Unavailable(format!(
                        "LINE answered 429 to the followers page {MAX_WAITS_PER_TAKE} times in a row"
                    ))));
                }
                Fetched::Wait(wait) => {
                    waits += 1;
                    tracing::info!(
                        wait_ms = wait.as_millis() as u64,
                        outcome = "rate_limited",
                        "LINE asked the followers sync to wait"
                    );
                    if !self.pause(wait, &mut held, &doc).await? {
                        return Ok(());
                    }
                    continue;
                }
                Fetched::Refused(reason) => {
                    tracing::warn!(reason = %reason, outcome = "failed", "LINE refused the followers list");
                    let progress = self.progress(&doc, None, FollowerSyncState::Failed, Some(&reason));
                    store.advance_follower_sync(held.version, &progress).await?;
                    return Ok(());
                }
                Fetched::Later(problem) => {
                    return Err(PipelineError::Store(StoreError::Unavailable(format!(
                        "LINE did not give the followers page: {problem}"
                    ))));
                }
            };
            // The page's users are written only while the sync is surely ours.
            if held.renewed.elapsed() > self.renew_every() && !self.renew(&mut held, &doc).await? {
                return Ok(());
            }
            waits = 0;
            let counts = self.record(&page.user_ids, started_ms).await?;
            doc.pages += 1;
            doc.listed += page.user_ids.len() as u64;
            doc.recorded += counts.recorded;
            doc.already_following += counts.already_following;
            doc.kept_unfollowed += counts.kept_unfollowed;
            // A page further: the takes in a row start again.
            doc.attempts = 0;
            let state = if page.next.is_some() {
                FollowerSyncState::Running
            } else {
                FollowerSyncState::Done
            };
            let progress = self.progress(&doc, page.next.as_deref(), state, None);
            let Some(next_version) = store.advance_follower_sync(held.version, &progress).await? else {
                tracing::info!(outcome = "superseded", "another instance holds the followers sync");
                return Ok(());
            };
            held = Held {
                version: next_version,
                renewed: Instant::now(),
            };
            doc.next = page.next;
            if state == FollowerSyncState::Done {
                tracing::info!(
                    pages = doc.pages,
                    listed = doc.listed,
                    recorded = doc.recorded,
                    outcome = "done",
                    "followers sync done"
                );
                return Ok(());
            }
            // The ramp: no faster than Firestore asks of new write traffic.
            written += counts.recorded;
            let allowed = ramped(self.inner.writes_per_second, began.elapsed());
            let due = Duration::from_secs_f64(written as f64 / allowed);
            if let Some(wait) = due.checked_sub(began.elapsed())
                && !self.pause(wait, &mut held, &doc).await?
            {
                return Ok(());
            }
        }
    }

    /// How long the lease is trusted after its last renewal.
    fn renew_every(&self) -> Duration {
        self.inner.store.lease() / 3
    }

    /// Waits `wait` holding the sync: in pieces, renewing the lease after
    /// each. `false`: another instance took it meanwhile.
    async fn pause(&self, wait: Duration, held: &mut Held, doc: &FollowerSyncDoc) -> Result<bool, PipelineError> {
        let mut left = wait;
        while !left.is_zero() {
            let piece = left.min(self.renew_every());
            tokio::time::sleep(piece).await;
            left = left.saturating_sub(piece);
            if !self.renew(held, doc).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Renews the lease with the progress as it stands. `false`: the sync
    /// changed since this instance last wrote it (another holds it).
    async fn renew(&self, held: &mut Held, doc: &FollowerSyncDoc) -> Result<bool, PipelineError> {
        let progress = self.progress(doc, doc.next.as_deref(), FollowerSyncState::Running, None);
        match self.inner.store.advance_follower_sync(held.version, &progress).await? {
            Some(version) => {
                *held = Held {
                    version,
                    renewed: Instant::now(),
                };
                Ok(true)
            }
            None => {
                tracing::info!(outcome = "superseded", "another instance holds the followers sync");
                Ok(false)
            }
        }
    }

    fn progress<'a>(
        &self,
        doc: &FollowerSyncDoc,
        next: Option<&'a str>,
        state: FollowerSyncState,
        reason: Option<&'a str>,
    ) -> SyncProgress<'a> {
        let ended = state != FollowerSyncState::Running;
        SyncProgress {
            state,
            next,
            pages: doc.pages,
            listed: doc.listed,
            recorded: doc.recorded,
            already_following: doc.already_following,
            kept_unfollowed: doc.kept_unfollowed,
            reason,
            attempts: doc.attempts,
            lease_until: self.inner.store.follower_sync_lease_until(),
            ended_at: ended.then(|| crate::store::firestore_now(&self.inner.clock)),
        }
    }

    /// One page from LINE, through a few failures (a 429 is the caller's wait).
    async fn fetch(&self, start: Option<&str>) -> Fetched {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.inner.line.followers_page(start).await {
                Ok(Some(page)) => return Fetched::Page(page),
                Ok(None) => {
                    return Fetched::Refused("a dry run (no LINE access token) lists no friends".into());
                }
                Err(SendError::RateLimited { retry_after }) => {
                    return Fetched::Wait(retry_after.unwrap_or(Duration::from_secs(1)));
                }
                Err(SendError::Rejected { status: 403, reason }) => {
                    return Fetched::Refused(format!(
                        "LINE refused the followers list (403: {reason}): only verified or premium accounts may list their friends"
                    ));
                }
                Err(error @ (SendError::Rejected { .. } | SendError::InvalidReplyToken)) => {
                    return Fetched::Refused(error.to_string());
                }
                Err(error) if tries >= PAGE_TRIES => return Fetched::Later(error.to_string()),
                Err(_) => tokio::time::sleep(Duration::from_millis(250 * u64::from(tries))).await,
            }
        }
    }

    /// Records a page's users, each conditional on its record as read.
    async fn record(&self, ids: &[String], started_ms: i64) -> Result<PageCounts, PipelineError> {
        let store = &self.inner.store;
        // Only LINE user ids become documents.
        let users: Vec<String> = ids.iter().filter(|id| is_line_user_id(id)).cloned().collect();
        for _ in 0..PAGE_ROUNDS {
            let records = store.followings(&users).await?;
            let mut counts = PageCounts::default();
            let mut writes = Vec::new();
            for (user, record) in users.iter().zip(&records) {
                match listed(record.as_ref(), started_ms) {
                    Listed::Record(expect) => {
                        counts.recorded += 1;
                        writes.push((user.clone(), expect));
                    }
                    Listed::AlreadyFollowing => counts.already_following += 1,
                    Listed::KeptUnfollowed => counts.kept_unfollowed += 1,
                }
            }
            if store.record_followers(&writes).await? {
                return Ok(counts);
            }
        }
        Err(PipelineError::Contention(
            "the page's users kept changing while the sync recorded them".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> firestore::FirestoreInstant {
        firestore::FirestoreInstant::from_millisecond(ms).expect("in range")
    }

    #[test]
    fn a_listed_user_is_recorded_unless_following_or_unfollowed_since_the_sync_began() {
        let version = Version::new_for_tests(gcloud_sdk::prost_types::Timestamp { seconds: 5, nanos: 0 });
        let record = |following: Option<bool>, unfollowed: Option<i64>| {
            Some((
                Following {
                    following,
                    unfollowed_at: unfollowed.map(at),
                },
                version,
            ))
        };
        let started = 10_000;
        // (record, what the sync does)
        let cases = [
            (None, Listed::Record(Expect::Absent)),
            (record(None, None), Listed::Record(Expect::At(version))),
            (record(Some(true), None), Listed::AlreadyFollowing),
            (record(Some(false), Some(9_000)), Listed::Record(Expect::At(version))),
            (record(Some(false), Some(10_000)), Listed::Record(Expect::At(version))),
            (record(Some(false), Some(11_000)), Listed::KeptUnfollowed),
        ];
        for (record, expected) in cases {
            assert_eq!(listed(record.as_ref(), started), expected, "{record:?}");
        }
    }

    #[test]
    fn writes_start_at_the_base_and_grow_by_half_every_five_minutes() {
        // (elapsed, writes a second)
        let cases = [
            (Duration::ZERO, 500.0),
            (Duration::from_secs(299), 500.0),
            (Duration::from_secs(300), 750.0),
            (Duration::from_secs(600), 1125.0),
        ];
        for (elapsed, rate) in cases {
            assert!((ramped(500, elapsed) - rate).abs() < 1e-9, "{elapsed:?}");
        }
        assert!(ramped(0, Duration::ZERO) >= 1.0, "never zero");
    }
}
