//! Personal text, where the user's state is read: an action whose messages hold
//! placeholders gets the values they name (see `engine::personal`) before its
//! ledger entry is staged, from one read of the user's record and the answers
//! named, plus LINE's profile when the cached display name is missing or older
//! than a week. The values are recorded on the entry, so whatever attempt or
//! instance sends it renders the same bytes; they are dropped when it settles.
//!
//! A profile that cannot be fetched (LINE failing, slow, or a user who blocked
//! the account) gives no name: the placeholder's fallback renders, and the step
//! waits at most one LINE timeout for it. Names are never logged.

use super::branches::StepSoFar;
use crate::clock::Clock;
use crate::engine::Engine;
use crate::engine::personal::{Needs, answer_text, needs};
use crate::ids::{LineUserId, NodeId, answer_id};
use crate::line::client::LineClient;
use crate::outbound::OutboundAction;
use crate::store::{Expect, Store, StoreError, UserRecord};
use crate::values::PersonalValues;

/// A cached display name is fetched again after this long.
const PROFILE_MAX_AGE_MS: i64 = 7 * 24 * 60 * 60 * 1000;

#[derive(Clone)]
pub(crate) struct Personaliser {
    store: Store,
    line: LineClient,
    clock: Clock,
}

impl Personaliser {
    pub(crate) fn new(store: Store, line: LineClient, clock: Clock) -> Self {
        Self { store, line, clock }
    }

    /// `action` with the values its placeholders name. `step` is what the step
    /// records with it (its answer, the fields it sets): the messages see the
    /// user as the step leaves them.
    pub(crate) async fn fill(
        &self,
        action: Option<OutboundAction>,
        engine: &Engine,
        step: &StepSoFar<'_>,
    ) -> Result<Option<OutboundAction>, StoreError> {
        let Some(mut action) = action else {
            return Ok(None);
        };
        let needs = needs(&action.messages);
        if needs.is_empty() {
            return Ok(Some(action));
        }
        action.personal = Some(self.values(&action.user, &action, &needs, engine, step).await?);
        Ok(Some(action))
    }

    async fn values(
        &self,
        user: &LineUserId,
        action: &OutboundAction,
        needs: &Needs,
        engine: &Engine,
        step: &StepSoFar<'_>,
    ) -> Result<PersonalValues, StoreError> {
        let nodes: Vec<NodeId> = needs
            .answers
            .iter()
            .filter_map(|node| NodeId::parse(node.as_str()).ok())
            .collect();
        let answer_ids: Vec<String> = nodes
            .iter()
            .map(|node| answer_id(&action.scenario, node, user))
            .collect();
        // The branch's read of this step, when it took every answer named;
        // else one read of our own.
        let covered = step
            .read
            .as_ref()
            .filter(|prior| answer_ids.iter().all(|id| prior.answers.contains_key(id)));
        let read = match covered {
            Some(prior) => super::branches::PriorRead {
                record: prior.record.clone(),
                expect: prior.expect,
                answers: prior.answers.clone(),
            },
            None => {
                let read = self.store.user_state(user.as_str(), &answer_ids, &[]).await?;
                super::branches::PriorRead {
                    answers: answer_ids.iter().cloned().zip(read.answers).collect(),
                    record: read.record,
                    expect: read.expect,
                }
            }
        };
        let scenario = engine.scenario(&action.scenario);
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
                .filter(|(scenario, answered, _)| *scenario == &action.scenario && *answered == node)
                .map(|(_, _, value)| value);
            let stored = read.answers.get(id).and_then(Option::as_ref);
            if let Some(value) = own.or(stored) {
                values
                    .answers
                    .insert(node.to_string(), answer_text(scenario, node.as_str(), value));
            }
        }
        if needs.name {
            values.name = self.name(user, read.record.as_ref(), read.expect).await;
        }
        Ok(values)
    }

    /// The display name: the cached one while it is fresh, else LINE's (cached
    /// for next time), else a stale cached one, else none.
    async fn name(&self, user: &LineUserId, record: Option<&UserRecord>, read: Expect) -> Option<String> {
        let now = self.clock.now_ms();
        let cached = record.and_then(|record| record.display_name.clone());
        let fresh = record
            .and_then(|record| record.profile_fetched_ms)
            .is_some_and(|fetched| now.saturating_sub(fetched) < PROFILE_MAX_AGE_MS);
        if cached.is_some() && fresh {
            return cached;
        }
        self.fetch(user, read, now).await.unwrap_or(cached)
    }

    /// Asks LINE for the name and caches what it said. `None`: LINE could not
    /// be asked (the caller keeps what it has); `Some(None)`: LINE has no
    /// profile for us (the user blocked the account).
    async fn fetch(&self, user: &LineUserId, read: Expect, now: i64) -> Option<Option<String>> {
        match self.line.display_name(user.as_str()).await {
            Ok(name) => {
                tracing::info!(profile.found = name.is_some(), "profile fetched");
                // Only a user who follows has a name worth keeping; a 404 is no cache.
                if let Some(name) = &name {
                    match self
                        .store
                        .cache_display_name(user.as_str(), Some(name), now, read)
                        .await
                    {
                        Ok(true) => {}
                        Ok(false) => tracing::info!("the user's record changed; the name is not cached"),
                        Err(error) => tracing::warn!(error = %error, "could not cache the display name"),
                    }
                }
                Some(name)
            }
            Err(error) => {
                tracing::warn!(error = %error, "the profile could not be fetched; the fallback is used");
                None
            }
        }
    }

    /// At a follow: fetches and caches the name, so the greeting and later
    /// steps find it. Failures only cost the fallback later.
    pub(crate) async fn refresh(&self, user: &LineUserId) {
        match self.store.user_state(user.as_str(), &[], &[]).await {
            Ok(read) => {
                let now = self.clock.now_ms();
                let _ = self.fetch(user, read.expect, now).await;
            }
            Err(error) => tracing::warn!(error = %error, "could not read the user to cache the profile"),
        }
    }
}
