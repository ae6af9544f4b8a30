//! Reads behind guards 2 and 3 ("did this user answer this scenario? when was it
//! last started?") and the legacy lookups for answers saved under random ids.

use super::docs::collections::{MESSAGE_MARKS, SCENARIO_ANSWERS, SURVEY_RESPONSES, WEBHOOK_INBOX};
use super::docs::{InboxDoc, MessageMarkDoc, MessageMarkState, ScenarioMarkerDoc};
use super::inbox::InboxKey;
use super::lease::Stored;
use super::messages::MessageKey;
use super::round_trips::Timed;
use super::{Store, StoreError, Version, classify};
use gcloud_sdk::google::firestore::v1::Document;

/// One user's progress in one scenario, as a guard read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScenarioProgress {
    /// The marker's version; `None`: there is no marker yet. A start names it as
    /// its precondition, so an answer or another start in between makes it retry.
    pub(crate) version: Option<Version>,
    pub(crate) answered: bool,
    /// Event time (epoch ms) of the last start by a trigger or a card.
    pub(crate) last_started_ms: Option<i64>,
}

/// What a guard needs to decide again after its commit met a conflict.
pub(crate) struct Reobserved {
    pub(crate) event: Option<Stored<InboxDoc>>,
    pub(crate) progress: Option<ScenarioProgress>,
    pub(crate) unsent: bool,
}

impl Store {
    pub(crate) fn legacy_lookup(&self) -> bool {
        self.options.legacy_answer_lookup
    }

    /// One get of the marker by its deterministic id; with legacy lookup on and no
    /// answer on the marker, one query for any answer to the scenario.
    pub(crate) async fn scenario_progress(
        &self,
        marker_id: &str,
        scenario: &str,
        user: &str,
    ) -> Result<ScenarioProgress, StoreError> {
        let mut found = self
            .get_many(vec![self.document_path(SCENARIO_ANSWERS, marker_id)])
            .await?;
        let progress = progress_of(found.pop().flatten())?;
        self.with_legacy(progress, scenario, user).await
    }

    /// The inbox record, the marker and the message mark, in one round trip.
    pub(crate) async fn reobserve(
        &self,
        inbox: &InboxKey,
        marker: Option<(&str, &str, &str)>,
        message: Option<&MessageKey>,
    ) -> Result<Reobserved, StoreError> {
        let mut paths = vec![self.document_path(WEBHOOK_INBOX, inbox.as_str())];
        if let Some((marker_id, _, _)) = marker {
            paths.push(self.document_path(SCENARIO_ANSWERS, marker_id));
        }
        if let Some(message) = message {
            paths.push(self.document_path(MESSAGE_MARKS, message.id()));
        }
        let mut found = self.get_many(paths).await?.into_iter();
        let event = found.next().flatten().map(Stored::decode).transpose()?;
        let progress = match marker {
            Some((_, scenario, user)) => {
                let progress = progress_of(found.next().flatten())?;
                Some(self.with_legacy(progress, scenario, user).await?)
            }
            None => None,
        };
        let unsent = match message {
            Some(_) => match found.next().flatten() {
                Some(document) => {
                    let mark: MessageMarkDoc = firestore::FirestoreDb::deserialize_doc_to(&document)?;
                    mark.state == MessageMarkState::Unsent
                }
                None => false,
            },
            None => false,
        };
        Ok(Reobserved {
            event,
            progress,
            unsent,
        })
    }

    async fn with_legacy(
        &self,
        progress: ScenarioProgress,
        scenario: &str,
        user: &str,
    ) -> Result<ScenarioProgress, StoreError> {
        if progress.answered || !self.legacy_lookup() {
            return Ok(progress);
        }
        Ok(ScenarioProgress {
            answered: self.legacy_answer_exists(scenario, None, user).await?,
            ..progress
        })
    }

    /// With legacy lookup on: whether this node was answered under a random id
    /// (an answer under its deterministic id is found by the answer's `create`).
    pub(crate) async fn node_answered_legacy(
        &self,
        scenario: &str,
        node: &str,
        user: &str,
    ) -> Result<bool, StoreError> {
        self.legacy_answer_exists(scenario, Some(node), user).await
    }

    /// Answers saved before deterministic ids have random ids: find them by field.
    /// Needs composite indexes in production (see the README).
    async fn legacy_answer_exists(&self, scenario: &str, node: Option<&str>, user: &str) -> Result<bool, StoreError> {
        super::round_trips::count();
        let found = self
            .db
            .fluent()
            .select()
            .fields(["__name__"])
            .from(SURVEY_RESPONSES)
            .filter(|q| {
                q.for_all([
                    q.field("scenarioId").eq(scenario),
                    q.field("lineUserId").eq(user),
                    node.and_then(|node| q.field("nodeId").eq(node)),
                ])
            })
            .limit(1)
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(classify)?;
        Ok(!found.is_empty())
    }
}

fn progress_of(document: Option<Document>) -> Result<ScenarioProgress, StoreError> {
    let Some(document) = document else {
        return Ok(ScenarioProgress {
            version: None,
            answered: false,
            last_started_ms: None,
        });
    };
    let marker = Stored::<ScenarioMarkerDoc>::decode(document)?;
    Ok(ScenarioProgress {
        version: Some(marker.version),
        answered: marker.doc.last_answer_id.is_some(),
        last_started_ms: marker
            .doc
            .last_started_at
            .map(firestore::jiff::Timestamp::as_millisecond),
    })
}
