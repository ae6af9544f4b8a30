//! Building Firestore `Write`s by hand and sending them.
//!
//! - `Commit` without a transaction id: an atomic batched write in one round trip,
//!   all of it lands or none does. Effects use it.
//! - `BatchWrite`: independent writes, one status each, not atomic. Claims and
//!   settles use it (see `claimer` and `settler`).
//!
//! Every state change of a stored record names the version its writer believes in
//! ([`Expect::At`]), so a late or superseded writer changes nothing.

use super::{Store, StoreError, Version, classify};
use firestore::FirestoreDb;
use firestore::errors::FirestoreError;
use gcloud_sdk::google::firestore::v1::{
    self as v1, BatchWriteRequest, CommitRequest, DocumentMask, Precondition, Write,
    document_transform::{FieldTransform, field_transform::TransformType},
    precondition::ConditionType,
    value::ValueType,
};
use gcloud_sdk::tonic::Code;
use serde::Serialize;
use std::time::Duration;

/// What a write requires of its document before it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// The document does not exist (a `create`).
    Absent,
    /// The document is exactly at this version (unchanged since it was read or written).
    At(Version),
}

/// Writes `object` as a whole new document; fails with `ALREADY_EXISTS` if it exists.
pub(super) fn create<T: Serialize>(path: String, object: &T) -> Result<Write, FirestoreError> {
    Ok(expecting(set(path, object)?, Expect::Absent))
}

/// Writes `object` as the whole document, whether or not it exists.
pub(super) fn set<T: Serialize>(path: String, object: &T) -> Result<Write, FirestoreError> {
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
pub(super) fn merge<T: Serialize>(
    path: String,
    object: &T,
    transforms: Vec<FieldTransform>,
) -> Result<Write, FirestoreError> {
    merge_deleting(path, object, &[], transforms)
}

/// Like [`merge`], and removes the fields named in `delete` (absent from
/// `object`, so listing them in the mask deletes them).
pub(super) fn merge_deleting<T: Serialize>(
    path: String,
    object: &T,
    delete: &[&str],
    transforms: Vec<FieldTransform>,
) -> Result<Write, FirestoreError> {
    let delete: Vec<String> = delete.iter().map(|field| (*field).to_owned()).collect();
    merge_paths(path, object, &delete, transforms)
}

/// Changes the fields of `object` named in `paths` (dotted paths into its maps)
/// and its other top-level fields, then applies `transforms`. Like [`merge`],
/// except that a map listed by its entries' paths keeps its other entries.
pub(super) fn merge_paths<T: Serialize>(
    path: String,
    object: &T,
    paths: &[String],
    transforms: Vec<FieldTransform>,
) -> Result<Write, FirestoreError> {
    let document = FirestoreDb::serialize_to_doc(path, object)?;
    let field_paths = document
        .fields
        .keys()
        .filter(|top| !paths.iter().any(|path| path.split('.').next() == Some(top.as_str())))
        .cloned()
        .chain(paths.iter().cloned())
        .collect();
    Ok(Write {
        operation: Some(v1::write::Operation::Update(document)),
        update_mask: Some(DocumentMask { field_paths }),
        update_transforms: transforms,
        current_document: None,
    })
}

/// Only `transforms`, on a document that may not exist yet (a merge of no field).
pub(super) fn transform_only(path: String, transforms: Vec<FieldTransform>) -> Write {
    Write {
        operation: Some(v1::write::Operation::Update(v1::Document {
            name: path,
            ..v1::Document::default()
        })),
        update_mask: Some(DocumentMask {
            field_paths: Vec::new(),
        }),
        update_transforms: transforms,
        current_document: None,
    }
}

/// Deletes a document, if it is where its writer believes it is.
pub(super) fn delete(path: String) -> Write {
    Write {
        operation: Some(v1::write::Operation::Delete(path)),
        update_mask: None,
        update_transforms: Vec::new(),
        current_document: None,
    }
}

/// Adds the precondition `expect` to `write`.
pub(super) fn expecting(write: Write, expect: Expect) -> Write {
    let condition_type = match expect {
        Expect::Absent => ConditionType::Exists(false),
        Expect::At(version) => ConditionType::UpdateTime(version.timestamp()),
    };
    Write {
        current_document: Some(Precondition {
            condition_type: Some(condition_type),
        }),
        ..write
    }
}

/// Makes `write` apply only to a document that exists, at whatever version
/// (an update that must not create it).
pub(super) fn only_if_present(write: Write) -> Write {
    Write {
        current_document: Some(Precondition {
            condition_type: Some(ConditionType::Exists(true)),
        }),
        ..write
    }
}

/// The document a write changes.
pub(super) fn document_name(write: &Write) -> &str {
    match &write.operation {
        Some(v1::write::Operation::Update(document)) => &document.name,
        Some(v1::write::Operation::Delete(name)) => name,
        _ => "",
    }
}

/// Adds the strings not yet present (array union): concurrent writers never
/// overwrite each other's elements, unlike a read-modify-write of the array.
pub(super) fn array_union(field: &str, values: &[String]) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::AppendMissingElements(v1::ArrayValue {
            values: values.iter().map(|value| string_value(value)).collect(),
        })),
    }
}

/// Removes every occurrence of the strings (array remove).
pub(super) fn array_remove(field: &str, values: &[String]) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::RemoveAllFromArray(v1::ArrayValue {
            values: values.iter().map(|value| string_value(value)).collect(),
        })),
    }
}

/// Adds `by` to the stored integer (0 when absent).
pub(super) fn increment_by(field: &str, by: i64) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::Increment(integer_value(by))),
    }
}

/// Keeps the smaller of the stored and the given integer.
pub(super) fn minimum(field: &str, value: i64) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::Minimum(integer_value(value))),
    }
}

/// Keeps the larger of the stored and the given integer.
pub(super) fn maximum(field: &str, value: i64) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::Maximum(integer_value(value))),
    }
}

/// Sets the field to the commit's time on the server: a write carrying it
/// always changes the document (and its version), even when nothing else in
/// it does.
pub(super) fn commit_time(field: &str) -> FieldTransform {
    FieldTransform {
        field_path: field.to_owned(),
        transform_type: Some(TransformType::SetToServerValue(
            v1::document_transform::field_transform::ServerValue::RequestTime as i32,
        )),
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

/// How a `Commit` ended. Nothing partial: either every write landed or none did.
#[derive(Debug)]
pub(crate) enum CommitOutcome {
    /// Landed: the version of each written document, in the order of the writes.
    Committed(Vec<Option<Version>>),
    /// A `create` met an existing document: nothing was applied.
    AlreadyExists,
    /// A document was not at the version (or in the existence) its writer expected:
    /// nothing was applied.
    Changed,
    /// No answer in time, or the connection broke: it may or may not have landed.
    /// Read what happened before acting on it.
    Unknown(StoreError),
    /// Refused: nothing was applied.
    Failed(StoreError),
}

impl CommitOutcome {
    /// For a conditional change of one record (its first write): `Some(version)`
    /// when it landed, `None` when the record had moved on, an error when the
    /// outcome is unknown or it was refused.
    pub(super) fn first_version(self) -> Result<Option<Version>, StoreError> {
        match self {
            CommitOutcome::Committed(versions) => Ok(versions.into_iter().next().flatten()),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(None),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }
}

/// gRPC codes after which a write may have been applied although no answer came.
fn outcome_unknown(code: Code) -> bool {
    matches!(
        code,
        Code::DeadlineExceeded | Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal
    )
}

impl Store {
    /// One `Commit` RPC without a transaction: atomic, one round trip.
    pub(super) async fn commit(&self, writes: Vec<Write>) -> CommitOutcome {
        super::round_trips::count();
        commit_writes(&self.db, writes, self.options.request_timeout).await
    }
}

/// One `Commit` RPC of `writes`, within `timeout`.
pub(super) async fn commit_writes(db: &FirestoreDb, writes: Vec<Write>, timeout: Duration) -> CommitOutcome {
    let request = CommitRequest {
        database: db.get_database_path().clone(),
        writes,
        transaction: Vec::new(),
        request_options: None,
    };
    let mut request = gcloud_sdk::tonic::Request::new(request);
    request.set_timeout(timeout);
    let mut client = db.client().get();
    let answer = super::round_trips::observed(
        super::round_trips::COMMIT,
        tokio::time::timeout(timeout, client.commit(request)),
        |answer| match answer {
            Ok(Ok(_)) => crate::metrics::series::OK,
            Ok(Err(status))
                if matches!(
                    status.code(),
                    Code::AlreadyExists | Code::FailedPrecondition | Code::NotFound
                ) =>
            {
                crate::metrics::series::CONFLICT
            }
            _ => crate::metrics::series::ERROR,
        },
    )
    .await;
    match answer {
        Err(_) => CommitOutcome::Unknown(StoreError::Unavailable("commit timed out; outcome unknown".into())),
        Ok(Ok(response)) => CommitOutcome::Committed(
            response
                .into_inner()
                .write_results
                .into_iter()
                .map(|result| result.update_time.map(Version::new))
                .collect(),
        ),
        Ok(Err(status)) => match status.code() {
            Code::AlreadyExists => CommitOutcome::AlreadyExists,
            Code::FailedPrecondition | Code::NotFound => CommitOutcome::Changed,
            code if outcome_unknown(code) => CommitOutcome::Unknown(StoreError::Unavailable(format!(
                "commit failed ({code:?}); outcome unknown"
            ))),
            _ => CommitOutcome::Failed(classify(FirestoreError::from(status))),
        },
    }
}

/// Whether a write's status (as `BatchWrite` reports it) is worth retrying.
pub(super) fn transient(code: i32) -> bool {
    outcome_unknown(Code::from(code)) || matches!(Code::from(code), Code::Aborted | Code::ResourceExhausted)
}

/// gRPC status codes as `BatchWriteResponse.status` carries them.
pub(super) mod code {
    pub(crate) const OK: i32 = 0;
    pub(crate) const NOT_FOUND: i32 = 5;
    pub(crate) const ALREADY_EXISTS: i32 = 6;
    pub(crate) const FAILED_PRECONDITION: i32 = 9;
}

/// The outcome of one write of a `BatchWrite`.
#[derive(Debug, Clone, Copy)]
pub(super) struct WriteStatus {
    pub(super) code: i32,
    pub(super) version: Option<Version>,
}

/// One `BatchWrite` RPC: the writes are applied independently (not atomically),
/// each with its own status, returned in order. `Err` when the request as a
/// whole failed or timed out (then any of the writes may have landed).
pub(super) async fn batch_write(
    db: &FirestoreDb,
    writes: Vec<Write>,
    timeout: Duration,
) -> Result<Vec<WriteStatus>, StoreError> {
    let count = writes.len();
    let request = BatchWriteRequest {
        database: db.get_database_path().clone(),
        writes,
        labels: Default::default(),
        request_options: None,
    };
    let mut request = gcloud_sdk::tonic::Request::new(request);
    request.set_timeout(timeout);
    let mut client = db.client().get();
    let answer = super::round_trips::observed(
        super::round_trips::BATCH_WRITE,
        tokio::time::timeout(timeout, client.batch_write(request)),
        |answer| match answer {
            Ok(Ok(_)) => crate::metrics::series::OK,
            _ => crate::metrics::series::ERROR,
        },
    )
    .await;
    match answer {
        Err(_) => Err(StoreError::Unavailable("batch write timed out; outcome unknown".into())),
        Ok(Err(status)) => Err(classify(FirestoreError::from(status))),
        Ok(Ok(response)) => {
            let response = response.into_inner();
            // A missing status reads as OK, as the API documents for success.
            Ok((0..count)
                .map(|index| WriteStatus {
                    code: response.status.get(index).map_or(code::OK, |status| status.code),
                    version: response
                        .write_results
                        .get(index)
                        .and_then(|result| result.update_time)
                        .map(Version::new),
                })
                .collect())
        }
    }
}
