//! Friend-add sources: who came through which link, recorded once.
//!
//! - `user_sources/{id}` (id: the deterministic id of user and source) is
//!   created by the first verified login through the source, with the
//!   source's tags and `users.firstSource` (only if absent) in the same
//!   commit, conditional on the user's record as read. Its standing moves
//!   from `waiting` to `friend` once, by the commit that also queues the
//!   source's scenario (an inbox record of its own, so a worker starts it
//!   like any event, once).
//! - `login_states/{nonce}` is created by the commit that records a login:
//!   a state is used once, and a login is counted once.
//! - `source_counters/{source}~{day}~{shard}` counts logins, new friends and
//!   unfollows by increments inside those once-only commits, spread over
//!   shards by the user's hash (no hot document).

use super::docs::collections::{LOGIN_STATES, SOURCE_COUNTERS, USER_SOURCES, USERS};
use super::inbox::{InboxKey, NewEvent};
use super::lease::Stored;
use super::round_trips::Timed;
use super::writes::{CommitOutcome, Expect, array_union, create, expecting, increment_by, merge};
use super::{Store, StoreError, Version, later};
use crate::ids::deterministic_id;
use crate::values::SourceStanding;
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Document;
use gcloud_sdk::google::firestore::v1::document_transform::FieldTransform;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Shards per source and day: a source takes far fewer logins a second than
/// a survey takes answers, and each shard takes about one write a second.
const SHARDS: u32 = 16;
/// A user's sources read at a follow: more than any account has links.
const MAX_SOURCES_PER_USER: u32 = 100;
/// A used state is kept past its own lifetime, then removed by the TTL policy.
const LOGIN_STATE_RETENTION: Duration = Duration::from_secs(2 * 24 * 60 * 60);

/// Every field of a `user_sources` record (a query's projection).
const USER_SOURCE_FIELDS: [&str; 10] = [
    "lineUserId",
    "source",
    "standing",
    "recordedAt",
    "linkOpenedMs",
    "friendAt",
    "unfollowedAt",
    "startEvent",
    "deferredTo",
    "takenBy",
];

/// `takenBy` of a source whose start was queued as a push.
pub(crate) const TAKEN_BY_QUEUE: &str = "queue";

/// `user_sources/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserSourceDoc {
    pub(crate) line_user_id: String,
    pub(crate) source: String,
    pub(crate) standing: SourceStanding,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) recorded_at: FirestoreInstant,
    /// When the link was opened (ms): a follow after it is the link's.
    pub(crate) link_opened_ms: i64,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) friend_at: Option<FirestoreInstant>,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) unfollowed_at: Option<FirestoreInstant>,
    /// The inbox record of the source's scenario start, once queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) start_event: Option<String>,
    /// The login came while the follow of this time (ms) waited for it: that
    /// follow starts the scenario (by reply), or queues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) deferred_to: Option<i64>,
    /// Who starts the scenario: a follow's webhook event id (by its reply),
    /// or [`TAKEN_BY_QUEUE`] (a queued push, final). A follow that cannot
    /// reply after all (superseded) hands its own over to a push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) taken_by: Option<String>,
}

/// What a login's decision needs: the user's record and this source's.
pub(crate) struct SourceRead {
    /// The user's record version (`None`: no record yet).
    user_version: Option<Version>,
    /// While the user follows: when they followed (ms).
    pub(crate) following_since_ms: Option<i64>,
    pub(crate) has_first_source: bool,
    pub(crate) recorded: Option<Stored<UserSourceDoc>>,
    /// The newest follow (its time, ms) that began waiting for logins.
    pub(crate) wait_opened_ms: Option<i64>,
    /// The newest follow that stopped waiting for logins.
    pub(crate) wait_closed_ms: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct UserFacts {
    #[serde(default)]
    following: Option<bool>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    followed_at: Option<FirestoreInstant>,
    #[serde(default)]
    first_source: Option<String>,
    #[serde(default)]
    source_wait_opened_ms: Option<i64>,
    #[serde(default)]
    source_wait_closed_ms: Option<i64>,
}

/// A source's scenario start, as an inbox record to create.
pub(crate) struct QueuedStart<'a> {
    pub(crate) key: &'a InboxKey,
    pub(crate) event: NewEvent<'a>,
}

/// A verified login to record.
pub(crate) struct Visit<'a> {
    pub(crate) nonce: &'a str,
    pub(crate) source: &'a str,
    pub(crate) user: &'a str,
    pub(crate) tags: &'a [String],
    pub(crate) link_opened_ms: i64,
    /// The day it counts on (`YYYY-MM-DD`).
    pub(crate) day: &'a str,
    /// A first visit's standing (`None`: a later visit, a login only).
    pub(crate) standing: Option<SourceStanding>,
    pub(crate) new_friend: bool,
    pub(crate) start: Option<QueuedStart<'a>>,
    /// The start is left to the follow of this time, which waits for it.
    pub(crate) deferred_to: Option<i64>,
}

/// How recording a login ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VisitOutcome {
    Recorded,
    /// The state was used before: nothing was written.
    StateUsed,
    /// Something changed since the read (the user's record, another login of
    /// the same user and source): read and decide again.
    Changed,
    /// No answer, and the state's record not there when read: the commit may
    /// still land. Decide again; a "used" state next time may be this one.
    Unsure,
}

/// A follow's change to one of the user's waiting sources.
pub(crate) struct Befriend<'a> {
    pub(crate) recorded: &'a Stored<UserSourceDoc>,
    /// The follow came after the link was opened: a new friend of the
    /// source (otherwise a late follow of one who was a friend before).
    pub(crate) new_friend: bool,
    pub(crate) followed_ms: i64,
    pub(crate) day: &'a str,
    pub(crate) start: Option<QueuedStart<'a>>,
    /// The follow's webhook event id, when it starts the scenario itself.
    pub(crate) taken_by: Option<&'a str>,
}

/// Logins, new friends and unfollows of one source, over a range of days.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SourceCounts {
    pub(crate) logins: i64,
    pub(crate) new_friends: i64,
    pub(crate) unfollows: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CounterDoc {
    #[serde(default)]
    logins: i64,
    #[serde(default)]
    new_friends: i64,
    #[serde(default)]
    unfollows: i64,
}

/// One of a source's recent users, for the console.
#[derive(Debug, Clone)]
pub(crate) struct SourceUser {
    pub(crate) line_user_id: String,
    pub(crate) standing: SourceStanding,
    pub(crate) recorded_at_ms: i64,
}

impl Store {
    /// The user's record and their record for `source`, in one round trip.
    pub(crate) async fn source_read(&self, user: &str, source: &str) -> Result<SourceRead, StoreError> {
        let mut found = self
            .get_many(vec![
                self.document_path(USERS, user),
                self.document_path(USER_SOURCES, &user_source_id(user, source)),
            ])
            .await?
            .into_iter();
        let user_doc = found.next().flatten().map(Stored::<UserFacts>::decode).transpose()?;
        let recorded = found.next().flatten().map(Stored::decode).transpose()?;
        let (user_version, facts) = match user_doc {
            Some(stored) => (Some(stored.version), stored.doc),
            None => (None, UserFacts::default()),
        };
        Ok(SourceRead {
            user_version,
            following_since_ms: following_since(&facts),
            has_first_source: facts.first_source.is_some(),
            recorded,
            wait_opened_ms: facts.source_wait_opened_ms,
            wait_closed_ms: facts.source_wait_closed_ms,
        })
    }

    /// Records a verified login as decided from `read`: the state's use and the
    /// login's count always; a first visit's record, tags and first source;
    /// the scenario's start when queued. One atomic commit.
    pub(crate) async fn record_visit(&self, read: &SourceRead, visit: Visit<'_>) -> Result<VisitOutcome, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct StateDoc<'a> {
            source: &'a str,
            line_user_id: &'a str,
            #[serde(with = "firestore::serialize_as_timestamp")]
            used_at: FirestoreInstant,
            #[serde(with = "firestore::serialize_as_timestamp")]
            expire_at: FirestoreInstant,
        }
        let now = self.now();
        let mut writes = vec![create(
            self.document_path(LOGIN_STATES, visit.nonce),
            &StateDoc {
                source: visit.source,
                line_user_id: visit.user,
                used_at: now,
                expire_at: later(now, LOGIN_STATE_RETENTION),
            },
        )?];
        let mut counts = vec![increment_by("logins", 1)];
        if visit.new_friend {
            counts.push(increment_by("newFriends", 1));
        }
        writes.push(self.source_counter_write(visit.source, visit.day, visit.user, counts)?);
        if let Some(standing) = visit.standing {
            let start_event = visit.start.as_ref().map(|start| start.key.as_str().to_owned());
            let doc = UserSourceDoc {
                line_user_id: visit.user.to_owned(),
                source: visit.source.to_owned(),
                standing,
                recorded_at: now,
                link_opened_ms: visit.link_opened_ms,
                friend_at: (standing == SourceStanding::Friend)
                    .then(|| {
                        read.following_since_ms
                            .and_then(|ms| FirestoreInstant::from_millisecond(ms).ok())
                    })
                    .flatten(),
                unfollowed_at: None,
                start_event,
                deferred_to: visit.deferred_to,
                taken_by: visit.start.as_ref().map(|_| TAKEN_BY_QUEUE.to_owned()),
            };
            writes.push(create(
                self.document_path(USER_SOURCES, &user_source_id(visit.user, visit.source)),
                &doc,
            )?);
            writes.push(self.user_source_write(read, visit.user, visit.source, visit.tags)?);
            if let Some(start) = visit.start {
                writes.push(self.inbox_create_write(start.key, start.event)?);
            }
        }
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(VisitOutcome::Recorded),
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => {
                // The state's record, or the source's (another login of the
                // same user racing this one), or the user's moved: which one
                // decides whether this state may try again.
                if self.login_state_used(visit.nonce).await? {
                    Ok(VisitOutcome::StateUsed)
                } else {
                    Ok(VisitOutcome::Changed)
                }
            }
            CommitOutcome::Unknown(error) => {
                // Landed or not: the state's record says.
                tracing::warn!(error = %error, "a login's commit outcome is unknown; reading what happened");
                if self.login_state_used(visit.nonce).await? {
                    Ok(VisitOutcome::Recorded)
                } else {
                    Ok(VisitOutcome::Unsure)
                }
            }
            CommitOutcome::Failed(error) => Err(error),
        }
    }

    async fn login_state_used(&self, nonce: &str) -> Result<bool, StoreError> {
        let found = self.get_many(vec![self.document_path(LOGIN_STATES, nonce)]).await?;
        Ok(found.into_iter().next().flatten().is_some())
    }

    /// The user's tags and sources, and their first source if they have none;
    /// conditional on the record as read (a follow recorded meanwhile makes
    /// the login decide again).
    fn user_source_write(
        &self,
        read: &SourceRead,
        user: &str,
        source: &str,
        tags: &[String],
    ) -> Result<gcloud_sdk::google::firestore::v1::Write, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields<'a> {
            line_user_id: &'a str,
            /// Only when the user has none: the first source stays first.
            #[serde(skip_serializing_if = "Option::is_none")]
            first_source: Option<&'a str>,
        }
        let mut transforms = vec![array_union("sources", &[source.to_owned()])];
        if !tags.is_empty() {
            transforms.push(array_union("tags", tags));
        }
        transforms.push(super::writes::commit_time("changedAt"));
        let write = merge(
            self.document_path(USERS, user),
            &Fields {
                line_user_id: user,
                first_source: (!read.has_first_source).then_some(source),
            },
            transforms,
        )?;
        Ok(expecting(write, read.user_version.map_or(Expect::Absent, Expect::At)))
    }

    /// The user's sources still waiting for their follow.
    pub(crate) async fn waiting_sources(&self, user: &str) -> Result<Vec<Stored<UserSourceDoc>>, StoreError> {
        self.user_sources_where(user, "waiting").await
    }

    /// The user's sources they became a friend through.
    pub(crate) async fn befriended_sources(&self, user: &str) -> Result<Vec<Stored<UserSourceDoc>>, StoreError> {
        self.user_sources_where(user, "friend").await
    }

    /// The user's sources they follow through (a new friend's or one who was
    /// a friend before), in id order.
    pub(crate) async fn followed_sources(&self, user: &str) -> Result<Vec<Stored<UserSourceDoc>>, StoreError> {
        let documents = self
            .page_by_id(
                USER_SOURCES,
                &USER_SOURCE_FIELDS,
                |q| q.for_all([q.field("lineUserId").eq(user)]),
                None,
                MAX_SOURCES_PER_USER,
            )
            .await?;
        let all: Vec<Stored<UserSourceDoc>> = documents.into_iter().map(Stored::decode).collect::<Result<_, _>>()?;
        Ok(all
            .into_iter()
            .filter(|recorded| recorded.doc.standing != SourceStanding::Waiting)
            .collect())
    }

    async fn user_sources_where(&self, user: &str, standing: &str) -> Result<Vec<Stored<UserSourceDoc>>, StoreError> {
        let documents = self
            .page_by_id(
                USER_SOURCES,
                &USER_SOURCE_FIELDS,
                |q| q.for_all([q.field("lineUserId").eq(user), q.field("standing").eq(standing)]),
                None,
                MAX_SOURCES_PER_USER,
            )
            .await?;
        documents.into_iter().map(Stored::decode).collect()
    }

    /// A follow makes a waiting source's user its new friend and queues its
    /// scenario, conditional on the record as read. `false` when it moved on
    /// (another follow's delivery, on another instance, got there first).
    pub(crate) async fn befriend(&self, change: Befriend<'_>) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields<'a> {
            standing: SourceStanding,
            #[serde(with = "firestore::serialize_as_timestamp")]
            friend_at: FirestoreInstant,
            #[serde(skip_serializing_if = "Option::is_none")]
            start_event: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            taken_by: Option<&'a str>,
        }
        let doc = &change.recorded.doc;
        let friend_at = FirestoreInstant::from_millisecond(change.followed_ms).unwrap_or_else(|_| self.now());
        let fields = Fields {
            standing: if change.new_friend {
                SourceStanding::Friend
            } else {
                SourceStanding::WasFriend
            },
            friend_at,
            start_event: change.start.as_ref().map(|start| start.key.as_str()),
            taken_by: change
                .taken_by
                .or_else(|| change.start.as_ref().map(|_| TAKEN_BY_QUEUE)),
        };
        let mut writes = vec![expecting(
            merge(
                self.document_path(USER_SOURCES, &change.recorded.id),
                &fields,
                Vec::new(),
            )?,
            Expect::At(change.recorded.version),
        )];
        if change.new_friend {
            writes.push(self.source_counter_write(
                &doc.source,
                change.day,
                &doc.line_user_id,
                vec![increment_by("newFriends", 1)],
            )?);
        }
        if let Some(start) = change.start {
            writes.push(self.inbox_create_write(start.key, start.event)?);
        }
        self.commit(writes).await.first_version().map(|landed| landed.is_some())
    }

    /// Begins the wait of the follow at `followed_ms` for logins: a login
    /// leaves its start to a follow only when the user's record says that
    /// very follow waits (so a follow that never waits strands nothing). A
    /// login that read the record before this write commits conditional on
    /// it, so it reads again.
    pub(crate) async fn open_source_wait(&self, user: &str, followed_ms: i64) -> Result<(), StoreError> {
        self.mark_source_wait(user, "sourceWaitOpenedMs", followed_ms).await
    }

    /// Ends the wait of the follow at `followed_ms` for logins: a login that
    /// read the user's record before this write commits conditional on it, so
    /// it reads again and queues its start itself; one that committed before
    /// is found by the follow's next read.
    pub(crate) async fn close_source_wait(&self, user: &str, followed_ms: i64) -> Result<(), StoreError> {
        self.mark_source_wait(user, "sourceWaitClosedMs", followed_ms).await
    }

    async fn mark_source_wait(&self, user: &str, field: &str, followed_ms: i64) -> Result<(), StoreError> {
        let write = super::writes::transform_only(
            self.document_path(USERS, user),
            vec![
                super::writes::maximum(field, followed_ms),
                // Moves the record's version even when a newer follow got
                // further already.
                super::writes::commit_time("changedAt"),
            ],
        );
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) => Ok(()),
            // A maximum is idempotent: a retry of an unknown outcome is safe,
            // and the follow's attempt is retried as a whole.
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
            CommitOutcome::AlreadyExists | CommitOutcome::Changed => Err(StoreError::Unavailable(
                "the user's record refused a precondition-free write".into(),
            )),
        }
    }

    /// Since when the user follows (ms; `Some(0)`: with no follow time), or
    /// `None` while they do not.
    pub(crate) async fn following_since(&self, user: &str) -> Result<Option<i64>, StoreError> {
        let found = self.get_many(vec![self.document_path(USERS, user)]).await?;
        let facts = found
            .into_iter()
            .next()
            .flatten()
            .map(Stored::<UserFacts>::decode)
            .transpose()?
            .map(|stored| stored.doc)
            .unwrap_or_default();
        Ok(following_since(&facts))
    }

    /// Gives a source a follow took back, for the user's next follow to
    /// take (`deferredTo` that follow's time, `takenBy` removed), conditional
    /// on the record as read. `false` when it moved on.
    pub(crate) async fn hand_back_source(
        &self,
        recorded: &Stored<UserSourceDoc>,
        followed_ms: i64,
    ) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields {
            deferred_to: i64,
        }
        let write = expecting(
            super::writes::merge_deleting(
                self.document_path(USER_SOURCES, &recorded.id),
                &Fields {
                    deferred_to: followed_ms,
                },
                &["takenBy"],
                Vec::new(),
            )?,
            Expect::At(recorded.version),
        );
        self.commit(vec![write])
            .await
            .first_version()
            .map(|landed| landed.is_some())
    }

    /// Gives a friend's source to whoever starts its scenario: the follow
    /// `taken_by` (its reply), or a queued push (`start`), conditional on the
    /// record as read. `false` when it moved on.
    pub(crate) async fn take_source(
        &self,
        recorded: &Stored<UserSourceDoc>,
        taken_by: &str,
        start: Option<QueuedStart<'_>>,
    ) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields<'a> {
            taken_by: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            start_event: Option<&'a str>,
        }
        let fields = Fields {
            taken_by,
            start_event: start.as_ref().map(|start| start.key.as_str()),
        };
        let mut writes = vec![expecting(
            merge(self.document_path(USER_SOURCES, &recorded.id), &fields, Vec::new())?,
            Expect::At(recorded.version),
        )];
        if let Some(start) = start {
            writes.push(self.inbox_create_write(start.key, start.event)?);
        }
        self.commit(writes).await.first_version().map(|landed| landed.is_some())
    }

    /// The newest unfollow of a friend a source brought: counted once per
    /// user and source, conditional on the record as read.
    pub(crate) async fn count_unfollow(
        &self,
        recorded: &Stored<UserSourceDoc>,
        unfollowed_ms: i64,
        day: &str,
    ) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Fields {
            #[serde(with = "firestore::serialize_as_timestamp")]
            unfollowed_at: FirestoreInstant,
        }
        let unfollowed_at = FirestoreInstant::from_millisecond(unfollowed_ms).unwrap_or_else(|_| self.now());
        let doc = &recorded.doc;
        let writes = vec![
            expecting(
                merge(
                    self.document_path(USER_SOURCES, &recorded.id),
                    &Fields { unfollowed_at },
                    Vec::new(),
                )?,
                Expect::At(recorded.version),
            ),
            self.source_counter_write(&doc.source, day, &doc.line_user_id, vec![increment_by("unfollows", 1)])?,
        ];
        self.commit(writes).await.first_version().map(|landed| landed.is_some())
    }

    fn source_counter_write(
        &self,
        source: &str,
        day: &str,
        user: &str,
        increments: Vec<FieldTransform>,
    ) -> Result<gcloud_sdk::google::firestore::v1::Write, StoreError> {
        #[derive(Serialize)]
        struct Fields<'a> {
            source: &'a str,
            day: &'a str,
        }
        let id = format!("{source}~{day}~{:03}", shard_of(user));
        Ok(merge(
            self.document_path(SOURCE_COUNTERS, &id),
            &Fields { source, day },
            increments,
        )?)
    }

    /// The counts of `source` from day `from` to day `to` (inclusive,
    /// `YYYY-MM-DD`; absent: unbounded): one query over a range of document
    /// names (`~` sorts after every id character, digit and `-`).
    pub(crate) async fn source_counts(
        &self,
        source: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<SourceCounts, StoreError> {
        let first = self.document_path(SOURCE_COUNTERS, &format!("{source}~{}", from.unwrap_or("")));
        let last = self.document_path(
            SOURCE_COUNTERS,
            &format!("{source}~{}~", to.map(|to| format!("{to}~")).unwrap_or_default()),
        );
        let mut counts = SourceCounts::default();
        self.each_in_name_range(
            SOURCE_COUNTERS,
            &["logins", "newFriends", "unfollows"],
            (first, last),
            |document: &Document| {
                let doc: CounterDoc = firestore::FirestoreDb::deserialize_doc_to(document)?;
                counts.logins += doc.logins;
                counts.new_friends += doc.new_friends;
                counts.unfollows += doc.unfollows;
                Ok(())
            },
        )
        .await?;
        Ok(counts)
    }

    /// The latest `limit` users recorded through `source`, newest first. Needs
    /// the composite index (source, recordedAt descending) in
    /// `firestore.indexes.json`.
    pub(crate) async fn source_users(&self, source: &str, limit: u32) -> Result<Vec<SourceUser>, StoreError> {
        super::round_trips::count();
        let documents: Vec<Document> = self
            .scan_db
            .fluent()
            .select()
            .from(USER_SOURCES)
            .filter(|q| q.for_all([q.field("source").eq(source)]))
            .order(|o| o.fields([o.field("recordedAt").descending()]))
            .limit(limit)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(super::classify)?;
        documents
            .into_iter()
            .map(|document| {
                let doc: UserSourceDoc = firestore::FirestoreDb::deserialize_doc_to(&document)?;
                Ok(SourceUser {
                    line_user_id: doc.line_user_id,
                    standing: doc.standing,
                    recorded_at_ms: doc.recorded_at.as_millisecond(),
                })
            })
            .collect()
    }
}

/// While the user follows: since when (ms).
fn following_since(facts: &UserFacts) -> Option<i64> {
    match (facts.following, facts.followed_at) {
        (Some(true), Some(at)) => Some(at.as_millisecond()),
        // Following with no follow time (the followers sync): long ago.
        (Some(true), None) => Some(0),
        _ => None,
    }
}

/// `user_sources/{id}`: one record per user and source.
fn user_source_id(user: &str, source: &str) -> String {
    deterministic_id(&["user_source", user, source])
}

/// Spreads a source's writes over its shards by the user's hash.
fn shard_of(user: &str) -> u32 {
    let hex = deterministic_id(&["source_shard", user]);
    u32::from_str_radix(&hex[..8], 16).unwrap_or(0) % SHARDS
}

/// The inbox record of `source`'s scenario start for `user`: the same for a
/// login and a follow, so whichever queues it second finds it there.
pub(crate) fn source_start_key(user: &str, source: &str) -> Option<InboxKey> {
    InboxKey::new("line-survey:source", &format!("{source}:{user}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_spreads_over_its_shards() {
        let shards: std::collections::BTreeSet<u32> = (0..1000).map(|i| shard_of(&format!("U{i:032x}"))).collect();
        assert_eq!(shards.len(), SHARDS as usize);
        assert!(shards.iter().all(|shard| *shard < SHARDS));
    }

    #[test]
    fn one_source_never_reads_another_sources_counters() {
        // `~` sorts after every character a source id may hold, so the range
        // of `insta` ends before `insta_dec` begins.
        let (first, last) = ("insta~", "insta~~");
        for (id, inside) in [
            ("insta~2026-12-01~015", true),
            ("insta~2026-12-31~000", true),
            ("insta_dec~2026-12-01~000", false),
            ("insta0~2026-12-01~000", false),
            ("instb~2026-12-01~000", false),
        ] {
            assert_eq!(id >= first && id <= last, inside, "{id}");
        }
    }
}
