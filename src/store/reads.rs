//! Reading documents by id: any number of them, from any collections, in one
//! `BatchGetDocuments` round trip. Gets by id stay fast however large a
//! collection grows (queries on the emulator scan it). And reading a query's
//! documents a page at a time, in document-id order.

use super::lease::Stored;
use super::round_trips::Timed;
use super::{Store, StoreError, classify};
use firestore::errors::FirestoreError;
use firestore::select_filter_builder::FirestoreQueryFilterBuilder;
use firestore::{FirestoreDb, FirestoreQueryCursor, FirestoreQueryFilter};
use gcloud_sdk::google::firestore::v1::{BatchGetDocumentsRequest, Document, batch_get_documents_response};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::time::Duration;

impl Store {
    /// How many documents of `collection` `filter` finds (at most `up_to`):
    /// one count aggregation, a read per thousand documents counted.
    pub(super) async fn count_where(
        &self,
        collection: &str,
        filter: impl Fn(FirestoreQueryFilterBuilder) -> Option<FirestoreQueryFilter>,
        up_to: Option<usize>,
    ) -> Result<u64, StoreError> {
        use gcloud_sdk::google::firestore::v1::value::ValueType;
        super::round_trips::count();
        let documents: Vec<Document> = self
            .db
            .fluent()
            .select()
            .from(collection)
            .filter(filter)
            .aggregate(|a| {
                a.fields([match up_to {
                    Some(cap) => a.field("n").count_up_to(cap),
                    None => a.field("n").count(),
                }])
            })
            .query()
            .timed(super::round_trips::COUNT)
            .await
            .map_err(classify)?;
        documents
            .first()
            .and_then(|document| document.fields.get("n"))
            .and_then(|value| match value.value_type {
                Some(ValueType::IntegerValue(count)) => u64::try_from(count).ok(),
                _ => None,
            })
            .ok_or_else(|| StoreError::Unavailable(format!("the count of {collection} came without a number")))
    }

    /// The documents at `paths` (full document names), each `None` when absent,
    /// in the order asked. One round trip.
    pub(super) async fn get_many(&self, paths: Vec<String>) -> Result<Vec<Option<Document>>, StoreError> {
        super::round_trips::count();
        get_documents(&self.db, paths, None, self.options.request_timeout).await
    }

    /// The same, each document with only `fields` (a projection: less to
    /// send for records read for a few fields).
    pub(super) async fn get_many_fields(
        &self,
        paths: Vec<String>,
        fields: &[&str],
    ) -> Result<Vec<Option<Document>>, StoreError> {
        super::round_trips::count();
        let mask = gcloud_sdk::google::firestore::v1::DocumentMask {
            field_paths: fields.iter().map(|field| (*field).to_owned()).collect(),
        };
        get_documents(&self.db, paths, Some(mask), self.options.request_timeout).await
    }

    /// One document of `collection` with its version, or `None`.
    pub(super) async fn get_stored<T: DeserializeOwned>(
        &self,
        collection: &str,
        id: &str,
    ) -> Result<Option<Stored<T>>, StoreError> {
        let mut found = self.get_many(vec![self.document_path(collection, id)]).await?;
        found.pop().flatten().map(Stored::decode).transpose()
    }

    /// One page of what `filter` finds in `collection` (`fields` only), in
    /// document-id order, starting after the document with id `after`. The
    /// automatic single-field indexes serve it (equality filters plus `__name__`
    /// order), and the cursor never skips or repeats a document however the
    /// collection changes between pages.
    pub(super) async fn page_by_id(
        &self,
        collection: &str,
        fields: &[&str],
        filter: impl Fn(FirestoreQueryFilterBuilder) -> Option<FirestoreQueryFilter>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Document>, StoreError> {
        super::round_trips::count();
        let mut query = self
            .scan_db
            .fluent()
            .select()
            .fields(fields.iter().copied())
            .from(collection)
            .filter(filter)
            .order(|o| o.fields([o.field("__name__").ascending()]))
            .limit(limit);
        if let Some(last) = after {
            query = query.start_at(FirestoreQueryCursor::AfterValue(vec![super::lease::reference_value(
                self.document_path(collection, last),
            )]));
        }
        query.query().timed(super::round_trips::QUERY).await.map_err(classify)
    }
}

/// One `BatchGetDocuments` round trip for `paths`, within `timeout`.
pub(super) async fn get_documents(
    db: &FirestoreDb,
    paths: Vec<String>,
    mask: Option<gcloud_sdk::google::firestore::v1::DocumentMask>,
    timeout: Duration,
) -> Result<Vec<Option<Document>>, StoreError> {
    let request = BatchGetDocumentsRequest {
        database: db.get_database_path().clone(),
        documents: paths.clone(),
        mask,
        request_options: None,
        consistency_selector: None,
    };
    let mut request = gcloud_sdk::tonic::Request::new(request);
    request.set_timeout(timeout);
    let mut client = db.client().get();
    let read = async {
        let mut stream = client
            .batch_get_documents(request)
            .await
            .map_err(|status| classify(FirestoreError::from(status)))?
            .into_inner();
        let mut found: HashMap<String, Document> = HashMap::new();
        while let Some(response) = stream
            .message()
            .await
            .map_err(|status| classify(FirestoreError::from(status)))?
        {
            if let Some(batch_get_documents_response::Result::Found(document)) = response.result {
                found.insert(document.name.clone(), document);
            }
        }
        Ok::<_, StoreError>(found)
    };
    let mut found = super::round_trips::observed(
        super::round_trips::BATCH_GET,
        tokio::time::timeout(timeout, read),
        |read| match read {
            Ok(Ok(_)) => crate::metrics::series::OK,
            _ => crate::metrics::series::ERROR,
        },
    )
    .await
    .map_err(|_| StoreError::Unavailable("read timed out".into()))??;
    Ok(paths.iter().map(|path| found.remove(path)).collect())
}
