//! `scenario_versions/{scenarioId}@{version}`: every scenario version the service
//! has loaded, with its content and a hash of it. A version's content never
//! changes once recorded: start-up refuses a file whose content changed while
//! its `version` did not, and a run pinned to an old version reads that
//! version's content from here.

use super::docs::collections::SCENARIO_VERSIONS;
use super::writes::{CommitOutcome, create};
use super::{Store, StoreError};
use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VersionDoc {
    scenario_id: String,
    version: u32,
    /// Hex SHA-256 of the file's bytes.
    content_hash: String,
    /// The scenario file as loaded (TOML).
    content: String,
    /// The file it was loaded from, for operators.
    source: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    recorded_at: FirestoreInstant,
}

/// What start-up found for one scenario version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VersionCheck {
    /// First seen now: recorded.
    Recorded,
    /// Recorded before with the same content.
    Unchanged,
    /// Recorded before with other content: the file changed but its `version` did not.
    Changed { recorded_hash: String },
}

/// The document id: `{id}@{version}` when the id is safe in a document path,
/// otherwise a hash of both.
pub(crate) fn version_doc_id(scenario: &str, version: u32) -> String {
    let safe = !scenario.starts_with("__")
        && !matches!(scenario, "." | "..")
        && scenario
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if safe {
        format!("{scenario}@{version}")
    } else {
        crate::ids::deterministic_id(&["scenario_version", scenario, &version.to_string()])
    }
}

impl Store {
    /// Records a loaded scenario version, or compares it with the one recorded.
    pub(crate) async fn record_scenario_version(
        &self,
        scenario: &str,
        version: u32,
        content_hash: &str,
        content: &str,
        source: &str,
    ) -> Result<VersionCheck, StoreError> {
        let id = version_doc_id(scenario, version);
        let doc = VersionDoc {
            scenario_id: scenario.to_owned(),
            version,
            content_hash: content_hash.to_owned(),
            content: content.to_owned(),
            source: source.to_owned(),
            recorded_at: self.now(),
        };
        let write = create(self.document_path(SCENARIO_VERSIONS, &id), &doc)?;
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) => return Ok(VersionCheck::Recorded),
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => {}
            // Read below what is there: it was written by this call or by another.
            CommitOutcome::Unknown(_) => {}
            CommitOutcome::Failed(error) => return Err(error),
        }
        let Some(recorded) = self.get_stored::<VersionDoc>(SCENARIO_VERSIONS, &id).await? else {
            return Err(StoreError::Unavailable(format!(
                "scenario version {id} could not be recorded"
            )));
        };
        Ok(if recorded.doc.content_hash == content_hash {
            VersionCheck::Unchanged
        } else {
            VersionCheck::Changed {
                recorded_hash: recorded.doc.content_hash,
            }
        })
    }

    /// The recorded content of a scenario version, if any.
    pub(crate) async fn scenario_version_content(
        &self,
        scenario: &str,
        version: u32,
    ) -> Result<Option<String>, StoreError> {
        let id = version_doc_id(scenario, version);
        Ok(self
            .get_stored::<VersionDoc>(SCENARIO_VERSIONS, &id)
            .await?
            .map(|stored| stored.doc.content))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_are_readable_when_safe_and_hashed_otherwise() {
        assert_eq!(version_doc_id("lunch", 2), "lunch@2");
        assert_eq!(version_doc_id("ja-profile_v.2", 1), "ja-profile_v.2@1");
        for unsafe_id in ["a/b", "..", "__x__", "ランチ"] {
            let id = version_doc_id(unsafe_id, 1);
            assert_eq!(id.len(), 40, "{unsafe_id}");
            assert!(!id.contains('/'));
        }
        assert_ne!(version_doc_id("a/b", 1), version_doc_id("a/b", 2));
    }
}
