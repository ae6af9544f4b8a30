//! The legacy-answers migration (`line-survey migrate legacy-answers`): answers
//! an earlier bot saved under random ids get their deterministic document and
//! the user's scenario marker, so the guards hold without the legacy lookup,
//! safely while the service runs.
//!
//! A pass reads `survey_responses` in document-id order. Random ids scatter a
//! group (scenario, question, user) over the whole id range, so the groups of
//! each page's legacy documents are read whole (every answer of the page's
//! users, a query per 30 users); a group is decided at its smallest id
//! (the first of it a pass in id order meets), so it is decided once per pass
//! and, after a kill, again at the same document, with the same result:
//! - the deterministic answer is created from the earliest legacy answer;
//!   `create()` makes a race with a user's answer, or with a killed run's
//!   commit that landed after all, end in one document;
//! - an answer that already exists stays; the group counts as migrated when
//!   this pass wrote it (`migrationPass`), as already migrated otherwise.
//!
//! The cursor and the counts move once per page, after every group of the
//! page is done; a page started again counts its groups again from what they
//! hold, so the counts are exact however often a run is killed.

use crate::clock::Clock;
use crate::engine::legacy::{LegacyAnswer, decide, decides_group};
use crate::store::{
    CommitOutcome, DoubtfulUser, Expect, GroupState, GroupWrite, HeldMigration, LegacyDoc, LegacyKey, MarkerSeen, Met,
    MigrationCounts, MigrationProgress, NAMED_UNREADABLE, Store, StoreError, USERS_PER_QUERY,
};
use futures::{StreamExt, TryStreamExt};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Documents per page unless `--batch` says otherwise.
pub(crate) const DEFAULT_BATCH: u32 = 200;

/// Groups of a page decided at once.
const CONCURRENCY: usize = 8;

/// Reads and commits of one group before the run gives up on it (each retry
/// follows a change someone else made: a user's answer, a marker).
const ATTEMPTS: u32 = 8;

/// Users with doubtful tags named in a report (all are counted).
pub(crate) const NAMED_DOUBTFUL: u32 = 100;

/// How often a run waiting for another run's lease looks again.
const WAIT_STEP: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub(crate) enum MigrationError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("another run took the migration over while this one worked (its lease ran out); it goes on from here")]
    LostLease,
    #[error(
        "the migration has not finished: run `line-survey migrate legacy-answers` to the end before --delete-legacy"
    )]
    NotFinished,
    #[error("--delete-legacy deletes documents: add --yes (see what it would delete with --dry-run)")]
    NotConfirmed,
    #[error("the answers of group {0} kept changing under the migration; run it again")]
    Contended(String),
}

/// What a run (or a dry run, or `status`) reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MigrationReport {
    pub(crate) counts: MigrationCounts,
    pub(crate) doubtful_tag_users: u64,
    /// The first [`NAMED_DOUBTFUL`] of them, with their doubtful tags.
    pub(crate) doubtful: Vec<DoubtfulUser>,
    /// The first unreadable documents' ids.
    pub(crate) unreadable_ids: Vec<String>,
    pub(crate) finished: bool,
    /// Finished, and no unreadable document the lookup still finds.
    pub(crate) lookup_can_go: bool,
    /// Whether a run is under way (a pass started and not finished).
    pub(crate) started: bool,
    pub(crate) dry_run: bool,
}

/// What `--delete-legacy` did, or would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeleteReport {
    /// Legacy documents whose group has its deterministic answer.
    pub(crate) deletable: u64,
    pub(crate) deleted: u64,
    /// The first of them.
    pub(crate) named: Vec<String>,
    pub(crate) dry_run: bool,
}

/// One group's part of the counts.
struct GroupTally {
    duplicated: bool,
    conflicting: bool,
    migrated: bool,
    doubtful: Option<(String, Vec<String>)>,
}

pub(crate) struct LegacyMigration {
    store: Store,
    clock: Clock,
    batch: u32,
}

impl LegacyMigration {
    pub(crate) fn new(store: Store, clock: Clock, batch: u32) -> Self {
        Self {
            store,
            clock,
            batch: batch.max(1),
        }
    }

    /// Runs the migration to its end (or goes on with a pass a killed run
    /// left), or with `dry_run` reports what it would do and writes nothing.
    pub(crate) async fn run(&self, dry_run: bool) -> Result<MigrationReport, MigrationError> {
        if dry_run {
            return self.dry_run().await;
        }
        let (mut held, waited) = self.hold().await?;
        let progress = match held.progress.clone() {
            // Another run finished it while this one waited: one run.
            Some(progress) if progress.finished && waited => {
                self.store.release_migration(&held).await?;
                return self.report(progress).await;
            }
            Some(progress) if !progress.finished && progress.pass_ms != 0 => progress,
            _ => {
                // A new pass, recorded before any group is, so a run killed
                // from here on goes on with it.
                let fresh = MigrationProgress {
                    pass_ms: self.clock.now_ms(),
                    ..MigrationProgress::default()
                };
                if !self.store.save_migration(&mut held, &fresh).await? {
                    return Err(MigrationError::LostLease);
                }
                tracing::info!(pass = fresh.pass_ms, "legacy-answers migration: a new pass starts");
                fresh
            }
        };
        let done = self.pass(&mut held, progress).await;
        if let Err(error) = self.store.release_migration(&held).await {
            tracing::warn!(error = %error, "legacy-answers migration: the lease could not be let go; it runs out");
        }
        self.report(done?).await
    }

    async fn pass(
        &self,
        held: &mut HeldMigration,
        mut progress: MigrationProgress,
    ) -> Result<MigrationProgress, MigrationError> {
        loop {
            let page = self
                .store
                .responses_page(progress.cursor.as_deref(), self.batch)
                .await?;
            let Some((last, _)) = page.last() else {
                progress.finished = true;
                progress.finished_ms = Some(self.clock.now_ms());
                if !self.store.save_migration(held, &progress).await? {
                    return Err(MigrationError::LostLease);
                }
                tracing::info!(
                    pass = progress.pass_ms,
                    migrated = progress.counts.migrated,
                    already_migrated = progress.counts.already_migrated,
                    "legacy-answers migration finished"
                );
                return Ok(progress);
            };
            let last = last.clone();
            let (counts, unreadable, _) = self.page(&page, progress.pass_ms, false).await?;
            progress.counts += counts;
            for id in unreadable {
                if progress.unreadable_ids.len() < NAMED_UNREADABLE && !progress.unreadable_ids.contains(&id) {
                    progress.unreadable_ids.push(id);
                }
            }
            progress.cursor = Some(last);
            if !self.store.save_migration(held, &progress).await? {
                return Err(MigrationError::LostLease);
            }
            tracing::info!(
                legacy_documents = progress.counts.legacy_documents,
                groups = progress.counts.groups,
                "legacy-answers migration: a page is done"
            );
        }
    }

    /// Every page, nothing written: what a run from the start would report.
    async fn dry_run(&self) -> Result<MigrationReport, MigrationError> {
        let stored = self.store.migration_progress().await?;
        let mut counts = MigrationCounts::default();
        let mut unreadable_ids = Vec::new();
        let mut doubtful: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.store.responses_page(cursor.as_deref(), self.batch).await?;
            let Some((last, _)) = page.last() else { break };
            let last = last.clone();
            // No pass wrote anything: an existing answer is "already migrated".
            let (page_counts, unreadable, users) = self.page(&page, i64::MIN, true).await?;
            counts += page_counts;
            unreadable_ids.extend(
                unreadable
                    .into_iter()
                    .take(NAMED_UNREADABLE - unreadable_ids.len().min(NAMED_UNREADABLE)),
            );
            for (user, tags) in users {
                let known = doubtful.entry(user).or_default();
                known.extend(tags);
                known.sort();
                known.dedup();
            }
            cursor = Some(last);
        }
        Ok(MigrationReport {
            counts,
            doubtful_tag_users: doubtful.len() as u64,
            doubtful: doubtful
                .into_iter()
                .take(NAMED_DOUBTFUL as usize)
                .map(|(user, tags)| DoubtfulUser::new(user, tags))
                .collect(),
            unreadable_ids,
            finished: stored.as_ref().is_some_and(|progress| progress.finished),
            lookup_can_go: stored.as_ref().is_some_and(MigrationProgress::lookup_can_go),
            started: stored.is_some_and(|progress| !progress.finished),
            dry_run: true,
        })
    }

    /// One page: its counts, its unreadable documents, and the users with
    /// doubtful tags among its groups.
    async fn page(
        &self,
        page: &[(String, Met)],
        pass_ms: i64,
        dry_run: bool,
    ) -> Result<(MigrationCounts, Vec<String>, Vec<(String, Vec<String>)>), MigrationError> {
        let mut counts = MigrationCounts::default();
        let mut unreadable = Vec::new();
        let mut legacy = Vec::new();
        for (id, met) in page {
            match met {
                Met::Deterministic => {}
                Met::Unreadable { scenario_user } => {
                    counts.unreadable += 1;
                    counts.unreadable_with_user += u64::from(*scenario_user);
                    unreadable.push(id.clone());
                }
                Met::Legacy(key) => {
                    counts.legacy_documents += 1;
                    legacy.push((id.as_str(), key));
                }
            }
        }
        // Every legacy answer of the page's users, by group: a few queries.
        let mut users: Vec<String> = legacy.iter().map(|(_, key)| key.user.as_str().to_owned()).collect();
        users.sort();
        users.dedup();
        let found: Vec<Vec<(LegacyKey, LegacyDoc)>> = futures::stream::iter(users.chunks(USERS_PER_QUERY))
            .map(|chunk| self.store.legacy_answers_of(chunk))
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        let mut groups: HashMap<LegacyKey, Vec<LegacyDoc>> = HashMap::new();
        for (key, doc) in found.into_iter().flatten() {
            groups.entry(key).or_default().push(doc);
        }
        // The groups this page decides: those whose smallest id is on it.
        let decided: Vec<(&LegacyKey, &[LegacyDoc])> = legacy
            .iter()
            .filter_map(|(id, key)| {
                let members = groups.get(*key)?;
                let answers = answers_of(members);
                decides_group(id, &answers).then_some((*key, members.as_slice()))
            })
            .collect();
        let keys: Vec<&LegacyKey> = decided.iter().map(|(key, _)| *key).collect();
        let states = self.store.group_states(&keys).await?;
        let tallies: Vec<GroupTally> = futures::stream::iter(decided.into_iter().zip(states))
            .map(|((key, members), state)| self.settle(key, members, state, pass_ms, dry_run))
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        let mut doubtful = Vec::new();
        for tally in tallies {
            counts.groups += 1;
            counts.duplicated_groups += u64::from(tally.duplicated);
            counts.conflicting_groups += u64::from(tally.conflicting);
            if tally.migrated {
                counts.migrated += 1;
            } else {
                counts.already_migrated += 1;
            }
            doubtful.extend(tally.doubtful);
        }
        Ok((counts, unreadable, doubtful))
    }

    /// Decides a group from its documents and what its answer, marker and
    /// user hold (`state`), and (unless `dry_run`) writes what it needs.
    async fn settle(
        &self,
        key: &LegacyKey,
        members: &[LegacyDoc],
        state: GroupState,
        pass_ms: i64,
        dry_run: bool,
    ) -> Result<GroupTally, MigrationError> {
        let answers = answers_of(members);
        let mut state = Some(state);
        for _ in 0..ATTEMPTS {
            let state = match state.take() {
                Some(state) => state,
                None => self
                    .store
                    .group_states(&[key])
                    .await?
                    .pop()
                    .ok_or_else(|| MigrationError::Contended(key.answer_id()))?,
            };
            let verdict =
                decide(&answers, &state.user_tags).ok_or_else(|| MigrationError::Contended(key.answer_id()))?;
            let migrated = match &state.answer {
                None => true,
                Some(existing) => existing.migrated_in_pass == Some(pass_ms),
            };
            let tally = GroupTally {
                duplicated: answers.len() > 1,
                conflicting: verdict.conflicting,
                migrated,
                doubtful: (!verdict.doubtful_tags.is_empty())
                    .then(|| (key.user.as_str().to_owned(), verdict.doubtful_tags.clone())),
            };
            if dry_run {
                return Ok(tally);
            }
            let canonical = members
                .iter()
                .find(|member| member.id == verdict.canonical)
                .ok_or_else(|| MigrationError::Contended(key.answer_id()))?;
            let write = GroupWrite {
                key,
                pass_ms,
                create: state
                    .answer
                    .is_none()
                    .then_some((canonical, verdict.duplicates.as_slice())),
                marker: match state.marker {
                    MarkerSeen::Answered => None,
                    MarkerSeen::Absent => Some(Expect::Absent),
                    MarkerSeen::Unanswered(version) => Some(Expect::At(version)),
                },
                doubtful_tags: &verdict.doubtful_tags,
            };
            if write.is_empty() {
                return Ok(tally);
            }
            match self.store.commit_group(&write).await {
                CommitOutcome::Committed(_) => return Ok(tally),
                // Someone wrote the answer or the marker since the read (a
                // user answering, or this commit landing after all): read
                // again and decide on what is there.
                CommitOutcome::AlreadyExists | CommitOutcome::Changed => {}
                CommitOutcome::Unknown(error) => {
                    tracing::warn!(answer = %key.answer_id(), error = %error, "a group's commit has an unknown outcome; reading it again");
                }
                CommitOutcome::Failed(error) => return Err(error.into()),
            }
        }
        Err(MigrationError::Contended(key.answer_id()))
    }

    /// Deletes the legacy documents whose group has its deterministic answer,
    /// once the migration finished (with `dry_run`: counts them).
    pub(crate) async fn delete_legacy(&self, dry_run: bool, confirmed: bool) -> Result<DeleteReport, MigrationError> {
        let finished = self
            .store
            .migration_progress()
            .await?
            .is_some_and(|progress| progress.finished);
        if !finished {
            return Err(MigrationError::NotFinished);
        }
        if !dry_run && !confirmed {
            return Err(MigrationError::NotConfirmed);
        }
        let held = if dry_run {
            None
        } else {
            let (held, _) = self.hold().await?;
            // A pass that started while this run waited: not finished any more.
            if !held.progress.as_ref().is_some_and(|progress| progress.finished) {
                self.store.release_migration(&held).await?;
                return Err(MigrationError::NotFinished);
            }
            Some(held)
        };
        let mut held = held;
        let deleting = self.delete_pages(held.as_mut()).await;
        if let Some(held) = &held
            && let Err(error) = self.store.release_migration(held).await
        {
            tracing::warn!(error = %error, "legacy-answers deletion: the lease could not be let go; it runs out");
        }
        deleting
    }

    /// The deletion's pages; with `held` (not a dry run) it deletes, and
    /// renews the lease with each page, so no pass starts under it.
    async fn delete_pages(&self, mut held: Option<&mut HeldMigration>) -> Result<DeleteReport, MigrationError> {
        let dry_run = held.is_none();
        let mut report = DeleteReport {
            deletable: 0,
            deleted: 0,
            named: Vec::new(),
            dry_run,
        };
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .store
                .responses_page(cursor.as_deref(), self.batch.min(500))
                .await?;
            let Some((last, _)) = page.last() else {
                return Ok(report);
            };
            cursor = Some(last.clone());
            let legacy: Vec<(&String, &LegacyKey)> = page
                .iter()
                .filter_map(|(id, met)| match met {
                    Met::Legacy(key) => Some((id, key)),
                    _ => None,
                })
                .collect();
            let keys: Vec<&LegacyKey> = legacy.iter().map(|(_, key)| *key).collect();
            let exist = self.store.answers_exist(&keys).await?;
            let doomed: Vec<String> = legacy
                .iter()
                .zip(exist)
                .filter(|(_, exists)| *exists)
                .map(|((id, _), _)| (*id).clone())
                .collect();
            report.deletable += doomed.len() as u64;
            for id in doomed.iter().take(NAMED_UNREADABLE.saturating_sub(report.named.len())) {
                report.named.push(id.clone());
            }
            if let Some(held) = held.as_deref_mut() {
                let progress = held.progress.clone().unwrap_or_default();
                if !self.store.save_migration(held, &progress).await? {
                    return Err(MigrationError::LostLease);
                }
                self.store.delete_responses(&doomed).await?;
                report.deleted += doomed.len() as u64;
            }
        }
    }

    /// Where the migration stands, as stored.
    pub(crate) async fn status(&self) -> Result<MigrationReport, MigrationError> {
        match self.store.migration_progress().await? {
            Some(progress) => self.report(progress).await,
            None => Ok(MigrationReport {
                counts: MigrationCounts::default(),
                doubtful_tag_users: 0,
                doubtful: Vec::new(),
                unreadable_ids: Vec::new(),
                finished: false,
                lookup_can_go: false,
                started: false,
                dry_run: false,
            }),
        }
    }

    async fn report(&self, progress: MigrationProgress) -> Result<MigrationReport, MigrationError> {
        let (doubtful_tag_users, doubtful) = self.store.doubtful_users(progress.pass_ms, NAMED_DOUBTFUL).await?;
        Ok(MigrationReport {
            counts: progress.counts,
            doubtful_tag_users,
            doubtful,
            lookup_can_go: progress.lookup_can_go(),
            unreadable_ids: progress.unreadable_ids,
            finished: progress.finished,
            started: !progress.finished,
            dry_run: false,
        })
    }

    /// The lease, waiting while another run holds it; and whether it waited.
    async fn hold(&self) -> Result<(HeldMigration, bool), MigrationError> {
        let mut waited = false;
        loop {
            match self.store.take_migration().await? {
                Ok(held) => return Ok((held, waited)),
                Err(until) => {
                    if !waited {
                        tracing::info!(
                            until = %until,
                            "another run holds the legacy-answers migration; waiting for it"
                        );
                    }
                    waited = true;
                    tokio::time::sleep(WAIT_STEP).await;
                }
            }
        }
    }
}

/// What the engine decides a group on, from its documents as read.
fn answers_of(members: &[LegacyDoc]) -> Vec<LegacyAnswer> {
    members
        .iter()
        .map(|member| LegacyAnswer {
            id: member.id.clone(),
            answered_ms: member.answered_ms,
            value: member.value.clone(),
            tags: member.tags.clone(),
        })
        .collect()
}
