//! The legacy-answers migration in Firestore: answers an earlier bot saved in
//! `survey_responses` under random ids, moved onto their deterministic ids.
//!
//! - `survey_responses` is read a page at a time in document-id order, each
//!   document leniently (an old bot's document may hold anything).
//! - The groups (same `scenarioId`, `nodeId`, `lineUserId`) of a page's legacy
//!   documents are read with one query per 30 of the page's users
//!   (`lineUserId in [...]`, in id order): the automatic single-field index
//!   serves it, and a page costs a few queries rather than one per document.
//! - A group's writes go in a commit of their own: the deterministic answer
//!   (`create()`, so it lands once, whoever else writes it), the scenario
//!   marker (conditional on the version read) and the record of a user with
//!   doubtful tags. One `ALREADY_EXISTS` aborts only that group's commit.
//! - `migrations/legacy-answers` holds the lease (two runs at once are one
//!   run), the pass, its cursor and its counts; it is written once per page.
//! - `legacy_doubtful_users/{hash of the user}`: the users whose tags include
//!   a tag only a duplicate gave, those tags, and the pass that found them.

use super::docs::collections::{MIGRATIONS, SCENARIO_ANSWERS, SURVEY_RESPONSES, USERS};
use super::lease::{Stored, document_id};
use super::round_trips::Timed;
use super::writes::{CommitOutcome, Expect, array_union, delete, expecting, merge, set};
use super::{Store, StoreError, Version, classify};
use crate::ids::{LineUserId, NodeId, ScenarioId, answer_id, check_id, deterministic_id, scenario_marker_id};
use firestore::{FirestoreInstant, FirestoreQueryCursor};
use gcloud_sdk::google::firestore::v1::value::ValueType;
use gcloud_sdk::google::firestore::v1::{self as v1, Document, Write};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The migration's progress document, `migrations/legacy-answers`.
const PROGRESS: &str = "legacy-answers";

/// The users with doubtful tags (a collection of its own: a query cannot
/// name a subcollection by its path).
const DOUBTFUL: &str = "legacy_doubtful_users";

/// Users whose answers one query reads (Firestore's limit for `in`).
pub(crate) const USERS_PER_QUERY: usize = 30;

/// Answers read per query page.
const ANSWERS_PAGE: u32 = 500;

/// More answers than this for 30 users is not an old bot's data: the
/// migration stops and says so rather than hold them all.
const MAX_ANSWERS: usize = 30_000;

/// At most this many unreadable documents are named in the progress document
/// (all are counted).
pub(crate) const NAMED_UNREADABLE: usize = 100;

/// A `survey_responses` document as the migration met it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Met {
    /// Under the deterministic id of its fields: this service's answer.
    Deterministic,
    /// Under another id, with readable fields.
    Legacy(LegacyKey),
    /// A field missing or not an id (empty, with a NUL, over the limits);
    /// `scenario_user`: its `scenarioId` and `lineUserId` are ids, so the
    /// lookup's scenario-level query finds it and the guards rely on it.
    Unreadable { scenario_user: bool },
}

/// The group a legacy document belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LegacyKey {
    pub(crate) scenario: ScenarioId,
    pub(crate) node: NodeId,
    pub(crate) user: LineUserId,
}

impl LegacyKey {
    /// The deterministic answer id of the group.
    pub(crate) fn answer_id(&self) -> String {
        answer_id(&self.scenario, &self.node, &self.user)
    }

    fn marker_id(&self) -> String {
        scenario_marker_id(&self.scenario, &self.user)
    }
}

/// One legacy document of a group: what the decision needs, and its fields
/// as stored, copied whole onto the deterministic answer.
#[derive(Debug, Clone)]
pub(crate) struct LegacyDoc {
    pub(crate) id: String,
    /// `answeredAt` in epoch ms, or the document's create time without one.
    pub(crate) answered_ms: i64,
    /// The stored value, rendered so equal values compare equal.
    pub(crate) value: Option<String>,
    pub(crate) tags: Vec<String>,
    fields: HashMap<String, v1::Value>,
    create_time: Option<gcloud_sdk::prost_types::Timestamp>,
    /// The version read: the group's commit is conditional on it, so an
    /// erasure of the user's data in between makes the group read again.
    version: Version,
}

/// What a group's deterministic answer says, when it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExistingAnswer {
    /// Written by a migration: the pass that wrote it (its start, epoch ms).
    pub(crate) migrated_in_pass: Option<i64>,
}

/// The user's scenario marker as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkerSeen {
    Absent,
    Unanswered(Version),
    Answered,
}

/// What a group's commit must know about the documents it writes.
#[derive(Debug, Clone)]
pub(crate) struct GroupState {
    pub(crate) answer: Option<ExistingAnswer>,
    pub(crate) marker: MarkerSeen,
    pub(crate) user_tags: Vec<String>,
}

/// One group's writes.
pub(crate) struct GroupWrite<'a> {
    pub(crate) key: &'a LegacyKey,
    pub(crate) pass_ms: i64,
    /// The canonical document and the others' ids, when the deterministic
    /// answer is to be created.
    pub(crate) create: Option<(&'a LegacyDoc, &'a [String])>,
    /// The marker to create (`Absent`) or complete (`At`); `None`: it says answered.
    pub(crate) marker: Option<Expect>,
    /// Tags of the user only a duplicate gave, that the user has.
    pub(crate) doubtful_tags: &'a [String],
}

impl GroupWrite<'_> {
    pub(crate) fn is_empty(&self) -> bool {
        self.create.is_none() && self.marker.is_none() && self.doubtful_tags.is_empty()
    }
}

/// The counts of a pass, up to its cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MigrationCounts {
    pub(crate) legacy_documents: u64,
    pub(crate) groups: u64,
    pub(crate) duplicated_groups: u64,
    pub(crate) conflicting_groups: u64,
    pub(crate) unreadable: u64,
    /// Unreadable documents with a scenario and a user: the lookup still
    /// sees them, so it cannot go while there are any.
    #[serde(default)]
    pub(crate) unreadable_with_user: u64,
    pub(crate) migrated: u64,
    pub(crate) already_migrated: u64,
}

impl std::ops::AddAssign for MigrationCounts {
    fn add_assign(&mut self, other: Self) {
        self.legacy_documents += other.legacy_documents;
        self.groups += other.groups;
        self.duplicated_groups += other.duplicated_groups;
        self.conflicting_groups += other.conflicting_groups;
        self.unreadable += other.unreadable;
        self.unreadable_with_user += other.unreadable_with_user;
        self.migrated += other.migrated;
        self.already_migrated += other.already_migrated;
    }
}

/// Where a pass stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MigrationProgress {
    /// When the pass started (epoch ms): answers it created carry it.
    pub(crate) pass_ms: i64,
    /// The last document done; `None`: from the start.
    #[serde(default)]
    pub(crate) cursor: Option<String>,
    #[serde(default)]
    pub(crate) counts: MigrationCounts,
    /// The first [`NAMED_UNREADABLE`] unreadable documents.
    #[serde(default)]
    pub(crate) unreadable_ids: Vec<String>,
    #[serde(default)]
    pub(crate) finished: bool,
    #[serde(default)]
    pub(crate) finished_ms: Option<i64>,
}

impl MigrationProgress {
    /// Whether `LEGACY_ANSWER_LOOKUP` can be switched off: the migration
    /// finished, and no unreadable document names a scenario and a user.
    pub(crate) fn lookup_can_go(&self) -> bool {
        self.finished && self.counts.unreadable_with_user == 0
    }
}

/// `migrations/legacy-answers`: the lease and the progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressDoc {
    lease_owner: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    lease_until: FirestoreInstant,
    #[serde(flatten)]
    progress: MigrationProgress,
}

/// The migration's lease as held.
#[derive(Debug, Clone)]
pub(crate) struct HeldMigration {
    version: Version,
    pub(crate) progress: Option<MigrationProgress>,
}

/// A user with doubtful tags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DoubtfulUser {
    pub(crate) line_user_id: String,
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pass_ms: i64,
}

impl DoubtfulUser {
    /// A user a dry run found (no pass recorded it).
    pub(crate) fn new(line_user_id: String, tags: Vec<String>) -> Self {
        Self {
            line_user_id,
            tags,
            pass_ms: 0,
        }
    }
}

/// The fields a page reads of each document.
const KEY_FIELDS: [&str; 3] = ["scenarioId", "nodeId", "lineUserId"];

impl Store {
    /// One page of `survey_responses` in document-id order after `after`,
    /// each document classified.
    pub(crate) async fn responses_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<(String, Met)>, StoreError> {
        let documents = self
            .page_by_id(SURVEY_RESPONSES, &KEY_FIELDS, |_| None, after, limit)
            .await?;
        Ok(documents
            .iter()
            .map(|document| {
                let id = document_id(&document.name).to_owned();
                let met = match key_of(document) {
                    None => Met::Unreadable {
                        scenario_user: id_field(document, "scenarioId").is_some()
                            && id_field(document, "lineUserId").is_some(),
                    },
                    Some(key) if key.answer_id() == id => Met::Deterministic,
                    Some(key) => Met::Legacy(key),
                };
                (id, met)
            })
            .collect())
    }

    /// Every legacy answer of `users` (at most [`USERS_PER_QUERY`]), whole,
    /// with its group: every document readable as an answer whose id is not
    /// its deterministic one, in id order.
    pub(crate) async fn legacy_answers_of(&self, users: &[String]) -> Result<Vec<(LegacyKey, LegacyDoc)>, StoreError> {
        let mut found = Vec::new();
        let mut after: Option<String> = None;
        loop {
            super::round_trips::count();
            let mut query = self
                .scan_db
                .fluent()
                .select()
                .from(SURVEY_RESPONSES)
                .filter(|q| q.for_all([q.field("lineUserId").is_in(users.to_vec())]))
                .order(|o| o.fields([o.field("__name__").ascending()]))
                .limit(ANSWERS_PAGE);
            if let Some(last) = &after {
                query = query.start_at(FirestoreQueryCursor::AfterValue(vec![super::lease::reference_value(
                    self.document_path(SURVEY_RESPONSES, last),
                )]));
            }
            let page: Vec<Document> = query.query().timed(super::round_trips::QUERY).await.map_err(classify)?;
            let full = page.len() == ANSWERS_PAGE as usize;
            after = page.last().map(|document| document_id(&document.name).to_owned());
            for document in page {
                let Some(key) = key_of(&document) else { continue };
                if key.answer_id() != document_id(&document.name) {
                    found.push((key, legacy_doc(document)));
                }
            }
            if found.len() > MAX_ANSWERS {
                return Err(StoreError::Unavailable(format!(
                    "more than {MAX_ANSWERS} legacy answers of {} users; not an old bot's data",
                    users.len()
                )));
            }
            if !full {
                return Ok(found);
            }
        }
    }

    /// Each group's deterministic answer, the user's marker and tags, in one
    /// round trip for all of `keys`.
    pub(crate) async fn group_states(&self, keys: &[&LegacyKey]) -> Result<Vec<GroupState>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let wanted = |key: &LegacyKey| {
            let mut paths = vec![
                self.document_path(SURVEY_RESPONSES, &key.answer_id()),
                self.document_path(SCENARIO_ANSWERS, &key.marker_id()),
            ];
            // A user id an old bot made up may hold a `/`: no `users` document.
            if crate::ids::is_line_user_id(key.user.as_str()) {
                paths.push(self.document_path(USERS, key.user.as_str()));
            }
            paths
        };
        // Groups of one user share a marker and a record: each path once.
        let mut paths: Vec<String> = keys.iter().flat_map(|key| wanted(key)).collect();
        paths.sort();
        paths.dedup();
        let found: HashMap<String, Document> = paths
            .iter()
            .cloned()
            .zip(
                self.get_many_fields(
                    paths.clone(),
                    &["migratedFrom", "migrationPass", "lastAnswerId", "tags"],
                )
                .await?,
            )
            .filter_map(|(path, document)| Some((path, document?)))
            .collect();
        Ok(keys
            .iter()
            .map(|key| {
                let mut paths = wanted(key).into_iter();
                let mut next = || paths.next().and_then(|path| found.get(&path));
                let answer = next().map(|document| ExistingAnswer {
                    migrated_in_pass: document
                        .fields
                        .get("migratedFrom")
                        .and(document.fields.get("migrationPass"))
                        .and_then(integer),
                });
                let marker = match next() {
                    None => MarkerSeen::Absent,
                    Some(document) if document.fields.contains_key("lastAnswerId") => MarkerSeen::Answered,
                    Some(document) => MarkerSeen::Unanswered(Version::new(document.update_time.unwrap_or_default())),
                };
                let user_tags = next()
                    .and_then(|document| document.fields.get("tags").map(strings))
                    .unwrap_or_default();
                GroupState {
                    answer,
                    marker,
                    user_tags,
                }
            })
            .collect())
    }

    /// Commits one group's writes (see [`GroupWrite`]) on their own.
    pub(crate) async fn commit_group(&self, group: &GroupWrite<'_>) -> CommitOutcome {
        match self.group_writes(group) {
            Ok(writes) => self.commit(writes).await,
            Err(error) => CommitOutcome::Failed(error),
        }
    }

    fn group_writes(&self, group: &GroupWrite<'_>) -> Result<Vec<Write>, StoreError> {
        let answer_id = group.key.answer_id();
        let mut writes = Vec::new();
        let mut answered_at = None;
        if let Some((canonical, duplicates)) = group.create {
            let mut fields = canonical.fields.clone();
            let stamp = match fields.get("answeredAt") {
                Some(v1::Value {
                    value_type: Some(ValueType::TimestampValue(stamp)),
                }) => *stamp,
                _ => canonical.create_time.unwrap_or_default(),
            };
            answered_at = Some(stamp);
            // Unchanged since read (an erasure of the user's data strips
            // the legacy answers' values): a no-op write that says so.
            writes.push(expecting(
                super::writes::transform_only(self.document_path(SURVEY_RESPONSES, &canonical.id), Vec::new()),
                Expect::At(canonical.version),
            ));
            fields.insert("answeredAt".to_owned(), timestamp(stamp));
            fields.insert("migratedFrom".to_owned(), string(&canonical.id));
            fields.insert(
                "legacyDuplicates".to_owned(),
                v1::Value {
                    value_type: Some(ValueType::ArrayValue(v1::ArrayValue {
                        values: duplicates.iter().map(|id| string(id)).collect(),
                    })),
                },
            );
            fields.insert(
                "migrationPass".to_owned(),
                v1::Value {
                    value_type: Some(ValueType::IntegerValue(group.pass_ms)),
                },
            );
            writes.push(expecting(
                Write {
                    operation: Some(v1::write::Operation::Update(Document {
                        name: self.document_path(SURVEY_RESPONSES, &answer_id),
                        fields,
                        ..Document::default()
                    })),
                    update_mask: None,
                    update_transforms: Vec::new(),
                    current_document: None,
                },
                Expect::Absent,
            ));
        }
        if let Some(expect) = group.marker {
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Answered<'a> {
                scenario_id: &'a str,
                line_user_id: &'a str,
                last_answer_id: &'a str,
                #[serde(with = "firestore::serialize_as_timestamp")]
                last_answered_at: FirestoreInstant,
            }
            let when = match answered_at {
                Some(stamp) => firestore_instant(stamp),
                None => self.now(),
            };
            let marker = Answered {
                scenario_id: group.key.scenario.as_str(),
                line_user_id: group.key.user.as_str(),
                last_answer_id: &answer_id,
                last_answered_at: when,
            };
            writes.push(expecting(
                merge(
                    self.document_path(SCENARIO_ANSWERS, &group.key.marker_id()),
                    &marker,
                    Vec::new(),
                )?,
                expect,
            ));
        }
        if !group.doubtful_tags.is_empty() {
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Doubtful<'a> {
                line_user_id: &'a str,
                pass_ms: i64,
            }
            let record = Doubtful {
                line_user_id: group.key.user.as_str(),
                pass_ms: group.pass_ms,
            };
            writes.push(merge(
                self.document_path(DOUBTFUL, &doubtful_id(group.key.user.as_str())),
                &record,
                vec![array_union("tags", group.doubtful_tags)],
            )?);
        }
        Ok(writes)
    }

    /// The migration's progress, lease aside; `None` before the first run.
    pub(crate) async fn migration_progress(&self) -> Result<Option<MigrationProgress>, StoreError> {
        Ok(self
            .get_stored::<ProgressDoc>(MIGRATIONS, PROGRESS)
            .await?
            .map(|stored| stored.doc.progress))
    }

    /// Takes the migration's lease when it is free (never taken, run out, or
    /// ours): with the progress it holds; `Err` with when it runs out while
    /// another run holds it.
    pub(crate) async fn take_migration(&self) -> Result<Result<HeldMigration, FirestoreInstant>, StoreError> {
        let found = self.get_stored::<ProgressDoc>(MIGRATIONS, PROGRESS).await?;
        let now = self.now();
        let (expect, progress) = match found {
            None => (Expect::Absent, None),
            Some(held)
                if held.doc.lease_owner != self.options.instance_id
                    && held.doc.lease_until.as_millisecond() > now.as_millisecond() =>
            {
                return Ok(Err(held.doc.lease_until));
            }
            Some(held) => (Expect::At(held.version), Some(held.doc.progress)),
        };
        let until = super::later(now, self.options.lease);
        let kept = progress.clone().unwrap_or_default();
        match self.write_migration(expect, until, &kept).await? {
            Some(version) => Ok(Ok(HeldMigration { version, progress })),
            // Another run took it between the read and the write.
            None => Ok(Err(until)),
        }
    }

    /// Records `progress` and renews the lease: `false` when the lease is not
    /// ours any more (another run took over; nothing was written).
    pub(crate) async fn save_migration(
        &self,
        held: &mut HeldMigration,
        progress: &MigrationProgress,
    ) -> Result<bool, StoreError> {
        let until = super::later(self.now(), self.options.lease);
        match self.write_migration(Expect::At(held.version), until, progress).await? {
            Some(version) => {
                held.version = version;
                held.progress = Some(progress.clone());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Lets the lease go (it runs out now), so the next run need not wait.
    pub(crate) async fn release_migration(&self, held: &HeldMigration) -> Result<(), StoreError> {
        let progress = held.progress.clone().unwrap_or_default();
        self.write_migration(Expect::At(held.version), self.now(), &progress)
            .await
            .map(|_| ())
    }

    async fn write_migration(
        &self,
        expect: Expect,
        until: FirestoreInstant,
        progress: &MigrationProgress,
    ) -> Result<Option<Version>, StoreError> {
        let doc = ProgressDoc {
            lease_owner: self.options.instance_id.clone(),
            lease_until: until,
            progress: progress.clone(),
        };
        let write = expecting(set(self.document_path(MIGRATIONS, PROGRESS), &doc)?, expect);
        self.commit(vec![write]).await.first_version()
    }

    /// How many users the pass found with doubtful tags, and the first `up_to`.
    pub(crate) async fn doubtful_users(
        &self,
        pass_ms: i64,
        up_to: u32,
    ) -> Result<(u64, Vec<DoubtfulUser>), StoreError> {
        let filter = |q: firestore::select_filter_builder::FirestoreQueryFilterBuilder| {
            q.for_all([q.field("passMs").eq(pass_ms)])
        };
        let count = self.count_where(DOUBTFUL, filter, None).await?;
        let listed = self
            .page_by_id(DOUBTFUL, &["lineUserId", "tags", "passMs"], filter, None, up_to)
            .await?
            .into_iter()
            .map(|document| Stored::<DoubtfulUser>::decode(document).map(|stored| stored.doc))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((count, listed))
    }

    /// Which of `keys`' deterministic answers exist, in one round trip.
    pub(crate) async fn answers_exist(&self, keys: &[&LegacyKey]) -> Result<Vec<bool>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<String> = keys
            .iter()
            .map(|key| self.document_path(SURVEY_RESPONSES, &key.answer_id()))
            .collect();
        // Documents of one group share the path: each path asked once.
        let mut paths = wanted.clone();
        paths.sort();
        paths.dedup();
        let found: std::collections::HashSet<String> = paths
            .iter()
            .cloned()
            .zip(self.get_many_fields(paths.clone(), &["migratedFrom"]).await?)
            .filter_map(|(path, document)| document.map(|_| path))
            .collect();
        Ok(wanted.iter().map(|path| found.contains(path)).collect())
    }

    /// Deletes the `survey_responses` documents `ids` (at most 500), in one commit.
    pub(crate) async fn delete_responses(&self, ids: &[String]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let writes = ids
            .iter()
            .map(|id| delete(self.document_path(SURVEY_RESPONSES, id)))
            .collect();
        match self.commit(writes).await {
            CommitOutcome::Committed(_) | CommitOutcome::AlreadyExists | CommitOutcome::Changed => Ok(()),
            // Deletes are safe to repeat: the next run deletes what is left.
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }
}

/// A field of `document` that is an id.
fn id_field(document: &Document, name: &str) -> Option<String> {
    match document.fields.get(name) {
        Some(v1::Value {
            value_type: Some(ValueType::StringValue(text)),
        }) if check_id(text).is_ok() => Some(text.clone()),
        _ => None,
    }
}

/// The group key of a document, when its three fields are ids.
fn key_of(document: &Document) -> Option<LegacyKey> {
    let field = |name: &str| id_field(document, name);
    Some(LegacyKey {
        scenario: ScenarioId::parse(field("scenarioId")?).ok()?,
        node: NodeId::parse(field("nodeId")?).ok()?,
        user: LineUserId::parse(field("lineUserId")?).ok()?,
    })
}

fn legacy_doc(document: Document) -> LegacyDoc {
    let id = document_id(&document.name).to_owned();
    let answered_ms = match document.fields.get("answeredAt") {
        Some(v1::Value {
            value_type: Some(ValueType::TimestampValue(stamp)),
        }) => millis(stamp),
        _ => document.create_time.as_ref().map(millis).unwrap_or_default(),
    };
    LegacyDoc {
        id,
        answered_ms,
        value: document.fields.get("value").map(rendered),
        tags: document.fields.get("tags").map(strings).unwrap_or_default(),
        version: Version::new(document.update_time.unwrap_or_default()),
        fields: document.fields,
        create_time: document.create_time,
    }
}

/// A value rendered so that equal values render alike (a whole double as the
/// integer it is: an old bot may have stored 5 as 5.0).
fn rendered(value: &v1::Value) -> String {
    match &value.value_type {
        None | Some(ValueType::NullValue(_)) => "null".to_owned(),
        Some(ValueType::BooleanValue(flag)) => format!("b:{flag}"),
        Some(ValueType::IntegerValue(number)) => format!("n:{number}"),
        Some(ValueType::DoubleValue(number)) if number.fract() == 0.0 && number.abs() < 9.0e15 => {
            format!("n:{}", *number as i64)
        }
        Some(ValueType::DoubleValue(number)) => format!("n:{number}"),
        Some(ValueType::StringValue(text)) => format!("s:{text}"),
        Some(ValueType::TimestampValue(stamp)) => format!("t:{}.{}", stamp.seconds, stamp.nanos),
        Some(ValueType::ArrayValue(array)) => {
            let items: Vec<String> = array.values.iter().map(rendered).collect();
            format!("[{}]", items.join(","))
        }
        Some(ValueType::MapValue(map)) => {
            let mut entries: Vec<String> = map
                .fields
                .iter()
                .map(|(key, value)| format!("{key:?}:{}", rendered(value)))
                .collect();
            entries.sort();
            format!("{{{}}}", entries.join(","))
        }
        Some(other) => format!("{other:?}"),
    }
}

fn strings(value: &v1::Value) -> Vec<String> {
    match &value.value_type {
        Some(ValueType::ArrayValue(array)) => array
            .values
            .iter()
            .filter_map(|value| match &value.value_type {
                Some(ValueType::StringValue(text)) => Some(text.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn integer(value: &v1::Value) -> Option<i64> {
    match value.value_type {
        Some(ValueType::IntegerValue(number)) => Some(number),
        _ => None,
    }
}

fn string(text: &str) -> v1::Value {
    v1::Value {
        value_type: Some(ValueType::StringValue(text.to_owned())),
    }
}

fn timestamp(stamp: gcloud_sdk::prost_types::Timestamp) -> v1::Value {
    v1::Value {
        value_type: Some(ValueType::TimestampValue(stamp)),
    }
}

fn millis(stamp: &gcloud_sdk::prost_types::Timestamp) -> i64 {
    stamp.seconds.saturating_mul(1000) + i64::from(stamp.nanos / 1_000_000)
}

fn firestore_instant(stamp: gcloud_sdk::prost_types::Timestamp) -> FirestoreInstant {
    FirestoreInstant::from_millisecond(millis(&stamp)).unwrap_or(FirestoreInstant::UNIX_EPOCH)
}

/// The doubtful record's id: a hash, as an old bot's user id may hold a `/`.
fn doubtful_id(user: &str) -> String {
    deterministic_id(&["doubtful", user])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(value_type: ValueType) -> v1::Value {
        v1::Value {
            value_type: Some(value_type),
        }
    }

    #[test]
    fn equal_values_render_alike_and_different_ones_apart() {
        let same = [
            (value(ValueType::IntegerValue(5)), value(ValueType::DoubleValue(5.0))),
            (string("good"), string("good")),
        ];
        for (a, b) in same {
            assert_eq!(rendered(&a), rendered(&b));
        }
        let apart = [
            (string("5"), value(ValueType::IntegerValue(5))),
            (string("good"), string("bad")),
            (value(ValueType::DoubleValue(5.5)), value(ValueType::IntegerValue(5))),
            (value(ValueType::NullValue(0)), string("null")),
        ];
        for (a, b) in apart {
            assert_ne!(rendered(&a), rendered(&b));
        }
    }

    #[test]
    fn only_documents_with_three_ids_have_a_group() {
        let document = |fields: &[(&str, v1::Value)]| Document {
            fields: fields
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.clone()))
                .collect(),
            ..Document::default()
        };
        let readable = document(&[
            ("scenarioId", string("lunch")),
            ("nodeId", string("ask")),
            ("lineUserId", string("U1")),
        ]);
        assert!(key_of(&readable).is_some());
        let unreadable = [
            document(&[("scenarioId", string("lunch")), ("nodeId", string("ask"))]),
            document(&[
                ("scenarioId", string("lunch")),
                ("nodeId", string("a\0b")),
                ("lineUserId", string("U1")),
            ]),
            document(&[
                ("scenarioId", string(&"x".repeat(101))),
                ("nodeId", string("ask")),
                ("lineUserId", string("U1")),
            ]),
            document(&[
                ("scenarioId", string("lunch")),
                ("nodeId", value(ValueType::IntegerValue(3))),
                ("lineUserId", string("U1")),
            ]),
            document(&[
                ("scenarioId", string("")),
                ("nodeId", string("ask")),
                ("lineUserId", string("U1")),
            ]),
        ];
        for (index, document) in unreadable.iter().enumerate() {
            assert!(key_of(document).is_none(), "case {index}");
        }
    }
}
