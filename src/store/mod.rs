//! Firestore access. Every guard decision that must survive concurrency is made
//! by Firestore itself: a `create` (precondition `exists = false`) on a
//! deterministic id either lands once or fails with `ALREADY_EXISTS`.
//!
//! Collections (names are part of the data contract, see the README):
//! `survey_responses`, `users`, `scenario_answers` (the "answered this scenario"
//! marker), `webhook_inbox`, `outbound_ledger` and `dead_letters`.

mod answers;
mod claimer;
mod dead_letters;
mod docs;
mod guards;
mod inbox;
mod lease;
mod ledger;
pub mod round_trips;
mod settler;
mod writes;

pub use answers::{AnswerCommit, EffectCommit};
pub use docs::{DeadLetterDoc, DeadLetterKind, InboxDoc, InboxState, LedgerDoc, LedgerState, RouteDoc, collections};
pub use inbox::{Claim, InboxKey, NewEvent, dead_letter_id};
pub use lease::Leased;
pub use ledger::{Recorded, Settlement, StagedAction};

use claimer::Claimer;
use firestore::errors::FirestoreError;
use firestore::{FirestoreDb, FirestoreDbOptions};
use settler::Settler;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Firestore did not answer in time or could not be reached. Fail closed: the
    /// webhook answers 5xx and LINE redelivers.
    #[error("Firestore is unavailable: {0}")]
    Unavailable(String),
    #[error("Firestore refused the request: {0}")]
    Firestore(#[from] FirestoreError),
}

/// Settings of the store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub project_id: String,
    /// `host:port` of the emulator; `None` for real Firestore with ADC credentials.
    pub emulator_host: Option<String>,
    /// Upper bound for one Firestore request, so an unreachable Firestore turns
    /// into a 5xx well within LINE's ~2 s patience instead of a hung request.
    pub request_timeout: Duration,
    /// Also look for answers saved under random ids (before deterministic ids).
    pub legacy_answer_lookup: bool,
    /// Names this process as the owner of the leases it takes.
    pub instance_id: String,
    /// How long a lease lasts before another instance may take the work over.
    pub lease: Duration,
}

#[derive(Clone)]
pub struct Store {
    db: FirestoreDb,
    options: StoreOptions,
    settler: Settler,
    claimer: Claimer,
}

impl Store {
    /// Connects eagerly, so a wrong emulator address fails at start.
    pub async fn connect(options: StoreOptions) -> Result<Self, StoreError> {
        let mut db_options = FirestoreDbOptions::new(options.project_id.clone())
            .with_request_timeout(options.request_timeout)
            // A failed read is retried once; writes are never retried by the crate.
            .with_max_retries(1);
        if let Some(host) = &options.emulator_host {
            db_options = db_options.with_firebase_api_url(format!("http://{host}"));
        }
        let db = FirestoreDb::with_options(db_options).await?;
        let settler = Settler::start(db.clone(), options.request_timeout);
        let claimer = Claimer::start(db.clone(), options.request_timeout);
        Ok(Self {
            db,
            options,
            settler,
            claimer,
        })
    }

    /// Sends the settles still queued (at shutdown).
    pub async fn flush_settles(&self) {
        self.settler.flush().await;
    }

    /// Batched settle RPCs sent and the writes they carried.
    pub fn settle_counts(&self) -> (u64, u64) {
        self.settler.counts()
    }

    /// Batched claim RPCs sent and the claims they carried.
    pub fn claim_counts(&self) -> (u64, u64) {
        self.claimer.counts()
    }

    /// `projects/P/databases/(default)/documents/{collection}/{id}`
    fn document_path(&self, collection: &str, id: &str) -> String {
        format!("{}/{collection}/{id}", self.db.get_documents_path())
    }
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
