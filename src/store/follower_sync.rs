//! The followers sync: every friend LINE lists recorded in `users/{id}` as
//! following.
//!
//! - `follower_syncs/current`: the sync under way or the last one: its state
//!   (`running`, `done`, `failed` with its reason), LINE's page token of the
//!   next page, counts, and a lease, so one instance at a time pages through
//!   LINE's list and one that dies is followed by another from the stored
//!   token.
//! - A page's users are read first (one batched read), then each written
//!   conditional on what was read: a user LINE lists who is not known to be
//!   following is recorded following (`followSource: "sync"`); tags, fields and
//!   first seen stay as they are; one whose unfollow the service recorded
//!   after the sync began stays unfollowed. A page written twice (a crash
//!   before its progress was stored) changes nothing the second time.

use super::docs::collections::{FOLLOWER_SYNCS, USERS};
use super::lease::Stored;
use super::writes::{CommitOutcome, Expect, expecting, merge, set};
use super::{Store, StoreError, Version};
use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};

/// The one document of the sync.
const CURRENT: &str = "current";

/// `follower_syncs/current`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FollowerSyncDoc {
    pub(crate) state: FollowerSyncState,
    /// When it began (the service's clock): an unfollow recorded after it wins.
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) started_at: FirestoreInstant,
    /// LINE's continuation token of the next page; absent: the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) next: Option<String>,
    #[serde(default)]
    pub(crate) pages: u64,
    /// Ids LINE listed.
    #[serde(default)]
    pub(crate) listed: u64,
    /// Recorded as following by this sync.
    #[serde(default)]
    pub(crate) recorded: u64,
    /// Known to be following already.
    #[serde(default)]
    pub(crate) already_following: u64,
    /// Unfollowed after the sync began: left unfollowed.
    #[serde(default)]
    pub(crate) kept_unfollowed: u64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease_owner: Option<String>,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) lease_until: Option<FirestoreInstant>,
    #[serde(default)]
    pub(crate) attempts: u32,
    #[serde(
        default,
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) ended_at: Option<FirestoreInstant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FollowerSyncState {
    Running,
    Done,
    Failed,
}

impl FollowerSyncState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FollowerSyncState::Running => "running",
            FollowerSyncState::Done => "done",
            FollowerSyncState::Failed => "failed",
        }
    }
}

/// How a sync's start ended.
pub(crate) enum SyncStart {
    /// A new sync began.
    Started(Box<Stored<FollowerSyncDoc>>),
    /// One is under way: it is the sync.
    Running(Box<Stored<FollowerSyncDoc>>),
}

/// What one page did to its users.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PageCounts {
    pub(crate) recorded: u64,
    pub(crate) already_following: u64,
    pub(crate) kept_unfollowed: u64,
}

/// What the sync needs of a listed user's record.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Following {
    #[serde(default)]
    pub(crate) following: Option<bool>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    pub(crate) unfollowed_at: Option<FirestoreInstant>,
}

/// A page's progress, written with the lease renewed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SyncProgress<'a> {
    pub(crate) state: FollowerSyncState,
    /// `None`: no page is left (LINE returned no `next`).
    pub(crate) next: Option<&'a str>,
    pub(crate) pages: u64,
    pub(crate) listed: u64,
    pub(crate) recorded: u64,
    pub(crate) already_following: u64,
    pub(crate) kept_unfollowed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<&'a str>,
    /// Takes in a row without a page further (0 once a page is written).
    pub(crate) attempts: u32,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) lease_until: FirestoreInstant,
    #[serde(
        with = "firestore::serialize_as_optional_timestamp",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) ended_at: Option<FirestoreInstant>,
}

/// Conditional writes of one commit, at most.
const WRITES_PER_COMMIT: usize = 500;

impl Store {
    pub(crate) async fn follower_sync(&self) -> Result<Option<Stored<FollowerSyncDoc>>, StoreError> {
        self.get_stored(FOLLOWER_SYNCS, CURRENT).await
    }

    /// Begins a sync unless one is under way (running with a live lease, or
    /// running and never leased yet): then that one is the sync.
    pub(crate) async fn start_follower_sync(&self) -> Result<SyncStart, StoreError> {
        for _ in 0..3 {
            let current = self.follower_sync().await?;
            if let Some(current) = current.as_ref()
                && current.doc.state == FollowerSyncState::Running
            {
                return Ok(SyncStart::Running(Box::new(current.clone())));
            }
            // Whole milliseconds, as stored: the start shown now is the one read later.
            let now = self.now();
            let started_at = FirestoreInstant::from_millisecond(now.as_millisecond()).unwrap_or(now);
            let doc = FollowerSyncDoc {
                state: FollowerSyncState::Running,
                started_at,
                next: None,
                pages: 0,
                listed: 0,
                recorded: 0,
                already_following: 0,
                kept_unfollowed: 0,
                reason: None,
                lease_owner: None,
                lease_until: None,
                attempts: 0,
                ended_at: None,
            };
            let expect = current
                .as_ref()
                .map_or(Expect::Absent, |current| Expect::At(current.version));
            let write = expecting(set(self.document_path(FOLLOWER_SYNCS, CURRENT), &doc)?, expect);
            match self.commit(vec![write]).await {
                CommitOutcome::Committed(versions) => {
                    let version = versions.into_iter().next().flatten();
                    if let Some(version) = version {
                        return Ok(SyncStart::Started(Box::new(Stored {
                            id: CURRENT.to_owned(),
                            doc,
                            version,
                        })));
                    }
                }
                // Two starts at once: the other one's sync is the sync.
                CommitOutcome::Changed | CommitOutcome::AlreadyExists | CommitOutcome::Unknown(_) => {}
                CommitOutcome::Failed(error) => return Err(error),
            }
        }
        Err(StoreError::Unavailable(
            "the followers sync kept changing while it was started".into(),
        ))
    }

    /// Takes the sync's lease (or renews it) unless it changed since `version`.
    pub(crate) async fn lease_follower_sync(
        &self,
        version: Version,
        attempts: u32,
    ) -> Result<Option<Version>, StoreError> {
        let until = super::later(self.now(), self.options.lease);
        self.lease_to_me(FOLLOWER_SYNCS, CURRENT, version, attempts, until)
            .await
    }

    /// When a lease taken now runs out.
    pub(crate) fn follower_sync_lease_until(&self) -> FirestoreInstant {
        super::later(self.now(), self.options.lease)
    }

    /// Writes a page's progress unless the sync changed since `version`.
    pub(crate) async fn advance_follower_sync(
        &self,
        version: Version,
        progress: &SyncProgress<'_>,
    ) -> Result<Option<Version>, StoreError> {
        // The next token goes when there is none: the last page was written.
        let drop: &[&str] = if progress.next.is_none() { &["next"] } else { &[] };
        let write = expecting(
            super::writes::merge_deleting(self.document_path(FOLLOWER_SYNCS, CURRENT), progress, drop, Vec::new())?,
            Expect::At(version),
        );
        self.commit(vec![write]).await.first_version()
    }

    /// The records of `users` (one batched read), each with its version.
    pub(crate) async fn followings(&self, users: &[String]) -> Result<Vec<Option<(Following, Version)>>, StoreError> {
        let paths = users.iter().map(|user| self.document_path(USERS, user)).collect();
        self.get_many(paths)
            .await?
            .into_iter()
            .map(|document| {
                document
                    .map(|document| {
                        let stored = Stored::<Following>::decode(document)?;
                        Ok((stored.doc, stored.version))
                    })
                    .transpose()
            })
            .collect()
    }

    /// Records `users` as following, each conditional on its record as read
    /// (`Expect::Absent` or its version), in commits of at most 500. `Ok(false)`:
    /// a commit met a record that changed since it was read (nothing of that
    /// commit landed); the caller reads the page again.
    pub(crate) async fn record_followers(&self, users: &[(String, Expect)]) -> Result<bool, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Followed<'a> {
            line_user_id: &'a str,
            following: bool,
            follow_source: &'a str,
        }
        for part in users.chunks(WRITES_PER_COMMIT) {
            let writes = part
                .iter()
                .map(|(user, expect)| {
                    let followed = Followed {
                        line_user_id: user,
                        following: true,
                        follow_source: "sync",
                    };
                    Ok(expecting(
                        merge(self.document_path(USERS, user), &followed, Vec::new())?,
                        *expect,
                    ))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            match self.commit(writes).await {
                CommitOutcome::Committed(_) => {}
                CommitOutcome::Changed | CommitOutcome::AlreadyExists => return Ok(false),
                // Landed or not: the page is read again and what landed is
                // found following then.
                CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => return Err(error),
            }
        }
        Ok(true)
    }
}
