//! A campaign's results, exactly (see `store::campaign_results`): its
//! recipients, who got it, answered, was reminded, whose question expired, who
//! unfollowed since, and the answers per question and choice of its run only.
//! Counted by Firestore at most every few seconds per campaign and instance (a
//! console page polling a campaign reads the counts once per interval).

use crate::engine::Engine;
use crate::ids::ScenarioId;
use crate::store::{CampaignTally, Store, StoreError};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Results counted within this long are shown again.
const FRESH_FOR: Duration = Duration::from_secs(5);
/// Campaigns whose results are remembered at most.
const REMEMBERED: usize = 200;

/// What a campaign's status shows of its results.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CampaignResults {
    /// Users the campaign was planned for.
    pub(crate) recipients: u64,
    /// Of them, those LINE accepted it for.
    pub(crate) delivered: u64,
    #[serde(flatten)]
    pub(crate) tally: CampaignTally,
    /// Answers of the campaign's run per question, in the scenario's order.
    pub(crate) questions: Vec<QuestionResults>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QuestionResults {
    pub(crate) node_id: String,
    pub(crate) kind: &'static str,
    pub(crate) text: String,
    pub(crate) answered: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) choices: Vec<ChoiceCount>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChoiceCount {
    pub(crate) value: String,
    pub(crate) label: String,
    pub(crate) count: u64,
}

/// What the results are of.
pub(crate) struct CampaignRef<'a> {
    pub(crate) id: &'a str,
    pub(crate) scenario: &'a str,
    pub(crate) planned: u64,
    pub(crate) sent: u64,
}

/// What Firestore counted for a campaign, remembered for a few seconds.
#[derive(Debug, Clone)]
struct Counted {
    tally: CampaignTally,
    questions: Vec<QuestionResults>,
}

#[derive(Clone)]
pub(crate) struct CampaignResultsReport {
    engine: Engine,
    store: Store,
    counted: Arc<Mutex<HashMap<String, (Instant, Counted)>>>,
}

impl CampaignResultsReport {
    pub(crate) fn new(engine: Engine, store: Store) -> Self {
        Self {
            engine,
            store,
            counted: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The campaign's results: its recipients and deliveries as its status
    /// says now, what its run left counted now or within the last few seconds.
    pub(crate) async fn of(&self, campaign: &CampaignRef<'_>) -> Result<CampaignResults, StoreError> {
        let recent = self
            .counted
            .lock()
            .ok()
            .and_then(|counted| counted.get(campaign.id).cloned())
            .filter(|(at, _)| at.elapsed() < FRESH_FOR)
            .map(|(_, counted)| counted);
        let counted = match recent {
            Some(counted) => counted,
            None => {
                let counted = self.count(campaign).await?;
                if let Ok(mut remembered) = self.counted.lock() {
                    if remembered.len() >= REMEMBERED {
                        remembered.clear();
                    }
                    remembered.insert(campaign.id.to_owned(), (Instant::now(), counted.clone()));
                }
                counted
            }
        };
        Ok(CampaignResults {
            recipients: campaign.planned,
            delivered: campaign.sent,
            tally: counted.tally,
            questions: counted.questions,
        })
    }

    async fn count(&self, campaign: &CampaignRef<'_>) -> Result<Counted, StoreError> {
        let outlines = ScenarioId::parse(campaign.scenario)
            .ok()
            .and_then(|scenario| self.engine.question_outlines(&scenario))
            .unwrap_or_default();
        let tally = self.store.campaign_tally(campaign.id);
        let per_question = futures::future::try_join_all(outlines.iter().map(|outline| {
            let values: Vec<String> = outline.choices.iter().map(|(value, _)| value.clone()).collect();
            async move {
                let (answered, counts) = self.store.campaign_answers(campaign.id, &outline.node, &values).await?;
                Ok::<_, StoreError>(QuestionResults {
                    node_id: outline.node.clone(),
                    kind: outline.kind,
                    text: outline.text.clone(),
                    answered,
                    choices: outline
                        .choices
                        .iter()
                        .zip(counts)
                        .map(|((value, label), count)| ChoiceCount {
                            value: value.clone(),
                            label: label.clone(),
                            count,
                        })
                        .collect(),
                })
            }
        }));
        let (tally, questions) = futures::future::try_join(tally, per_question).await?;
        Ok(Counted { tally, questions })
    }
}
