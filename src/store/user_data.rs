//! One user's stored data, for an owner's export and erasure (個人情報の開示・
//! 削除): their answers read or redacted a page at a time by document id, and
//! their fields, display name and open question removed.

use super::docs::AnswerDoc;
use super::docs::collections::{OPEN_QUESTIONS, SURVEY_RESPONSES, USERS};
use super::lease::Stored;
use super::writes::{CommitOutcome, delete, merge_deleting, only_if_present};
use super::{Store, StoreError};
use serde::Serialize;

/// Answers read or redacted per round trip.
pub(crate) const ANSWER_PAGE: u32 = 200;

impl Store {
    /// A page of `user`'s answers (all fields), after the answer `after`;
    /// the id alone of one that cannot be decoded.
    pub(crate) async fn answers_of_user(
        &self,
        user: &str,
        after: Option<&str>,
    ) -> Result<Vec<Result<Stored<AnswerDoc>, String>>, StoreError> {
        let documents = self
            .page_by_id(
                SURVEY_RESPONSES,
                &[
                    "scenarioId",
                    "nodeId",
                    "lineUserId",
                    "value",
                    "valueType",
                    "tags",
                    "scenarioVersion",
                    "answeredAt",
                    "webhookEventId",
                    "variant",
                    "campaignId",
                    "redacted",
                ],
                |q| q.for_all([q.field("lineUserId").eq(user)]),
                after,
                ANSWER_PAGE,
            )
            .await?;
        // An answer that cannot be read (an old bot's) is named by its id,
        // not allowed to hide the others.
        Ok(documents
            .into_iter()
            .map(|document| {
                let id = super::lease::document_id(&document.name).to_owned();
                Stored::decode(document).map_err(|_| id)
            })
            .collect())
    }

    /// A page of `user`'s answers as the erasure needs them: each id, and
    /// whether it still holds a value. Read without decoding the rest, so a
    /// malformed answer (an old bot's) does not stop an erasure.
    pub(crate) async fn answer_values_of_user(
        &self,
        user: &str,
        after: Option<&str>,
    ) -> Result<Vec<(String, bool)>, StoreError> {
        let documents = self
            .page_by_id(
                SURVEY_RESPONSES,
                &["lineUserId", "value"],
                |q| q.for_all([q.field("lineUserId").eq(user)]),
                after,
                ANSWER_PAGE,
            )
            .await?;
        Ok(documents
            .into_iter()
            .map(|document| {
                let holds_value = document.fields.contains_key("value");
                (super::lease::document_id(&document.name).to_owned(), holds_value)
            })
            .collect())
    }

    /// Redacts answers by id (the value removed, `redacted` set), in one
    /// commit; an answer gone meanwhile is not made up. Doing it again is
    /// harmless.
    pub(crate) async fn redact_answers(&self, ids: &[String]) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Redacted {
            redacted: bool,
        }
        let mut writes = Vec::with_capacity(ids.len());
        for id in ids {
            let write = merge_deleting(
                self.document_path(SURVEY_RESPONSES, id),
                &Redacted { redacted: true },
                &["value"],
                Vec::new(),
            )?;
            writes.push(only_if_present(write));
        }
        if writes.is_empty() {
            return Ok(());
        }
        match self.commit(writes).await {
            CommitOutcome::Committed(_) => Ok(()),
            // One answer was deleted meanwhile (it aborted the commit): each
            // on its own, then.
            // A single answer gone: nothing left to redact.
            CommitOutcome::Changed | CommitOutcome::AlreadyExists if ids.len() == 1 => Ok(()),
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => {
                for id in ids {
                    Box::pin(self.redact_answers(std::slice::from_ref(id))).await?;
                }
                Ok(())
            }
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }

    /// Removes the user's fields and cached display name from their record
    /// (tags, follow state and times stay: counts and audiences need them)
    /// and deletes their open question.
    pub(crate) async fn forget_user_details(&self, user: &str) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Nothing {}
        let forget = only_if_present(merge_deleting(
            self.document_path(USERS, user),
            &Nothing {},
            &["fields", "displayName", "profileFetchedMs"],
            Vec::new(),
        )?);
        let question = delete(self.document_path(OPEN_QUESTIONS, user));
        match self.commit(vec![forget, question]).await {
            CommitOutcome::Committed(_) => Ok(()),
            // No record of the user: only the question, if any.
            CommitOutcome::Changed | CommitOutcome::AlreadyExists => {
                match self
                    .commit(vec![delete(self.document_path(OPEN_QUESTIONS, user))])
                    .await
                {
                    CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
                    _ => Ok(()),
                }
            }
            CommitOutcome::Unknown(error) | CommitOutcome::Failed(error) => Err(error),
        }
    }
}
