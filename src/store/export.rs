//! A scenario's answers, a page at a time: for the CSV export (every page, in
//! turn) and for lists that show answers paged (one page per request).
//!
//! Pages come from `survey_responses` where `scenarioId` is the scenario, in
//! document-id order after a cursor (the last answer id of the page before).
//! The automatic single-field index on `scenarioId` serves that query, so no
//! composite index is needed and memory holds one page, however many answers
//! there are. A date range is not asked of Firestore: `answeredAt` is exempt
//! from indexing (it only grows, and an index on it would cap answer writes at
//! about 500 per second), so callers filter each page on it.

use super::docs::collections::SURVEY_RESPONSES;
use super::lease::document_id;
use super::round_trips::Timed;
use super::{Store, StoreError};
use crate::values::AnswerValue;
use firestore::FirestoreInstant;
use firestore::select_filter_builder::FirestoreQueryFilterBuilder;
use serde::Deserialize;

/// Answers per page of the export (Firestore's responses stay well under its
/// limits: an answer holds at most 5,000 characters of text).
pub(crate) const EXPORT_PAGE: u32 = 500;

/// The fields an answer page reads: everything an answer holds.
const ANSWER_FIELDS: [&str; 12] = [
    "scenarioId",
    "nodeId",
    "lineUserId",
    "value",
    "valueType",
    "redacted",
    "tags",
    "scenarioVersion",
    "answeredAt",
    "webhookEventId",
    "variant",
    "campaignId",
];

/// One stored answer as listed. Lenient where [`super::docs::AnswerDoc`] is
/// strict: answers written under random ids by earlier versions may lack
/// fields, and they are listed all the same.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListedAnswer {
    /// The document id (`survey_responses/{id}`).
    #[serde(skip)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) scenario_id: String,
    #[serde(default)]
    pub(crate) node_id: String,
    #[serde(default)]
    pub(crate) line_user_id: String,
    /// Absent once redacted (the user unsent the typed answer).
    #[serde(default)]
    pub(crate) value: Option<AnswerValue>,
    #[serde(default)]
    pub(crate) value_type: String,
    #[serde(default)]
    pub(crate) redacted: bool,
    #[serde(default)]
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pub(crate) scenario_version: Option<u32>,
    #[serde(default, with = "firestore::serialize_as_optional_timestamp")]
    pub(crate) answered_at: Option<FirestoreInstant>,
    #[serde(default)]
    pub(crate) webhook_event_id: Option<String>,
    /// The A/B arm the question was asked in.
    #[serde(default)]
    pub(crate) variant: Option<String>,
    /// The campaign whose run asked the question; `None` outside campaigns.
    #[serde(default)]
    pub(crate) campaign_id: Option<String>,
}

/// One page of a scenario's answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct AnswerPage {
    /// In answer-id order (ids are hashes: not by time).
    pub(crate) answers: Vec<ListedAnswer>,
    /// The cursor of the next page (the last answer id of this one); `None`
    /// when this page is the last.
    pub(crate) next: Option<String>,
}

impl Store {
    /// Up to `limit` answers of `scenario` (1 to 1,000; clamped) after the
    /// answer with id `after` (`None`: from the first), in answer-id order.
    /// Pass the page's `next` as `after` to read the next page. One query.
    pub(crate) async fn answers_page(
        &self,
        scenario: &str,
        campaign: Option<&str>,
        after: Option<&str>,
        limit: u32,
    ) -> Result<AnswerPage, StoreError> {
        let limit = limit.clamp(1, 1000);
        // Equality filters only: the automatic single-field indexes serve them.
        let filter = |q: FirestoreQueryFilterBuilder| {
            q.for_all([
                q.field("scenarioId").eq(scenario),
                campaign.and_then(|campaign| q.field("campaignId").eq(campaign)),
            ])
        };
        let documents = self
            .page_by_id(SURVEY_RESPONSES, &ANSWER_FIELDS, filter, after, limit)
            .await?;
        let full = documents.len() >= limit as usize;
        let mut answers = Vec::with_capacity(documents.len());
        for document in &documents {
            let mut answer: ListedAnswer = firestore::FirestoreDb::deserialize_doc_to(document)?;
            answer.id = document_id(&document.name).to_owned();
            answers.push(answer);
        }
        let next = if full {
            answers.last().map(|answer| answer.id.clone())
        } else {
            None
        };
        Ok(AnswerPage { answers, next })
    }
}

/// Users whose answers one query asks for, at most (Firestore's `in` takes 30).
const USERS_PER_QUERY: usize = 30;

impl Store {
    /// The latest `limit` answers to one node of `scenario` answered in
    /// `[from_ms, to_ms)` and not after `until_ms` (inclusive: a page's
    /// cursor), newest first. Uses the composite index (`scenarioId`,
    /// `nodeId`, `answeredAt` descending) of the results' latest answers.
    pub(crate) async fn recent_answers(
        &self,
        scenario: &str,
        node: &str,
        (from_ms, to_ms): (Option<i64>, Option<i64>),
        until_ms: Option<i64>,
        limit: u32,
    ) -> Result<Vec<ListedAnswer>, StoreError> {
        let instant = |ms: i64| {
            firestore::FirestoreTimestamp(
                FirestoreInstant::from_microsecond(ms.saturating_mul(1000)).unwrap_or(FirestoreInstant::MAX),
            )
        };
        super::round_trips::count();
        let documents: Vec<gcloud_sdk::google::firestore::v1::Document> = self
            .scan_db
            .fluent()
            .select()
            .fields(ANSWER_FIELDS)
            .from(SURVEY_RESPONSES)
            .filter(|q| {
                q.for_all([
                    q.field("scenarioId").eq(scenario),
                    q.field("nodeId").eq(node),
                    from_ms.and_then(|ms| q.field("answeredAt").greater_than_or_equal(instant(ms))),
                    to_ms.and_then(|ms| q.field("answeredAt").less_than(instant(ms))),
                    // Times are stored to the microsecond: the whole cursor's millisecond.
                    until_ms.and_then(|ms| q.field("answeredAt").less_than(instant(ms.saturating_add(1)))),
                ])
            })
            .order(|o| o.fields([o.field("answeredAt").descending()]))
            .limit(limit.clamp(1, 1000))
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(super::classify)?;
        Ok(listed(&documents))
    }

    /// Every answer of `users` to `scenario`, up to `limit` a query (one
    /// query per 30 users, on the index (`scenarioId`, `lineUserId`)).
    pub(crate) async fn answers_of_users(
        &self,
        scenario: &str,
        users: &[String],
        limit: u32,
    ) -> Result<Vec<ListedAnswer>, StoreError> {
        let mut answers = Vec::new();
        for chunk in users.chunks(USERS_PER_QUERY) {
            let found = self.answers_of_chunk(scenario, chunk, limit).await?;
            if found.len() >= limit as usize && chunk.len() > 1 {
                // Cut short: user by user instead, so no user's answers are missing.
                for user in chunk {
                    answers.extend(
                        self.answers_of_chunk(scenario, std::slice::from_ref(user), limit)
                            .await?,
                    );
                }
            } else {
                answers.extend(found);
            }
        }
        Ok(answers)
    }

    /// The answers of `chunk`'s users to `scenario`, up to `limit`.
    async fn answers_of_chunk(
        &self,
        scenario: &str,
        chunk: &[String],
        limit: u32,
    ) -> Result<Vec<ListedAnswer>, StoreError> {
        super::round_trips::count();
        let documents: Vec<gcloud_sdk::google::firestore::v1::Document> = self
            .scan_db
            .fluent()
            .select()
            .fields(ANSWER_FIELDS)
            .from(SURVEY_RESPONSES)
            .filter(|q| {
                q.for_all([
                    q.field("scenarioId").eq(scenario),
                    q.field("lineUserId").is_in(chunk.to_vec()),
                ])
            })
            .limit(limit.clamp(1, 1000))
            .query()
            .timed(super::round_trips::QUERY)
            .await
            .map_err(super::classify)?;
        Ok(listed(&documents))
    }
}

/// The answers of a query; one that does not read as an answer (written by
/// hand, or by an older version) is left out and logged.
fn listed(documents: &[gcloud_sdk::google::firestore::v1::Document]) -> Vec<ListedAnswer> {
    documents
        .iter()
        .filter_map(|document| {
            match firestore::FirestoreDb::deserialize_doc_to::<ListedAnswer>(document) {
                Ok(mut answer) => {
                    answer.id = document_id(&document.name).to_owned();
                    Some(answer)
                }
                Err(error) => {
                    tracing::warn!(answer.id = %document_id(&document.name), %error, "unreadable answer left out of the answers page");
                    None
                }
            }
        })
        .collect()
}
