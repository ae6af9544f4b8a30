//! `users/{lineUserId}`: whether the user follows the account, and when they
//! were first and last seen (campaign audiences read both). Follow and
//! unfollow events can arrive late or twice; the event time decides, so the
//! newest of them wins whatever order they are processed in.

use super::docs::collections::USERS;
use super::round_trips::Timed;
use super::writes::{CommitOutcome, Expect, expecting, maximum, merge_deleting, minimum};
use super::{Store, StoreError};
use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Relationship {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    following: Option<bool>,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    followed_at: Option<FirestoreInstant>,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    unfollowed_at: Option<FirestoreInstant>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RelationshipWrite<'a> {
    line_user_id: &'a str,
    following: bool,
    #[serde(
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    followed_at: Option<FirestoreInstant>,
    #[serde(
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    unfollowed_at: Option<FirestoreInstant>,
}

/// Rounds of read and conditional write before giving up for this attempt.
const ROUNDS: usize = 4;

impl Store {
    /// Records a follow (`following`) or an unfollow at `event_ms`, unless a
    /// newer event of the same kind is recorded already. `following` changes
    /// only when this event is newer than the last one of the other kind.
    /// Returns whether this event is the user's newest follow or unfollow (a
    /// repeat of it counts: its effects may not have finished).
    pub(crate) async fn record_following(
        &self,
        user: &str,
        following: bool,
        event_ms: i64,
    ) -> Result<bool, StoreError> {
        let at = FirestoreInstant::from_millisecond(event_ms)
            .map_err(|_| StoreError::Unavailable("the event time is out of range".into()))?;
        for _ in 0..ROUNDS {
            let read = self.get_stored::<Relationship>(USERS, user).await?;
            let (current, version) = match read {
                Some(stored) => (stored.doc, Some(stored.version)),
                None => (Relationship::default(), None),
            };
            let (same, other) = if following {
                (current.followed_at, current.unfollowed_at)
            } else {
                (current.unfollowed_at, current.followed_at)
            };
            // A follow and an unfollow of the same millisecond: the follow wins,
            // whichever is processed first.
            let newest = other.is_none_or(|other| {
                if following {
                    event_ms >= other.as_millisecond()
                } else {
                    event_ms > other.as_millisecond()
                }
            });
            if same.is_some_and(|recorded| recorded.as_millisecond() >= event_ms) {
                let repeat = same.is_some_and(|recorded| recorded.as_millisecond() == event_ms);
                return Ok(repeat && newest);
            }
            let write = RelationshipWrite {
                line_user_id: user,
                following: if newest {
                    following
                } else {
                    current.following.unwrap_or(!following)
                },
                followed_at: if following { Some(at) } else { None },
                unfollowed_at: if following { None } else { Some(at) },
            };
            let expect = version.map_or(Expect::Absent, Expect::At);
            // First and last seen as the answers keep them: a campaign's audience
            // may ask who was first seen when.
            let seen = vec![minimum("firstSeenMs", event_ms), maximum("lastSeenMs", event_ms)];
            // The newest unfollow also forgets the cached display name: it is
            // personal data, kept only while the user is a friend.
            let forget: &[&str] = if !following && newest {
                &["displayName", "profileFetchedMs"]
            } else {
                &[]
            };
            let write = expecting(
                merge_deleting(self.document_path(USERS, user), &write, forget, seen)?,
                expect,
            );
            match self.commit(vec![write]).await {
                CommitOutcome::Committed(_) => return Ok(newest),
                // Changed meanwhile (an answer's tags, another event), or the
                // outcome is unknown: read again; the write is idempotent.
                CommitOutcome::Changed | CommitOutcome::AlreadyExists | CommitOutcome::Unknown(_) => {}
                CommitOutcome::Failed(error) => return Err(error),
            }
        }
        Err(StoreError::Unavailable("the user's record kept changing".into()))
    }

    /// Caches the user's LINE display name (for `{name}`), conditional on the
    /// record as the caller read it: a record that changed meanwhile (an
    /// unfollow forgetting the name) keeps what it has. The record's new
    /// version when it landed, `None` when it did not (the name is only a
    /// cache: nothing retries it). `name` `None` forgets a cached one.
    pub(crate) async fn cache_display_name(
        &self,
        user: &str,
        name: Option<&str>,
        fetched_ms: i64,
        expect: Expect,
    ) -> Result<Option<super::Version>, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Profile<'a> {
            line_user_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            display_name: Option<&'a str>,
            profile_fetched_ms: i64,
        }
        let profile = Profile {
            line_user_id: user,
            display_name: name,
            profile_fetched_ms: fetched_ms,
        };
        let forget: &[&str] = if name.is_none() { &["displayName"] } else { &[] };
        let write = expecting(
            merge_deleting(self.document_path(USERS, user), &profile, forget, Vec::new())?,
            expect,
        );
        self.commit(vec![write]).await.first_version()
    }
}

/// What the console's user search looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UserSearch {
    /// Users whose cached LINE display name starts with this (as stored:
    /// Firestore compares strings by their bytes).
    NamePrefix(String),
    /// Users with this tag.
    Tag(String),
}

/// A user the search found.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FoundUser {
    #[serde(skip)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) display_name: Option<String>,
    #[serde(default)]
    pub(crate) following: Option<bool>,
    #[serde(default)]
    pub(crate) last_seen_ms: Option<i64>,
}

/// The fields a search reads of each user (never their tags' or fields'
/// whole lists).
const FOUND_FIELDS: [&str; 3] = ["displayName", "following", "lastSeenMs"];

impl Store {
    /// Up to `limit` users `search` finds: by name in name order, by tag in
    /// id order. One query; the name needs the single-field index on
    /// `users.displayName` (`firestore.indexes.json`).
    pub(crate) async fn find_users(&self, search: &UserSearch, limit: u32) -> Result<Vec<FoundUser>, StoreError> {
        let documents = match search {
            UserSearch::Tag(tag) => {
                self.page_by_id(
                    USERS,
                    &FOUND_FIELDS,
                    |q| q.for_all([q.field("tags").array_contains(tag.as_str())]),
                    None,
                    limit,
                )
                .await?
            }
            UserSearch::NamePrefix(prefix) => {
                // Every string that starts with `prefix` sorts before this one.
                let end = format!("{prefix}\u{10ffff}");
                super::round_trips::count();
                self.db
                    .fluent()
                    .select()
                    .fields(FOUND_FIELDS)
                    .from(USERS)
                    .filter(|q| {
                        q.for_all([
                            q.field("displayName").greater_than_or_equal(prefix.as_str()),
                            q.field("displayName").less_than(end.as_str()),
                        ])
                    })
                    .order(|o| o.fields([o.field("displayName").ascending()]))
                    .limit(limit)
                    .query()
                    .timed(super::round_trips::QUERY)
                    .await
                    .map_err(super::classify)?
            }
        };
        documents
            .iter()
            .map(|document| {
                let mut found: FoundUser = firestore::FirestoreDb::deserialize_doc_to(document)?;
                found.id = super::lease::document_id(&document.name).to_owned();
                Ok(found)
            })
            .collect()
    }
}
