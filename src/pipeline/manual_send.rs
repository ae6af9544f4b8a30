//! Operators' manual sends: a scenario started for listed users by push,
//! deliberately without the guards of taps and triggers (a re-send is what the
//! operator asked for). Answers to a re-sent survey are still guarded by guard 1.
//!
//! Each push is an action in the outbound ledger keyed by the `Idempotency-Key`,
//! the scenario and the user: a retried call with the same key finds it sent and
//! sends nothing new, and a repeated push carries the same retry key, so LINE
//! drops it. The first call with a key records what it asked for: the same key
//! with another request is refused.

use crate::engine::{Engine, ManualStartError};
use crate::ids::{LineUserId, RunId, ScenarioId, scenario_marker_id};
use crate::outbound::{ActionKey, Courier, Delivery, OutboundAction};
use crate::store::{LedgerState, Recorded, RequestCheck, RunRecord, Settlement, Store, StoreError};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Pushes in flight per call: well under LINE's push rate limit.
const SEND_CONCURRENCY: usize = 8;
/// How long a call waits for its "sent" marks to be stored before it answers.
const FLUSH_LIMIT: Duration = Duration::from_secs(3);

#[derive(Clone)]
pub(crate) struct ManualSender {
    engine: Engine,
    store: Store,
    courier: Courier,
    personal: super::personal::Personaliser,
    /// When the timers a send schedules are due from, and when its question opens.
    clock: crate::clock::Clock,
}

/// What became of the push to one user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UserSend {
    Sent,
    /// An earlier call with the same key sent it.
    AlreadySent,
    /// Dry run: printed, not sent.
    Logged,
    /// Not sent yet: retried later by the sweeper.
    RetryLater(String),
    Failed(String),
}

/// Why a start could not be decided.
enum StartFailure {
    /// The scenario cannot render its start (a defect of the file).
    Broken(String),
    Pipeline(super::PipelineError),
}

/// Decisions of one user's send when the user's record changes under a branch.
const BRANCH_ROUNDS: usize = 3;

impl UserSend {
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            UserSend::Sent => "sent",
            UserSend::AlreadySent => "already_sent",
            UserSend::Logged => "logged",
            UserSend::RetryLater(_) => "retry_later",
            UserSend::Failed(_) => "failed",
        }
    }

    pub(crate) fn error(&self) -> Option<&str> {
        match self {
            UserSend::RetryLater(error) | UserSend::Failed(error) => Some(error),
            _ => None,
        }
    }

    pub(crate) fn went_out(&self) -> bool {
        matches!(self, UserSend::Sent | UserSend::AlreadySent | UserSend::Logged)
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ManualSendError {
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error("scenario {0:?} cannot be sent: {1}")]
    BrokenScenario(String, String),
    #[error("this Idempotency-Key was used for a different request")]
    KeyReused,
    #[error("the Idempotency-Key cannot be used: it contains NUL")]
    BadKey,
    /// Firestore failed (the kinds the admin API maps to statuses once).
    #[error(transparent)]
    Pipeline(#[from] super::PipelineError),
}

impl From<StoreError> for ManualSendError {
    fn from(error: StoreError) -> Self {
        ManualSendError::Pipeline(super::PipelineError::Store(error))
    }
}

impl ManualSender {
    pub(crate) fn new(
        engine: Engine,
        store: Store,
        courier: Courier,
        personal: super::personal::Personaliser,
        clock: crate::clock::Clock,
    ) -> Self {
        Self {
            engine,
            store,
            courier,
            personal,
            clock,
        }
    }

    /// What a send of `scenario` would send `user` now, rendered for them
    /// (their name, fields and answers in its placeholders, its branches
    /// decided on their record), as plain text per message: an operator
    /// checks it before confirming. Nothing is recorded (the display name may
    /// be cached on the user's record, as any send would).
    pub(crate) async fn preview(
        &self,
        scenario: &ScenarioId,
        user: &LineUserId,
    ) -> Result<Vec<String>, ManualSendError> {
        self.startable(scenario)?;
        let run = RunId::begun_by("preview");
        let (decided, _) = match self.start_of(scenario, &run, user).await {
            Ok(started) => started,
            Err(StartFailure::Broken(problem)) => {
                return Err(ManualSendError::BrokenScenario(scenario.to_string(), problem));
            }
            Err(StartFailure::Pipeline(error)) => return Err(error.into()),
        };
        let mut messages = decided.chain.messages;
        let step = super::branches::StepSoFar {
            changes: decided.chain.changes.clone(),
            answer: None,
            read: decided.read,
        };
        let (values, _) = self
            .personal
            .values_for(user, scenario, &messages, &self.engine, &step)
            .await?;
        crate::engine::personal::render(&mut messages, values.as_ref());
        Ok(messages
            .iter()
            .map(crate::line::messages::Message::preview_text)
            .collect())
    }

    /// Every loaded scenario an operator may send, by id, with its title.
    pub(crate) fn sendable(&self) -> Vec<(String, String)> {
        self.engine
            .scenarios()
            .iter()
            .filter(|loaded| self.engine.can_start(&loaded.scenario.id).is_ok())
            .map(|loaded| {
                (
                    loaded.scenario.id.to_string(),
                    loaded.scenario.title.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// The start of `scenario` for `user` in `run`, its branches decided on
    /// the user's record, and the version it is pinned to.
    async fn start_of(
        &self,
        scenario: &ScenarioId,
        run: &RunId,
        user: &LineUserId,
    ) -> Result<(super::branches::Decided, u32), StartFailure> {
        let (rendered, version) = self
            .engine
            .manual_start_in_run(scenario, run, user)
            .map_err(|error| StartFailure::Broken(error.to_string()))?;
        let decided = super::branches::decide(
            &self.store,
            &self.engine,
            scenario,
            user,
            rendered,
            Some(run),
            super::branches::StepSoFar::default(),
        )
        .await
        .map_err(StartFailure::Pipeline)?;
        Ok((decided, version))
    }

    fn startable(&self, scenario: &ScenarioId) -> Result<(), ManualSendError> {
        self.engine.can_start(scenario).map_err(|error| match error {
            ManualStartError::UnknownScenario => ManualSendError::UnknownScenario(scenario.to_string()),
            ManualStartError::Broken(problem) => {
                ManualSendError::BrokenScenario(scenario.to_string(), problem.to_string())
            }
        })
    }

    /// Sends `scenario` to each of `users` (unique, checked ids), once per key.
    /// `audit`, the operator's entry in the audit log, is created in the
    /// commit that records the request.
    pub(crate) async fn send(
        &self,
        idempotency_key: &str,
        scenario: &ScenarioId,
        users: &[LineUserId],
        audit: Option<&crate::store::AuditEntry>,
    ) -> Result<Vec<(LineUserId, UserSend)>, ManualSendError> {
        self.startable(scenario)?;
        let keys = users
            .iter()
            .map(|user| ActionKey::manual(idempotency_key, scenario, user).ok_or(ManualSendError::BadKey))
            .collect::<Result<Vec<_>, _>>()?;
        match self
            .store
            .check_request("manual_send", idempotency_key, &request_hash(scenario, users), audit)
            .await?
        {
            RequestCheck::Conflict => return Err(ManualSendError::KeyReused),
            RequestCheck::First => {}
            // A retry may push what the first call did not: its own audit
            // entry is written before that (the request's commit carried
            // only the first call's).
            RequestCheck::Repeat => {
                if let Some(entry) = audit {
                    self.store.begin_audit(entry).await?;
                }
            }
        }
        let results = futures::stream::iter(users.iter().zip(keys))
            .map(|(user, key)| async move {
                let result = self.send_one(key, scenario, user).await;
                tracing::info!(scenario.id = %scenario, user.id = %crate::log_ids::logged(user.as_str()), send.result = result.as_str(), "manual send");
                (user.clone(), result)
            })
            .buffered(SEND_CONCURRENCY)
            .collect()
            .await;
        // "Sent" marks are batched; a caller who retries right after this answer
        // must find every push recorded.
        self.store.flush_settles(FLUSH_LIMIT).await;
        Ok(results)
    }

    /// Records the push in the ledger, then sends it unless an earlier call with the
    /// same key already did.
    async fn send_one(&self, key: ActionKey, scenario: &ScenarioId, user: &LineUserId) -> UserSend {
        // A branch decided on a state that changed before the commit is
        // decided again, from a fresh read.
        for _ in 0..BRANCH_ROUNDS {
            if let Some(result) = self.try_send_one(key.clone(), scenario, user).await {
                return result;
            }
        }
        // Nothing is recorded, so nothing retries it: the caller sends again
        // (with the same key: what did go out is not sent twice).
        UserSend::Failed("the user's record kept changing under a branch; send again".into())
    }

    /// One decision and record of the send; `None`: the user's record changed
    /// under a branch, nothing was recorded.
    async fn try_send_one(&self, key: ActionKey, scenario: &ScenarioId, user: &LineUserId) -> Option<UserSend> {
        // Each send begins a run of its own: its buttons and timers belong to it.
        let run = RunId::begun_by(key.as_str());
        let (decided, version) = match self.start_of(scenario, &run, user).await {
            Ok(started) => started,
            Err(StartFailure::Broken(problem)) => return Some(UserSend::Failed(problem)),
            Err(StartFailure::Pipeline(error)) => return Some(UserSend::Failed(format!("{error}; send again"))),
        };
        let (rendered, user_read, prior) = (decided.chain, decided.user_read, decided.read);
        let now = self.clock.now();
        let timers = super::timers::schedule(&self.engine, user, &rendered.timers, now);
        let marker_id = scenario_marker_id(scenario, user);
        let run_record = RunRecord {
            marker_id: &marker_id,
            scenario_id: scenario.as_str(),
            user: user.as_str(),
            run: run.as_str(),
            run_version: version,
            variant: rendered.variant.as_ref().map(|took| took.label.as_str()),
            campaign_id: None,
        };
        // A typed or date question the scenario asks opens with the ledger entry.
        let question = rendered
            .opens
            .as_ref()
            .map(|opens| super::typed::opening(user.as_str(), opens, None, now));
        let action = OutboundAction {
            key,
            user: user.clone(),
            messages: rendered.messages.clone(),
            reply: None,
            scenario: scenario.clone(),
            webhook_event_id: None,
            inbox_id: None,
            answer_id: None,
            counts: super::asked_on(
                &self.engine,
                scenario,
                rendered.asks.as_ref(),
                &crate::engine::Arms::of(&rendered),
                now,
            ),
            personal: None,
        };
        let step = super::branches::StepSoFar {
            changes: rendered.changes.clone(),
            answer: None,
            read: prior,
        };
        let (action, user_read) = match self.personal.fill(Some(action), &self.engine, &step).await {
            Ok((Some(action), moved)) => (action, super::personal::Moved::applied(moved, user_read)),
            Ok((None, _)) => return None,
            Err(error) => return Some(UserSend::Failed(format!("{error}; send again"))),
        };
        let staged = match action.stage(&self.store) {
            Ok(staged) => staged,
            Err(error) => return Some(UserSend::Failed(error.to_string())),
        };
        let (doc, version) = match self
            .store
            .record_outbound(
                &staged.ledger_id,
                &staged.doc,
                question.as_ref(),
                Some(&run_record),
                &timers,
                Some(crate::store::UserWrite {
                    user: user.as_str(),
                    changes: &rendered.changes,
                    read: user_read,
                }),
            )
            .await
        {
            Ok(Recorded::New { version }) => (staged.doc, version),
            Ok(Recorded::Existing(existing))
                if matches!(existing.doc.state, LedgerState::Sent | LedgerState::Logged) =>
            {
                return Some(UserSend::AlreadySent);
            }
            // Pending (an earlier call stopped half-way) or failed: push again; the
            // retry key makes LINE drop it if the earlier push did arrive.
            // A failed entry dropped its personal values when it was settled:
            // it renders with the ones just decided (not the fallbacks).
            Ok(Recorded::Existing(existing)) => {
                let mut doc = existing.doc;
                if doc.personal.is_none() {
                    doc.personal.clone_from(&staged.doc.personal);
                }
                (doc, existing.version)
            }
            Ok(Recorded::UserChanged) => return None,
            Err(error) => return Some(UserSend::Failed(error.to_string())),
        };
        Some(match self.courier.deliver(&staged.ledger_id, &doc, version).await {
            Delivery::Settled(Settlement::Sent) => UserSend::Sent,
            Delivery::Settled(Settlement::Logged) => UserSend::Logged,
            Delivery::Settled(Settlement::RetryAt { error, .. }) => UserSend::RetryLater(error),
            Delivery::Settled(Settlement::Uncertain(reason) | Settlement::Failed(reason)) => UserSend::Failed(reason),
            Delivery::NotSettled => UserSend::RetryLater("another instance holds the push".into()),
        })
    }
}

/// The request as understood: the scenario and the set of users, order aside.
fn request_hash(scenario: &ScenarioId, users: &[LineUserId]) -> String {
    let mut sorted: Vec<&str> = users.iter().map(LineUserId::as_str).collect();
    sorted.sort_unstable();
    let mut hasher = Sha256::new();
    hasher.update(scenario.as_str().as_bytes());
    for user in sorted {
        hasher.update([0u8]);
        hasher.update(user.as_bytes());
    }
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str) -> LineUserId {
        LineUserId::parse(id).expect("valid")
    }

    #[test]
    fn the_request_hash_ignores_order_but_not_content() {
        let lunch = ScenarioId::parse("lunch").expect("valid");
        let news = ScenarioId::parse("news").expect("valid");
        let ab = request_hash(&lunch, &[user("Ua"), user("Ub")]);
        assert_eq!(ab, request_hash(&lunch, &[user("Ub"), user("Ua")]));
        assert_ne!(ab, request_hash(&lunch, &[user("Ua")]));
        assert_ne!(ab, request_hash(&news, &[user("Ua"), user("Ub")]));
    }
}
