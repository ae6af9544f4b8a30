//! One user's stored data as an owner exports it (個人情報の開示): their
//! record, every answer with its value, the cached display name, and their
//! timeline. Read only.

use super::timeline::time;
use crate::ids::LineUserId;
use crate::store::{ANSWER_PAGE, Store, StoreError};
use serde_json::{Value, json};

/// Answers an export holds at most: far beyond what one user gives a
/// survey bot, and a bound on what one request reads into memory.
pub(crate) const MAX_EXPORTED_ANSWERS: usize = 10_000;

pub(crate) struct UserDataReport {
    store: Store,
}

impl UserDataReport {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }

    /// Every answer of `user` (up to [`MAX_EXPORTED_ANSWERS`]; `true` when
    /// there were more), in answer-id order.
    pub(crate) async fn answers(&self, user: &LineUserId) -> Result<(Vec<Value>, bool), StoreError> {
        let mut answers = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store.answers_of_user(user.as_str(), after.as_deref()).await?;
            let full = page.len() >= usize::try_from(ANSWER_PAGE).unwrap_or(usize::MAX);
            after = page.last().map(|answer| match answer {
                Ok(answer) => answer.id.clone(),
                Err(id) => id.clone(),
            });
            for answer in page {
                if answers.len() >= MAX_EXPORTED_ANSWERS {
                    return Ok((answers, true));
                }
                let answer = match answer {
                    Ok(answer) => answer,
                    Err(id) => {
                        answers.push(json!({ "answerId": id, "unreadable": true }));
                        continue;
                    }
                };
                let doc = answer.doc;
                answers.push(json!({
                    "answerId": answer.id,
                    "scenarioId": doc.scenario_id,
                    "nodeId": doc.node_id,
                    "value": doc.value,
                    "valueType": doc.value_type,
                    "tags": doc.tags,
                    "scenarioVersion": doc.scenario_version,
                    "answeredAt": time(&doc.answered_at),
                    "variant": doc.variant,
                    "campaignId": doc.campaign_id,
                }));
            }
            if !full {
                return Ok((answers, false));
            }
        }
    }

    /// The display name cached on the user's record, if any.
    pub(crate) async fn display_name(&self, user: &LineUserId) -> Result<Option<String>, StoreError> {
        Ok(self
            .store
            .user_for_edit(user.as_str())
            .await?
            .and_then(|record| record.doc.display_name))
    }
}
