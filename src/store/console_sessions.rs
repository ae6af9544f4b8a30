//! `console_sessions/{id}`: the console's logins, kept on the server so that a
//! logout, a disabled operator or a changed role holds on the next request on
//! every instance. The id is a digest of the cookie's random value: whoever
//! can read Firestore (or a backup of it) still cannot present a session.
//!
//! `api_tokens/{id}`: operators' personal API tokens (`lsv_...`), likewise
//! under a digest of the token, never the token itself.

use super::docs::collections::{API_TOKENS, CONSOLE_SESSIONS};
use super::lease::Stored;
use super::writes::{CommitOutcome, Expect, create, delete, expecting, merge};
use super::{Store, StoreError};
use crate::values::OperatorRole;
use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

/// A personal API token's listing holds at most this many per operator.
pub(crate) const MAX_API_TOKENS: u32 = 100;

/// How a console session was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum SessionVia {
    /// An operator's email and password.
    Password,
    /// The `ADMIN_TOKEN` (an owner without a name: first run, scripts).
    AdminToken,
}

/// `console_sessions/{digest of the cookie}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConsoleSessionDoc {
    pub(crate) via: SessionVia,
    /// The operator's record (`operators/{id}`), read on every request for
    /// its role and whether it is disabled. `None` for the admin token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) operator_id: Option<String>,
    /// For an admin-token session: a digest of the token it was opened with,
    /// so changing `ADMIN_TOKEN` ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token_digest: Option<String>,
    pub(crate) created_ms: i64,
    /// The absolute end (`CONSOLE_SESSION_MINUTES` after the login).
    pub(crate) expires_ms: i64,
    /// The last request, refreshed at most once a minute (`CONSOLE_IDLE_MINUTES`
    /// counts from it).
    pub(crate) last_seen_ms: i64,
    /// For Firestore's TTL policy: the record goes some time after it ends.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) expire_at: FirestoreInstant,
}

/// `api_tokens/{digest of the token}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiTokenDoc {
    pub(crate) operator_id: String,
    pub(crate) email: String,
    /// At most the operator's role when made; the operator's current role
    /// bounds it on every use.
    pub(crate) role: OperatorRole,
    /// The operator's name for it ("集計スクリプト").
    pub(crate) label: String,
    /// The token's first characters, so its owner can tell tokens apart.
    pub(crate) prefix: String,
    pub(crate) created_ms: i64,
    #[serde(default)]
    pub(crate) revoked: bool,
}

impl Store {
    pub(crate) async fn create_console_session(&self, id: &str, doc: &ConsoleSessionDoc) -> Result<(), StoreError> {
        let write = create(self.document_path(CONSOLE_SESSIONS, id), doc)?;
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) => Ok(()),
            // A random 256-bit id met itself: only possible if our own retry
            // landed, and the record is the one we wrote.
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(()),
            CommitOutcome::Unknown(error) => match self.console_session(id).await? {
                Some(_) => Ok(()),
                None => Err(error),
            },
            CommitOutcome::Failed(error) => Err(error),
        }
    }

    pub(crate) async fn console_session(&self, id: &str) -> Result<Option<Stored<ConsoleSessionDoc>>, StoreError> {
        self.get_stored(CONSOLE_SESSIONS, id).await
    }

    /// Moves a session's `lastSeenMs` on, conditional on the record as read:
    /// after a logout (deleted) or another request's refresh it changes nothing.
    pub(crate) async fn touch_console_session(
        &self,
        session: &Stored<ConsoleSessionDoc>,
        seen_ms: i64,
    ) -> Result<(), StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Seen {
            last_seen_ms: i64,
        }
        let write = expecting(
            merge(
                self.document_path(CONSOLE_SESSIONS, &session.id),
                &Seen { last_seen_ms: seen_ms },
                Vec::new(),
            )?,
            Expect::At(session.version),
        );
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) | CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(()),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Ends a session (a logout). Deleting what is gone already is fine.
    pub(crate) async fn delete_console_session(&self, id: &str) -> Result<(), StoreError> {
        match self
            .commit(vec![delete(self.document_path(CONSOLE_SESSIONS, id))])
            .await
        {
            CommitOutcome::Committed(_) | CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(()),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    pub(crate) async fn create_api_token(&self, id: &str, doc: &ApiTokenDoc) -> Result<(), StoreError> {
        let write = create(self.document_path(API_TOKENS, id), doc)?;
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) | CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(()),
            CommitOutcome::Unknown(error) => match self.api_token(id).await? {
                Some(_) => Ok(()),
                None => Err(error),
            },
            CommitOutcome::Failed(error) => Err(error),
        }
    }

    pub(crate) async fn api_token(&self, id: &str) -> Result<Option<Stored<ApiTokenDoc>>, StoreError> {
        self.get_stored(API_TOKENS, id).await
    }

    /// An operator's tokens (revoked ones too), at most [`MAX_API_TOKENS`].
    pub(crate) async fn api_tokens_of(&self, operator_id: &str) -> Result<Vec<Stored<ApiTokenDoc>>, StoreError> {
        let documents = self
            .page_by_id(
                API_TOKENS,
                &["operatorId", "email", "role", "label", "prefix", "createdMs", "revoked"],
                |q| q.for_all([q.field("operatorId").eq(operator_id)]),
                None,
                MAX_API_TOKENS,
            )
            .await?;
        documents.into_iter().map(Stored::decode).collect()
    }

    /// Marks a token revoked, conditional on the record as read. `false`
    /// when there is no such token.
    pub(crate) async fn revoke_api_token(&self, token: &Stored<ApiTokenDoc>) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        struct Revoked {
            revoked: bool,
        }
        let write = expecting(
            merge(
                self.document_path(API_TOKENS, &token.id),
                &Revoked { revoked: true },
                Vec::new(),
            )?,
            Expect::At(token.version),
        );
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) => Ok(true),
            // Changed since read: only a revoke changes it, so it is revoked.
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(true),
            // Revoking again is harmless: read what happened.
            CommitOutcome::Unknown(error) => match self.api_token(&token.id).await? {
                Some(found) if found.doc.revoked => Ok(true),
                _ => Err(error),
            },
            CommitOutcome::Failed(error) => Err(error),
        }
    }
}
