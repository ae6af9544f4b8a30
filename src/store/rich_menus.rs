//! Rich menu deploys in Firestore.
//!
//! - `rich_menus/{id}`: one record per menu file: the hash deployed or being
//!   deployed, its LINE menu, the step reached, the old LINE menus whose users
//!   move to it and which are deleted last, and the LINE menu a per-user link
//!   uses now (`live`). Each step is recorded after LINE did it, conditional
//!   on the record as last written.
//! - `rich_menu_deploys/current`: the deploy's lease, so two instances
//!   starting at once (or a start-up and the command) make one deploy, and the
//!   batch under way (its LINE request id and the menus it serves).

use super::docs::collections::{RICH_MENU_DEPLOYS, RICH_MENU_LINKS, RICH_MENUS, USERS};
use super::docs::{LedgerDoc, LedgerState, RouteDoc};
use super::lease::Stored;
use super::writes::{CommitOutcome, Expect, delete, expecting, set};
use super::{Store, StoreError, Version};
use crate::values::DeployStep;
use firestore::FirestoreInstant;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The deploy lease's one document.
const CURRENT: &str = "current";

/// More menu records than LINE allows menus (1,000) is not a deploy's.
const MAX_RECORDS: u32 = 1000;

/// `rich_menus/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RichMenuRecord {
    pub(crate) hash: String,
    pub(crate) step: DeployStep,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rich_menu_id: Option<String>,
    /// The LINE menu a per-user link to this menu uses now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) live: Option<String>,
    /// LINE menus this one replaces: their users move to it, then they go.
    #[serde(default)]
    pub(crate) old: Vec<String>,
    /// The account's default menu, as the file says.
    #[serde(default)]
    pub(crate) default: bool,
}

/// `rich_menu_deploys/current`: the lease, and the batch under way (the
/// one batch of a deploy moves the users of every replaced menu).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeployLease {
    lease_owner: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    lease_until: FirestoreInstant,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch: Option<DeployBatch>,
}

/// A batch LINE accepted: its request id, and the menus whose users it moves
/// (or, for menus whose files are gone, unlinks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeployBatch {
    pub(crate) request_id: String,
    pub(crate) menus: Vec<BatchTarget>,
}

/// One menu file a batch served: the LINE menu it moved users to (`None`:
/// it unlinked them). A later deploy credits the batch only to a record
/// that still names that LINE menu.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BatchTarget {
    pub(crate) menu: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rich_menu_id: Option<String>,
}

/// The deploy lease as held: its version and the batch it records.
#[derive(Debug, Clone)]
pub(crate) struct HeldDeploy {
    pub(crate) version: Version,
    pub(crate) batch: Option<DeployBatch>,
}

/// The rich menu a user's record asks for, and its sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AskedMenu {
    /// A menu file's id, or `default` (no menu of the user's own).
    pub(crate) menu: String,
    pub(crate) seq: i64,
}

impl Store {
    /// The menu `user`'s record asks for; `None` when it asks for none.
    pub(crate) async fn asked_rich_menu(&self, user: &str) -> Result<Option<AskedMenu>, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Asked {
            #[serde(default)]
            rich_menu: Option<String>,
            #[serde(default)]
            rich_menu_seq: i64,
        }
        let found = self.get_stored::<Asked>(USERS, user).await?;
        Ok(found.and_then(|stored| {
            stored.doc.rich_menu.map(|menu| AskedMenu {
                menu,
                seq: stored.doc.rich_menu_seq,
            })
        }))
    }

    /// The LINE menu a link to menu file `id` uses now; `None` when it was
    /// never deployed.
    pub(crate) async fn live_rich_menu(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .get_stored::<RichMenuRecord>(RICH_MENUS, id)
            .await?
            .and_then(|stored| stored.doc.live))
    }

    /// A ledger entry that makes `user`'s menu on LINE what their record
    /// asks for, takeable by any instance at once. Written with each step
    /// that decides a menu; a repeat of the commit writes another, which
    /// does the same.
    pub(super) fn rich_menu_sync_entry(&self, user: &str) -> (String, LedgerDoc) {
        self.rich_menu_sync_entry_after(user, Duration::ZERO)
    }

    /// [`Self::rich_menu_sync_entry`], takeable only after `delay`.
    fn rich_menu_sync_entry_after(&self, user: &str, delay: Duration) -> (String, LedgerDoc) {
        let nonce = uuid::Uuid::new_v4().to_string();
        let action_key = crate::ids::deterministic_id(&["rich_menu", user, &nonce]);
        let now = self.now();
        let doc = LedgerDoc {
            action_key: action_key.clone(),
            line_user_id: user.to_owned(),
            messages: "[]".to_owned(),
            route: RouteDoc::RichMenu,
            reply_token: None,
            event_time_ms: None,
            retry_key: uuid::Uuid::new_v4().to_string(),
            state: LedgerState::Pending,
            attempts: 0,
            reply_outcome_unknown: false,
            reply_call_pending: Some(false),
            reply_marks_by: None,
            lease_owner: self.options.instance_id.clone(),
            // Run out at once (or after `delay`): then the sweeper of any
            // instance makes the call.
            lease_until: super::later(now, delay),
            created_at: now,
            last_error: None,
            scenario_id: String::new(),
            webhook_event_id: None,
            inbox_id: None,
            answer_id: None,
            asks: None,
            split: None,
            personal: None,
            expire_at: super::later(now, super::ledger::LEDGER_RETENTION),
        };
        (action_key, doc)
    }

    /// Every menu record (a deploy's whole state: one per menu file).
    pub(crate) async fn rich_menu_records(&self) -> Result<Vec<Stored<RichMenuRecord>>, StoreError> {
        const FIELDS: [&str; 6] = ["hash", "step", "richMenuId", "live", "old", "default"];
        let documents = self
            .page_by_id(RICH_MENUS, &FIELDS, |_| None, None, MAX_RECORDS)
            .await?;
        documents.into_iter().map(Stored::decode).collect()
    }

    /// Writes a menu's record unless it changed since `expect`: its new
    /// version, or `None` when it changed (another deploy is at work). An
    /// unknown outcome is an error: the next deploy reads the record and goes
    /// on from what it says (every step is safe to repeat).
    pub(crate) async fn put_rich_menu_record(
        &self,
        id: &str,
        record: &RichMenuRecord,
        expect: Expect,
    ) -> Result<Option<Version>, StoreError> {
        let write = expecting(set(self.document_path(RICH_MENUS, id), record)?, expect);
        self.commit(vec![write]).await.first_version()
    }

    /// Deletes a retired menu's record unless it changed since `version`.
    pub(crate) async fn delete_rich_menu_record(&self, id: &str, version: Version) -> Result<bool, StoreError> {
        let write = expecting(delete(self.document_path(RICH_MENUS, id)), Expect::At(version));
        match self.commit(vec![write]).await {
            CommitOutcome::Committed(_) => Ok(true),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Ok(false),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Takes the deploy lease when it is free (never taken, run out, or
    /// ours), with the batch an earlier deploy recorded; `Err` with when the
    /// holder's lease runs out while another instance holds it.
    pub(crate) async fn take_rich_menu_deploy(&self) -> Result<Result<HeldDeploy, FirestoreInstant>, StoreError> {
        let found = self.get_stored::<DeployLease>(RICH_MENU_DEPLOYS, CURRENT).await?;
        let now = self.now();
        let (expect, batch) = match found {
            None => (Expect::Absent, None),
            Some(lease)
                if lease.doc.lease_owner != self.options.instance_id
                    && lease.doc.lease_until.as_millisecond() > now.as_millisecond() =>
            {
                return Ok(Err(lease.doc.lease_until));
            }
            Some(lease) => (Expect::At(lease.version), lease.doc.batch),
        };
        let until = super::later(now, self.options.lease);
        match self.write_deploy_lease(expect, until, batch.clone()).await? {
            Some(version) => Ok(Ok(HeldDeploy { version, batch })),
            // Another instance took it between the read and the write.
            None => Ok(Err(until)),
        }
    }

    /// Renews the deploy lease held as `held`, recording `batch` (`None`: no
    /// batch under way): the new version, or `None` when it is not ours any more.
    pub(crate) async fn renew_rich_menu_deploy(
        &self,
        held: &HeldDeploy,
        batch: Option<DeployBatch>,
    ) -> Result<Option<Version>, StoreError> {
        let until = super::later(self.now(), self.options.lease);
        self.write_deploy_lease(Expect::At(held.version), until, batch).await
    }

    /// Lets the lease go (it runs out now), so the next deploy need not wait.
    pub(crate) async fn release_rich_menu_deploy(&self, held: &HeldDeploy) -> Result<(), StoreError> {
        self.write_deploy_lease(Expect::At(held.version), self.now(), held.batch.clone())
            .await
            .map(|_| ())
    }

    async fn write_deploy_lease(
        &self,
        expect: Expect,
        until: FirestoreInstant,
        batch: Option<DeployBatch>,
    ) -> Result<Option<Version>, StoreError> {
        let lease = DeployLease {
            lease_owner: self.options.instance_id.clone(),
            lease_until: until,
            batch,
        };
        let write = expecting(set(self.document_path(RICH_MENU_DEPLOYS, CURRENT), &lease)?, expect);
        self.commit(vec![write]).await.first_version()
    }
}

/// `rich_menu_links/{jobId}`: an operator's link of one menu to an audience,
/// resumable: the user cursor moves past a page only once its users' records
/// say the menu was asked for and LINE took the bulk calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MenuLinkJob {
    pub(crate) menu: String,
    /// SHA-256 of the request, so one key cannot resume another request.
    pub(crate) request_hash: String,
    /// The last user of the last page done; absent: from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) after: Option<String>,
    #[serde(default)]
    pub(crate) done: bool,
    /// Users linked (or unlinked) so far.
    #[serde(default)]
    pub(crate) linked: u64,
    /// LINE bulk calls made so far.
    #[serde(default)]
    pub(crate) calls: u64,
    pub(crate) lease_owner: String,
    #[serde(with = "firestore::serialize_as_timestamp")]
    pub(crate) lease_until: FirestoreInstant,
}

/// How taking a link job ended.
pub(crate) enum JobTake {
    Taken(Box<Stored<MenuLinkJob>>),
    /// Another request works on it now.
    Busy,
    /// The key was used for another request.
    OtherRequest,
}

impl Store {
    /// Takes (or creates) link job `id` for `menu` and `request_hash`.
    pub(crate) async fn take_menu_link_job(
        &self,
        id: &str,
        menu: &str,
        request_hash: &str,
    ) -> Result<JobTake, StoreError> {
        let now = self.now();
        let until = super::later(now, self.options.lease);
        let found = self.get_stored::<MenuLinkJob>(RICH_MENU_LINKS, id).await?;
        let (mut job, expect) = match found {
            None => (
                MenuLinkJob {
                    menu: menu.to_owned(),
                    request_hash: request_hash.to_owned(),
                    after: None,
                    done: false,
                    linked: 0,
                    calls: 0,
                    lease_owner: self.options.instance_id.clone(),
                    lease_until: until,
                },
                Expect::Absent,
            ),
            Some(stored) if stored.doc.request_hash != request_hash => return Ok(JobTake::OtherRequest),
            // A live lease is another request's, on any instance (each
            // request lets its lease go when it ends).
            Some(stored) if !stored.doc.done && stored.doc.lease_until.as_millisecond() > now.as_millisecond() => {
                return Ok(JobTake::Busy);
            }
            Some(stored) => (stored.doc, Expect::At(stored.version)),
        };
        job.lease_owner.clone_from(&self.options.instance_id);
        job.lease_until = until;
        match self.put_menu_link_job(id, &job, expect).await? {
            Some(version) => Ok(JobTake::Taken(Box::new(Stored {
                id: id.to_owned(),
                doc: job,
                version,
            }))),
            None => Ok(JobTake::Busy),
        }
    }

    /// Writes the job's progress (its lease renewed) unless it changed since
    /// `version`: the new version, or `None` when another request took it.
    pub(crate) async fn advance_menu_link_job(
        &self,
        id: &str,
        job: &mut MenuLinkJob,
        version: Version,
    ) -> Result<Option<Version>, StoreError> {
        job.lease_until = super::later(self.now(), self.options.lease);
        self.put_menu_link_job(id, job, Expect::At(version)).await
    }

    /// Lets the job's lease go (it runs out now), so the same request sent
    /// again may go on at once.
    pub(crate) async fn release_menu_link_job(&self, id: &str, job: &mut MenuLinkJob, version: Version) {
        job.lease_until = self.now();
        if let Err(error) = self.put_menu_link_job(id, job, Expect::At(version)).await {
            tracing::warn!(error = %error, "a rich menu link job's lease could not be released");
        }
    }

    async fn put_menu_link_job(
        &self,
        id: &str,
        job: &MenuLinkJob,
        expect: Expect,
    ) -> Result<Option<Version>, StoreError> {
        let write = expecting(set(self.document_path(RICH_MENU_LINKS, id), job)?, expect);
        self.commit(vec![write]).await.first_version()
    }

    /// Records on each of `users` (at most 250) that `menu` is asked for,
    /// raising their sequence numbers, with a link entry each that any
    /// sweeper takes only after `settle`, in one commit. The caller links
    /// them in bulk meanwhile; the entries then apply each user's newest
    /// decision again, whatever became of the bulk call (refused, lost with
    /// the process, applied late by LINE, overtaken by a step or a deploy).
    pub(crate) async fn ask_rich_menu(&self, users: &[String], menu: &str, settle: Duration) -> Result<(), StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Asked<'a> {
            line_user_id: &'a str,
            rich_menu: &'a str,
        }
        let writes = users
            .iter()
            .map(|user| {
                let asked = Asked {
                    line_user_id: user,
                    rich_menu: menu,
                };
                let (id, entry) = self.rich_menu_sync_entry_after(user, settle);
                Ok([
                    super::writes::merge(
                        self.document_path(USERS, user),
                        &asked,
                        vec![super::writes::increment_by("richMenuSeq", 1)],
                    )?,
                    self.ledger_create_write(&id, &entry)?,
                ])
            })
            .collect::<Result<Vec<_>, StoreError>>()?
            .into_iter()
            .flatten()
            .collect();
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(()),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => Err(StoreError::Unavailable(
                "a user's record changed while the menu was recorded".into(),
            )),
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }
}
