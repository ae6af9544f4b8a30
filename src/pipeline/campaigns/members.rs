//! The audience of a campaign, read page by page. Memory stays at one page
//! whatever the sizes: each page of users Firestore finds for the scan is
//! filtered by what their records say, and only then are the answers the
//! filter needs looked up for that page's candidates (their markers, by id,
//! one batched read per scenario), never every answerer of a scenario at once.

use crate::engine::campaign::{AnsweredBy, Audience, Candidate, Scan};
use crate::ids::{ScenarioId, is_line_user_id};
use crate::store::{Store, StoreError, UserScan};

/// The audience, page by page: users Firestore finds for the scan, kept when
/// the whole filter holds.
pub(crate) struct Members<'a> {
    store: &'a Store,
    audience: Audience,
    scan: UserScan,
    /// The scenarios whose answers the filter needs, the campaign's own
    /// (`skipAnswered`) among them.
    answers: Vec<ScenarioId>,
    /// The campaign's own scenario when `skipAnswered`: its answerers are left out.
    skip: Option<ScenarioId>,
    after: Option<String>,
    done: bool,
}

impl<'a> Members<'a> {
    pub(crate) fn read(store: &'a Store, audience: Audience, skip: Option<&ScenarioId>) -> Self {
        let mut answers: Vec<ScenarioId> = Vec::new();
        for scenario in audience.needs_answers().chain(skip) {
            if !answers.contains(scenario) {
                answers.push(scenario.clone());
            }
        }
        let scan = match audience.scan() {
            Scan::All => UserScan::All,
            Scan::AnyTag(tags) => UserScan::AnyTag(tags),
            Scan::AnySource(sources) => UserScan::AnySource(sources),
            Scan::Tag(tag) => UserScan::Tag(tag),
        };
        Self {
            store,
            audience,
            scan,
            answers,
            skip: skip.cloned(),
            after: None,
            done: false,
        }
    }

    /// The same members from after user `after` (a cursor an earlier read
    /// gave: [`Self::cursor`]).
    pub(crate) fn after(self, after: Option<String>) -> Self {
        Self { after, ..self }
    }

    /// Where the next page starts: `None` at the start or once done.
    pub(crate) fn cursor(&self) -> Option<&str> {
        self.after.as_deref()
    }

    /// The next page's members (perhaps none), or `None` at the end.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<String>>, StoreError> {
        if self.done {
            return Ok(None);
        }
        let (users, next) = self.store.users_page(&self.scan, self.after.as_deref()).await?;
        self.done = next.is_none();
        self.after = next;
        let candidates: Vec<String> = users
            .into_iter()
            // A document id that is no LINE user id (written by hand) would
            // make LINE refuse the whole chunk: it is left out.
            .filter(|user| is_line_user_id(&user.id))
            .filter(|user| {
                self.audience.includes_but_answers(&Candidate {
                    following: user.following,
                    tags: &user.tags,
                    first_seen_ms: user
                        .first_seen_ms
                        .or(user.followed_at.map(firestore::jiff::Timestamp::as_millisecond)),
                    fields: &user.fields,
                    sources: &user.sources,
                })
            })
            .map(|user| user.id)
            .collect();
        if candidates.is_empty() || self.answers.is_empty() {
            return Ok(Some(candidates));
        }
        let mut answered_by = AnsweredBy::new();
        for scenario in &self.answers {
            let answered = self.store.answered_among(scenario, &candidates).await?;
            answered_by.insert(scenario.clone(), answered);
        }
        let skipped = self.skip.as_ref().and_then(|scenario| answered_by.get(scenario));
        Ok(Some(
            candidates
                .into_iter()
                .filter(|user| {
                    self.audience.answers_hold(user, &answered_by)
                        && !skipped.is_some_and(|answered| answered.contains(user))
                })
                .collect(),
        ))
    }
}
