//! Which campaign a run belongs to: answers of a campaign's run name the
//! campaign (`campaignId`). A campaign's run id says that it is one (see
//! [`RunId::of_campaign`]) but is too short to hold the whole campaign id,
//! which is read once per process and campaign: runs of one campaign never
//! move to another.

use crate::ids::RunId;
use crate::store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Runs remembered per process: far more than the campaigns an account sends
/// (each has one run); past it the memory starts again.
const REMEMBERED: usize = 10_000;

#[derive(Clone)]
pub(crate) struct CampaignRuns {
    store: Store,
    known: Arc<Mutex<HashMap<String, Option<String>>>>,
}

impl CampaignRuns {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            store,
            known: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The campaign whose run `run` is; `None` for any other run (no read).
    pub(crate) async fn campaign_of(&self, run: Option<&RunId>) -> Result<Option<String>, StoreError> {
        let Some(run) = run.filter(|run| run.is_campaign_run()) else {
            return Ok(None);
        };
        if let Some(known) = self
            .known
            .lock()
            .ok()
            .and_then(|known| known.get(run.as_str()).cloned())
        {
            return Ok(known);
        }
        let found = self.store.campaign_of_run(run.as_str()).await?;
        if let Ok(mut known) = self.known.lock() {
            if known.len() >= REMEMBERED {
                known.clear();
            }
            known.insert(run.as_str().to_owned(), found.clone());
        }
        Ok(found)
    }
}
