//! Reading and clearing dead letters (`GET /admin/dead-letters`, replay).

use super::docs::DeadLetterDoc;
use super::docs::collections::DEAD_LETTERS;
use super::{Store, StoreError, classify};

impl Store {
    /// The newest dead letters first.
    pub async fn dead_letters(&self, limit: u32) -> Result<Vec<(String, DeadLetterDoc)>, StoreError> {
        let documents = self
            .db
            .fluent()
            .select()
            .from(DEAD_LETTERS)
            .order(|o| o.fields([o.field("parkedAt").descending()]))
            .limit(limit)
            .query()
            .await
            .map_err(classify)?;
        documents
            .into_iter()
            .map(|document| {
                let id = document.name.rsplit('/').next().unwrap_or_default().to_owned();
                Ok((id, firestore::FirestoreDb::deserialize_doc_to(&document)?))
            })
            .collect()
    }

    pub async fn dead_letter(&self, id: &str) -> Result<Option<DeadLetterDoc>, StoreError> {
        let found = self
            .db
            .fluent()
            .select()
            .by_id_in(DEAD_LETTERS)
            .one(id)
            .await
            .map_err(classify)?;
        Ok(found
            .map(|document| firestore::FirestoreDb::deserialize_doc_to(&document))
            .transpose()?)
    }

    pub async fn remove_dead_letter(&self, id: &str) -> Result<(), StoreError> {
        self.db
            .fluent()
            .delete()
            .from(DEAD_LETTERS)
            .document_id(id)
            .execute()
            .await
            .map_err(classify)
    }
}
