//! `POST /admin/rich-menus/{id}/link`: one menu linked to every user of a
//! campaign-style audience (or, with `default`, their own menus unlinked),
//! 500 users a LINE bulk call, resumable.
//!
//! Per 500 users: their records say the menu was asked for (`richMenu`, the
//! sequence number raised), each with a link entry that waits [`SETTLE`], in
//! commits of 250 users; then one bulk call links them (LINE answers 202 and
//! applies it within seconds, saying nothing per user). The entries then
//! apply each user's newest decision once more, whatever became of the bulk
//! call: refused, lost with the process, applied late, overtaken by a step's
//! own decision or by a deploy that moved the menu. The job's cursor
//! (`rich_menu_links/{id}`, from the `Idempotency-Key`) moves past a page of
//! users only once all of that is done: the same request sent again after a
//! crash or a failure goes on from there.

use super::PipelineError;
use super::campaigns::members::Members;
use super::versions::Versions;
use crate::engine::campaign::{AudienceError, AudienceRequest};
use crate::line::client::SendError;
use crate::line::rich_menus::RichMenuApi;
use crate::store::{JobTake, Store};
use std::sync::Arc;
use std::time::Duration;

/// LINE's bulk link and unlink take at most this many users.
const BULK: usize = 500;
/// Users a commit records (each a record and a link entry: 500 writes).
const ASK: usize = 250;
/// How long the link entries of a bulk page wait: longer than LINE takes to
/// apply a bulk call.
const SETTLE: Duration = Duration::from_secs(30);
/// Users a dry run shows.
const SAMPLE: usize = 20;
/// Tries of one bulk call (5xx, 429, no answer: the call is safe to repeat).
const TRIES: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    #[error("{0:?} is no rich menu id: {rule} or \"default\"", rule = crate::ids::MenuId::RULE)]
    BadMenu(String),
    #[error("rich menu {0:?} is not deployed (line-survey richmenus deploy)")]
    NotDeployed(String),
    #[error(transparent)]
    Audience(#[from] AudienceError),
    #[error("another request is linking with this Idempotency-Key now")]
    Busy,
    #[error("this Idempotency-Key was used for another request")]
    OtherRequest,
    #[error("LINE refused or kept failing the bulk call: {0}")]
    Line(SendError),
    #[error("rich menu links need LINE: this is a dry run (LINE_DRY_RUN)")]
    NoLine,
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

impl From<crate::store::StoreError> for LinkError {
    fn from(error: crate::store::StoreError) -> Self {
        LinkError::Pipeline(PipelineError::Store(error))
    }
}

/// What was asked.
pub(crate) struct LinkRequest {
    pub(crate) menu: String,
    pub(crate) audience: AudienceRequest,
    pub(crate) dry_run: bool,
    /// The same key resumes the same request.
    pub(crate) idempotency_key: String,
}

/// What a link did (or a dry run found).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LinkReport {
    pub(crate) menu: String,
    pub(crate) dry_run: bool,
    /// Users matched (a dry run) or linked so far (this job, all requests).
    pub(crate) users: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) sample: Vec<String>,
    /// LINE bulk calls made (this job, all requests).
    pub(crate) calls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) job_id: Option<String>,
    pub(crate) done: bool,
}

#[derive(Clone)]
pub(crate) struct MenuLinks {
    store: Store,
    api: Option<RichMenuApi>,
    versions: Arc<Versions>,
}

impl MenuLinks {
    pub(crate) fn new(store: Store, api: Option<RichMenuApi>, versions: Arc<Versions>) -> Self {
        Self { store, api, versions }
    }

    pub(crate) async fn link(&self, request: LinkRequest) -> Result<LinkReport, LinkError> {
        let unlink = request.menu == "default";
        if !unlink && crate::ids::MenuId::parse(request.menu.clone()).is_err() {
            return Err(LinkError::BadMenu(request.menu));
        }
        if !unlink && self.live(&request.menu).await?.is_none() {
            return Err(LinkError::NotDeployed(request.menu));
        }
        // Dates in the audience are read in the scenarios' default zone.
        let audience = self
            .versions
            .current()
            .audience_in(&request.audience, crate::scenario::DEFAULT_TIME_ZONE)?;
        let mut members = Members::read(&self.store, audience, None);
        if request.dry_run {
            let (mut users, mut sample) = (0u64, Vec::new());
            while let Some(page) = members.next_page().await? {
                users += page.len() as u64;
                sample.extend(page.into_iter().take(SAMPLE.saturating_sub(sample.len())));
            }
            return Ok(LinkReport {
                menu: request.menu,
                dry_run: true,
                users,
                sample,
                calls: 0,
                job_id: None,
                done: false,
            });
        }
        if self.api.is_none() {
            return Err(LinkError::NoLine);
        }
        let job_id = link_job_id(&request.idempotency_key);
        let request_hash = crate::ids::deterministic_id(&[
            &request.menu,
            &serde_json::to_string(&request.audience).map_err(|error| PipelineError::Encoding(error.to_string()))?,
        ]);
        let stored = match self
            .store
            .take_menu_link_job(&job_id, &request.menu, &request_hash)
            .await?
        {
            JobTake::Taken(stored) => *stored,
            JobTake::Busy => return Err(LinkError::Busy),
            JobTake::OtherRequest => return Err(LinkError::OtherRequest),
        };
        let (mut job, mut version) = (stored.doc, stored.version);
        let linked = self
            .pages(&request.menu, members, &job_id, &mut job, &mut version)
            .await;
        // Whatever happened, the same request may go on at once.
        self.store.release_menu_link_job(&job_id, &mut job, version).await;
        linked?;
        tracing::info!(
            menu = %request.menu,
            users = job.linked,
            calls = job.calls,
            outcome = "linked",
            "rich menu linked to an audience"
        );
        Ok(LinkReport {
            menu: request.menu,
            dry_run: false,
            users: job.linked,
            sample: Vec::new(),
            calls: job.calls,
            job_id: Some(job_id),
            done: job.done,
        })
    }

    /// The menu's LINE menu now; `None` for `default` (an unlink) and for a
    /// menu never deployed.
    async fn live(&self, menu: &str) -> Result<Option<String>, LinkError> {
        if menu == "default" {
            return Ok(None);
        }
        Ok(self.store.live_rich_menu(menu).await?)
    }

    /// The job's pages from its cursor to the end, each recorded once done.
    async fn pages(
        &self,
        menu: &str,
        members: Members<'_>,
        job_id: &str,
        job: &mut crate::store::MenuLinkJob,
        version: &mut crate::store::Version,
    ) -> Result<(), LinkError> {
        let api = self.api.as_ref().ok_or(LinkError::NoLine)?;
        if job.done {
            return Ok(());
        }
        let mut members = members.after(job.after.clone());
        while let Some(page) = members.next_page().await? {
            // Read for each page: a deploy may have moved the menu meanwhile.
            let live = self.live(menu).await?;
            if menu != "default" && live.is_none() {
                return Err(LinkError::NotDeployed(menu.to_owned()));
            }
            for users in page.chunks(BULK) {
                for asked in users.chunks(ASK) {
                    self.store.ask_rich_menu(asked, menu, SETTLE).await?;
                }
                self.bulk(api, live.as_deref(), users).await?;
                job.calls += 1;
                job.linked += users.len() as u64;
            }
            job.after = members.cursor().map(str::to_owned);
            job.done = job.after.is_none();
            *version = self
                .store
                .advance_menu_link_job(job_id, job, *version)
                .await?
                .ok_or(LinkError::Busy)?;
        }
        if !job.done {
            job.done = true;
            *version = self
                .store
                .advance_menu_link_job(job_id, job, *version)
                .await?
                .ok_or(LinkError::Busy)?;
        }
        Ok(())
    }

    /// One bulk call, tried again on LINE's 5xx, 429 and lost answers.
    async fn bulk(&self, api: &RichMenuApi, live: Option<&str>, users: &[String]) -> Result<(), LinkError> {
        let mut wait = Duration::from_millis(500);
        for attempt in 1..=TRIES {
            let called = match live {
                Some(menu) => api.bulk_link(menu, users).await,
                None => api.bulk_unlink(users).await,
            };
            match called {
                Ok(()) => return Ok(()),
                Err(error @ SendError::Rejected { .. }) => return Err(LinkError::Line(error)),
                Err(error) if attempt == TRIES => return Err(LinkError::Line(error)),
                Err(SendError::RateLimited {
                    retry_after: Some(after),
                }) => tokio::time::sleep(after.max(wait)).await,
                Err(_) => tokio::time::sleep(wait).await,
            }
            wait = (wait * 2).min(Duration::from_secs(8));
        }
        Err(LinkError::Line(SendError::NoAnswer("no tries left".into())))
    }
}

/// The id of the link job an `Idempotency-Key` names (the audit entry of
/// the link names it too).
pub(crate) fn link_job_id(idempotency_key: &str) -> String {
    crate::ids::deterministic_id(&["rich_menu_link", idempotency_key])
}
