//! `POST /admin/rich-menus/{id}/link`: one menu linked to every user of a
//! campaign-style audience (or, with `default`, their own menus unlinked),
//! 500 users a LINE bulk call, resumable.
//!
//! Per 500 users: their records say the menu was asked for (`richMenu`, the
//! sequence number raised) in one commit, then one bulk call links them (LINE
//! answers 202 and says nothing per user). A user whose record asks for
//! another menu afterwards (a step decided anew meanwhile, and its own link
//! call may have come before the bulk call) gets a link entry of their own,
//! which applies their newest decision again. The job's cursor
//! (`rich_menu_links/{id}`, from the `Idempotency-Key`) moves past a page of
//! users only once all of that is done: the same request sent again after a
//! crash or a failure goes on from there, and a page done twice changes nothing.

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
    /// Users whose newer decision was applied again afterwards.
    pub(crate) resynced: u64,
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
        let live = if unlink {
            None
        } else {
            Some(
                self.store
                    .live_rich_menu(&request.menu)
                    .await?
                    .ok_or_else(|| LinkError::NotDeployed(request.menu.clone()))?,
            )
        };
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
                resynced: 0,
                job_id: None,
                done: false,
            });
        }
        let api = self.api.as_ref().ok_or(LinkError::NoLine)?;
        let job_id = crate::ids::deterministic_id(&["rich_menu_link", &request.idempotency_key]);
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
        if !job.done {
            members = members.after(job.after.clone());
            while let Some(page) = members.next_page().await? {
                for users in page.chunks(BULK) {
                    self.store.ask_rich_menu(users, &request.menu).await?;
                    self.bulk(api, live.as_deref(), users).await?;
                    job.calls += 1;
                    job.linked += users.len() as u64;
                    let moved = self.store.asking_other_menu(users, &request.menu).await?;
                    if !moved.is_empty() {
                        self.store.queue_menu_syncs(&moved).await?;
                        job.resynced += moved.len() as u64;
                    }
                }
                job.after = members.cursor().map(str::to_owned);
                job.done = job.after.is_none();
                version = self
                    .store
                    .advance_menu_link_job(&job_id, &mut job, version)
                    .await?
                    .ok_or(LinkError::Busy)?;
            }
            if !job.done {
                job.done = true;
                self.store
                    .advance_menu_link_job(&job_id, &mut job, version)
                    .await?
                    .ok_or(LinkError::Busy)?;
            }
        }
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
            resynced: job.resynced,
            job_id: Some(job_id),
            done: job.done,
        })
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
