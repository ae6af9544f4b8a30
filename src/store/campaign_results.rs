//! A campaign's results, counted exactly by Firestore (count aggregations over
//! single-field indexes, a read per thousand documents counted) from what its
//! run leaves behind:
//!
//! - `users` with `campaigns` holding it (its settle records each recipient):
//!   those with `following == false` unfollowed since;
//! - `users` with `answeredCampaigns` holding it: answered a question of its run;
//! - `users` with `remindedCampaigns` / `expiredCampaigns` holding it (the
//!   firing of a reminder, of an expiry of its run records each recipient
//!   once, however many questions and reminders);
//! - `survey_responses` with its `campaignId`: answers per question and choice.

use super::docs::collections::{SURVEY_RESPONSES, USERS};
use super::{Store, StoreError};

/// What a campaign's recipients did, as counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignTally {
    /// Recipients who answered at least one question of its run.
    pub(crate) answered: u64,
    /// Recipients a reminder of its run reached at least once.
    pub(crate) reminded: u64,
    /// Recipients whose question of its run was closed by its expiry.
    pub(crate) expired: u64,
    /// Recipients who unfollowed since (and did not come back).
    pub(crate) unfollowed: u64,
}

impl Store {
    /// The tally of campaign `id`.
    pub(crate) async fn campaign_tally(&self, id: &str) -> Result<CampaignTally, StoreError> {
        let (answered, reminded, expired, unfollowed) = futures::future::try_join4(
            self.count_where(
                USERS,
                |q| q.for_all([q.field("answeredCampaigns").array_contains(id)]),
                None,
            ),
            self.count_where(
                USERS,
                |q| q.for_all([q.field("remindedCampaigns").array_contains(id)]),
                None,
            ),
            self.count_where(
                USERS,
                |q| q.for_all([q.field("expiredCampaigns").array_contains(id)]),
                None,
            ),
            self.count_where(
                USERS,
                |q| q.for_all([q.field("campaigns").array_contains(id), q.field("following").eq(false)]),
                None,
            ),
        )
        .await?;
        Ok(CampaignTally {
            answered,
            reminded,
            expired,
            unfollowed,
        })
    }

    /// Answers of campaign `id`'s run to `node`, and among them those of each
    /// of `choices`, in order.
    pub(crate) async fn campaign_answers(
        &self,
        id: &str,
        node: &str,
        choices: &[String],
    ) -> Result<(u64, Vec<u64>), StoreError> {
        let answered = self.count_where(
            SURVEY_RESPONSES,
            |q| q.for_all([q.field("campaignId").eq(id), q.field("nodeId").eq(node)]),
            None,
        );
        let per_choice = futures::future::try_join_all(choices.iter().map(|choice| {
            self.count_where(
                SURVEY_RESPONSES,
                move |q| {
                    q.for_all([
                        q.field("campaignId").eq(id),
                        q.field("nodeId").eq(node),
                        q.field("valueType").eq("choice"),
                        q.field("value").eq(choice.as_str()),
                    ])
                },
                None,
            )
        }));
        futures::future::try_join(answered, per_choice).await
    }
}
