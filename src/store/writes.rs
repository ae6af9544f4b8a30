//! Building Firestore `Write`s by hand and committing them in one `Commit` RPC.
//!
//! A `Commit` without a transaction id is an atomic batched write in one round
//! trip: all writes land or none do. (The `BatchWrite` RPC, behind the crate's
//! batch writers, is not atomic, which is why it is not used here.)

use super::{Store, StoreError, classify};
use firestore::FirestoreDb;
use firestore::errors::FirestoreError;
use firestore::gcloud_sdk::google::firestore::v1::{
    self as v1, BatchWriteRequest, CommitRequest, CommitResponse, DocumentMask, Precondition, Write,
    document_transform::{FieldTransform, field_transform::TransformType},
    precondition::ConditionType,
    value::ValueType,
};
use firestore::gcloud_sdk::prost_types;
use serde::Serialize;
use std::time::Duration;

/// Writes `object` as a whole new document; fails with `ALREADY_EXISTS` if it exists.
pub fn create<T: Serialize>(path: String, object: &T) -> Result<Write, FirestoreError> {
    Ok(Write {
        current_document: Some(Precondition {
            condition_type: Some(ConditionType::Exists(false)),
        }),
        ..set(path, object)?
    })
}

/// Writes `object` as the whole document, whether or not it exists.
pub fn set<T: Serialize>(path: String, object: &T) -> Result<Write, FirestoreError> {
    Ok(Write {
        operation: Some(v1::write::Operation::Update(FirestoreDb::serialize_to_doc(
            path, object,
        )?)),
        update_mask: None,
        update_transforms: Vec::new(),
        current_document: None,
    })
}

/// Changes only the fields of `object` (creating the document if needed), then
/// applies `transforms` server-side.
pub fn merge<T: Serialize>(path: String, object: &T, transforms: Vec<FieldTransform>) -> Result<Write, FirestoreError> {
    merge_deleting(path, object, &[], transforms)
}

/// Like [`merge`], and removes the fields named in `delete`.
pub fn merge_deleting<T: Serialize>(
    path: String,
    object: &T,
    delete: &[&str],
    transforms: Vec<FieldTransform>,
) -> Result<Write, FirestoreError> {
    let document = FirestoreDb::serialize_to_doc(path, object)?;
    let field_paths = document
        .fields
        .keys()
        .cloned()
        .chain(delete.iter().map(|field| (*field).to_owned()))
        .collect();
    Ok(Write {
        operation: Some(v1::write::Operation::Update(document)),
        update_mask: Some(DocumentMask { field_paths }),
        update_transforms: transforms,
        current_document: None,
    })
}

/// Requires the document to exist (an update must not resurrect a deleted one).
pub fn if_exists(write: Write) -> Write {
    Write {
        current_document: Some(Precondition {
            condition_type: Some(ConditionType::Exists(true)),
        }),
        ..write
    }
}

/// Requires the document to be unchanged since `update_time`: the optimistic
/// check that lets exactly one instance take over an expired lease.
pub fn if_unchanged_since(write: Write, update_time: prost_types::Timestamp) -> Write {
    Write {
        current_document: Some(Precondition {
            condition_type: Some(ConditionType::UpdateTime(update_time)),
        }),
        ..write
    }
}

/// A Firestore timestamp value, for query filters.
pub fn timestamp_value(instant: firestore::FirestoreInstant) -> firestore::FirestoreValue {
    firestore::FirestoreValue::from(v1::Value {
        value_type: Some(ValueType::TimestampValue(firestore::FirestoreTimestamp(instant).into())),
    })
}

/// Adds the strings not yet present (array union): concurrent writers never
/// overwrite each other's elements, unlike a read-modify-write of the array.
pub fn array_union(field: &str, values: &[String]) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::AppendMissingElements(v1::ArrayValue {
            values: values.iter().map(|value| string_value(value)).collect(),
        })),
    }
}

/// Keeps the smaller of the stored and the given integer.
pub fn minimum(field: &str, value: i64) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::Minimum(integer_value(value))),
    }
}

/// Keeps the larger of the stored and the given integer.
pub fn maximum(field: &str, value: i64) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::Maximum(integer_value(value))),
    }
}

fn string_value(value: &str) -> v1::Value {
    v1::Value {
        value_type: Some(ValueType::StringValue(value.to_owned())),
    }
}

fn integer_value(value: i64) -> v1::Value {
    v1::Value {
        value_type: Some(ValueType::IntegerValue(value)),
    }
}

impl Store {
    /// One `Commit` RPC without a transaction: atomic, one round trip.
    pub(super) async fn commit(&self, writes: Vec<Write>) -> Result<CommitResponse, CommitError> {
        super::round_trips::count();
        let request = CommitRequest {
            database: self.db.get_database_path().clone(),
            writes,
            transaction: Vec::new(),
            request_options: None,
        };
        let mut request = tonic_request(request);
        request.set_timeout(self.options.request_timeout);
        let mut client = self.db.client().get();
        match tokio::time::timeout(self.options.request_timeout, client.commit(request)).await {
            Err(_) => Err(CommitError::Store(StoreError::Unavailable(
                "commit timed out; outcome unknown".into(),
            ))),
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(match status.code() {
                firestore::gcloud_sdk::tonic::Code::AlreadyExists => CommitError::AlreadyExists,
                firestore::gcloud_sdk::tonic::Code::FailedPrecondition => CommitError::FailedPrecondition,
                firestore::gcloud_sdk::tonic::Code::NotFound => CommitError::NotFound,
                _ => CommitError::Store(classify(FirestoreError::from(status))),
            }),
        }
    }
}

impl Store {
    /// Commits writes that settle records' states. A record that vanished in the
    /// meantime (its TTL expired) leaves nothing to settle, so that is not an error.
    pub(super) async fn commit_settling(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        match self.commit(writes).await {
            Ok(_) => Ok(()),
            Err(CommitError::FailedPrecondition | CommitError::NotFound) => {
                tracing::warn!("a record to settle no longer exists");
                Ok(())
            }
            Err(CommitError::AlreadyExists) => Err(StoreError::Unavailable("unexpected ALREADY_EXISTS".into())),
            Err(CommitError::Store(error)) => Err(error),
        }
    }
}

/// gRPC status codes as `BatchWriteResponse.status` carries them.
pub mod code {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 5;
    pub const ALREADY_EXISTS: i32 = 6;
}

/// One `BatchWrite` RPC: the writes are applied independently (not atomically),
/// each with its own status code, returned in order. `Err` when the request as a
/// whole failed or timed out (then any of the writes may have landed).
pub(super) async fn batch_write(
    db: &FirestoreDb,
    writes: Vec<Write>,
    timeout: Duration,
) -> Result<Vec<i32>, StoreError> {
    let count = writes.len();
    let request = BatchWriteRequest {
        database: db.get_database_path().clone(),
        writes,
        labels: Default::default(),
        request_options: None,
    };
    let mut client = db.client().get();
    match tokio::time::timeout(timeout, client.batch_write(request)).await {
        Err(_) => Err(StoreError::Unavailable("batch write timed out; outcome unknown".into())),
        Ok(Err(status)) => Err(classify(FirestoreError::from(status))),
        Ok(Ok(response)) => {
            let statuses = response.into_inner().status;
            // A missing status reads as OK, as the API documents for success.
            Ok((0..count)
                .map(|index| statuses.get(index).map_or(code::OK, |status| status.code))
                .collect())
        }
    }
}

fn tonic_request<T>(message: T) -> firestore::gcloud_sdk::tonic::Request<T> {
    firestore::gcloud_sdk::tonic::Request::new(message)
}

/// Why a commit did not land.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// A `create` met an existing document: nothing of the commit was applied.
    #[error("a document to create already exists")]
    AlreadyExists,
    /// Another precondition failed: nothing of the commit was applied.
    #[error("a write precondition failed")]
    FailedPrecondition,
    /// An update required a document that does not exist: nothing was applied.
    #[error("a document to update does not exist")]
    NotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}
