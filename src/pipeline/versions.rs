//! Runs pinned to the scenario version they started on. The scenarios directory
//! holds only the newest files; an answer, a text or a timer of a run on an
//! older version reads that version's content from `scenario_versions` (once
//! per process: it never changes) and is decided with it.

use crate::engine::Engine;
use crate::ids::ScenarioId;
use crate::scenario::load_version;
use crate::store::{Store, StoreError};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Versions remembered per process at most (each a scenario's worth of memory).
const MAX_REMEMBERED: usize = 256;

pub(crate) struct Versions {
    current: Engine,
    store: Store,
    /// Engines pinned to older versions, by scenario and version.
    pinned: Mutex<HashMap<(ScenarioId, u32), Engine>>,
}

impl Versions {
    pub(crate) fn new(current: Engine, store: Store) -> Self {
        Self {
            current,
            store,
            pinned: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn current(&self) -> &Engine {
        &self.current
    }

    /// The engine that decides for a run of `scenario` on `version`: the
    /// current one when that is the loaded version (or the scenario is no
    /// longer loaded), otherwise one pinned to the recorded version. A version
    /// never recorded (or unreadable) falls back to the loaded one, logged.
    pub(crate) async fn engine_for(&self, scenario: &ScenarioId, version: u32) -> Result<Engine, StoreError> {
        match self.current.scenario(scenario) {
            Some(loaded) if loaded.scenario.version != version => {}
            _ => return Ok(self.current.clone()),
        }
        let key = (scenario.clone(), version);
        if let Some(engine) = self.pinned.lock().ok().and_then(|pinned| pinned.get(&key).cloned()) {
            return Ok(engine);
        }
        let engine = match self.store.scenario_version_content(scenario.as_str(), version).await? {
            None => {
                // Postback data can name any version: such a miss is remembered
                // (within bounds) so it costs one read, not one per event.
                tracing::warn!(scenario.id = %scenario, scenario.version = version, "a run's scenario version was never recorded; the loaded version decides");
                self.current.clone()
            }
            Some(content) => {
                let source = PathBuf::from(format!("scenario_versions/{}@{version}", scenario.as_str()));
                match load_version(&content, source) {
                    Ok(loaded) => {
                        tracing::info!(scenario.id = %scenario, scenario.version = version, "an older scenario version was loaded for its runs");
                        self.current.pinned_to(Arc::new(loaded))
                    }
                    Err(error) => {
                        tracing::error!(scenario.id = %scenario, scenario.version = version, error = %error, "a recorded scenario version no longer loads; the loaded version decides");
                        self.current.clone()
                    }
                }
            }
        };
        if let Ok(mut pinned) = self.pinned.lock()
            && pinned.len() < MAX_REMEMBERED
        {
            pinned.insert(key, engine.clone());
        }
        Ok(engine)
    }
}
