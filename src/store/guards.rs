//! Reads behind guards 2 and 3 ("did this user answer this scenario?") and the
//! legacy lookups for answers saved under random ids.

use super::docs::collections::{SCENARIO_ANSWERS, SURVEY_RESPONSES};
use super::{Store, StoreError, classify};
use crate::ids::{LineUserId, NodeId, ScenarioId};

impl Store {
    pub fn legacy_lookup(&self) -> bool {
        self.options.legacy_answer_lookup
    }

    /// One get of the marker by its deterministic id; with legacy lookup on and no
    /// marker, one query for any answer to the scenario.
    pub async fn scenario_answered(
        &self,
        marker_id: &str,
        scenario: &ScenarioId,
        user: &LineUserId,
    ) -> Result<bool, StoreError> {
        self.answered(SCENARIO_ANSWERS, marker_id, scenario, None, user).await
    }

    /// Whether this node was answered: the fast get of the answer by id, then, with
    /// legacy lookup on, the query for an answer saved under a random id.
    pub async fn node_answered_legacy(
        &self,
        answer_id: &str,
        scenario: &ScenarioId,
        node: &NodeId,
        user: &LineUserId,
    ) -> Result<bool, StoreError> {
        self.answered(SURVEY_RESPONSES, answer_id, scenario, Some(node), user)
            .await
    }

    async fn answered(
        &self,
        collection: &str,
        id: &str,
        scenario: &ScenarioId,
        node: Option<&NodeId>,
        user: &LineUserId,
    ) -> Result<bool, StoreError> {
        if self.exists(collection, id).await? {
            return Ok(true);
        }
        if !self.legacy_lookup() {
            return Ok(false);
        }
        self.legacy_answer_exists(scenario, node, user).await
    }

    async fn exists(&self, collection: &str, id: &str) -> Result<bool, StoreError> {
        super::round_trips::count();
        let found = self
            .db
            .fluent()
            .select()
            .fields(["__name__"])
            .by_id_in(collection)
            .one(id)
            .await
            .map_err(classify)?;
        Ok(found.is_some())
    }

    /// Answers saved before deterministic ids have random ids: find them by field.
    /// Needs composite indexes in production (see the README).
    async fn legacy_answer_exists(
        &self,
        scenario: &ScenarioId,
        node: Option<&NodeId>,
        user: &LineUserId,
    ) -> Result<bool, StoreError> {
        super::round_trips::count();
        let found = self
            .db
            .fluent()
            .select()
            .fields(["__name__"])
            .from(SURVEY_RESPONSES)
            .filter(|q| {
                q.for_all([
                    q.field("scenarioId").eq(scenario.as_str()),
                    q.field("lineUserId").eq(user.as_str()),
                    node.and_then(|node| q.field("nodeId").eq(node.as_str())),
                ])
            })
            .limit(1)
            .query()
            .await
            .map_err(classify)?;
        Ok(!found.is_empty())
    }
}
