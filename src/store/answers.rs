//! Effect commits: guard 1's answer commit, and the commit of a trigger's or a
//! card tap's effects. Each is one `Commit` RPC: all of it lands or none does.

use super::docs::{AnswerDoc, ScenarioAnswerDoc, collections};
use super::inbox::InboxKey;
use super::ledger::StagedAction;
use super::writes::{CommitError, array_union, create, maximum, merge, minimum, set};
use super::{Store, StoreError};
use crate::engine::AnswerPlan;
use crate::ids::LineUserId;
use firestore::FirestoreInstant;
use firestore::gcloud_sdk::google::firestore::v1::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerCommit {
    /// The answer, the tags and the marker landed together: go on to the next node.
    Recorded,
    /// An answer to this node by this user exists: stop, add nothing.
    AlreadyAnswered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectCommit {
    Committed,
    /// Another run of the same event committed first: nothing was applied.
    AlreadyDone,
}

impl Store {
    /// Writes the answer (create, so `exists = false`), the user's new tags (array
    /// union), the scenario marker, the inbox record's "done" and the follow-up's
    /// ledger entry in one atomic commit. `ALREADY_EXISTS` means none of it was
    /// applied: the user had answered (the ledger entry of an answer's follow-up
    /// only ever exists beside its answer).
    pub async fn commit_answer(
        &self,
        plan: &AnswerPlan,
        inbox: &InboxKey,
        webhook_event_id: &str,
        follow_up: Option<&StagedAction>,
    ) -> Result<AnswerCommit, StoreError> {
        let now = FirestoreInstant::now();
        let answer = AnswerDoc {
            scenario_id: plan.scenario.to_string(),
            node_id: plan.node.to_string(),
            line_user_id: plan.user.to_string(),
            value: plan.choice.clone(),
            tags: plan.tags.clone(),
            scenario_version: plan.scenario_version,
            answered_at: now,
            webhook_event_id: webhook_event_id.to_owned(),
        };
        let marker = ScenarioAnswerDoc {
            scenario_id: plan.scenario.to_string(),
            line_user_id: plan.user.to_string(),
            last_answer_id: plan.answer_id.clone(),
            last_answered_at: now,
        };
        let mut writes = vec![
            create(
                self.document_path(collections::SURVEY_RESPONSES, &plan.answer_id),
                &answer,
            )?,
            self.user_write(&plan.user, &plan.tags, now)?,
            set(
                self.document_path(collections::SCENARIO_ANSWERS, &plan.marker_id),
                &marker,
            )?,
            self.inbox_done_write(inbox)?,
        ];
        if let Some(action) = follow_up {
            writes.push(self.ledger_create_write(action)?);
        }
        match self.commit(writes).await {
            Ok(_) => Ok(AnswerCommit::Recorded),
            Err(CommitError::AlreadyExists) => Ok(AnswerCommit::AlreadyAnswered),
            // The inbox record vanished (TTL) meanwhile: nothing was applied.
            Err(CommitError::FailedPrecondition | CommitError::NotFound) => Ok(AnswerCommit::AlreadyAnswered),
            Err(CommitError::Store(error)) => Err(error),
        }
    }

    /// The effects of a trigger or a card tap, in one atomic commit: an optional
    /// tag, the inbox record's "done" and the ledger entry of what to send. The
    /// ledger `create` makes a second run of the same event (an instance that took
    /// over a lease while the first still worked) apply nothing.
    pub async fn commit_event_effects(
        &self,
        inbox: &InboxKey,
        tag: Option<(&LineUserId, &str)>,
        action: Option<&StagedAction>,
    ) -> Result<EffectCommit, StoreError> {
        let mut writes = vec![self.inbox_done_write(inbox)?];
        if let Some((user, tag)) = tag {
            writes.push(self.user_write(user, &[tag.to_owned()], FirestoreInstant::now())?);
        }
        if let Some(action) = action {
            writes.push(self.ledger_create_write(action)?);
        }
        match self.commit(writes).await {
            Ok(_) => Ok(EffectCommit::Committed),
            Err(CommitError::AlreadyExists | CommitError::FailedPrecondition | CommitError::NotFound) => {
                Ok(EffectCommit::AlreadyDone)
            }
            Err(CommitError::Store(error)) => Err(error),
        }
    }

    /// `users/{lineUserId}`: adds `tags` without reading the document and keeps
    /// first/last seen as epoch milliseconds (min/max transforms are numeric only).
    pub(super) fn user_write(
        &self,
        user: &LineUserId,
        tags: &[String],
        now: FirestoreInstant,
    ) -> Result<Write, StoreError> {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct UserFields<'a> {
            line_user_id: &'a str,
        }
        let now_ms = now.as_millisecond();
        let mut transforms = vec![minimum("firstSeenMs", now_ms), maximum("lastSeenMs", now_ms)];
        if !tags.is_empty() {
            transforms.push(array_union("tags", tags));
        }
        Ok(merge(
            self.document_path(collections::USERS, user.as_str()),
            &UserFields {
                line_user_id: user.as_str(),
            },
            transforms,
        )?)
    }
}
