//! Reading dead letters (`GET /admin/dead-letters`, replay). A letter is written
//! in the same commit that parks its record and removed in the same commit that
//! revives it, so a replay that fails again leaves a new letter.

use super::docs::DeadLetterDoc;
use super::docs::collections::DEAD_LETTERS;
use super::lease::document_id;
use super::round_trips::Timed;
use super::{Store, StoreError, classify};

/// A dead letter and its id.
#[derive(Debug, Clone)]
pub(crate) struct DeadLetter {
    pub(crate) id: String,
    pub(crate) doc: DeadLetterDoc,
}

impl Store {
    /// The newest dead letters first. A letter that cannot be read is skipped
    /// (and logged) rather than hiding the others.
    pub(crate) async fn dead_letters(&self, limit: u32) -> Result<Vec<DeadLetter>, StoreError> {
        let documents = self
            .db
            .fluent()
            .select()
            .from(DEAD_LETTERS)
            .order(|o| o.fields([o.field("parkedAt").descending()]))
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(documents
            .into_iter()
            .filter_map(|document| {
                let id = document_id(&document.name).to_owned();
                match firestore::FirestoreDb::deserialize_doc_to(&document) {
                    Ok(doc) => Some(DeadLetter { id, doc }),
                    Err(error) => {
                        tracing::warn!(dead_letter.id = %id, error = %error, "a dead letter cannot be read");
                        None
                    }
                }
            })
            .collect())
    }

    pub(crate) async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetter>, StoreError> {
        Ok(self
            .get_stored::<DeadLetterDoc>(DEAD_LETTERS, id)
            .await?
            .map(|stored| DeadLetter {
                id: stored.id,
                doc: stored.doc,
            }))
    }
}
