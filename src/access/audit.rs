//! Making the audit log's entries (`audit_log`, see `store::audit`): who
//! (from the request's [`Actor`]), what, when, and after the action its
//! result. An entry is created before the action runs, or inside the
//! action's own commit where it is one; either way it is then completed with
//! the answer's status, so no action goes unaudited.

use super::Actor;
use crate::clock::Clock;
use crate::store::{AuditDoc, AuditEnd, AuditEntry, Store, StoreError};
use std::collections::BTreeMap;

/// Where an action came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Console,
    Api,
    Cli,
}

impl Via {
    fn as_str(self) -> &'static str {
        match self {
            Via::Console => "console",
            Via::Api => "api",
            Via::Cli => "cli",
        }
    }
}

/// The result an HTTP status stands for.
pub(crate) fn result_of(status: u16) -> &'static str {
    match status {
        // A console form sent again whose action had landed: nothing done now.
        208 => "repeat",
        200..=399 => "done",
        400..=499 => "refused",
        _ => "failed",
    }
}

/// The longest a summary's value or a touched id is kept.
const MAX_VALUE_CHARS: usize = 300;

fn bounded(value: String) -> String {
    if value.chars().count() <= MAX_VALUE_CHARS {
        value
    } else {
        value.chars().take(MAX_VALUE_CHARS).chain(['…']).collect()
    }
}

/// A request's part (an audience, a filter) as compact JSON for a summary.
/// Only for parts without message text.
pub(crate) fn json_summary(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// What an action is, before it runs.
pub(crate) struct Action<'a> {
    pub(crate) via: Via,
    /// `manual_send`, `campaign_create`, ...
    pub(crate) name: &'static str,
    /// `POST /admin/campaigns`: the method and the path asked.
    pub(crate) route: String,
    /// What was asked, without message text.
    pub(crate) summary: Vec<(&'a str, String)>,
    pub(crate) touched: Vec<String>,
}

#[derive(Clone)]
pub(crate) struct Auditor {
    store: Store,
    clock: Clock,
}

impl Auditor {
    pub(crate) fn new(store: Store, clock: Clock) -> Self {
        Self { store, clock }
    }

    /// A new entry for `action` by `actor` (`None`: the operators command).
    pub(crate) fn entry(&self, actor: Option<&Actor>, action: Action<'_>) -> AuditEntry {
        let (operator, operator_id, token) = match actor {
            None => ("cli".to_owned(), None, None),
            Some(Actor::AdminToken) => ("ADMIN_TOKEN".to_owned(), None, None),
            Some(Actor::Operator { id, email, .. }) => (email.clone(), Some(id.clone()), None),
            Some(Actor::ApiToken {
                operator_id,
                email,
                prefix,
                ..
            }) => (email.clone(), Some(operator_id.clone()), Some(prefix.clone())),
        };
        let (touched, touched_count) = crate::store::audit_touched(action.touched.into_iter().map(bounded).collect());
        AuditEntry {
            id: uuid::Uuid::new_v4().simple().to_string(),
            doc: AuditDoc {
                at_ms: self.clock.now_ms(),
                via: action.via.as_str().to_owned(),
                operator,
                operator_id,
                token,
                action: action.name.to_owned(),
                route: action.route,
                summary: action
                    .summary
                    .into_iter()
                    .map(|(key, value)| (key.to_owned(), bounded(value)))
                    .collect::<BTreeMap<_, _>>(),
                result: "pending".to_owned(),
                status: None,
                touched,
                touched_count,
                completed_ms: None,
            },
        }
    }

    /// Records `entry` before its action runs: an action whose entry could
    /// not be written does not run.
    pub(crate) async fn begin(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.store.begin_audit(entry).await
    }

    /// Completes `entry` with the answer's `status`; if the action's own
    /// commit did not carry it (refused before, or a repeat), it is recorded
    /// now, complete. A failure here is logged: the action has happened.
    pub(crate) async fn finish(&self, entry: &AuditEntry, status: u16, touched: Option<Vec<String>>) {
        let end = AuditEnd {
            result: result_of(status),
            status,
            touched,
        };
        if let Err(error) = self.store.finish_audit(entry, &end).await {
            tracing::error!(
                audit.id = %entry.id,
                action = %entry.doc.action,
                status,
                error = %error,
                outcome = "audit_incomplete",
                "the audit entry could not be completed with its result"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_results() {
        for (status, result) in [
            (200, "done"),
            (202, "done"),
            (303, "done"),
            (208, "repeat"),
            (400, "refused"),
            (403, "refused"),
            (409, "refused"),
            (502, "failed"),
            (503, "failed"),
        ] {
            assert_eq!(result_of(status), result, "{status}");
        }
    }
}
