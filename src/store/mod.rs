//! Firestore access: the bottom layer. It knows documents, versions and
//! preconditions, nothing of scenarios, engines or LINE.
//!
//! Every guard decision that must survive concurrency is made by Firestore itself:
//! a `create` (precondition `exists = false`) on a deterministic id lands once or
//! fails with `ALREADY_EXISTS`, and every state change of a stored record names
//! the version its writer read (an update-time precondition), so a late or
//! superseded writer changes nothing.
//!
//! Collections (names are part of the data contract, see the README):
//! `survey_responses`, `users`, `scenario_answers` (per user and scenario: answered,
//! last started), `webhook_inbox`, `outbound_ledger`, `message_marks`,
//! `admin_requests`, `dead_letters`, `open_questions`, `message_texts`, `timers`
//! `scenario_versions`, `campaigns`, `campaign_chunks` and `result_counters`.

mod audit;
mod backlog;
mod campaign_results;
mod campaigns;
mod claimer;
mod console_sessions;
mod dead_letters;
mod docs;
mod effects;
mod export;
mod follower_sync;
mod guards;
mod hand_edits;
pub(crate) use guards::ScenarioProgress;
mod idempotency;
mod inbox;
mod instances;
mod lease;
mod ledger;
mod legacy_answers;
mod messages;
mod notices;
mod operators;
mod questions;
mod reads;
mod results;
mod rich_menus;
pub(crate) mod round_trips;
mod settler;
mod sources;
mod timeline;
mod timers;
mod user_data;
mod user_state;
mod users;
pub(crate) use users::{FoundUser, UserSearch};
mod versions;
mod writes;

pub(crate) use audit::{AuditDoc, AuditEnd, AuditEntry, AuditFilter, MAX_LISTED as MAX_AUDIT_LISTED, audit_touched};
pub(crate) use backlog::Backlog;
pub(crate) use campaign_results::CampaignTally;
#[cfg(test)]
pub(crate) use campaigns::MarkerRead;
pub(crate) use campaigns::{
    CampaignChange, CampaignCreate, CampaignDoc, CampaignState, ChunkCounts, ChunkDoc, ChunkEnd, ChunkSent, ChunkState,
    RecipientPart, RecipientRead, UserScan, chunk_id,
};
pub(crate) use console_sessions::{ApiTokenDoc, ConsoleSessionDoc, MAX_API_TOKENS, SessionVia};
pub(crate) use docs::{
    AsksDoc, DeadLetterDoc, DeadLetterKind, EntryCounts, InboxDoc, InboxState, LedgerDoc, LedgerState, RouteDoc,
    SplitDoc,
};
pub(crate) use effects::{AnswerRecord, CampaignMark, Effect, EffectWrites, RunRecord, StartRecord};
pub(crate) use export::{AnswerPage, EXPORT_PAGE, ListedAnswer};
pub(crate) use follower_sync::{FollowerSyncDoc, FollowerSyncState, Following, PageCounts, SyncProgress, SyncStart};
pub(crate) use hand_edits::HandEditWrite;
pub(crate) use idempotency::RequestCheck;
pub(crate) use inbox::{Claim, INBOX_RETENTION, InboxKey, NewEvent};
pub(crate) use lease::{Stored, Swept};
pub(crate) use ledger::{Attempted, NewAction, Recorded, SettleWrite, Settlement, UserWrite};
pub(crate) use legacy_answers::{
    DoubtfulUser, GroupState, GroupWrite, HeldMigration, LegacyDoc, LegacyKey, MarkerSeen, Met, MigrationCounts,
    MigrationProgress, NAMED_UNREADABLE, USERS_PER_QUERY,
};
pub(crate) use messages::{MessageKey, UnsendOutcome};
pub(crate) use notices::NoticeWrite;
pub(crate) use operators::{OperatorChange, OperatorDoc, OperatorWrite, normalise_email, operator_id};
pub(crate) use questions::{OpenQuestionDoc, QuestionChange};
pub(crate) use rich_menus::{BatchTarget, DeployBatch, HeldDeploy, JobTake, MenuLinkJob, RichMenuRecord};
pub(crate) use sources::{
    Befriend, QueuedStart, SourceCounts, SourceUser, TAKEN_BY_QUEUE, UserSourceDoc, Visit, VisitOutcome,
    source_start_key,
};
pub(crate) use timeline::{UserAnswer, UserEvent, UserMarker, UserMessage, UserRecord};
pub(crate) use timers::{ContextRequest, FiringWrites, TimerContext, TimerDoc, TimerEnd, TimerState, still_held};
pub(crate) use user_data::ANSWER_PAGE;
pub(crate) use versions::VersionCheck;

pub(crate) use writes::{CommitOutcome, Expect};

use crate::clock::Clock;
use claimer::Claimer;
use firestore::errors::FirestoreError;
use firestore::{FirestoreDb, FirestoreDbOptions};
use gcloud_sdk::prost_types::Timestamp;
use settler::Settler;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// Firestore did not answer in time or could not be reached. Fail closed: the
    /// webhook answers 5xx and LINE redelivers.
    #[error("Firestore is unavailable: {0}")]
    Unavailable(String),
    #[error("Firestore refused the request: {0}")]
    Firestore(FirestoreError),
}

/// A (de)serialisation error names the document's path, and the path of
/// `users/{id}`, `open_questions/{id}` and the like is a LINE user id: dropped
/// here, so no log line, `lastError` or dead letter's reason carries it.
impl From<FirestoreError> for StoreError {
    fn from(error: FirestoreError) -> Self {
        StoreError::Firestore(match error {
            FirestoreError::DeserializeError(mut error) => {
                error.document_path = None;
                FirestoreError::DeserializeError(error)
            }
            FirestoreError::SerializeError(mut error) => {
                error.document_path = None;
                FirestoreError::SerializeError(error)
            }
            other => other,
        })
    }
}

/// The update time of a stored document as its writer last saw it. State changes
/// name it as their precondition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Version(Timestamp);

impl Version {
    fn new(timestamp: Timestamp) -> Self {
        Self(timestamp)
    }

    #[cfg(test)]
    pub(crate) fn new_for_tests(timestamp: Timestamp) -> Self {
        Self(timestamp)
    }

    fn timestamp(self) -> Timestamp {
        self.0
    }

    /// The update time in milliseconds since the epoch (Firestore's clock).
    pub(crate) fn as_millis(self) -> i64 {
        self.0
            .seconds
            .saturating_mul(1000)
            .saturating_add(i64::from(self.0.nanos) / 1_000_000)
    }
}

/// Settings of the store.
#[derive(Debug, Clone)]
pub(crate) struct StoreOptions {
    pub(crate) project_id: String,
    /// `(default)` or a named database: one database serves one LINE channel.
    pub(crate) database_id: String,
    /// `host:port` of the emulator; `None` for real Firestore with ADC credentials.
    pub(crate) emulator_host: Option<String>,
    /// Upper bound for one Firestore request, so an unreachable Firestore turns
    /// into a 5xx well within LINE's ~2 s patience instead of a hung request.
    pub(crate) request_timeout: Duration,
    /// Upper bound for one page of a scan (audiences, results): admin and
    /// background work, so it may wait longer than a webhook could.
    pub(crate) scan_timeout: Duration,
    /// Also look for answers saved under random ids (before deterministic ids).
    pub(crate) legacy_answer_lookup: bool,
    /// Names this process as the owner of the leases it takes.
    pub(crate) instance_id: String,
    /// How long a lease lasts before another instance may take the work over.
    pub(crate) lease: Duration,
    /// What "now" is in every lease, timestamp and due-time query the store
    /// writes or asks: the service's clock, so a test can move it.
    pub(crate) clock: Clock,
}

#[derive(Clone)]
pub(crate) struct Store {
    db: FirestoreDb,
    /// The same database with the longer `scan_timeout`, for paged scans.
    scan_db: FirestoreDb,
    options: StoreOptions,
    settler: Settler,
    claimer: Claimer,
}

/// One client of the database whose every request gives up after `timeout`.
async fn connect_with_timeout(options: &StoreOptions, timeout: Duration) -> Result<FirestoreDb, StoreError> {
    crate::tls::install_crypto_provider();
    let mut db_options = FirestoreDbOptions::new(options.project_id.clone())
        .with_database_id(options.database_id.clone())
        .with_request_timeout(timeout)
        // A failed read is retried once; writes are never retried by the crate.
        .with_max_retries(1);
    if let Some(host) = &options.emulator_host {
        db_options = db_options.with_firebase_api_url(format!("http://{host}"));
    }
    Ok(FirestoreDb::with_options(db_options).await?)
}

impl Store {
    /// Connects eagerly, so a wrong emulator address fails at start.
    pub(crate) async fn connect(options: StoreOptions) -> Result<Self, StoreError> {
        let db = connect_with_timeout(&options, options.request_timeout).await?;
        let scan_db = connect_with_timeout(&options, options.scan_timeout).await?;
        let settler = Settler::start(db.clone(), options.request_timeout);
        let claimer = Claimer::start(db.clone(), options.request_timeout);
        Ok(Self {
            db,
            scan_db,
            options,
            settler,
            claimer,
        })
    }

    pub(crate) fn instance_id(&self) -> &str {
        &self.options.instance_id
    }

    pub(crate) fn lease(&self) -> Duration {
        self.options.lease
    }

    /// Now in milliseconds since the epoch, as the service's clock sees it
    /// (the clock due timers are found by).
    pub(crate) fn now_ms(&self) -> i64 {
        self.options.clock.now_ms()
    }

    /// Now, as the service's clock sees it, in Firestore's type.
    fn now(&self) -> firestore::FirestoreInstant {
        firestore_now(&self.options.clock)
    }

    /// Sends the settles still queued, retrying failed ones, for at most `limit` (at shutdown).
    pub(crate) async fn flush_settles(&self, limit: Duration) {
        self.settler.flush(limit).await;
    }

    /// Batched settle RPCs sent and the writes they carried.
    pub(crate) fn settle_counts(&self) -> (u64, u64) {
        self.settler.counts()
    }

    /// Batched claim RPCs sent and the claims they carried.
    pub(crate) fn claim_counts(&self) -> (u64, u64) {
        self.claimer.counts()
    }

    /// `projects/P/databases/D/documents/{collection}/{id}`
    fn document_path(&self, collection: &str, id: &str) -> String {
        format!("{}/{collection}/{id}", self.db.get_documents_path())
    }
}

/// `clock`'s now as a Firestore timestamp. The clock's range (chrono's) is
/// wider than Firestore's only at the ends of time, where the end stands in.
pub(crate) fn firestore_now(clock: &Clock) -> firestore::FirestoreInstant {
    let now = clock.now();
    let nanos = i32::try_from(now.timestamp_subsec_nanos()).unwrap_or(0);
    firestore::FirestoreInstant::new(now.timestamp(), nanos).unwrap_or(firestore::FirestoreInstant::MAX)
}

/// `at + after`, saturating at the end of time instead of panicking: a huge
/// `Retry-After` from LINE or an absurd setting must not crash a worker.
fn later(at: firestore::FirestoreInstant, after: Duration) -> firestore::FirestoreInstant {
    at.saturating_add(after).unwrap_or(firestore::FirestoreInstant::MAX)
}

/// Whether two instants are the same as Firestore stores them (to the
/// microsecond): what was written compares equal to what is read back.
pub(crate) fn same_instant(a: firestore::FirestoreInstant, b: firestore::FirestoreInstant) -> bool {
    a.as_microsecond() == b.as_microsecond()
}

/// Maps what the crate reports for a lost connection or timeout to `Unavailable`,
/// which callers treat as "retry later", and the rest to `Firestore`.
fn classify(error: FirestoreError) -> StoreError {
    match &error {
        FirestoreError::DatabaseError(db) if db.retry_possible => StoreError::Unavailable(error.to_string()),
        FirestoreError::NetworkError(_) => StoreError::Unavailable(error.to_string()),
        FirestoreError::DatabaseError(db)
            if matches!(db.public.code.as_str(), "Unavailable" | "DeadlineExceeded" | "Unknown") =>
        {
            StoreError::Unavailable(error.to_string())
        }
        _ => StoreError::Firestore(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_equals_itself_as_firestore_stores_it() {
        let now = firestore::FirestoreInstant::now();
        let stored = firestore::FirestoreInstant::from_microsecond(now.as_microsecond()).expect("in range");
        assert!(same_instant(now, stored), "nanoseconds are not stored");
        let later = firestore::FirestoreInstant::from_microsecond(now.as_microsecond() + 1).expect("in range");
        assert!(!same_instant(now, later));
    }

    #[test]
    fn the_store_reads_the_time_of_its_clock() {
        let clock = Clock::test();
        let before = firestore_now(&clock);
        assert!(clock.advance(Duration::from_secs(3600)).is_ok());
        let moved = firestore_now(&clock);
        assert!(moved.as_millisecond() - before.as_millisecond() >= 3_600_000);
        // The system clock's time, converted, is the system's time.
        let system = firestore_now(&Clock::system()).as_millisecond();
        assert!((system - firestore::FirestoreInstant::now().as_millisecond()).abs() < 60_000);
    }

    #[test]
    fn later_saturates_instead_of_panicking() {
        let now = firestore::FirestoreInstant::now();
        assert_eq!(later(now, Duration::MAX), firestore::FirestoreInstant::MAX);
        assert!(later(now, Duration::from_secs(1)) > now);
    }
}
