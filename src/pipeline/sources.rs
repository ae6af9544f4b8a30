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
//!
//! A follow greets by reply, so where it can it starts the source's scenario
//! itself, instead of the generic welcome (`SOURCE_WAIT_SECS`):
//! - a login recorded before the follow: the follow takes it (`takenBy`, in
//!   the commit that makes the user its friend);
//! - otherwise the follow says on the user's record that it waits
//!   (`sourceWaitOpenedMs`) and comes back once its wait is over (the event
//!   is put back, holding no worker); a login that finds that very follow
//!   waiting records its source as left to it (`deferredTo`) instead of
//!   queuing its start. A follow that never said so (links off on its
//!   instance, no wait there) is left nothing;
//! - after the wait the follow closes it on the user's record
//!   (`sourceWaitClosedMs`): a login that read the record before commits
//!   conditional on it, so it reads again and queues its start itself; then
//!   the follow reads the sources left to it (or to an older follow that was
//!   superseded) and takes one (`takenBy`, conditional), queuing any other as
//!   a push;
//! - a follow superseded meanwhile (an unfollow, a newer follow) queues what
//!   it took or was left as pushes.
//!
//! `takenBy` changes only conditional on the record as read, so each source's
//! start has one owner: a follow's reply, or a queued push (`queue`, final).

use super::PipelineError;
use super::versions::Versions;
use super::work::{Plan, Work};
use crate::clock::Clock;
use crate::engine::StartPlan;
use crate::engine::source_link::{FollowWait, follow_takes_start};
use crate::engine::source_link::{LinkState, StateError, issue_state, plan_visit, verify_state};
use crate::ids::LineUserId;
use crate::line::login::{LoginClient, LoginError, authorize_url};
use crate::scenario::sources::{Source, Sources};
use crate::store::{
    Befriend, InboxKey, NewEvent, QueuedStart, Store, Stored, TAKEN_BY_QUEUE, UserSourceDoc, Visit, VisitOutcome,
    source_start_key,
};
use std::sync::Arc;
use std::time::Duration;

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
    /// How long a follow waits for a login (`SOURCE_WAIT_SECS`).
    wait: Duration,
}

/// What a follow greets its new friend with.
#[derive(Debug)]
pub(crate) enum FollowGreeting {
    /// Not yet: the follow waits this much longer for a login naming the user.
    Wait(Duration),
    /// A source's scenario, by the follow's reply, instead of the welcome.
    Source(Box<StartPlan>),
    /// The follow trigger's welcome, as without sources.
    Welcome,
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
    pub(crate) fn new(
        store: Store,
        versions: Arc<Versions>,
        sources: Arc<Sources>,
        clock: Clock,
        wait: Duration,
    ) -> Self {
        Self {
            store,
            versions,
            sources,
            clock,
            wait,
        }
    }

    fn wait_ms(&self) -> i64 {
        i64::try_from(self.wait.as_millis()).unwrap_or(i64::MAX)
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

    /// The start of `source`'s scenario for `user`, if it has one: its run is
    /// the same whether a follow's reply or a queued push carries it.
    fn start_plan(&self, user: &LineUserId, source: &Source) -> Result<Option<(StartPlan, String)>, PipelineError> {
        let Some(scenario) = &source.scenario else {
            return Ok(None);
        };
        let event_id = format!("source:{}:{}", source.id, user.as_str());
        let plan = self
            .versions
            .current()
            .source_start(scenario, user.clone(), &event_id)
            .map_err(|ignored| PipelineError::Defect(format!("the source's scenario cannot start: {ignored}")))?;
        Ok(Some((plan, event_id)))
    }

    /// The start of `source`'s scenario for `user` as a queued push, if it has one.
    fn queued(&self, user: &LineUserId, source: &Source) -> Result<Option<Queued>, PipelineError> {
        let Some((plan, event_id)) = self.start_plan(user, source)? else {
            return Ok(None);
        };
        let key = source_start_key(user.as_str(), &source.id)
            .ok_or_else(|| PipelineError::InvalidInput("the source start's key cannot be formed".into()))?;
        let now = self.clock.now_ms();
        let work = Work::raised(&event_id, SOURCE_START_EVENT, now, Plan::Start(plan));
        let plan = work
            .encode()
            .map_err(|error| PipelineError::Encoding(format!("the source start cannot be encoded: {error}")))?;
        Ok(Some(Queued { key, plan, event_id }))
    }

    /// A follow (webhook event `event_id`, at `followed_ms`): each of the
    /// user's sources still waiting becomes a friend's, counted once; then
    /// what the follow greets with (see the module's notes). Safe to repeat
    /// (a retry, a redelivery, another instance): each change is conditional
    /// on the record as read.
    pub(crate) async fn followed(
        &self,
        user: &LineUserId,
        event_id: &str,
        followed_ms: i64,
    ) -> Result<FollowGreeting, PipelineError> {
        if self.sources.is_empty() {
            return Ok(FollowGreeting::Welcome);
        }
        let took = self.befriend_waiting(user, event_id, followed_ms).await?;
        if !took && self.wait_ms() > 0 {
            let remaining = followed_ms
                .saturating_add(self.wait_ms())
                .saturating_sub(self.clock.now_ms())
                // A follow stamped ahead of this clock waits no longer.
                .min(self.wait_ms());
            if remaining > 0 {
                // Said on the user's record before the follow goes back: only
                // a login that reads it leaves its start to this follow.
                self.store.open_source_wait(user.as_str(), followed_ms).await?;
                return Ok(FollowGreeting::Wait(Duration::from_millis(remaining.unsigned_abs())));
            }
        }
        // Closed even where this instance did not open it (the follow taken
        // over by an instance with another wait): a maximum, so it is cheap to
        // repeat.
        self.store.close_source_wait(user.as_str(), followed_ms).await?;
        self.greeting(user, event_id, followed_ms).await
    }

    /// Whether `recorded` is a source whose scenario this service can start.
    fn startable(&self, recorded: &Stored<UserSourceDoc>) -> Option<&Source> {
        self.sources
            .get(&recorded.doc.source)
            .filter(|source| source.scenario.is_some())
    }

    /// The user's waiting sources become a friend's; the first with a
    /// scenario is taken by this follow (none if a source is taken already).
    /// Whether one was taken now.
    async fn befriend_waiting(
        &self,
        user: &LineUserId,
        event_id: &str,
        followed_ms: i64,
    ) -> Result<bool, PipelineError> {
        let mut took = false;
        for _ in 0..ROUNDS {
            let waiting = self.store.waiting_sources(user.as_str()).await?;
            if waiting.is_empty() {
                return Ok(took);
            }
            for recorded in &waiting {
                // A source removed from the file since: its record stays waiting.
                let Some(source) = self.sources.get(&recorded.doc.source) else {
                    continue;
                };
                let take = !took && source.scenario.is_some();
                let start = if take { None } else { self.queued(user, source)? };
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
                        taken_by: take.then_some(event_id),
                    })
                    .await?;
                if landed {
                    took |= take;
                    tracing::info!(source = %source.id, outcome = "befriended", "a source's new friend recorded");
                }
            }
        }
        let left = self.store.waiting_sources(user.as_str()).await?;
        let known = left
            .iter()
            .filter(|recorded| self.sources.get(&recorded.doc.source).is_some());
        if known.count() == 0 {
            Ok(took)
        } else {
            Err(PipelineError::Contention("the user's sources kept changing".into()))
        }
    }

    /// After the wait: the source this follow starts (taken by it before, or
    /// left to it by a login and taken now), the others queued as pushes.
    async fn greeting(
        &self,
        user: &LineUserId,
        event_id: &str,
        followed_ms: i64,
    ) -> Result<FollowGreeting, PipelineError> {
        for _ in 0..ROUNDS {
            let friends = self.store.followed_sources(user.as_str()).await?;
            // In id order: a retry of this follow picks the same one.
            let mut mine = friends
                .iter()
                .filter(|recorded| recorded.doc.taken_by.as_deref() == Some(event_id))
                .filter_map(|recorded| Some((recorded, self.startable(recorded)?)));
            let first = mine.next();
            // Taken twice by this follow (an earlier attempt took one, a later
            // one another): the extra goes as a push.
            let mut extra: Vec<(&Stored<UserSourceDoc>, &Source)> = mine.collect();
            let left: Vec<(&Stored<UserSourceDoc>, &Source)> = friends
                .iter()
                // Left to this follow, or to an older one superseded before it
                // could take it (a follow, an unfollow and a follow again).
                .filter(|recorded| {
                    recorded.doc.taken_by.is_none()
                        && recorded.doc.deferred_to.is_some_and(|deferred| deferred <= followed_ms)
                })
                .filter_map(|recorded| Some((recorded, self.startable(recorded)?)))
                .collect();
            if extra.is_empty() && left.is_empty() {
                return match first {
                    Some((_, source)) => {
                        tracing::info!(source = %source.id, outcome = "source_greeting", "the follow greets with the source's scenario");
                        let (plan, _) = self
                            .start_plan(user, source)?
                            .ok_or_else(|| PipelineError::Defect("a startable source has no scenario".into()))?;
                        Ok(FollowGreeting::Source(Box::new(plan)))
                    }
                    None => Ok(FollowGreeting::Welcome),
                };
            }
            let mut iter = left.into_iter();
            if first.is_none()
                && let Some((recorded, _)) = iter.next()
            {
                // Landed or not, the next read says who has it.
                self.store.take_source(recorded, event_id, None).await?;
            }
            extra.extend(iter);
            for (recorded, source) in extra {
                let queued = self.queued(user, source)?;
                let start = queued.as_ref().map(|start| start.as_start(user.as_str()));
                self.store.take_source(recorded, TAKEN_BY_QUEUE, start).await?;
            }
        }
        Err(PipelineError::Contention("the user's sources kept changing".into()))
    }

    /// A follow that is no longer the user's newest event of its kind (an
    /// unfollow or a newer follow was recorded while it waited or failed): its
    /// reply greets no one now. While the user follows (a newer follow), what
    /// it took, or what a login left to it, is queued as a push; a newer
    /// follow's greeting taking one first is as good. While they do not (an
    /// unfollow), nothing is pushed to someone who left: what it took goes
    /// back, left to their next follow like what a login left to this one.
    /// Each change is conditional on its record as read. (A follow processed
    /// again has not committed its start: that commit ends it.)
    pub(crate) async fn superseded(
        &self,
        user: &LineUserId,
        event_id: &str,
        followed_ms: i64,
    ) -> Result<(), PipelineError> {
        if self.sources.is_empty() {
            return Ok(());
        }
        let following = self.store.following_since(user.as_str()).await?.is_some();
        for _ in 0..ROUNDS {
            let friends = self.store.followed_sources(user.as_str()).await?;
            let stranded: Vec<(&Stored<UserSourceDoc>, &Source)> = friends
                .iter()
                .filter(|recorded| match recorded.doc.taken_by.as_deref() {
                    Some(taken_by) => taken_by == event_id,
                    None => following && recorded.doc.deferred_to == Some(followed_ms),
                })
                .filter_map(|recorded| Some((recorded, self.startable(recorded)?)))
                .collect();
            if stranded.is_empty() {
                return Ok(());
            }
            for (recorded, source) in stranded {
                if !following {
                    self.store.hand_back_source(recorded, followed_ms).await?;
                    continue;
                }
                let queued = self.queued(user, source)?;
                let start = queued.as_ref().map(|start| start.as_start(user.as_str()));
                if self.store.take_source(recorded, TAKEN_BY_QUEUE, start).await? {
                    tracing::info!(source = %source.id, outcome = "queued_for_superseded_follow", "a superseded follow's source is pushed");
                }
            }
        }
        Err(PipelineError::Contention("the user's sources kept changing".into()))
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
            let now_ms = self.clock.now_ms();
            let day = SourceStarts::day(now_ms);
            let deferred_to = follow_takes_start(
                &plan,
                read.following_since_ms,
                FollowWait {
                    opened: read.wait_opened_ms,
                    closed: read.wait_closed_ms,
                },
                self.starts.wait_ms(),
                now_ms,
            );
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
                    .filter(|_| plan.start_now && deferred_to.is_none())
                    .map(|start| start.as_start(user.as_str())),
                deferred_to,
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
