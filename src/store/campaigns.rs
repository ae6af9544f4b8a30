//! Campaigns: a scenario sent to an audience, once per user.
//!
//! - `campaigns/{campaignId}`: the request as first made (its hash answers a
//!   retried call), what every chunk sends (messages rendered once), its state
//!   (`planning` -> `sending` -> `done`, or `cancelling` -> `cancelled`) and a
//!   lease: one instance at a time plans it and paces its sending.
//! - `campaign_chunks/{campaignId}-{planId}-{index}`: up to 500 users each,
//!   written by a plan. Only the plan the campaign records when it starts
//!   sending is ever sent, so a planner that lost its lease half-way leaves
//!   chunks nobody reads. A chunk is claimed (lease, precondition on its
//!   version) before its one LINE call, and settled conditional on the claim, in
//!   the same commit as its dead letter when LINE refuses it.
//!
//! Counts live on the chunks while a campaign runs (each chunk settles once),
//! and are copied onto the campaign when it ends.

use super::docs::collections::{CAMPAIGN_CHUNKS, CAMPAIGNS, DEAD_LETTERS, OPEN_QUESTIONS, SCENARIO_ANSWERS, USERS};
use super::docs::{DeadLetterDoc, DeadLetterKind};
use super::inbox::dead_letter_id;
use super::lease::{Stored, document_id};
use super::round_trips::Timed;
use super::writes::{CommitOutcome, Expect, create, expecting, merge, merge_deleting, set};
use super::{Store, StoreError, Version, classify};
use firestore::FirestoreInstant;
use firestore::select_filter_builder::FirestoreQueryFilterBuilder;
use gcloud_sdk::google::firestore::v1::{Document, Write};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// `campaigns/{campaignId}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignDoc {
    pub(crate) scenario_id: String,
    /// The version every recipient's run is pinned to.
    pub(crate) scenario_version: u32,
    /// The run all recipients share (their buttons carry it).
    pub(crate) run: String,
    pub(crate) idempotency_key: String,
    /// SHA-256 of the request as understood: a retry with the same key must match.
    pub(crate) request_hash: String,
    /// The audience as asked for (JSON), for the record and the planner.
    pub(crate) audience: String,
    pub(crate) skip_answered: bool,
    pub(crate) calls_per_second: u32,
    /// The messages (JSON), rendered once: every chunk sends the same.
    pub(crate) messages: String,
    /// LINE's `customAggregationUnits` name of this campaign.
    pub(crate) aggregation_unit: String,
    /// The question node the messages ask: each sent chunk counts its users
    /// as sent for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asks_node: Option<String>,
    /// What each recipient's run records once LINE accepted their chunk
    /// (JSON, the engine's `RecipientStart`). Absent on campaigns created
    /// before campaigns started runs: those record nothing per recipient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) recipient: Option<String>,
    /// Recipients per chunk (absent: 500), so a chunk's settle with every
    /// recipient's part fits one commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) chunk_size: Option<u32>,
    /// A cancel also cancels the timers (reminders, expiries, steps) its
    /// recipients' runs have not fired yet.
    #[serde(default)]
    pub(crate) cancel_timers: bool,
    /// `push`: each recipient's messages decided and pushed on their own
    /// (absent: one multicast a chunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delivery: Option<String>,
    /// Messages of the monthly quota each recipient costs (first send and
    /// timers' pushes); absent on campaigns created before it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) messages_per_recipient: Option<u32>,
    /// The send time asked for (`sendAt`), when scheduled.
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) send_at: Option<FirestoreInstant>,
    /// When it fires: `send_at`, or the end of the scenario's quiet hours.
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) starts_at: Option<FirestoreInstant>,
    /// `starts_at` in ms, present only while scheduled: the due query ranges
    /// over it (its single-field index), so campaigns scheduled far ahead
    /// never crowd out the due ones, and it goes with the move out of
    /// `scheduled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fire_at_ms: Option<i64>,
    pub(crate) state: CampaignState,
    /// The plan being sent (chunk ids start with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) plan_id: Option<String>,
    #[serde(default)]
    pub(crate) planned: u64,
    #[serde(default)]
    pub(crate) chunks: u32,
    /// Final counts, written when the campaign ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) counts: Option<ChunkCounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease_owner: Option<String>,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) lease_until: Option<FirestoreInstant>,
    /// Times an instance took the campaign over.
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) created_at: FirestoreInstant,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) ended_at: Option<FirestoreInstant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CampaignState {
    /// Waits for its send time (`startsAt`); fired once, by the instance
    /// whose conditional move to `planning` lands.
    Scheduled,
    /// Its audience is being snapshotted into chunks.
    Planning,
    Sending,
    /// Cancelled by an operator: chunks not yet claimed are being skipped.
    Cancelling,
    Cancelled,
    Done,
}

impl CampaignState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CampaignState::Scheduled => "scheduled",
            CampaignState::Planning => "planning",
            CampaignState::Sending => "sending",
            CampaignState::Cancelling => "cancelling",
            CampaignState::Cancelled => "cancelled",
            CampaignState::Done => "done",
        }
    }
}

/// `campaign_chunks/{chunkId}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChunkDoc {
    pub(crate) campaign_id: String,
    pub(crate) plan_id: String,
    pub(crate) index: u32,
    /// Read only when the chunk is sent (lists of chunks leave it out).
    #[serde(default)]
    pub(crate) users: Vec<String>,
    pub(crate) count: u32,
    pub(crate) state: ChunkState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease_owner: Option<String>,
    /// Claimable once this has passed (a claim's lease, a retry's time).
    pub(crate) wake_at_ms: i64,
    #[serde(default)]
    pub(crate) attempts: u32,
    /// When it was first claimed: LINE keeps a retry key for 24 hours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) first_attempt_ms: Option<i64>,
    /// The claim whose call may have reached LINE first, of the attempts not
    /// settled since (Firestore's clock: that claim's commit time). A
    /// recipient's record changed after it may be their reaction to a message
    /// that reached them, which a later settle must not undo.
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) uncertain_since: Option<FirestoreInstant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) line_status: Option<u16>,
    /// Of a sent push chunk: recipients LINE refused (counted failed, no run).
    #[serde(default)]
    pub(crate) failed_users: u32,
    /// Of a push chunk settled after a cancel: recipients not pushed (counted
    /// skipped).
    #[serde(default)]
    pub(crate) skipped_users: u32,
    /// A push chunk's progress over its turns (JSON, see
    /// `pipeline::campaigns::push`): who LINE took, with what was decided for
    /// them, who it refused, whose push may have reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pushes: Option<String>,
    /// A call of it may have reached LINE (claimed, then a 5xx, no answer or a
    /// crash): a cancel does not skip it, it is sent again with its retry key
    /// to find out.
    #[serde(default)]
    pub(crate) uncertain: bool,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) settled_at: Option<FirestoreInstant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ChunkState {
    Pending,
    /// LINE accepted it (or had, with this retry key).
    Sent,
    /// LINE refused it, or it ran out of retries: parked as a dead letter.
    Failed,
    /// Not sent: the campaign was cancelled before it was claimed.
    Skipped,
}

/// Users per state, over a campaign's chunks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChunkCounts {
    pub(crate) pending: u64,
    pub(crate) sent: u64,
    pub(crate) failed: u64,
    pub(crate) skipped: u64,
}

/// What a sent chunk counts in the results, and who of it LINE refused.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChunkSent<'a> {
    pub(crate) scenario_id: &'a str,
    /// `YYYY-MM-DD` in the scenario's time zone.
    pub(crate) day: &'a str,
    /// Questions its recipients were asked: node, arm, recipients.
    pub(crate) asks: Vec<(String, Option<String>, u32)>,
    /// Split arms its recipients took: split node, label, recipients.
    pub(crate) runs: Vec<(String, String, u32)>,
    /// Recipients LINE refused (a push chunk's): counted failed.
    pub(crate) failed_users: u32,
    /// Recipients a push chunk settled after a cancel did not push: counted
    /// skipped.
    pub(crate) skipped_users: u32,
}

/// How a claimed chunk ends its turn.
#[derive(Debug, Clone)]
pub(crate) enum ChunkEnd {
    Sent,
    Skipped,
    /// LINE refused it or it ran out of retries: parked with a dead letter.
    Failed {
        error: String,
        status: Option<u16>,
    },
    /// Not sent this turn: claimable again at `wake_at_ms`. `counted`: the turn
    /// counts as an attempt (a 429 does not). `uncertain`: LINE may have taken it.
    Retry {
        wake_at_ms: i64,
        error: String,
        counted: bool,
        uncertain: bool,
        /// A push chunk's progress so far, kept for its next turn.
        pushes: Option<String>,
    },
}

/// What the audience scan asks Firestore for; the rest is filtered in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UserScan {
    All,
    /// Users holding at least one of these tags (at most 30).
    AnyTag(Vec<String>),
    /// Users who came through at least one of these sources (at most 30).
    AnySource(Vec<String>),
    /// Users holding this tag.
    Tag(String),
}

/// The fields of `users/{id}` that [`UserFacts`] holds.
const USER_FACTS: [&str; 8] = [
    "displayName",
    "following",
    "tags",
    "firstSeenMs",
    "followedAt",
    "fields",
    "sources",
    "firstSource",
];

/// What the audience filter and the reports read of `users/{id}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserFacts {
    #[serde(skip)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) following: Option<bool>,
    #[serde(default)]
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pub(crate) first_seen_ms: Option<i64>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    pub(crate) followed_at: Option<FirestoreInstant>,
    #[serde(default)]
    pub(crate) fields: std::collections::BTreeMap<String, crate::values::FieldValue>,
    /// Every source link the user came through (`sources.toml` ids).
    #[serde(default)]
    pub(crate) sources: Vec<String>,
    /// The first of them.
    #[serde(default)]
    pub(crate) first_source: Option<String>,
    /// The LINE display name cached for `{name}`, when one is.
    #[serde(default)]
    pub(crate) display_name: Option<String>,
}

/// How a campaign's creation ended.
#[derive(Debug)]
pub(crate) enum CampaignCreate {
    Created,
    /// A campaign with this id exists (a retried call, or another key's body).
    Existing(Box<Stored<CampaignDoc>>),
}

/// The campaigns that can be read; one that cannot (edited by hand, written by
/// a newer version) is logged and left out rather than stopping all of them.
fn readable(documents: Vec<Document>) -> Vec<Stored<CampaignDoc>> {
    documents
        .into_iter()
        .filter_map(|document| {
            let id = document_id(&document.name).to_owned();
            Stored::decode(document)
                .inspect_err(|error| tracing::error!(campaign.id = %id, error = %error, "a campaign cannot be read"))
                .ok()
        })
        .collect()
}

pub(crate) fn chunk_id(campaign_id: &str, plan_id: &str, index: u32) -> String {
    format!("{campaign_id}-{plan_id}-{index:05}")
}

/// Every chunk field but its users: what a sender needs to pick and claim one.
const CHUNK_FIELDS_BUT_USERS: [&str; 16] = [
    "campaignId",
    "planId",
    "index",
    "count",
    "state",
    "leaseOwner",
    "wakeAtMs",
    "attempts",
    "firstAttemptMs",
    "uncertainSince",
    "lastError",
    "lineStatus",
    "failedUsers",
    "skippedUsers",
    "uncertain",
    "settledAt",
];

/// Reads per page of the audience scan.
const SCAN_PAGE: u32 = 1000;

impl Store {
    /// Creates the campaign unless one with this id exists; then that one is
    /// returned, for the caller to compare requests.
    pub(crate) async fn create_campaign(
        &self,
        id: &str,
        doc: &CampaignDoc,
        audit: Option<&super::AuditEntry>,
    ) -> Result<CampaignCreate, StoreError> {
        let mut writes = vec![create(self.document_path(CAMPAIGNS, id), doc)?];
        if let Some(entry) = audit {
            writes.push(self.audit_write(entry)?);
        }
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => return Ok(CampaignCreate::Created),
            // Created before, or perhaps by this very commit: the record tells.
            CommitOutcome::AlreadyExists | CommitOutcome::Unknown(_) => {}
            CommitOutcome::Changed => return Err(StoreError::Unavailable("unexpected precondition failure".into())),
            CommitOutcome::Failed(error) => return Err(error),
        }
        let stored = self
            .campaign(id)
            .await?
            .ok_or_else(|| StoreError::Unavailable("the campaign could not be written".into()))?;
        Ok(CampaignCreate::Existing(Box::new(stored)))
    }

    pub(crate) async fn campaign(&self, id: &str) -> Result<Option<Stored<CampaignDoc>>, StoreError> {
        self.get_stored(CAMPAIGNS, id).await
    }

    /// Campaigns waiting for their send time, soonest first, at most `limit`.
    /// `fireAtMs` exists only while a campaign is scheduled, and its
    /// single-field index serves the order.
    pub(crate) async fn scheduled_campaigns(&self, limit: u32) -> Result<Vec<Stored<CampaignDoc>>, StoreError> {
        super::round_trips::count();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .from(CAMPAIGNS)
            .order(|o| o.fields([o.field("fireAtMs").ascending()]))
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(readable(documents))
    }

    /// The newest campaigns first.
    pub(crate) async fn campaigns(&self, limit: u32) -> Result<Vec<Stored<CampaignDoc>>, StoreError> {
        super::round_trips::count();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .from(CAMPAIGNS)
            .order(|o| o.fields([o.field("createdAt").descending()]))
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(readable(documents))
    }

    /// The id of the campaign whose recipients share `run`, if any.
    pub(crate) async fn campaign_of_run(&self, run: &str) -> Result<Option<String>, StoreError> {
        super::round_trips::count();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .fields(["run"])
            .from(CAMPAIGNS)
            .filter(|q| q.for_all([q.field("run").eq(run)]))
            .limit(1)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(documents.first().map(|document| document_id(&document.name).to_owned()))
    }

    /// Campaigns planning, sending or being cancelled.
    pub(crate) async fn active_campaigns(&self) -> Result<Vec<Stored<CampaignDoc>>, StoreError> {
        super::round_trips::count();
        let active: Vec<&str> = [
            CampaignState::Planning,
            CampaignState::Sending,
            CampaignState::Cancelling,
        ]
        .into_iter()
        .map(CampaignState::as_str)
        .collect();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .from(CAMPAIGNS)
            .filter(|q| q.for_all([q.field("state").is_in(active.clone())]))
            .limit(100)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(readable(documents))
    }

    /// Takes the campaign's lease (or renews it) unless it changed since `version`.
    pub(crate) async fn lease_campaign(
        &self,
        id: &str,
        version: Version,
        attempts: u32,
    ) -> Result<Option<Version>, StoreError> {
        let until = super::later(self.now(), self.options.lease);
        self.lease_to_me(CAMPAIGNS, id, version, attempts, until).await
    }

    /// Changes the campaign's state (and what goes with it) unless it changed
    /// since `version`. `Ok(None)`: it had.
    pub(crate) async fn change_campaign(
        &self,
        id: &str,
        version: Version,
        change: &CampaignChange,
    ) -> Result<Option<Version>, StoreError> {
        // Out of `scheduled`, out of the due query.
        let unscheduled: &[&str] = if change.state.is_some_and(|state| state != CampaignState::Scheduled) {
            &["fireAtMs"]
        } else {
            &[]
        };
        let write = expecting(
            merge_deleting(self.document_path(CAMPAIGNS, id), change, unscheduled, Vec::new())?,
            Expect::At(version),
        );
        self.commit(vec![write]).await.first_version()
    }

    /// Writes chunks of a plan (ids unique to the plan, so writing one again
    /// changes nothing that is sent). One commit.
    pub(crate) async fn write_chunks(&self, chunks: &[(String, ChunkDoc)]) -> Result<(), StoreError> {
        let writes = chunks
            .iter()
            .map(|(id, doc)| Ok(set(self.document_path(CAMPAIGN_CHUNKS, id), doc)?))
            .collect::<Result<Vec<_>, StoreError>>()?;
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(()),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => {
                Err(StoreError::Unavailable("unexpected precondition failure".into()))
            }
        }
    }

    /// A chunk with its users and version.
    pub(crate) async fn chunk(&self, id: &str) -> Result<Option<Stored<ChunkDoc>>, StoreError> {
        self.get_stored::<ChunkDoc>(CAMPAIGN_CHUNKS, id).await
    }

    /// Pending chunks of the plan, by index, up to `limit`, without their users.
    pub(crate) async fn pending_chunks(
        &self,
        campaign_id: &str,
        plan_id: &str,
        limit: u32,
    ) -> Result<Vec<Stored<ChunkDoc>>, StoreError> {
        super::round_trips::count();
        let documents: Vec<Document> = self
            .scan_db
            .fluent()
            .select()
            .fields(CHUNK_FIELDS_BUT_USERS)
            .from(CAMPAIGN_CHUNKS)
            .filter(|q| {
                q.for_all([
                    q.field("campaignId").eq(campaign_id),
                    q.field("planId").eq(plan_id),
                    q.field("state").eq("pending"),
                ])
            })
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        let mut chunks = documents
            .into_iter()
            .map(Stored::decode)
            .collect::<Result<Vec<Stored<ChunkDoc>>, StoreError>>()?;
        chunks.sort_by_key(|chunk| chunk.doc.index);
        Ok(chunks)
    }

    /// Users per chunk state over the plan (reads the states and counts only).
    pub(crate) async fn chunk_counts(&self, campaign_id: &str, plan_id: &str) -> Result<ChunkCounts, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Tally {
            state: ChunkState,
            count: u32,
            #[serde(default)]
            failed_users: u32,
            #[serde(default)]
            skipped_users: u32,
        }
        let mut counts = ChunkCounts::default();
        let filter = |q: FirestoreQueryFilterBuilder| {
            q.for_all([q.field("campaignId").eq(campaign_id), q.field("planId").eq(plan_id)])
        };
        let fields = ["state", "count", "failedUsers", "skippedUsers"];
        self.each_page(CAMPAIGN_CHUNKS, &fields, filter, |document| {
            let tally: Tally = firestore::FirestoreDb::deserialize_doc_to(document)?;
            let count = u64::from(tally.count);
            match tally.state {
                ChunkState::Pending => counts.pending += count,
                ChunkState::Sent => {
                    let failed = u64::from(tally.failed_users).min(count);
                    let skipped = u64::from(tally.skipped_users).min(count - failed);
                    counts.sent += count - failed - skipped;
                    counts.failed += failed;
                    counts.skipped += skipped;
                }
                ChunkState::Failed => counts.failed += count,
                ChunkState::Skipped => counts.skipped += count,
            }
            Ok(())
        })
        .await?;
        Ok(counts)
    }

    /// Every document `filter` finds in `collection`, `fields` only, a page at
    /// a time in document-id order: memory stays at one page.
    pub(super) async fn each_page(
        &self,
        collection: &str,
        fields: &[&str],
        filter: impl Fn(FirestoreQueryFilterBuilder) -> Option<firestore::FirestoreQueryFilter>,
        mut each: impl FnMut(&Document) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut after: Option<String> = None;
        loop {
            let documents = self
                .page_by_id(collection, fields, &filter, after.as_deref(), SCAN_PAGE)
                .await?;
            documents.iter().try_for_each(&mut each)?;
            if documents.len() < SCAN_PAGE as usize {
                return Ok(());
            }
            after = documents.last().map(|document| document_id(&document.name).to_owned());
        }
    }

    /// Claims a chunk for one turn, unless it changed since `version`.
    pub(crate) async fn claim_chunk(&self, chunk: &Stored<ChunkDoc>) -> Result<Option<Version>, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Claim<'a> {
            lease_owner: &'a str,
            wake_at_ms: i64,
            first_attempt_ms: i64,
            /// Until its settle says otherwise, its call may reach LINE.
            uncertain: bool,
        }
        let now = self.now();
        let claim = Claim {
            lease_owner: &self.options.instance_id,
            wake_at_ms: super::later(now, self.options.lease).as_millisecond(),
            first_attempt_ms: chunk.doc.first_attempt_ms.unwrap_or(now.as_millisecond()),
            uncertain: true,
        };
        // A claim of a chunk no earlier call of which may have reached LINE
        // begins the window in which its users may have got it.
        let first_claim = if chunk.doc.uncertain {
            Vec::new()
        } else {
            vec![super::writes::commit_time("uncertainSince")]
        };
        let write = expecting(
            merge(self.document_path(CAMPAIGN_CHUNKS, &chunk.id), &claim, first_claim)?,
            Expect::At(chunk.version),
        );
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(versions) => Ok(versions.into_iter().next().flatten()),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(None),
            // Not taken: its lease (if it landed) runs out, and it is claimed again.
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Records a push chunk's progress (`pushes`: its users' decided starts)
    /// conditional on the claim at `claimed`; the new version, or `None` when
    /// the chunk moved on (another instance took it).
    pub(crate) async fn record_chunk_pushes(
        &self,
        id: &str,
        claimed: Version,
        pushes: &str,
    ) -> Result<Option<Version>, StoreError> {
        #[derive(Serialize)]
        struct Pushes<'a> {
            pushes: &'a str,
        }
        let write = expecting(
            merge(self.document_path(CAMPAIGN_CHUNKS, id), &Pushes { pushes }, Vec::new())?,
            Expect::At(claimed),
        );
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(versions) => Ok(versions.into_iter().next().flatten()),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(None),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Ends a claimed chunk's turn, conditional on the claim; a sent chunk's
    /// `recipients` parts go in the same commit. `Ok(false)`: nothing was
    /// written, because the chunk moved on (another instance took it) or, in a
    /// recovery, a recipient's marker changed since it was read (the caller
    /// reads the chunk to tell).
    pub(crate) async fn settle_chunk(
        &self,
        chunk: &Stored<ChunkDoc>,
        claimed: Version,
        end: &ChunkEnd,
        sent: Option<&ChunkSent<'_>>,
        recipients: &[RecipientPart<'_>],
    ) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Settle<'a> {
            state: ChunkState,
            wake_at_ms: i64,
            attempts: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            last_error: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            line_status: Option<u16>,
            failed_users: u32,
            skipped_users: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            pushes: Option<&'a str>,
            uncertain: bool,
            #[serde(
                with = "firestore::serialize_as_optional_timestamp",
                skip_serializing_if = "Option::is_none"
            )]
            settled_at: Option<FirestoreInstant>,
        }
        let now = self.now();
        let attempts = chunk.doc.attempts.saturating_add(1);
        let settle = match end {
            ChunkEnd::Sent => Settle {
                state: ChunkState::Sent,
                wake_at_ms: now.as_millisecond(),
                attempts,
                last_error: None,
                line_status: None,
                failed_users: sent.map_or(0, |sent| sent.failed_users),
                skipped_users: sent.map_or(0, |sent| sent.skipped_users),
                pushes: None,
                uncertain: false,
                settled_at: Some(now),
            },
            ChunkEnd::Skipped => Settle {
                state: ChunkState::Skipped,
                wake_at_ms: now.as_millisecond(),
                attempts: chunk.doc.attempts,
                last_error: None,
                line_status: None,
                failed_users: 0,
                skipped_users: 0,
                pushes: None,
                uncertain: false,
                settled_at: Some(now),
            },
            ChunkEnd::Failed { error, status } => Settle {
                state: ChunkState::Failed,
                wake_at_ms: now.as_millisecond(),
                attempts,
                last_error: Some(error),
                line_status: *status,
                failed_users: 0,
                skipped_users: 0,
                pushes: None,
                uncertain: false,
                settled_at: Some(now),
            },
            ChunkEnd::Retry {
                wake_at_ms,
                error,
                counted,
                uncertain,
                pushes,
            } => Settle {
                state: ChunkState::Pending,
                wake_at_ms: *wake_at_ms,
                attempts: if *counted { attempts } else { chunk.doc.attempts },
                last_error: Some(error),
                line_status: None,
                failed_users: 0,
                skipped_users: 0,
                pushes: pushes.as_deref(),
                // Once uncertain, until a call settles it.
                uncertain: *uncertain || chunk.doc.uncertain,
                settled_at: None,
            },
        };
        // A chunk that ends drops its push progress (personal values with it).
        let drop: &[&str] = if matches!(end, ChunkEnd::Retry { .. }) {
            &[]
        } else {
            &["pushes"]
        };
        let mut writes = vec![expecting(
            super::writes::merge_deleting(
                self.document_path(CAMPAIGN_CHUNKS, &chunk.id),
                &settle,
                drop,
                Vec::new(),
            )?,
            Expect::At(claimed),
        )];
        // Exact: the settle is conditional on the claim, so it lands once.
        if let (ChunkEnd::Sent, Some(sent)) = (end, sent)
            && let Some(write) = self.chunk_sent_write(sent, &chunk.id)?
        {
            writes.push(write);
        }
        if matches!(end, ChunkEnd::Sent) {
            for part in recipients {
                writes.extend(self.recipient_writes(part)?);
            }
        }
        if let ChunkEnd::Failed { error, .. } = end {
            let letter = DeadLetterDoc {
                kind: DeadLetterKind::CampaignChunk,
                target_id: chunk.id.clone(),
                reason: error.clone(),
                attempts,
                webhook_event_id: None,
                line_user_id: None,
                event_type: None,
                action_key: None,
                campaign_id: Some(chunk.doc.campaign_id.clone()),
                user_count: Some(chunk.doc.count),
                parked_at: now,
            };
            writes.push(set(
                self.document_path(DEAD_LETTERS, &dead_letter_id(letter.kind, &chunk.id)),
                &letter,
            )?);
        }
        Ok(self.commit(writes).await.first_version()?.is_some())
    }

    /// The records of `users` that exist (ids that are no LINE user id are
    /// left out, unread), their audience and report fields only: one round
    /// trip, however many (a caller passes a page's worth). A record that
    /// cannot be read as such (a field of another type, written by hand) is
    /// left out and logged: a report shows the user without their facts
    /// rather than failing for everyone.
    pub(crate) async fn users_by_id(&self, users: &[String]) -> Result<Vec<UserFacts>, StoreError> {
        let ids: Vec<&String> = users.iter().filter(|user| crate::ids::is_line_user_id(user)).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let paths = ids.iter().map(|user| self.document_path(USERS, user)).collect();
        let mut found = Vec::with_capacity(ids.len());
        for (user, document) in ids.into_iter().zip(self.get_many_fields(paths, &USER_FACTS).await?) {
            let Some(document) = document else {
                continue;
            };
            match firestore::FirestoreDb::deserialize_doc_to::<UserFacts>(&document) {
                Ok(mut facts) => {
                    facts.id = user.clone();
                    found.push(facts);
                }
                Err(error) => {
                    tracing::warn!(error = %error, outcome = "unreadable", "a user's record does not read as expected; left out of the report");
                }
            }
        }
        Ok(found)
    }

    /// One page of the audience scan, in document-id order after `after`.
    pub(crate) async fn users_page(
        &self,
        scan: &UserScan,
        after: Option<&str>,
    ) -> Result<(Vec<UserFacts>, Option<String>), StoreError> {
        let filter = |q: FirestoreQueryFilterBuilder| match scan {
            UserScan::All => None,
            UserScan::AnyTag(tags) => q.for_all([q.field("tags").array_contains_any(tags.clone())]),
            UserScan::AnySource(sources) => q.for_all([q.field("sources").array_contains_any(sources.clone())]),
            UserScan::Tag(tag) => q.for_all([q.field("tags").array_contains(tag.as_str())]),
        };
        let documents = self.page_by_id(USERS, &USER_FACTS, filter, after, SCAN_PAGE).await?;
        let full = documents.len() >= SCAN_PAGE as usize;
        let mut users = Vec::with_capacity(documents.len());
        for document in &documents {
            let mut facts: UserFacts = firestore::FirestoreDb::deserialize_doc_to(document)?;
            facts.id = document_id(&document.name).to_owned();
            users.push(facts);
        }
        let next = if full {
            users.last().map(|user| user.id.clone())
        } else {
            None
        };
        Ok((users, next))
    }

    /// Those of `users` who answered `scenario` (their marker names an
    /// answer): their markers read by id, one round trip.
    pub(crate) async fn answered_among(
        &self,
        scenario: &crate::ids::ScenarioId,
        users: &[String],
    ) -> Result<HashSet<String>, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Marker {
            #[serde(default)]
            last_answer_id: Option<String>,
        }
        let ids: Vec<(&String, String)> = users
            .iter()
            .filter_map(|user| {
                let id = crate::ids::LineUserId::parse(user.clone()).ok()?;
                Some((user, crate::ids::scenario_marker_id(scenario, &id)))
            })
            .collect();
        let paths = ids
            .iter()
            .map(|(_, marker)| self.document_path(SCENARIO_ANSWERS, marker))
            .collect();
        let found = self.get_many(paths).await?;
        let mut answered = HashSet::new();
        for ((user, _), document) in ids.into_iter().zip(found) {
            if let Some(document) = document {
                let marker: Marker = firestore::FirestoreDb::deserialize_doc_to(&document)?;
                if marker.last_answer_id.is_some() {
                    answered.insert(user.clone());
                }
            }
        }
        Ok(answered)
    }
}

/// One recipient's part of a campaign's run, written with the settle of the
/// chunk LINE accepted: the marker naming the run (and the campaign), the
/// question it opens, its timers, what its first nodes do to the user.
pub(crate) struct RecipientPart<'a> {
    pub(crate) run: super::RunRecord<'a>,
    pub(crate) question: Option<super::QuestionChange>,
    pub(crate) timers: Vec<(String, super::TimerDoc)>,
    pub(crate) changes: &'a crate::values::UserChanges,
    /// The marker as a recovery read it: the settle lands only if it is
    /// unchanged (`None`: written whatever it holds).
    pub(crate) marker_read: Option<Expect>,
}

/// A recipient's marker and open question as a recovering settle reads them.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecipientRead {
    /// The marker, or `None` when absent.
    pub(crate) marker: Option<MarkerRead>,
    /// The open question's version, or `None` when none is open.
    pub(crate) question: Option<Version>,
}

/// What a recovering settle needs of a recipient's marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkerRead {
    pub(crate) run: Option<String>,
    /// When a trigger or card last started the scenario (event time, ms).
    pub(crate) last_started_ms: Option<i64>,
    pub(crate) version: Version,
}

impl Store {
    fn recipient_writes(&self, part: &RecipientPart<'_>) -> Result<Vec<Write>, StoreError> {
        let run = self.run_write(&part.run)?;
        let mut writes = vec![match part.marker_read {
            Some(expect) => expecting(run, expect),
            None => run,
        }];
        if let Some(question) = &part.question {
            writes.push(self.question_write(question)?);
        }
        for (id, doc) in &part.timers {
            writes.push(self.timer_write(id, doc)?);
        }
        // Always: the user's record names the campaigns that reached them.
        let campaign = part.run.campaign_id.map(super::effects::CampaignMark::Received);
        writes.extend(self.user_writes(part.run.user, part.changes, None, None, campaign)?);
        Ok(writes)
    }

    /// The markers (and, with `questions`, the open questions) of `users` for
    /// `scenario_marker_ids` (one per user, in order): one round trip.
    pub(crate) async fn recipients_read(
        &self,
        users: &[&str],
        marker_ids: &[String],
        questions: bool,
    ) -> Result<Vec<RecipientRead>, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Marker {
            #[serde(default)]
            run: Option<String>,
            #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
            last_started_at: Option<FirestoreInstant>,
        }
        let mut paths: Vec<String> = marker_ids
            .iter()
            .map(|id| self.document_path(SCENARIO_ANSWERS, id))
            .collect();
        if questions {
            paths.extend(users.iter().map(|user| self.document_path(OPEN_QUESTIONS, user)));
        }
        let found = self.get_many(paths).await?;
        let (markers, open) = found.split_at(marker_ids.len().min(found.len()));
        let mut reads = Vec::with_capacity(users.len());
        for (index, marker) in markers.iter().enumerate() {
            let marker = marker
                .as_ref()
                .map(|document| -> Result<_, StoreError> {
                    let read: Marker = firestore::FirestoreDb::deserialize_doc_to(document)?;
                    Ok(MarkerRead {
                        run: read.run,
                        last_started_ms: read.last_started_at.map(firestore::jiff::Timestamp::as_millisecond),
                        version: Version::new(document.update_time.unwrap_or_default()),
                    })
                })
                .transpose()?;
            let question = open
                .get(index)
                .and_then(Option::as_ref)
                .map(|document| Version::new(document.update_time.unwrap_or_default()));
            reads.push(RecipientRead { marker, question });
        }
        Ok(reads)
    }
}

/// A state change of a campaign, written by its lease holder or an operator.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignChange {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<CampaignState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) plan_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) planned: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) chunks: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) counts: Option<ChunkCounts>,
    #[serde(
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) ended_at: Option<FirestoreInstant>,
    /// A cancel that also cancels the recipients' timers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cancel_timers: Option<bool>,
}
