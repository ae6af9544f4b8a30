//! Personal text, where the user's state is read: an action whose messages hold
//! placeholders gets the values they name (see `engine::personal`) before its
//! ledger entry is staged, from one read of the user's record and the answers
//! named, plus LINE's profile when the cached display name is missing or older
//! than a week. The values are recorded on the entry, so whatever attempt or
//! instance sends it renders the same bytes; they are dropped when it settles.
//!
//! A profile that cannot be fetched (LINE failing, slow, or a user who blocked
//! the account) gives no name: the placeholder's fallback renders, and the step
//! waits at most one LINE timeout for it: what LINE said (or that it failed) is
//! remembered for a minute, so a follow and its greeting, or a step's retries,
//! ask once. Names are never logged.
//!
//! The cache write is conditional on the record as read; a step whose commit is
//! conditional on that same read (a branch, a timer's firing) takes the
//! record's new version from [`Moved`]: the only change since its read is the
//! name it renders with.

use super::branches::StepSoFar;
use crate::clock::Clock;
use crate::engine::Engine;
use crate::engine::personal::{Needs, answer_text, needs};
use crate::ids::{LineUserId, NodeId, ScenarioId, answer_id};
use crate::line::client::LineClient;
use crate::outbound::OutboundAction;
use crate::store::Version;
use crate::store::{Expect, Store, StoreError, UserRecord};
use crate::values::PersonalValues;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A cached display name is fetched again after this long.
const PROFILE_MAX_AGE_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// What a profile call said is reused for this long by this instance.
const RECENT_MS: i64 = 60_000;
/// At most this many recent outcomes are remembered (the oldest go first).
const RECENT_MAX: usize = 10_000;

/// One profile call's outcome: `Some(name or none)` when LINE answered,
/// `None` when it could not be asked.
type Outcome = Option<Option<String>>;

#[derive(Clone)]
pub(crate) struct Personaliser {
    store: Store,
    line: LineClient,
    clock: Clock,
    /// Recent outcomes by user, with when they came (ms).
    recent: Arc<Mutex<HashMap<String, (i64, Outcome)>>>,
}

/// The user's record moved from `from` (as the step read it) to `to` by the
/// name's cache write alone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Moved {
    pub(crate) from: Expect,
    pub(crate) to: Version,
}

impl Moved {
    /// `expect` (a step's precondition on the record) after the cache write:
    /// unchanged unless it named the version the cache write started from.
    pub(crate) fn applied(moved: Option<Moved>, expect: Option<Expect>) -> Option<Expect> {
        match (moved, expect) {
            (Some(moved), Some(expect)) if expect == moved.from => Some(Expect::At(moved.to)),
            (_, expect) => expect,
        }
    }
}

impl Personaliser {
    pub(crate) fn new(store: Store, line: LineClient, clock: Clock) -> Self {
        Self {
            store,
            line,
            clock,
            recent: Arc::default(),
        }
    }

    /// `action` with the values its placeholders name. `step` is what the step
    /// records with it (its answer, the fields it sets): the messages see the
    /// user as the step leaves them. With it, how the record moved if the name
    /// was cached on it now.
    pub(crate) async fn fill(
        &self,
        action: Option<OutboundAction>,
        engine: &Engine,
        step: &StepSoFar<'_>,
    ) -> Result<(Option<OutboundAction>, Option<Moved>), StoreError> {
        let Some(mut action) = action else {
            return Ok((None, None));
        };
        let (values, moved) = self
            .values_for(&action.user, &action.scenario, &action.messages, engine, step)
            .await?;
        if values.is_some() {
            action.personal = values;
        }
        Ok((Some(action), moved))
    }

    /// The values `messages`' placeholders name for `user` in `scenario`
    /// (`None` when they name none), as [`Self::fill`] decides them.
    pub(crate) async fn values_for(
        &self,
        user: &LineUserId,
        scenario: &ScenarioId,
        messages: &[crate::line::messages::Message],
        engine: &Engine,
        step: &StepSoFar<'_>,
    ) -> Result<(Option<PersonalValues>, Option<Moved>), StoreError> {
        let needs = needs(messages);
        if needs.is_empty() {
            return Ok((None, None));
        }
        let (values, moved) = self.values(user, scenario, &needs, engine, step).await?;
        Ok((Some(values), moved))
    }

    async fn values(
        &self,
        user: &LineUserId,
        scenario_id: &ScenarioId,
        needs: &Needs,
        engine: &Engine,
        step: &StepSoFar<'_>,
    ) -> Result<(PersonalValues, Option<Moved>), StoreError> {
        let nodes: Vec<NodeId> = needs
            .answers
            .iter()
            .filter_map(|node| NodeId::parse(node.as_str()).ok())
            .collect();
        let answer_ids: Vec<String> = nodes.iter().map(|node| answer_id(scenario_id, node, user)).collect();
        // The branch's read of this step, when it took every answer named;
        // else one read of our own.
        let covered = step
            .read
            .as_ref()
            .filter(|prior| answer_ids.iter().all(|id| prior.answers.contains_key(id)));
        let own;
        let read = match covered {
            Some(prior) => prior,
            None => {
                let read = self.store.user_state(user.as_str(), &answer_ids, &[]).await?;
                own = super::branches::PriorRead {
                    answers: answer_ids.iter().cloned().zip(read.answers).collect(),
                    record: read.record,
                    expect: read.expect,
                };
                &own
            }
        };
        let scenario = engine.scenario(scenario_id);
        let mut values = PersonalValues::default();
        for name in &needs.fields {
            let set = step.changes.set.get(name);
            let stored = read.record.as_ref().and_then(|record| record.fields.get(name));
            if let Some(value) = set.or(stored) {
                values.fields.insert(name.clone(), value.as_text());
            }
        }
        for (node, id) in nodes.iter().zip(&answer_ids) {
            let own = step
                .answer
                .filter(|(scenario, answered, _)| *scenario == scenario_id && *answered == node)
                .map(|(_, _, value)| value);
            let stored = read.answers.get(id).and_then(Option::as_ref);
            if let Some(value) = own.or(stored) {
                values
                    .answers
                    .insert(node.to_string(), answer_text(scenario, node.as_str(), value));
            }
        }
        let mut moved = None;
        if needs.name {
            (values.name, moved) = self.name(user, read.record.as_ref(), read.expect).await;
        }
        Ok((values, moved))
    }

    /// The display name: the cached one while it is fresh, else LINE's (cached
    /// for next time), else a stale cached one, else none.
    async fn name(
        &self,
        user: &LineUserId,
        record: Option<&UserRecord>,
        read: Expect,
    ) -> (Option<String>, Option<Moved>) {
        let now = self.clock.now_ms();
        let cached = record.and_then(|record| record.display_name.clone());
        let fresh = record
            .and_then(|record| record.profile_fetched_ms)
            .is_some_and(|fetched| now.saturating_sub(fetched) < PROFILE_MAX_AGE_MS);
        if cached.is_some() && fresh {
            return (cached, None);
        }
        let (outcome, moved) = self.fetch(user, record, read, now, true).await;
        (outcome.unwrap_or(cached), moved)
    }

    /// What LINE says of the user's name (remembered for a minute), cached on
    /// the record when the user follows; a 404 forgets a cached name.
    /// `reuse`: a recent outcome will do (a follow asks afresh: the user may
    /// have just unblocked the account).
    async fn fetch(
        &self,
        user: &LineUserId,
        record: Option<&UserRecord>,
        read: Expect,
        now: i64,
        reuse: bool,
    ) -> (Outcome, Option<Moved>) {
        if let Some(outcome) = self.recently(user.as_str(), now).filter(|_| reuse) {
            return (outcome, None);
        }
        let outcome = match self.line.display_name(user.as_str()).await {
            Ok(name) => {
                tracing::info!(profile.found = name.is_some(), "profile fetched");
                Some(name)
            }
            Err(error) => {
                tracing::warn!(error = %error, "the profile could not be fetched; the fallback is used");
                None
            }
        };
        self.remember(user.as_str(), now, &outcome);
        let follows = record.is_none_or(|record| record.following != Some(false));
        let cached = record.and_then(|record| record.display_name.as_deref());
        let write = match &outcome {
            // The same name again still moves its fetch time.
            Some(Some(name)) if follows => Some(Some(name.as_str())),
            Some(None) if cached.is_some() => Some(None),
            _ => None,
        };
        let Some(name) = write else {
            return (outcome, None);
        };
        let moved = match self.store.cache_display_name(user.as_str(), name, now, read).await {
            Ok(Some(to)) => Some(Moved { from: read, to }),
            Ok(None) => {
                tracing::info!("the user's record changed; the profile is not cached");
                None
            }
            Err(error) => {
                tracing::warn!(error = %error, "could not cache the profile");
                None
            }
        };
        (outcome, moved)
    }

    fn recently(&self, user: &str, now: i64) -> Option<Outcome> {
        let recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        recent
            .get(user)
            .filter(|(at, _)| now.saturating_sub(*at) < RECENT_MS)
            .map(|(_, outcome)| outcome.clone())
    }

    fn remember(&self, user: &str, now: i64, outcome: &Outcome) {
        let mut recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if recent.len() >= RECENT_MAX {
            recent.retain(|_, (at, _)| now.saturating_sub(*at) < RECENT_MS);
            // Still full of fresh outcomes: the oldest goes.
            if recent.len() >= RECENT_MAX
                && let Some(oldest) = recent
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(user, _)| user.clone())
            {
                recent.remove(&oldest);
            }
        }
        recent.insert(user.to_owned(), (now, outcome.clone()));
    }

    /// For an answer whose follow-up holds placeholders: one read of the user,
    /// the answer itself and the answers the scenario's texts name. `true`
    /// with it when the answer is recorded already.
    pub(crate) async fn read_for_answer(
        &self,
        engine: &Engine,
        plan: &crate::engine::AnswerPlan,
    ) -> Result<(super::branches::PriorRead, bool), StoreError> {
        let mut ids = vec![plan.answer_id.clone()];
        if let Some(loaded) = engine.scenario(&plan.scenario) {
            for node in &loaded.placeholder_answers {
                let id = answer_id(&plan.scenario, node, &plan.user);
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        let read = self.store.user_state(plan.user.as_str(), &ids, &[]).await?;
        let answered = read.answers.first().is_some_and(Option::is_some);
        Ok((
            super::branches::PriorRead {
                answers: ids.into_iter().zip(read.answers).collect(),
                record: read.record,
                expect: read.expect,
            },
            answered,
        ))
    }

    /// At a follow: fetches and caches the name, so the greeting and later
    /// steps find it. Failures only cost the fallback later.
    pub(crate) async fn refresh(&self, user: &LineUserId) {
        match self.store.user_state(user.as_str(), &[], &[]).await {
            Ok(read) => {
                let now = self.clock.now_ms();
                let _ = self.fetch(user, read.record.as_ref(), read.expect, now, false).await;
            }
            Err(error) => tracing::warn!(error = %error, "could not read the user to cache the profile"),
        }
    }
}
