//! One user's record (`GET /admin/users/{id}` and the console's user page):
//! their tags, fields, first and last seen, follow state and the scenarios
//! they met, answered or not.

use super::timeline::{rfc3339_ms, time};
use crate::ids::LineUserId;
use crate::store::{Store, StoreError, UserMarker};
use crate::values::FieldValue;
use serde::Serialize;
use std::collections::BTreeMap;

/// What `GET /admin/users/{id}` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UserProfile {
    pub(crate) user_id: String,
    /// `None`: no follow or unfollow recorded (known from an answer or a start).
    pub(crate) following: Option<bool>,
    pub(crate) followed_at: Option<String>,
    pub(crate) unfollowed_at: Option<String>,
    pub(crate) first_seen_at: Option<String>,
    pub(crate) last_seen_at: Option<String>,
    pub(crate) tags: Vec<String>,
    pub(crate) fields: BTreeMap<String, FieldValue>,
    /// The scenarios the user answered, by id.
    pub(crate) answered: Vec<Answered>,
    /// The scenarios started for the user and not answered (yet), by id.
    pub(crate) started: Vec<String>,
    /// More scenario markers exist than were read.
    pub(crate) truncated: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Answered {
    pub(crate) scenario_id: String,
    pub(crate) last_answered_at: Option<String>,
}

/// Users a search shows at most.
pub(crate) const FOUND_LIMIT: u32 = 50;

/// What a user search found.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) users: Vec<crate::store::FoundUser>,
    /// More matched than are shown: narrow the search.
    pub(crate) more: bool,
}

/// Reads users' records; never writes.
#[derive(Clone)]
pub(crate) struct UserProfiles {
    store: Store,
}

impl UserProfiles {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }

    /// Up to [`FOUND_LIMIT`] users `search` finds, and whether there are more.
    pub(crate) async fn find(&self, search: &crate::store::UserSearch) -> Result<Found, StoreError> {
        let mut users = self.store.find_users(search, FOUND_LIMIT + 1).await?;
        let more = users.len() > FOUND_LIMIT as usize;
        users.truncate(FOUND_LIMIT as usize);
        Ok(Found { users, more })
    }

    /// `None` when the service has no record of `user` at all.
    pub(crate) async fn user(&self, user: &LineUserId) -> Result<Option<UserProfile>, StoreError> {
        let records = self.store.user_profile(user.as_str()).await?;
        if records.user.is_none() && records.markers.is_empty() {
            return Ok(None);
        }
        let record = records.user.unwrap_or_default();
        let (answered, started) = split(records.markers);
        Ok(Some(UserProfile {
            user_id: user.as_str().to_owned(),
            following: record.following,
            followed_at: record.followed_at.as_ref().map(time),
            unfollowed_at: record.unfollowed_at.as_ref().map(time),
            first_seen_at: record.first_seen_ms.map(rfc3339_ms),
            last_seen_at: record.last_seen_ms.map(rfc3339_ms),
            tags: record.tags,
            fields: record.fields,
            answered,
            started,
            truncated: records.capped,
        }))
    }
}

/// Markers that name an answer, and the others, each sorted by scenario id.
fn split(mut markers: Vec<UserMarker>) -> (Vec<Answered>, Vec<String>) {
    markers.sort_by(|a, b| a.scenario_id.cmp(&b.scenario_id));
    let mut answered = Vec::new();
    let mut started = Vec::new();
    for marker in markers {
        if marker.last_answer_id.is_some() {
            answered.push(Answered {
                scenario_id: marker.scenario_id,
                last_answered_at: marker.last_answered_at.as_ref().map(time),
            });
        } else if marker.last_started_at.is_some() {
            started.push(marker.scenario_id);
        }
    }
    (answered, started)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marker(scenario: &str, answered: bool, started: bool) -> UserMarker {
        let at = firestore::FirestoreInstant::from_millisecond(1_764_000_000_000).ok();
        UserMarker {
            scenario_id: scenario.to_owned(),
            last_answer_id: answered.then(|| "a".repeat(40)),
            last_answered_at: at.filter(|_| answered),
            last_started_at: at.filter(|_| started),
        }
    }

    #[test]
    fn markers_split_into_answered_and_started_in_id_order() {
        let (answered, started) = split(vec![
            marker("zeta", true, true),
            marker("alpha", false, true),
            marker("beta", true, false),
            // A manual send's marker names a run but no start or answer.
            marker("gamma", false, false),
        ]);
        let answered: Vec<&str> = answered.iter().map(|a| a.scenario_id.as_str()).collect();
        assert_eq!(answered, ["beta", "zeta"]);
        assert_eq!(started, ["alpha"]);
    }
}
