//! Friend-add source links, carried out: a link's visit sent through LINE
//! Login, the login recorded once, and the source's scenario started once
//! the user follows.
//!
//! The follow event and the login's callback arrive in either order, seconds
//! apart, on any instances. Each reads the other's record and commits
//! conditional on what it read, so whichever is recorded second queues the
//! source's scenario:
//! - the login's commit expects the user's record as read (a follow recorded
//!   meanwhile makes it read and decide again, and then queue the start);
//! - the follow, after recording itself on the user's record, reads the
//!   user's waiting sources and moves each to `friend` conditional on it as
//!   read (a login committed before is seen; one after saw the follow).
//!
//! The start is queued as an inbox record with a key derived from user and
//! source, created in the same commit as the standing it goes with: a second
//! queuing finds it there, and a worker starts the scenario like any event
//! (a push: there is no reply token), once.

use super::PipelineError;
use super::versions::Versions;
use super::work::{Plan, Work};
use crate::clock::Clock;
use crate::engine::source_link::{LinkState, StateError, issue_state, plan_visit, verify_state};
use crate::ids::LineUserId;
use crate::line::login::{LoginClient, LoginError, authorize_url};
use crate::scenario::sources::{Source, Sources};
use crate::store::{Befriend, InboxKey, NewEvent, QueuedStart, Store, Visit, VisitOutcome, source_start_key};
use std::sync::Arc;

/// Decide-and-commit rounds of one login or follow before it gives up.
const ROUNDS: usize = 5;
/// The inbox's event type of a queued source start (metrics, timelines).
const SOURCE_START_EVENT: &str = "source";

/// Queues sources' scenario starts, for logins and follows alike.
#[derive(Clone)]
pub(crate) struct SourceStarts {
    store: Store,
    versions: Arc<Versions>,
    sources: Arc<Sources>,
    clock: Clock,
}

/// A start to queue: its inbox key and stored work.
struct Queued {
    key: InboxKey,
    plan: String,
    event_id: String,
}

impl Queued {
    fn as_start<'a>(&'a self, user: &'a str) -> QueuedStart<'a> {
        QueuedStart {
            key: &self.key,
            event: NewEvent {
                destination: "line-survey:source",
                webhook_event_id: &self.event_id,
                event_type: SOURCE_START_EVENT,
                line_user_id: Some(user),
                plan: self.plan.clone(),
                // Any sweeper takes it at once (no worker slot is held here).
                held: false,
                text: None,
            },
        }
    }
}

impl SourceStarts {
    pub(crate) fn new(store: Store, versions: Arc<Versions>, sources: Arc<Sources>, clock: Clock) -> Self {
        Self {
            store,
            versions,
            sources,
            clock,
        }
    }

    pub(crate) fn sources(&self) -> &Sources {
        &self.sources
    }

    /// The day (Tokyo) a count at `ms` goes to.
    fn day(ms: i64) -> String {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap_or_default()
            .with_timezone(&crate::scenario::DEFAULT_TIME_ZONE)
            .format("%Y-%m-%d")
            .to_string()
    }

    /// The start of `source`'s scenario for `user`, if it has one.
    fn queued(&self, user: &LineUserId, source: &Source) -> Result<Option<Queued>, PipelineError> {
        let Some(scenario) = &source.scenario else {
            return Ok(None);
        };
        let key = source_start_key(user.as_str(), &source.id)
            .ok_or_else(|| PipelineError::InvalidInput("the source start's key cannot be formed".into()))?;
        let event_id = format!("source:{}:{}", source.id, user.as_str());
        let plan = self
            .versions
            .current()
            .source_start(scenario, user.clone(), &event_id)
            .map_err(|ignored| PipelineError::Defect(format!("the source's scenario cannot start: {ignored}")))?;
        let now = self.clock.now_ms();
        let work = Work::raised(&event_id, SOURCE_START_EVENT, now, Plan::Start(plan));
        let plan = work
            .encode()
            .map_err(|error| PipelineError::Encoding(format!("the source start cannot be encoded: {error}")))?;
        Ok(Some(Queued { key, plan, event_id }))
    }

    /// A follow: each of the user's sources still waiting becomes a friend's,
    /// counted once, with its scenario queued. Safe to repeat (a redelivered
    /// follow, another instance): each change is conditional on the record
    /// as read.
    pub(crate) async fn followed(&self, user: &LineUserId, followed_ms: i64) -> Result<usize, PipelineError> {
        if self.sources.is_empty() {
            return Ok(0);
        }
        let mut queued = 0;
        for _ in 0..ROUNDS {
            let waiting = self.store.waiting_sources(user.as_str()).await?;
            if waiting.is_empty() {
                return Ok(queued);
            }
            for recorded in &waiting {
                // A source removed from the file since: its record stays waiting.
                let Some(source) = self.sources.get(&recorded.doc.source) else {
                    continue;
                };
                let start = self.queued(user, source)?;
                let day = Self::day(followed_ms);
                let landed = self
                    .store
                    .befriend(Befriend {
                        recorded,
                        // A follow delayed past the link's opening (a late
                        // delivery) was not brought by the link.
                        new_friend: followed_ms
                            >= recorded
                                .doc
                                .link_opened_ms
                                .saturating_sub(crate::engine::source_link::FOLLOW_SKEW_MS),
                        followed_ms,
                        day: &day,
                        start: start.as_ref().map(|start| start.as_start(user.as_str())),
                    })
                    .await?;
                if landed {
                    queued += 1;
                    tracing::info!(source = %source.id, outcome = "befriended", "a source's new friend recorded");
                }
            }
        }
        let left = self.store.waiting_sources(user.as_str()).await?;
        let known = left
            .iter()
            .filter(|recorded| self.sources.get(&recorded.doc.source).is_some());
        if known.count() == 0 {
            Ok(queued)
        } else {
            Err(PipelineError::Contention("the user's sources kept changing".into()))
        }
    }

    /// The newest unfollow: counted once for each source the user became a
    /// friend through.
    pub(crate) async fn unfollowed(&self, user: &LineUserId, unfollowed_ms: i64) -> Result<(), PipelineError> {
        if self.sources.is_empty() {
            return Ok(());
        }
        let day = Self::day(unfollowed_ms);
        for recorded in self.store.befriended_sources(user.as_str()).await? {
            if recorded.doc.unfollowed_at.is_some() {
                continue;
            }
            // A conflict means another delivery of the unfollow counted it.
            self.store.count_unfollow(&recorded, unfollowed_ms, &day).await?;
        }
        Ok(())
    }
}

/// Where a completed login sends the browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Landing {
    /// Not a friend yet: LINE's add-friend page (`FRIEND_URL`).
    AddFriend(String),
    /// Already a friend: the service's thanks page.
    AlreadyFriend,
}

/// Why a link or its callback ends on an error page. Recorded nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    #[error("no such source")]
    UnknownSource,
    #[error("the login was cancelled at LINE")]
    Cancelled,
    #[error("the request is missing its code or state")]
    Incomplete,
    #[error(transparent)]
    State(#[from] StateError),
    #[error("the link was started in another browser")]
    OtherBrowser,
    #[error("the link's login was used already")]
    Replayed,
    #[error(transparent)]
    Login(#[from] LoginError),
    #[error("the login is not from a LINE user this account can reach")]
    NotALineUser,
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

impl From<crate::store::StoreError> for LinkError {
    fn from(error: crate::store::StoreError) -> Self {
        LinkError::Pipeline(error.into())
    }
}

/// What `GET /r/{source}` answers with.
pub(crate) struct Begun {
    pub(crate) authorize_url: String,
    /// Bound to the browser by a cookie, when the browser keeps it.
    pub(crate) nonce: String,
}

/// What LINE's redirect brings back to `GET /r/callback`.
pub(crate) struct Callback<'a> {
    pub(crate) code: Option<&'a str>,
    pub(crate) state: Option<&'a str>,
    /// LINE's `error` (the user cancelled, say).
    pub(crate) error: Option<&'a str>,
    /// LINE's `friendship_status_changed`.
    pub(crate) friendship_changed: Option<bool>,
    /// The nonce cookie `begin` set, when this browser sent it.
    pub(crate) cookie_nonce: Option<&'a str>,
}

/// The source links' service.
pub(crate) struct SourceLinks {
    starts: SourceStarts,
    login: LoginClient,
    redirect_uri: String,
    friend_url: String,
    state_key: [u8; 32],
    clock: Clock,
}

/// Settings of the links (`PUBLIC_BASE_URL`, `FRIEND_URL`).
pub(crate) struct LinkSettings {
    pub(crate) public_base_url: String,
    pub(crate) friend_url: String,
}

impl SourceLinks {
    pub(crate) fn new(starts: SourceStarts, login: LoginClient, settings: LinkSettings) -> Self {
        let state_key = crate::engine::source_link::state_key(&login.channel().channel_secret);
        Self {
            clock: starts.clock.clone(),
            starts,
            redirect_uri: format!("{}/r/callback", settings.public_base_url.trim_end_matches('/')),
            friend_url: settings.friend_url,
            login,
            state_key,
        }
    }

    pub(crate) fn sources(&self) -> &Sources {
        self.starts.sources()
    }

    /// `PUBLIC_BASE_URL` is plain HTTP (a local run): a `Secure` cookie would
    /// not be kept.
    pub(crate) fn plain_http(&self) -> bool {
        self.redirect_uri.starts_with("http://")
    }

    /// A visit of `/r/{source}`: where LINE Login is, with a fresh state.
    /// Nothing is written (crawlers and link previews open links too).
    pub(crate) fn begin(&self, source: &str) -> Result<Begun, LinkError> {
        let source = self.sources().get(source).ok_or(LinkError::UnknownSource)?;
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let state = issue_state(
            &self.state_key,
            &LinkState {
                source: source.id.clone(),
                nonce: nonce.clone(),
                issued_ms: self.clock.now_ms(),
            },
        );
        Ok(Begun {
            authorize_url: authorize_url(self.login.channel(), &self.redirect_uri, &state, &nonce),
            nonce,
        })
    }

    /// LINE's redirect back: the state checked, the code exchanged, the ID
    /// token verified, then the login recorded once.
    pub(crate) async fn complete(&self, callback: Callback<'_>) -> Result<Landing, LinkError> {
        if callback.error.is_some() {
            return Err(LinkError::Cancelled);
        }
        let (Some(code), Some(state)) = (callback.code, callback.state) else {
            return Err(LinkError::Incomplete);
        };
        let now_ms = self.clock.now_ms();
        let state = verify_state(&self.state_key, state, now_ms)?;
        if callback.cookie_nonce.is_some_and(|nonce| nonce != state.nonce) {
            return Err(LinkError::OtherBrowser);
        }
        let source = self.sources().get(&state.source).ok_or(LinkError::UnknownSource)?;
        let claims = self
            .login
            .log_in(code, &self.redirect_uri, &state.nonce, now_ms)
            .await?;
        let user = LineUserId::parse_line_shaped(claims.sub).map_err(|_| LinkError::NotALineUser)?;
        let following = self.record(&user, source, &state, callback.friendship_changed).await?;
        tracing::info!(source = %source.id, outcome = "login_recorded", "a source link's login recorded");
        // LINE says whether the login added the friend; the service's record
        // says whether they were one before.
        if callback.friendship_changed == Some(true) || following.is_none() {
            Ok(Landing::AddFriend(self.friend_url.clone()))
        } else {
            Ok(Landing::AlreadyFriend)
        }
    }

    /// Records the login: read, decide, commit conditional on the read.
    /// Returns whether the user follows (`Some(since)`) as recorded.
    async fn record(
        &self,
        user: &LineUserId,
        source: &Source,
        state: &LinkState,
        friendship_changed: Option<bool>,
    ) -> Result<Option<i64>, LinkError> {
        let queued = self.starts.queued(user, source)?;
        // A commit whose outcome was unknown may land after the read that
        // looked for it: then its own state reads as used.
        let mut unsure = false;
        for _ in 0..ROUNDS {
            let read = self.starts.store.source_read(user.as_str(), &source.id).await?;
            let plan = plan_visit(
                read.recorded.as_ref().map(|recorded| recorded.doc.standing),
                read.following_since_ms,
                friendship_changed,
                state.issued_ms,
                queued.is_some(),
            );
            let day = SourceStarts::day(self.clock.now_ms());
            let visit = Visit {
                nonce: &state.nonce,
                source: &source.id,
                user: user.as_str(),
                tags: &source.tags,
                link_opened_ms: state.issued_ms,
                day: &day,
                standing: plan.standing,
                new_friend: plan.new_friend,
                start: queued
                    .as_ref()
                    .filter(|_| plan.start_now)
                    .map(|start| start.as_start(user.as_str())),
            };
            match self.starts.store.record_visit(&read, visit).await? {
                VisitOutcome::Recorded => return Ok(read.following_since_ms),
                VisitOutcome::StateUsed if unsure => return Ok(read.following_since_ms),
                VisitOutcome::StateUsed => return Err(LinkError::Replayed),
                VisitOutcome::Unsure => unsure = true,
                VisitOutcome::Changed => {}
            }
        }
        Err(PipelineError::Contention("the user's record kept changing".into()).into())
    }
}
