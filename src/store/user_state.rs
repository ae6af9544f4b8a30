//! What a branch reads of one user, in one round trip: the user's record
//! (with its version: the step's commit is conditional on it), the answers
//! and the scenario markers its conditions name.

use super::docs::collections::{SCENARIO_ANSWERS, SURVEY_RESPONSES, USERS};
use super::lease::Stored;
use super::timeline::UserRecord;
use super::writes::Expect;
use super::{Store, StoreError};
use crate::values::AnswerValue;
use serde::Deserialize;

/// One user's state as read for a decision.
#[derive(Debug)]
pub(crate) struct UserStateRead {
    /// `None`: the service never saw the user.
    pub(crate) record: Option<UserRecord>,
    /// What the step's commit expects of `users/{id}`: unchanged since this read.
    pub(crate) expect: Expect,
    /// The value of each answer asked for, in order (`None`: not answered, or
    /// redacted).
    pub(crate) answers: Vec<Option<AnswerValue>>,
    /// Whether each scenario marker asked for says "answered", in order.
    pub(crate) answered: Vec<bool>,
}

#[derive(Deserialize)]
struct AnswerValueOnly {
    #[serde(default)]
    value: Option<AnswerValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MarkerAnswered {
    #[serde(default)]
    last_answer_id: Option<String>,
}

impl Store {
    /// `users/{user}`, the answers `answer_ids` and the markers `marker_ids`,
    /// in one `BatchGetDocuments`.
    pub(crate) async fn user_state(
        &self,
        user: &str,
        answer_ids: &[String],
        marker_ids: &[String],
    ) -> Result<UserStateRead, StoreError> {
        let mut paths = vec![self.document_path(USERS, user)];
        paths.extend(answer_ids.iter().map(|id| self.document_path(SURVEY_RESPONSES, id)));
        paths.extend(marker_ids.iter().map(|id| self.document_path(SCENARIO_ANSWERS, id)));
        let mut found = self.get_many(paths).await?.into_iter();
        let user_doc = found.next().flatten().map(Stored::<UserRecord>::decode).transpose()?;
        let mut answers = Vec::with_capacity(answer_ids.len());
        for _ in answer_ids {
            let doc = found
                .next()
                .flatten()
                .map(Stored::<AnswerValueOnly>::decode)
                .transpose()?;
            answers.push(doc.and_then(|doc| doc.doc.value));
        }
        let mut answered = Vec::with_capacity(marker_ids.len());
        for _ in marker_ids {
            let doc = found
                .next()
                .flatten()
                .map(Stored::<MarkerAnswered>::decode)
                .transpose()?;
            answered.push(doc.is_some_and(|doc| doc.doc.last_answer_id.is_some()));
        }
        Ok(UserStateRead {
            expect: user_doc.as_ref().map_or(Expect::Absent, |doc| Expect::At(doc.version)),
            record: user_doc.map(|doc| doc.doc),
            answers,
            answered,
        })
    }
}
