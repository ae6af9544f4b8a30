//! The audit log for owners (`GET /admin/audit`, the console's audit page):
//! entries newest first, filtered by operator, action and days (Tokyo,
//! inclusive, the results report's rules). Read only.

use crate::engine::campaign::start_of_day_ms;
use crate::engine::results::{DayRange, RangeError};
use crate::scenario::DEFAULT_TIME_ZONE;
use crate::store::{AuditFilter, Store, StoreError};
use serde::Serialize;
use std::collections::BTreeMap;

/// Entries a listing returns when no limit is asked for.
pub(crate) const DEFAULT_LIMIT: u32 = 100;

/// What a listing asks for; empty values count as absent.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct AuditQuery {
    pub(crate) operator: Option<String>,
    pub(crate) action: Option<String>,
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) limit: Option<u32>,
}

/// One entry as owners read it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditRow {
    pub(crate) id: String,
    /// RFC 3339 in Tokyo time.
    pub(crate) at: String,
    pub(crate) at_ms: i64,
    pub(crate) via: String,
    pub(crate) operator: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
    pub(crate) action: String,
    pub(crate) route: String,
    pub(crate) summary: BTreeMap<String, String>,
    pub(crate) result: String,
    pub(crate) status: Option<u16>,
    pub(crate) touched: Vec<String>,
    pub(crate) touched_count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) completed_at: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AuditError {
    #[error(transparent)]
    BadRange(#[from] RangeError),
    #[error("limit must be 1 to {0}")]
    BadLimit(u32),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Clone)]
pub(crate) struct AuditReport {
    store: Store,
}

/// An instant as owners read it: Tokyo time, RFC 3339 to the millisecond.
pub(crate) fn tokyo(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|at| {
            at.with_timezone(&DEFAULT_TIME_ZONE)
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
        })
        .unwrap_or_default()
}

fn present(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|value| !value.is_empty())
}

impl AuditReport {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }

    pub(crate) async fn list(&self, query: &AuditQuery) -> Result<Vec<AuditRow>, AuditError> {
        let range = DayRange::parse(query.from.as_deref(), query.to.as_deref())?;
        let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=crate::store::MAX_AUDIT_LISTED).contains(&limit) {
            return Err(AuditError::BadLimit(crate::store::MAX_AUDIT_LISTED));
        }
        // Emails are stored as operators are named: trimmed and lower-cased.
        let operator = present(query.operator.as_deref()).map(|operator| {
            if operator.contains('@') {
                crate::store::normalise_email(operator)
            } else {
                operator.to_owned()
            }
        });
        let filter = AuditFilter {
            operator: operator.as_deref(),
            action: present(query.action.as_deref()),
            from_ms: range.from.map(|day| start_of_day_ms(DEFAULT_TIME_ZONE, day)),
            until_ms: range
                .to
                .and_then(|day| day.succ_opt())
                .map(|day| start_of_day_ms(DEFAULT_TIME_ZONE, day)),
        };
        let entries = self.store.audit_entries(&filter, limit).await?;
        Ok(entries
            .into_iter()
            .map(|entry| AuditRow {
                id: entry.id,
                at: tokyo(entry.doc.at_ms),
                at_ms: entry.doc.at_ms,
                via: entry.doc.via,
                operator: entry.doc.operator,
                token: entry.doc.token,
                action: entry.doc.action,
                route: entry.doc.route,
                summary: entry.doc.summary,
                result: entry.doc.result,
                status: entry.doc.status,
                touched: entry.doc.touched,
                touched_count: entry.doc.touched_count,
                completed_at: entry.doc.completed_ms.map(tokyo),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_in_tokyo_time() {
        assert_eq!(tokyo(0), "1970-01-01T09:00:00.000+09:00");
        assert_eq!(tokyo(1_764_547_200_123), "2025-12-01T09:00:00.123+09:00");
    }
}
