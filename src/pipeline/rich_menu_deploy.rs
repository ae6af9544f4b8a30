//! `line-survey richmenus deploy` (and `RICH_MENUS_DEPLOY=1` at start-up):
//! the menu files of `RICH_MENUS_DIR` made so on LINE, once, resumably.
//!
//! Each changed menu file goes through the steps of [`DeployStep`], each
//! recorded in `rich_menus/{id}` after LINE did it: the menu is created (or,
//! after a crash that lost the answer, adopted from LINE's list by its name,
//! which carries the file's hash: a create has no retry key), its image
//! uploaded and its alias moved to it. Then one batch for the whole deploy
//! (LINE allows three an hour) moves the users of every replaced menu to its
//! successor and unlinks the users of menus whose files are gone; its request
//! id is recorded with the lease before it is polled to its end. Then each
//! file's default is set and only then the replaced menus are deleted. A
//! deploy killed anywhere and run again repeats at most the step it was in,
//! and every step is safe to repeat. Menus carrying the service's name that
//! no record knows (a create whose record never landed, for a file that
//! changed again since) are deleted at the end.
//!
//! One deploy at a time: `rich_menu_deploys/current` is leased, renewed
//! before every call that changes something on LINE.

use crate::engine::rich_menus::{Begin, DeployStep, Recorded, begin, live_menu};
use crate::line::client::SendError;
use crate::line::rich_menus::{BatchOperation, BatchPhase, ImageType, ListedMenu, RichMenuApi};
use crate::scenario::rich_menus::{LINE_NAME_PREFIX, RichMenu, line_name};
use crate::store::{BatchTarget, DeployBatch, Expect, HeldDeploy, RichMenuRecord, Store, StoreError, Stored, Version};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// The first wait before a batch's progress is asked again; it doubles up
/// to [`PROGRESS_POLL_MAX`] (LINE allows 100 progress calls an hour).
const PROGRESS_POLL: Duration = Duration::from_secs(1);
const PROGRESS_POLL_MAX: Duration = Duration::from_secs(60);
/// How long a batch may take before the deploy stops (run again, it polls on).
const BATCH_PATIENCE: Duration = Duration::from_secs(600);
/// How long a deploy waits for another one's lease: longer than a batch may
/// take.
const LEASE_PATIENCE: Duration = Duration::from_secs(900);

#[derive(Debug, thiserror::Error)]
pub(crate) enum DeployError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// LINE refused or failed a step: the file, the step and LINE's words
    /// (with the property it names).
    #[error("{file}: {step} failed: {error}")]
    Line {
        file: String,
        step: &'static str,
        error: SendError,
    },
    /// Listing or another step not tied to one file failed.
    #[error("{step} failed: {error}")]
    Account { step: &'static str, error: SendError },
    #[error("another deploy holds the lease and did not finish within {0:?}")]
    Busy(Duration),
    #[error("the deploy lease was lost to another instance; nothing more was done")]
    LeaseLost,
    #[error("{0}")]
    Stuck(String),
}

/// What a deploy did (or, in a dry run, would do), one line per action.
#[derive(Debug, Default)]
pub(crate) struct DeployReport {
    pub(crate) lines: Vec<String>,
}

pub(crate) struct RichMenuDeploy {
    store: Store,
    line: RichMenuApi,
}

/// A menu file's deploy under way: its record as last written.
struct InHand<'a> {
    menu: &'a RichMenu,
    record: RichMenuRecord,
    version: Version,
}

impl RichMenuDeploy {
    pub(crate) fn new(store: Store, line: RichMenuApi) -> Self {
        Self { store, line }
    }

    /// Deploys `menus`; with `dry_run`, only says what it would do (it reads
    /// Firestore and LINE's list, and changes nothing).
    pub(crate) async fn run(&self, menus: &[RichMenu], dry_run: bool) -> Result<DeployReport, DeployError> {
        if dry_run {
            return self.plan(menus).await;
        }
        let mut lease = self.take_lease().await?;
        let result = self.deploy(menus, &mut lease).await;
        // Run out now, so the next deploy need not wait; a failure here only
        // makes it wait for the lease to run out.
        if let Err(error) = self.store.release_rich_menu_deploy(&lease).await {
            tracing::warn!(error = %error, "the rich menu deploy lease could not be released");
        }
        result
    }

    async fn take_lease(&self) -> Result<HeldDeploy, DeployError> {
        let began = std::time::Instant::now();
        loop {
            match self.store.take_rich_menu_deploy().await? {
                Ok(held) => return Ok(held),
                Err(_until) if began.elapsed() > LEASE_PATIENCE => return Err(DeployError::Busy(LEASE_PATIENCE)),
                Err(_until) => {
                    tracing::info!(outcome = "waiting", "another rich menu deploy holds the lease");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// Renews the lease, recording `batch` (or none) with it.
    async fn renew_with(&self, lease: &mut HeldDeploy, batch: Option<DeployBatch>) -> Result<(), DeployError> {
        match self.store.renew_rich_menu_deploy(lease, batch.clone()).await? {
            Some(version) => {
                lease.version = version;
                lease.batch = batch;
                Ok(())
            }
            None => Err(DeployError::LeaseLost),
        }
    }

    async fn renew(&self, lease: &mut HeldDeploy) -> Result<(), DeployError> {
        let batch = lease.batch.clone();
        self.renew_with(lease, batch).await
    }

    async fn deploy(&self, menus: &[RichMenu], lease: &mut HeldDeploy) -> Result<DeployReport, DeployError> {
        let mut report = DeployReport::default();
        let mut records = self.records_by_id().await?;
        // Up to the alias, file by file.
        let mut in_hand = Vec::new();
        for menu in menus {
            let stored = records.remove(&menu.file.id);
            if let Some(mut started) = self.begin(menu, stored, &mut report).await? {
                self.advance(&mut started, DeployStep::Aliased, lease, &mut report)
                    .await?;
                in_hand.push(started);
            }
        }
        // What is left in `records` has no file any more.
        let retiring: Vec<(String, Stored<RichMenuRecord>)> = records.into_iter().collect();
        self.move_users(&mut in_hand, &retiring, lease, &mut report).await?;
        for started in &mut in_hand {
            self.advance(started, DeployStep::Done, lease, &mut report).await?;
            report.lines.push(format!("{}: deployed", started.menu.file.id));
        }
        for (id, stored) in retiring {
            self.retire(&id, stored, lease, &mut report).await?;
        }
        self.report_leftovers(&mut report).await?;
        Ok(report)
    }

    /// Where a file's deploy begins: `None` when its hash is deployed.
    async fn begin<'a>(
        &self,
        menu: &'a RichMenu,
        stored: Option<Stored<RichMenuRecord>>,
        report: &mut DeployReport,
    ) -> Result<Option<InHand<'a>>, DeployError> {
        let id = menu.file.id.as_str();
        match (begin(stored.as_ref().map(recorded).as_ref(), &menu.hash), stored) {
            (Begin::Unchanged, _) => {
                report.lines.push(format!("{id}: unchanged"));
                Ok(None)
            }
            (Begin::Resume(step), Some(stored)) => {
                report
                    .lines
                    .push(format!("{id}: resuming after step {}", step.as_str()));
                Ok(Some(InHand {
                    menu,
                    record: stored.doc,
                    version: stored.version,
                }))
            }
            (Begin::Resume(_), None) => Err(DeployError::Stuck(format!("{id}: resumed without a record"))),
            (Begin::Plan { mut old }, stored) => {
                // Replacing a deploy that stopped after its create but before
                // recording it: that menu (named by its hash) is old too.
                if let Some(stored) = stored.as_ref().filter(|stored| stored.doc.rich_menu_id.is_none()) {
                    let name = line_name(id, &stored.doc.hash);
                    let listed = self.line.list().await.map_err(|error| DeployError::Account {
                        step: "listing LINE's menus",
                        error,
                    })?;
                    for listed in listed {
                        if listed.name == name && !old.contains(&listed.rich_menu_id) {
                            old.push(listed.rich_menu_id);
                        }
                    }
                }
                let expect = stored
                    .as_ref()
                    .map_or(Expect::Absent, |stored| Expect::At(stored.version));
                let record = RichMenuRecord {
                    hash: menu.hash.clone(),
                    step: DeployStep::Planned,
                    rich_menu_id: None,
                    live: live_menu(DeployStep::Planned, None, &old).map(str::to_owned),
                    old,
                    default: menu.file.default,
                };
                let version = self.record(id, &record, expect).await?;
                Ok(Some(InHand { menu, record, version }))
            }
        }
    }

    /// Takes a file's deploy step by step up to `until`. The users' move
    /// (after the alias) is the whole deploy's batch, not one file's.
    async fn advance(
        &self,
        started: &mut InHand<'_>,
        until: DeployStep,
        lease: &mut HeldDeploy,
        report: &mut DeployReport,
    ) -> Result<(), DeployError> {
        let menu = started.menu;
        let id = menu.file.id.as_str();
        let file = menu.path.display().to_string();
        let line_error = |step: DeployStep| {
            let file = file.clone();
            move |error: SendError| DeployError::Line {
                file: file.clone(),
                step: step.doing(),
                error,
            }
        };
        while started.record.step < until {
            let record = &mut started.record;
            match record.step {
                DeployStep::Planned => {
                    self.renew(lease).await?;
                    let error = line_error(DeployStep::Created);
                    let listed = self.line.list().await.map_err(&error)?;
                    let name = menu.line_name();
                    let created = match listed.iter().find(|listed| listed.name == name) {
                        Some(found) => {
                            report
                                .lines
                                .push(format!("{id}: adopted {} from LINE's list", found.rich_menu_id));
                            found.rich_menu_id.clone()
                        }
                        None => {
                            let created = self.line.create(&menu.line_request()).await.map_err(&error)?;
                            report.lines.push(format!("{id}: created {created}"));
                            created
                        }
                    };
                    // A file changed back to a hash deployed before adopts
                    // that menu: it is no longer old, and must not be deleted.
                    record.old.retain(|old| *old != created);
                    record.rich_menu_id = Some(created);
                    record.step = DeployStep::Created;
                }
                DeployStep::Created => {
                    let menu_id = known_id(record, id)?;
                    self.renew(lease).await?;
                    let error = line_error(DeployStep::ImageUploaded);
                    let kind = if menu.is_jpeg() {
                        ImageType::Jpeg
                    } else {
                        ImageType::Png
                    };
                    match self.line.upload_image(&menu_id, &menu.image, kind).await {
                        Ok(()) => report.lines.push(format!("{id}: image {} uploaded", menu.file.image)),
                        // LINE takes one image per menu: a repeat after a lost
                        // answer is refused, and the image is there.
                        Err(refused @ SendError::Rejected { .. }) => {
                            if !self.line.has_image(&menu_id).await.map_err(&error)? {
                                return Err(error(refused));
                            }
                            report
                                .lines
                                .push(format!("{id}: image {} already on LINE", menu.file.image));
                        }
                        Err(other) => return Err(error(other)),
                    }
                    record.step = DeployStep::ImageUploaded;
                    record.live = Some(menu_id);
                }
                DeployStep::ImageUploaded => {
                    let menu_id = known_id(record, id)?;
                    self.renew(lease).await?;
                    let error = line_error(DeployStep::Aliased);
                    match self.line.alias(id).await.map_err(&error)? {
                        Some(current) if current == menu_id => {}
                        Some(_) => self.line.update_alias(id, &menu_id).await.map_err(&error)?,
                        None => match self.line.create_alias(id, &menu_id).await {
                            Ok(()) => {}
                            // Created meanwhile (a lost answer): point it here.
                            Err(SendError::Rejected { .. }) => {
                                self.line.update_alias(id, &menu_id).await.map_err(&error)?;
                            }
                            Err(other) => return Err(error(other)),
                        },
                    }
                    report.lines.push(format!("{id}: alias {id} points at {menu_id}"));
                    record.step = DeployStep::Aliased;
                }
                DeployStep::Aliased => {
                    return Err(DeployError::Stuck(format!(
                        "{id}: the users of its old menus were not moved before its default and deletes"
                    )));
                }
                DeployStep::UsersMoved => {
                    let menu_id = known_id(record, id)?;
                    self.renew(lease).await?;
                    let error = line_error(DeployStep::Defaulted);
                    if menu.file.default {
                        self.line.set_default(&menu_id).await.map_err(&error)?;
                        report.lines.push(format!("{id}: the account's default menu"));
                    } else if let Some(current) = self.line.default_menu().await.map_err(&error)?
                        && (current == menu_id || record.old.contains(&current))
                    {
                        self.line.cancel_default().await.map_err(&error)?;
                        report.lines.push(format!("{id}: no longer the default menu"));
                    }
                    record.step = DeployStep::Defaulted;
                }
                DeployStep::Defaulted => {
                    for old in &record.old {
                        self.renew(lease).await?;
                        if self.line.delete(old).await.map_err(line_error(DeployStep::Done))? {
                            report.lines.push(format!("{id}: deleted the old menu {old}"));
                        }
                    }
                    record.old.clear();
                    record.step = DeployStep::Done;
                }
                DeployStep::Done => {}
            }
            started.version = self.record(id, &started.record, Expect::At(started.version)).await?;
        }
        Ok(())
    }

    /// The deploy's one batch: the users of every replaced menu moved to its
    /// successor, those of menus without a file unlinked. A batch an earlier
    /// deploy recorded is polled to its end first; the menus it served are
    /// then past their move.
    async fn move_users(
        &self,
        in_hand: &mut [InHand<'_>],
        retiring: &[(String, Stored<RichMenuRecord>)],
        lease: &mut HeldDeploy,
        report: &mut DeployReport,
    ) -> Result<(), DeployError> {
        let account = |error| DeployError::Account {
            step: "moving the users of the old menus",
            error,
        };
        if let Some(batch) = lease.batch.clone() {
            let done = self.await_batch(&batch.request_id, lease).await?;
            if done {
                self.moved(in_hand, &batch.menus).await?;
            }
            self.renew_with(lease, None).await?;
        }
        // A menu LINE no longer has has no users, and LINE refuses a batch naming it.
        let existing = self.existing_ids().await?;
        let mut operations = Vec::new();
        let mut menus = Vec::new();
        for started in in_hand
            .iter()
            .filter(|started| started.record.step == DeployStep::Aliased)
        {
            let menu_id = known_id(&started.record, &started.menu.file.id)?;
            menus.push(BatchTarget {
                menu: started.menu.file.id.clone(),
                rich_menu_id: Some(menu_id.clone()),
            });
            operations.extend(
                started
                    .record
                    .old
                    .iter()
                    .filter(|old| **old != menu_id && existing.contains(old.as_str()))
                    .map(|old| BatchOperation::Link {
                        from: old.clone(),
                        to: menu_id.clone(),
                    }),
            );
        }
        for (id, stored) in retiring {
            menus.push(BatchTarget {
                menu: id.clone(),
                rich_menu_id: None,
            });
            for from in stored.doc.rich_menu_id.iter().chain(stored.doc.old.iter()) {
                let operation = BatchOperation::Unlink { from: from.clone() };
                if existing.contains(from.as_str()) && !operations.contains(&operation) {
                    operations.push(operation);
                }
            }
        }
        if !operations.is_empty() {
            self.renew(lease).await?;
            let request_id = self.line.batch(&operations).await.map_err(account)?;
            // Recorded before it is polled: a deploy killed meanwhile polls it again.
            let batch = DeployBatch {
                request_id: request_id.clone(),
                menus: menus.clone(),
            };
            self.renew_with(lease, Some(batch)).await?;
            if !self.await_batch(&request_id, lease).await? {
                self.renew_with(lease, None).await?;
                return Err(DeployError::Stuck(format!(
                    "LINE's batch {request_id} moving the users of the old menus failed; run the deploy again"
                )));
            }
            report.lines.push(format!(
                "users of {} old menu(s) moved or unlinked in one batch",
                operations.len()
            ));
        }
        self.moved(in_hand, &menus).await?;
        self.renew_with(lease, None).await
    }

    /// The files a batch moved users to (their record still names the LINE
    /// menu the batch moved them to) are past their move.
    async fn moved(&self, in_hand: &mut [InHand<'_>], menus: &[BatchTarget]) -> Result<(), DeployError> {
        for started in in_hand.iter_mut().filter(|started| {
            started.record.step == DeployStep::Aliased
                && menus.iter().any(|target| {
                    target.menu == started.menu.file.id
                        && target.rich_menu_id.is_some()
                        && target.rich_menu_id == started.record.rich_menu_id
                })
        }) {
            started.record.step = DeployStep::UsersMoved;
            started.version = self
                .record(&started.menu.file.id, &started.record, Expect::At(started.version))
                .await?;
        }
        Ok(())
    }

    /// Polls LINE's batch to its end: `true` when it succeeded, `false` when
    /// it failed or LINE no longer knows it (run again, it is posted anew:
    /// users already moved are on the new menu, not the old).
    async fn await_batch(&self, request_id: &str, lease: &mut HeldDeploy) -> Result<bool, DeployError> {
        let account = |error| DeployError::Account {
            step: "waiting for LINE's batch",
            error,
        };
        let began = std::time::Instant::now();
        let mut wait = PROGRESS_POLL;
        loop {
            match self.line.batch_progress(request_id).await {
                Ok(BatchPhase::Succeeded) => return Ok(true),
                Ok(BatchPhase::Failed) | Err(SendError::Rejected { status: 404, .. }) => {
                    tracing::warn!(outcome = "failed", "LINE's rich menu batch failed or is unknown");
                    return Ok(false);
                }
                Ok(BatchPhase::Ongoing) if began.elapsed() < BATCH_PATIENCE => {
                    self.wait_renewing(wait, lease).await?;
                    wait = (wait * 2).min(PROGRESS_POLL_MAX);
                }
                Ok(BatchPhase::Ongoing) => {
                    return Err(DeployError::Stuck(format!(
                        "LINE's batch {request_id} is still under way after {BATCH_PATIENCE:?}; run the deploy again to go on waiting"
                    )));
                }
                Err(error) => return Err(account(error)),
            }
        }
    }

    /// Waits `wait`, renewing the lease at least every third of its length,
    /// so a long batch never lets it run out.
    async fn wait_renewing(&self, wait: Duration, lease: &mut HeldDeploy) -> Result<(), DeployError> {
        let slice = (self.store.lease() / 3).max(Duration::from_millis(100));
        let mut left = wait;
        while !left.is_zero() {
            self.renew(lease).await?;
            let now = left.min(slice);
            tokio::time::sleep(now).await;
            left = left.saturating_sub(now);
        }
        self.renew(lease).await
    }

    /// A record whose file is gone, after the batch unlinked its users: its
    /// alias, default and menus deleted, then the record.
    async fn retire(
        &self,
        id: &str,
        stored: Stored<RichMenuRecord>,
        lease: &mut HeldDeploy,
        report: &mut DeployReport,
    ) -> Result<(), DeployError> {
        let account = |error| DeployError::Account {
            step: "retiring a menu without a file",
            error,
        };
        let mut ids: Vec<String> = Vec::new();
        for known in stored.doc.rich_menu_id.iter().chain(stored.doc.old.iter()) {
            if !ids.contains(known) {
                ids.push(known.clone());
            }
        }
        self.renew(lease).await?;
        if let Some(current) = self.line.alias(id).await.map_err(account)?
            && ids.contains(&current)
        {
            self.line.delete_alias(id).await.map_err(account)?;
        }
        if let Some(current) = self.line.default_menu().await.map_err(account)?
            && ids.contains(&current)
        {
            self.line.cancel_default().await.map_err(account)?;
        }
        for old in &ids {
            self.renew(lease).await?;
            self.line.delete(old).await.map_err(account)?;
        }
        if !self.store.delete_rich_menu_record(id, stored.version).await? {
            return Err(DeployError::LeaseLost);
        }
        report.lines.push(format!(
            "{id}: no file any more: users unlinked, alias and menus deleted"
        ));
        Ok(())
    }

    /// Menus on LINE named by the service that no record knows are listed,
    /// never deleted: they may be another database's (a deploy against the
    /// wrong Firestore must not take a live account's menus away).
    async fn report_leftovers(&self, report: &mut DeployReport) -> Result<(), DeployError> {
        for leftover in self.leftovers().await? {
            report.lines.push(format!(
                "not deleted: {} ({}) is named by the service but no record here knows it",
                leftover.rich_menu_id, leftover.name
            ));
        }
        Ok(())
    }

    /// Every menu record, by the file's id.
    async fn records_by_id(&self) -> Result<BTreeMap<String, Stored<RichMenuRecord>>, DeployError> {
        Ok(self
            .store
            .rich_menu_records()
            .await?
            .into_iter()
            .map(|stored| (stored.id.clone(), stored))
            .collect())
    }

    /// Menus on LINE named by the service that no record knows.
    async fn leftovers(&self) -> Result<Vec<ListedMenu>, DeployError> {
        let known: HashSet<String> = self
            .store
            .rich_menu_records()
            .await?
            .into_iter()
            .flat_map(|stored| stored.doc.rich_menu_id.into_iter().chain(stored.doc.old))
            .collect();
        let listed = self.line.list().await.map_err(|error| DeployError::Account {
            step: "listing LINE's menus",
            error,
        })?;
        Ok(listed
            .into_iter()
            .filter(|listed| listed.name.starts_with(LINE_NAME_PREFIX) && !known.contains(&listed.rich_menu_id))
            .collect())
    }

    async fn existing_ids(&self) -> Result<HashSet<String>, DeployError> {
        let listed = self.line.list().await.map_err(|error| DeployError::Account {
            step: "listing LINE's menus",
            error,
        })?;
        Ok(listed.into_iter().map(|listed| listed.rich_menu_id).collect())
    }

    async fn record(&self, id: &str, record: &RichMenuRecord, expect: Expect) -> Result<Version, DeployError> {
        let version = self
            .store
            .put_rich_menu_record(id, record, expect)
            .await?
            .ok_or(DeployError::LeaseLost)?;
        tracing::info!(menu = id, step = record.step.as_str(), "rich menu deploy step recorded");
        Ok(version)
    }

    /// What a deploy would do now, changing nothing.
    async fn plan(&self, menus: &[RichMenu]) -> Result<DeployReport, DeployError> {
        let mut report = DeployReport::default();
        let mut records = self.records_by_id().await?;
        for menu in menus {
            let id = &menu.file.id;
            let stored = records.remove(id);
            let line = match begin(stored.as_ref().map(recorded).as_ref(), &menu.hash) {
                Begin::Unchanged => format!("{id}: unchanged"),
                Begin::Resume(step) => format!("{id}: would resume after step {}", step.as_str()),
                Begin::Plan { old } => {
                    let mut what = format!(
                        "{id}: would create a menu from {} (hash {}), upload {} and point alias {id} at it",
                        menu.path.display(),
                        menu.hash,
                        menu.file.image
                    );
                    if !old.is_empty() {
                        let old = old.join(", ");
                        what.push_str(&format!("; move the users of {old} to it, then delete {old}"));
                    }
                    if menu.file.default {
                        what.push_str("; set it as the account's default");
                    }
                    what
                }
            };
            report.lines.push(line);
        }
        for (id, stored) in records {
            let ids: Vec<&str> = stored
                .doc
                .rich_menu_id
                .iter()
                .chain(stored.doc.old.iter())
                .map(String::as_str)
                .collect();
            report.lines.push(format!(
                "{id}: no file any more: would unlink its users and delete its alias and {}",
                ids.join(", ")
            ));
        }
        for leftover in self.leftovers().await? {
            report.lines.push(format!(
                "not deleted: {} ({}) is named by the service but no record here knows it",
                leftover.rich_menu_id, leftover.name
            ));
        }
        Ok(report)
    }
}

fn recorded(stored: &Stored<RichMenuRecord>) -> Recorded<'_> {
    Recorded {
        hash: &stored.doc.hash,
        step: stored.doc.step,
        rich_menu_id: stored.doc.rich_menu_id.as_deref(),
        old: &stored.doc.old,
    }
}

/// The record's LINE menu, which every step after the create has.
fn known_id(record: &RichMenuRecord, id: &str) -> Result<String, DeployError> {
    record.rich_menu_id.clone().ok_or_else(|| {
        DeployError::Stuck(format!(
            "{id}: the record is at step {} without a LINE menu id",
            record.step.as_str()
        ))
    })
}
