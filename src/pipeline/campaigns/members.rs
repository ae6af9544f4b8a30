//! The audience of a campaign, read page by page.

use crate::engine::campaign::{AnsweredBy, Audience, Candidate, Scan};
use crate::ids::{ScenarioId, is_line_user_id};
use crate::store::{Store, StoreError, UserScan};

/// The audience, page by page: users Firestore finds for the scan, kept when
/// the whole filter holds.
pub(super) struct Members<'a> {
    store: &'a Store,
    audience: Audience,
    scan: UserScan,
    answered_by: AnsweredBy,
    /// The campaign's own scenario when `skipAnswered`: its answerers are left out.
    skip: Option<ScenarioId>,
    after: Option<String>,
    done: bool,
}

impl<'a> Members<'a> {
    pub(super) async fn read(
        store: &'a Store,
        audience: Audience,
        skip: Option<&ScenarioId>,
    ) -> Result<Self, StoreError> {
        let mut answered_by = AnsweredBy::new();
        for scenario in audience.needs_answers().chain(skip) {
            if !answered_by.contains_key(scenario) {
                answered_by.insert(scenario.clone(), store.answered_users(scenario.as_str()).await?);
            }
        }
        let scan = match audience.scan() {
            Scan::All => UserScan::All,
            Scan::AnyTag(tags) => UserScan::AnyTag(tags),
            Scan::Tag(tag) => UserScan::Tag(tag),
        };
        Ok(Self {
            store,
            audience,
            scan,
            answered_by,
            skip: skip.cloned(),
            after: None,
            done: false,
        })
    }

    /// The next page's members (perhaps none), or `None` at the end.
    pub(super) async fn next_page(&mut self) -> Result<Option<Vec<String>>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let (users, next) = self.store.users_page(&self.scan, self.after.as_deref()).await?;
        self.done = next.is_none();
        self.after = next;
        let skipped = self.skip.as_ref().and_then(|scenario| self.answered_by.get(scenario));
        Ok(Some(
            users
                .into_iter()
                // A document id that is no LINE user id (written by hand) would
                // make LINE refuse the whole chunk: it is left out.
                .filter(|user| is_line_user_id(&user.id))
                .filter(|user| {
                    let candidate = Candidate {
                        id: &user.id,
                        following: user.following,
                        tags: &user.tags,
                        first_seen_ms: user
                            .first_seen_ms
                            .or(user.followed_at.map(firestore::jiff::Timestamp::as_millisecond)),
                        fields: &user.fields,
                    };
                    self.audience.includes(&candidate, &self.answered_by)
                        && !skipped.is_some_and(|answered| answered.contains(&user.id))
                })
                .map(|user| user.id)
                .collect(),
        ))
    }
}
