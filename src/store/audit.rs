//! `audit_log/{id}`: who did what through the console, the admin API or the
//! operators command, when, with what result, and the ids it touched. The
//! service only ever creates an entry and completes it once with its result:
//! no route edits or deletes one.
//!
//! An action that is one Firestore commit (a campaign's creation, a manual
//! send's request record, an operator's change) carries its entry in that
//! commit ([`Store::audit_write`]); any other action's entry is created
//! before it runs ([`Store::begin_audit`]) and completed after
//! ([`Store::finish_audit`]), so no action goes unaudited.

use super::docs::collections::AUDIT_LOG;
use super::round_trips::Timed;
use super::writes::{CommitOutcome, create, merge, only_if_present};
use super::{Store, StoreError};
use gcloud_sdk::google::firestore::v1::Write;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Ids an entry lists at most; `touchedCount` counts them all.
pub(crate) const MAX_TOUCHED: usize = 100;
/// Entries a listing returns at most.
pub(crate) const MAX_LISTED: u32 = 500;

/// `audit_log/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditDoc {
    /// When the action was asked for (ms).
    pub(crate) at_ms: i64,
    /// `console`, `api` or `cli`.
    pub(crate) via: String,
    /// The operator's email, `ADMIN_TOKEN`, or `cli` (the operators command).
    pub(crate) operator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) operator_id: Option<String>,
    /// A personal API token's prefix (`lsv_1a2b3c4d`), when one was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
    /// `manual_send`, `campaign_create`, `campaign_cancel`, `replay`, ...
    pub(crate) action: String,
    /// The method and path asked (`POST /admin/campaigns`).
    pub(crate) route: String,
    /// What was asked, without message text (a scenario id, a count, a role).
    pub(crate) summary: BTreeMap<String, String>,
    /// `pending` until the action ends, then `done`, `refused` or `failed`.
    pub(crate) result: String,
    /// The HTTP status answered (or the command's exit status), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    pub(crate) touched: Vec<String>,
    pub(crate) touched_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) completed_ms: Option<i64>,
}

/// An entry and its id, ready to be written.
#[derive(Debug, Clone)]
pub(crate) struct AuditEntry {
    pub(crate) id: String,
    pub(crate) doc: AuditDoc,
}

/// What an entry's completion says.
#[derive(Debug, Clone)]
pub(crate) struct AuditEnd {
    pub(crate) result: &'static str,
    pub(crate) status: u16,
    /// The ids the action touched, when more are known than at its start.
    pub(crate) touched: Option<Vec<String>>,
}

/// A listing's filters; all optional.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuditFilter<'a> {
    pub(crate) operator: Option<&'a str>,
    pub(crate) action: Option<&'a str>,
    pub(crate) from_ms: Option<i64>,
    pub(crate) until_ms: Option<i64>,
}

/// At most [`MAX_TOUCHED`] of `ids`, and how many there were.
pub(crate) fn audit_touched(ids: Vec<String>) -> (Vec<String>, u64) {
    let count = u64::try_from(ids.len()).unwrap_or(u64::MAX);
    (ids.into_iter().take(MAX_TOUCHED).collect(), count)
}

impl Store {
    /// The create of `entry`, for a commit that carries it.
    pub(super) fn audit_write(&self, entry: &AuditEntry) -> Result<Write, StoreError> {
        Ok(create(self.document_path(AUDIT_LOG, &entry.id), &entry.doc)?)
    }

    /// Creates `entry` before its action runs. A retry after an unknown
    /// outcome finds it and is content.
    pub(crate) async fn begin_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        match self.commit(vec![self.audit_write(entry)?]).await {
            CommitOutcome::Committed(_) | CommitOutcome::AlreadyExists => Ok(()),
            CommitOutcome::Changed => Err(StoreError::Unavailable("unexpected precondition failure".into())),
            CommitOutcome::Unknown(error) => match self.audit_entry(&entry.id).await? {
                Some(_) => Ok(()),
                None => Err(error),
            },
            CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Completes `entry` with its action's result. When it was never written
    /// (the action's own commit did not land: a refusal, a repeat), it is
    /// created now, complete.
    pub(crate) async fn finish_audit(&self, entry: &AuditEntry, end: &AuditEnd) -> Result<(), StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Completed<'a> {
            result: &'a str,
            status: u16,
            completed_ms: i64,
            #[serde(skip_serializing_if = "Option::is_none")]
            touched: Option<Vec<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            touched_count: Option<u64>,
        }
        let now = self.options.clock.now_ms();
        let (touched, touched_count) = match end.touched.clone().map(audit_touched) {
            Some((ids, count)) => (Some(ids), Some(count)),
            None => (None, None),
        };
        let completed = Completed {
            result: end.result,
            status: end.status,
            completed_ms: now,
            touched: touched.clone(),
            touched_count,
        };
        let complete = || -> Result<Write, StoreError> {
            Ok(only_if_present(merge(
                self.document_path(AUDIT_LOG, &entry.id),
                &completed,
                Vec::new(),
            )?))
        };
        match self.commit(vec![complete()?]).await {
            CommitOutcome::Committed(_) | CommitOutcome::AlreadyExists => return Ok(()),
            CommitOutcome::Changed => {}
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => return Err(error),
        }
        // Not there: record it whole. If a commit still in flight created it
        // meanwhile (ours finds it there), complete that one instead.
        let mut doc = entry.doc.clone();
        doc.result = end.result.to_owned();
        doc.status = Some(end.status);
        doc.completed_ms = Some(now);
        if let (Some(ids), Some(count)) = (touched, touched_count) {
            doc.touched = ids;
            doc.touched_count = count;
        }
        let whole = create(self.document_path(AUDIT_LOG, &entry.id), &doc)?;
        match self.commit(vec![whole]).await {
            CommitOutcome::Committed(_) => Ok(()),
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => match self.commit(vec![complete()?]).await {
                CommitOutcome::Committed(_) | CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(()),
                CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
            },
            CommitOutcome::Unknown(error) => match self.audit_entry(&entry.id).await? {
                Some(_) => Ok(()),
                None => Err(error),
            },
            CommitOutcome::Failed(error) => Err(error),
        }
    }

    pub(crate) async fn audit_entry(&self, id: &str) -> Result<Option<AuditDoc>, StoreError> {
        Ok(self
            .get_stored::<AuditDoc>(AUDIT_LOG, id)
            .await?
            .map(|stored| stored.doc))
    }

    /// Entries newest first, at most `limit` (up to [`MAX_LISTED`]).
    pub(crate) async fn audit_entries(
        &self,
        filter: &AuditFilter<'_>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        super::round_trips::count();
        let documents: Vec<gcloud_sdk::google::firestore::v1::Document> = self
            .db
            .fluent()
            .select()
            .from(AUDIT_LOG)
            .filter(|q| {
                q.for_all([
                    filter.operator.and_then(|operator| q.field("operator").eq(operator)),
                    filter.action.and_then(|action| q.field("action").eq(action)),
                    filter
                        .from_ms
                        .and_then(|from| q.field("atMs").greater_than_or_equal(from)),
                    filter.until_ms.and_then(|until| q.field("atMs").less_than(until)),
                ])
            })
            .order(|o| o.fields([o.field("atMs").descending()]))
            .limit(limit.clamp(1, MAX_LISTED))
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(super::classify)?;
        documents
            .into_iter()
            .map(|document| {
                let stored = super::lease::Stored::<AuditDoc>::decode(document)?;
                Ok(AuditEntry {
                    id: stored.id,
                    doc: stored.doc,
                })
            })
            .collect()
    }
}
