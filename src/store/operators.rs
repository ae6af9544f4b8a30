//! `operators/{id}`: the people who use the console, one record each (id:
//! the deterministic id of the email, so an email is one operator, found
//! without a query). Created by `create()`, changed only conditional on the
//! record as read (two changes at once: one lands, the other reads again).

use super::docs::collections::OPERATORS;
use super::lease::Stored;
use super::writes::{CommitOutcome, Expect, create, expecting, set};
use super::{Store, StoreError};
use crate::ids::deterministic_id;
use crate::values::OperatorRole;
use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

/// Operators listed at most: a shop has a handful, an agency a few dozen.
const MAX_OPERATORS: u32 = 1000;

/// `operators/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OperatorDoc {
    /// Lower-cased and trimmed, as the id is made from it.
    pub(crate) email: String,
    pub(crate) role: OperatorRole,
    /// Argon2id, PHC string format: never the password itself.
    pub(crate) password_hash: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) created_at: FirestoreInstant,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) updated_at: FirestoreInstant,
    #[serde(default)]
    pub(crate) disabled: bool,
    /// When the password was last reset (ms): console sessions opened before
    /// it end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) password_changed_ms: Option<i64>,
}

/// A change to one operator.
#[derive(Debug, Clone)]
pub(crate) enum OperatorChange {
    Role(OperatorRole),
    Disabled,
    PasswordHash(String),
}

/// How a change to an operator ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OperatorWrite {
    Done,
    /// `add`: an operator with that email exists.
    Exists,
    /// A change: no operator with that email.
    NotFound,
}

/// The id of `email`'s record (normalised first).
pub(crate) fn operator_id(email: &str) -> String {
    deterministic_id(&["operator", &normalise_email(email)])
}

/// An email as stored and compared: trimmed and lower-cased.
pub(crate) fn normalise_email(email: &str) -> String {
    email.trim().to_lowercase()
}

impl Store {
    /// A new operator; `Exists` when one has that email (nothing changed).
    pub(crate) async fn add_operator(
        &self,
        email: &str,
        role: OperatorRole,
        password_hash: String,
        audit: Option<&super::AuditEntry>,
    ) -> Result<OperatorWrite, StoreError> {
        let now = self.now();
        let doc = OperatorDoc {
            email: normalise_email(email),
            role,
            password_hash,
            created_at: now,
            updated_at: now,
            disabled: false,
            password_changed_ms: None,
        };
        // The audit entry lands with the record, or neither does.
        let mut writes = vec![create(self.document_path(OPERATORS, &operator_id(email)), &doc)?];
        if let Some(entry) = audit {
            writes.push(self.audit_write(entry)?);
        }
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(OperatorWrite::Done),
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(OperatorWrite::Exists),
            CommitOutcome::Unknown(error) => {
                // Landed or not: a record with this very hash says it did.
                match self.operator(email).await? {
                    Some(found) if found.doc.password_hash == doc.password_hash => Ok(OperatorWrite::Done),
                    Some(_) => Ok(OperatorWrite::Exists),
                    None => Err(error),
                }
            }
            CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// The operator with `email`, if any.
    pub(crate) async fn operator(&self, email: &str) -> Result<Option<Stored<OperatorDoc>>, StoreError> {
        self.get_stored(OPERATORS, &operator_id(email)).await
    }

    /// The operator whose record has `id` (a session's or a token's).
    pub(crate) async fn operator_by_id(&self, id: &str) -> Result<Option<OperatorDoc>, StoreError> {
        Ok(self
            .get_stored::<OperatorDoc>(OPERATORS, id)
            .await?
            .map(|stored| stored.doc))
    }

    /// Every operator, by email.
    pub(crate) async fn operators(&self) -> Result<Vec<OperatorDoc>, StoreError> {
        let documents = self
            .page_by_id(
                OPERATORS,
                &[
                    "email",
                    "role",
                    "passwordHash",
                    "createdAt",
                    "updatedAt",
                    "disabled",
                    "passwordChangedMs",
                ],
                |_| None,
                None,
                MAX_OPERATORS,
            )
            .await?;
        let mut operators: Vec<OperatorDoc> = documents
            .into_iter()
            .map(|document| Stored::<OperatorDoc>::decode(document).map(|stored| stored.doc))
            .collect::<Result<_, _>>()?;
        operators.sort_by(|a, b| a.email.cmp(&b.email));
        Ok(operators)
    }

    /// Changes `email`'s operator, conditional on the record as read (read
    /// again a few times when another change lands in between).
    pub(crate) async fn change_operator(
        &self,
        email: &str,
        change: &OperatorChange,
        audit: Option<&super::AuditEntry>,
    ) -> Result<OperatorWrite, StoreError> {
        for _ in 0..3 {
            let Some(found) = self.operator(email).await? else {
                return Ok(OperatorWrite::NotFound);
            };
            let mut doc = found.doc.clone();
            match change {
                OperatorChange::Role(role) => doc.role = *role,
                OperatorChange::Disabled => doc.disabled = true,
                OperatorChange::PasswordHash(hash) => {
                    doc.password_hash.clone_from(hash);
                    doc.password_changed_ms = Some(self.options.clock.now_ms());
                }
            }
            doc.updated_at = self.now();
            let mut writes = vec![expecting(
                set(self.document_path(OPERATORS, &found.id), &doc)?,
                Expect::At(found.version),
            )];
            if let Some(entry) = audit {
                writes.push(self.audit_write(entry)?);
            }
            match self.commit(writes).await {
                CommitOutcome::Committed(_) => return Ok(OperatorWrite::Done),
                // The entry's id is new to this change: it exists only if an
                // earlier attempt whose outcome was unknown landed.
                CommitOutcome::AlreadyExists if audit.is_some() => return Ok(OperatorWrite::Done),
                CommitOutcome::Changed | CommitOutcome::AlreadyExists => {}
                // A change is idempotent: doing it again is safe.
                CommitOutcome::Unknown(_) => {}
                CommitOutcome::Failed(error) => return Err(error),
            }
        }
        Err(StoreError::Unavailable(
            "the operator's record kept changing; try again".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_is_one_operator_however_it_is_typed() {
        let id = operator_id("owner@shop.example");
        for typed in ["owner@shop.example", " Owner@Shop.Example ", "OWNER@SHOP.EXAMPLE\n"] {
            assert_eq!(operator_id(typed), id, "{typed:?}");
        }
        assert_ne!(operator_id("other@shop.example"), id);
    }
}
