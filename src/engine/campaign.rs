//! Campaigns, the decisions: who is in an audience, what a campaign sends, and
//! its ids. Pure: the pipeline reads users and answers, then asks.

use super::Engine;
use super::render::{QuestionRef, TimerPlan, render_in_run};
use crate::ids::{NodeId, RunId, ScenarioId, TimerKind, deterministic_id};
use crate::line::messages::Message;
use crate::values::{FieldValue, UserChanges};
use chrono::{DateTime, NaiveDate, Utc};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// LINE's multicast takes up to 500 recipients per call.
pub(crate) const CHUNK_SIZE: usize = 500;
/// Tags an audience may name across its lists: Firestore's `array-contains-any`
/// takes at most 30 values.
pub(crate) const MAX_TAGS: usize = 30;
/// Scenarios an audience may name in `answered` and `notAnswered`.
pub(crate) const MAX_SCENARIOS: usize = 10;
const MAX_TAG_CHARS: usize = 100;

/// The audience as an operator writes it (`audience` of `POST /admin/campaigns`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AudienceRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tags: Option<TagFilter>,
    /// Users who answered each of these scenarios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) answered: Option<Vec<String>>,
    /// Users who answered none of these scenarios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) not_answered: Option<Vec<String>>,
    /// First seen on or after this date (`YYYY-MM-DD`, in the campaign
    /// scenario's time zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) first_seen_from: Option<String>,
    /// First seen on or before this date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) first_seen_to: Option<String>,
    /// Conditions on user fields, by field name: all must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fields: Option<BTreeMap<String, FieldCondition>>,
    /// Users who came through any of these source links (any of their
    /// sources, not only the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sources: Option<SourceFilter>,
}

impl AudienceRequest {
    /// The audience as the audit log records it: field conditions name the
    /// field and the kinds of test, never the values (an operator may filter
    /// on a phone number, and the audit log is never erased). Campaigns and
    /// rich menu links record it alike.
    pub(crate) fn audit_summary(&self) -> String {
        let mut audience = self.clone();
        let fields = audience.fields.take();
        let mut summary = serde_json::to_value(&audience).unwrap_or_default();
        if let (Some(fields), Some(object)) = (fields, summary.as_object_mut()) {
            let kinds: serde_json::Map<String, serde_json::Value> = fields
                .iter()
                .map(|(name, condition)| {
                    let tests: Vec<&str> = [
                        ("equals", condition.equals.is_some()),
                        ("in", condition.one_of.is_some()),
                        ("exists", condition.exists.is_some()),
                        ("min", condition.min.is_some()),
                        ("max", condition.max.is_some()),
                    ]
                    .into_iter()
                    .filter_map(|(kind, given)| given.then_some(kind))
                    .collect();
                    (name.clone(), serde_json::json!(tests))
                })
                .collect();
            object.insert("fields".to_owned(), serde_json::Value::Object(kinds));
        }
        summary.to_string()
    }
}

/// `sources` of an audience: `{"anyOf": ["instagram_dec"]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SourceFilter {
    pub(crate) any_of: Vec<String>,
}

/// A condition on one user field: every key given must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FieldCondition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) equals: Option<FieldValue>,
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub(crate) one_of: Option<Vec<FieldValue>>,
    /// `true`: the user has the field; `false`: they do not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exists: Option<bool>,
    /// At least (numbers numerically; texts such as dates as text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) min: Option<FieldValue>,
    /// At most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max: Option<FieldValue>,
}

/// The most field conditions one audience may hold.
pub(crate) const MAX_FIELD_CONDITIONS: usize = 20;

impl FieldCondition {
    /// Whether `value` (the user's field, `None` when absent) meets the condition.
    pub(crate) fn holds(&self, value: Option<&FieldValue>) -> bool {
        if let Some(exists) = self.exists
            && exists != value.is_some()
        {
            return false;
        }
        let compared = self.equals.is_some() || self.one_of.is_some() || self.min.is_some() || self.max.is_some();
        if !compared {
            return true;
        }
        let Some(value) = value else {
            return false;
        };
        let same = |other: &FieldValue| order(value, other) == Some(std::cmp::Ordering::Equal);
        self.equals.as_ref().is_none_or(same)
            && self.one_of.as_ref().is_none_or(|values| values.iter().any(same))
            && self
                .min
                .as_ref()
                .is_none_or(|min| order(value, min).is_some_and(std::cmp::Ordering::is_ge))
            && self
                .max
                .as_ref()
                .is_none_or(|max| order(value, max).is_some_and(std::cmp::Ordering::is_le))
    }

    fn check(&self, name: &str) -> Result<(), AudienceError> {
        let bad = |problem: &str| AudienceError::BadField(name.to_owned(), problem.to_owned());
        if !crate::scenario::is_field_name(name) {
            return Err(bad("is not a field name ([a-z][a-z0-9_]{0,39})"));
        }
        if *self == FieldCondition::default() {
            return Err(bad("has no condition (equals, in, exists, min or max)"));
        }
        if self.one_of.as_ref().is_some_and(Vec::is_empty) {
            return Err(bad("has an empty `in` list"));
        }
        if let (Some(min), Some(max)) = (&self.min, &self.max)
            && order(min, max).is_none_or(std::cmp::Ordering::is_gt)
        {
            return Err(bad("has min above max, or min and max of different kinds"));
        }
        Ok(())
    }
}

/// How two field values compare: numbers numerically, texts as text, booleans
/// only for equality; `None` across kinds.
pub(crate) fn order(value: &FieldValue, other: &FieldValue) -> Option<std::cmp::Ordering> {
    match (value, other) {
        (FieldValue::Text(a), FieldValue::Text(b)) => Some(a.cmp(b)),
        (FieldValue::Bool(a), FieldValue::Bool(b)) => (a == b).then_some(std::cmp::Ordering::Equal),
        _ => value.as_number()?.partial_cmp(&other.as_number()?),
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TagFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) any_of: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) all_of: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) none_of: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AudienceError {
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error("{0} is an empty list; leave it out to not filter by it")]
    EmptyList(&'static str),
    #[error("the audience names {0} tags; at most {MAX_TAGS} are allowed")]
    TooManyTags(usize),
    #[error("the audience names {0} scenarios; at most {MAX_SCENARIOS} are allowed")]
    TooManyScenarios(usize),
    #[error("tag {0:?} is not a tag (1 to {MAX_TAG_CHARS} characters)")]
    BadTag(String),
    #[error("{field} {value:?} is not a date (YYYY-MM-DD)")]
    BadDate { field: &'static str, value: String },
    #[error("firstSeenFrom {from} is after firstSeenTo {to}")]
    InvertedDates { from: String, to: String },
    #[error("fields.{0} {1}")]
    BadField(String, String),
    #[error("the audience names {0} fields; at most {MAX_FIELD_CONDITIONS} are allowed")]
    TooManyFields(usize),
    #[error("sources.anyOf names {0} sources; at most {MAX_TAGS} are allowed")]
    TooManySources(usize),
    #[error("source {0:?} is not a source id ([a-z0-9_]{{1,40}})")]
    BadSource(String),
}

/// An audience, checked: all following users, filtered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Audience {
    any_of: Vec<String>,
    all_of: Vec<String>,
    none_of: Vec<String>,
    answered: Vec<ScenarioId>,
    not_answered: Vec<ScenarioId>,
    /// First seen in `[from, to)`, ms since the epoch.
    first_seen_from_ms: Option<i64>,
    first_seen_to_ms: Option<i64>,
    fields: BTreeMap<String, FieldCondition>,
    /// Any of these sources; empty: no filter on sources.
    sources: Vec<String>,
}

/// What Firestore is asked for; the rest of the audience is checked in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scan {
    All,
    AnyTag(Vec<String>),
    AnySource(Vec<String>),
    Tag(String),
}

/// One user as the audience filter sees them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    /// `None`: known from an answer, no follow or unfollow recorded.
    pub(crate) following: Option<bool>,
    pub(crate) tags: &'a [String],
    pub(crate) first_seen_ms: Option<i64>,
    pub(crate) fields: &'a BTreeMap<String, FieldValue>,
    /// The source links the user came through.
    pub(crate) sources: &'a [String],
}

/// Who answered which scenario, as read for the audience.
pub(crate) type AnsweredBy = HashMap<ScenarioId, HashSet<String>>;

impl Audience {
    /// The narrowest query Firestore can answer from its automatic indexes
    /// (one array condition a query: the others are checked in memory).
    pub(crate) fn scan(&self) -> Scan {
        if !self.any_of.is_empty() {
            Scan::AnyTag(self.any_of.clone())
        } else if !self.sources.is_empty() {
            Scan::AnySource(self.sources.clone())
        } else if let Some(tag) = self.all_of.first() {
            Scan::Tag(tag.clone())
        } else {
            Scan::All
        }
    }

    /// The audience without the users holding `tag` (the campaigns' opt-out
    /// tag: whatever the request says, they are never in an audience).
    /// (An audience asking for the tag itself is then empty, never wider.)
    pub(crate) fn without_tag(mut self, tag: &str) -> Self {
        let tag = tag.to_owned();
        if !self.none_of.contains(&tag) {
            self.none_of.push(tag);
        }
        self
    }

    /// The scenarios whose answers the filter needs.
    pub(crate) fn needs_answers(&self) -> impl Iterator<Item = &ScenarioId> {
        self.answered.iter().chain(&self.not_answered)
    }

    /// Whether user `id` is in the audience. Users who unfollowed never are.
    #[cfg(test)]
    pub(crate) fn includes(&self, id: &str, user: &Candidate<'_>, answered_by: &AnsweredBy) -> bool {
        self.includes_but_answers(user) && self.answers_hold(id, answered_by)
    }

    /// Whether the filters on answers hold for `user`, by who answered what
    /// (only the scenarios [`Self::needs_answers`] names are looked up).
    pub(crate) fn answers_hold(&self, user: &str, answered_by: &AnsweredBy) -> bool {
        let answered = |scenario: &ScenarioId| answered_by.get(scenario).is_some_and(|users| users.contains(user));
        self.answered.iter().all(answered) && !self.not_answered.iter().any(answered)
    }

    /// Whether every filter but those on answers holds for `user`: what the
    /// user's own record says (read first; answers only for who passes).
    pub(crate) fn includes_but_answers(&self, user: &Candidate<'_>) -> bool {
        let has = |tag: &String| user.tags.contains(tag);
        user.following != Some(false)
            && (self.any_of.is_empty() || self.any_of.iter().any(has))
            && self.all_of.iter().all(has)
            && !self.none_of.iter().any(has)
            && self
                .first_seen_from_ms
                .is_none_or(|from| user.first_seen_ms.is_some_and(|seen| seen >= from))
            && self
                .first_seen_to_ms
                .is_none_or(|to| user.first_seen_ms.is_some_and(|seen| seen < to))
            && self
                .fields
                .iter()
                .all(|(name, condition)| condition.holds(user.fields.get(name)))
            && (self.sources.is_empty() || self.sources.iter().any(|source| user.sources.contains(source)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CampaignStartError {
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error("scenario {0:?} cannot be rendered: {1}")]
    Broken(String, String),
}

/// How a campaign's messages go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Every recipient of a chunk gets the same bytes: one multicast a chunk.
    Multicast,
    /// Each recipient gets their own: a split, a branch or placeholders come
    /// before the first question or wait. One push a user.
    Push,
}

impl Delivery {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Delivery::Multicast => "multicast",
            Delivery::Push => "push",
        }
    }
}

/// Recipients of a chunk of a push campaign: each user's part of its settle
/// takes at most 7 writes (marker, user's record twice, a rich menu's link
/// entry, open question, two timers), and their sends by arm one counter
/// write: 50 stay well within a commit's 500, and a chunk's pushes within a
/// call's pace.
pub(crate) const PUSH_CHUNK_SIZE: usize = 50;

/// What every recipient of a campaign gets.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CampaignStart {
    /// Multicast: what every recipient gets; push: nothing (each recipient's
    /// messages are decided when their chunk goes).
    pub(crate) delivery: Delivery,
    pub(crate) messages: Vec<Message>,
    pub(crate) version: u32,
    pub(crate) run: RunId,
    /// The question node the messages ask: counted as sent per recipient.
    pub(crate) asks: Option<NodeId>,
    /// What each recipient's run records once LINE accepted their message.
    pub(crate) recipient: RecipientStart,
    /// Messages of the account's monthly quota each recipient costs: the
    /// first send, and the pushes its timers are set to make (each step, each
    /// reminder up to `max_reminders`, an expiry's `on_expire`). Answers'
    /// follow-ups are replies, which cost nothing.
    pub(crate) messages_per_recipient: u32,
}

/// A recipient's part of a campaign's run, written in the commit that settles
/// the chunk LINE accepted (never before: a refused or cancelled chunk leaves
/// nothing that would remind or close a question nobody received). The marker
/// naming the run is always written; the rest as the first messages ask.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecipientStart {
    /// The text or date question the messages ask: it opens for the recipient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) opens: Option<QuestionRef>,
    /// The step, reminder and expiry the messages schedule, due from the settle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) timers: Vec<TimerPlan>,
    /// What the first messages' nodes do to tags and fields.
    #[serde(default, skip_serializing_if = "UserChanges::is_empty")]
    pub(crate) changes: UserChanges,
}

/// Writes a Firestore commit holds at most.
pub(crate) const MAX_COMMIT_WRITES: usize = 500;
/// Writes of a chunk's settle that are not a recipient's: the chunk itself and
/// the result counter of the question it asks (a dead letter goes only with a
/// failed chunk, which writes nothing per recipient).
pub(crate) const SETTLE_OWN_WRITES: usize = 2;

impl RecipientStart {
    /// Firestore writes one recipient's part takes: the marker, the open
    /// question, each timer, and the user's record (which names the campaigns
    /// that reached them: one write, and a second when tags are removed, one
    /// transform per field and write).
    pub(crate) fn writes(&self) -> usize {
        // A rich menu's link entry is one more write.
        let user = 1 + usize::from(!self.changes.untag.is_empty()) + usize::from(self.changes.rich_menu.is_some());
        1 + usize::from(self.opens.is_some()) + self.timers.len() + user
    }

    /// Recipients per chunk: LINE's 500 per multicast, fewer when their parts
    /// and the chunk's own writes would not fit one commit. Smaller chunks
    /// rather than a settle split over several commits: one commit per chunk
    /// keeps "LINE accepted it" and "its recipients' runs exist" one fact,
    /// with no half-settled chunk to resume, at the price of more calls (a
    /// question with a reminder and an expiry: 124 a chunk, 4 calls where 1 was).
    pub(crate) fn chunk_size(&self) -> usize {
        ((MAX_COMMIT_WRITES - SETTLE_OWN_WRITES) / self.writes().max(1)).clamp(1, CHUNK_SIZE)
    }
}

impl Engine {
    /// Checks an audience against the loaded scenarios; dates are read in the
    /// time zone of `scenario` (the campaign's).
    pub(crate) fn audience(&self, request: &AudienceRequest, scenario: &ScenarioId) -> Result<Audience, AudienceError> {
        let zone = self
            .scenario(scenario)
            .ok_or_else(|| AudienceError::UnknownScenario(scenario.to_string()))?
            .timing()
            .zone;
        self.audience_in(request, zone)
    }

    /// Checks an audience against the loaded scenarios; dates are read in `zone`.
    pub(crate) fn audience_in(
        &self,
        request: &AudienceRequest,
        zone: chrono_tz::Tz,
    ) -> Result<Audience, AudienceError> {
        let tags = request.tags.clone().unwrap_or_default();
        let any_of = tag_list("tags.anyOf", tags.any_of)?;
        let all_of = tag_list("tags.allOf", tags.all_of)?;
        let none_of = tag_list("tags.noneOf", tags.none_of)?;
        let tag_count = any_of.len() + all_of.len() + none_of.len();
        if tag_count > MAX_TAGS {
            return Err(AudienceError::TooManyTags(tag_count));
        }
        let answered = self.scenario_list("answered", request.answered.as_deref())?;
        let not_answered = self.scenario_list("notAnswered", request.not_answered.as_deref())?;
        if answered.len() + not_answered.len() > MAX_SCENARIOS {
            return Err(AudienceError::TooManyScenarios(answered.len() + not_answered.len()));
        }
        let fields = request.fields.clone().unwrap_or_default();
        if fields.len() > MAX_FIELD_CONDITIONS {
            return Err(AudienceError::TooManyFields(fields.len()));
        }
        for (name, condition) in &fields {
            condition.check(name)?;
        }
        let sources = source_list(request.sources.as_ref())?;
        let from = date("firstSeenFrom", request.first_seen_from.as_deref())?;
        let to = date("firstSeenTo", request.first_seen_to.as_deref())?;
        if let (Some(from), Some(to)) = (from, to)
            && from > to
        {
            return Err(AudienceError::InvertedDates {
                from: from.to_string(),
                to: to.to_string(),
            });
        }
        let start_of = |day: NaiveDate| start_of_day_ms(zone, day);
        Ok(Audience {
            any_of,
            all_of,
            none_of,
            answered,
            not_answered,
            first_seen_from_ms: from.map(start_of),
            first_seen_to_ms: to.and_then(|day| day.succ_opt()).map(start_of),
            fields,
            sources,
        })
    }

    fn scenario_list(&self, field: &'static str, ids: Option<&[String]>) -> Result<Vec<ScenarioId>, AudienceError> {
        let Some(ids) = ids else {
            return Ok(Vec::new());
        };
        if ids.is_empty() {
            return Err(AudienceError::EmptyList(field));
        }
        let mut scenarios: Vec<ScenarioId> = Vec::with_capacity(ids.len());
        for raw in ids {
            let id = ScenarioId::parse(raw.clone())
                .ok()
                .filter(|id| self.scenario(id).is_some())
                .ok_or_else(|| AudienceError::UnknownScenario(raw.clone()))?;
            if !scenarios.contains(&id) {
                scenarios.push(id);
            }
        }
        Ok(scenarios)
    }

    /// What a campaign of `scenario` sends, in the run all its recipients share.
    pub(crate) fn campaign_start(
        &self,
        scenario: &ScenarioId,
        campaign_id: &str,
    ) -> Result<CampaignStart, CampaignStartError> {
        self.campaign_start_in(scenario, &RunId::of_campaign(campaign_id))
    }

    /// What a campaign of `scenario` sends in `run` (a campaign's, or a test
    /// send's).
    pub(crate) fn campaign_start_in(
        &self,
        scenario: &ScenarioId,
        run: &RunId,
    ) -> Result<CampaignStart, CampaignStartError> {
        let loaded = self
            .scenario(scenario)
            .ok_or_else(|| CampaignStartError::UnknownScenario(scenario.to_string()))?;
        let run = run.clone();
        // No user: a split before the first wait or question cannot be taken,
        // and the campaign goes by push, each recipient decided on their own.
        let rendered = match render_in_run(loaded, &loaded.start, Some(&run), None) {
            Ok(rendered) => rendered,
            Err(crate::scenario::WalkError::SplitWithoutUser(_)) => return Ok(self.push_start(loaded, run)),
            Err(problem) => return Err(CampaignStartError::Broken(scenario.to_string(), problem.to_string())),
        };
        if rendered.branch.is_some() || !super::personal::needs(&rendered.messages).is_empty() {
            return Ok(self.push_start(loaded, run));
        }
        // Rendered once for everyone: literal braces (`{{`) become braces.
        let mut messages = rendered.messages;
        super::personal::render(&mut messages, None);
        let timer_sends = timer_sends(loaded, &rendered.timers);
        Ok(CampaignStart {
            delivery: Delivery::Multicast,
            messages_per_recipient: 1 + timer_sends,
            messages,
            version: loaded.scenario.version,
            run,
            asks: rendered.asks,
            recipient: RecipientStart {
                opens: rendered.opens,
                timers: rendered.timers,
                changes: rendered.changes,
            },
        })
    }
}

/// How far ahead a campaign may be scheduled.
pub(crate) const MAX_SCHEDULE_DAYS: i64 = 90;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SendAtError {
    #[error("sendAt {0} has passed: give a time to come, or leave sendAt out to send now")]
    Past(String),
    #[error("sendAt {0} is more than {MAX_SCHEDULE_DAYS} days ahead")]
    TooFar(String),
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
}

impl Engine {
    /// When a campaign of `scenario` asked to send at `requested` starts
    /// sending: then, or when the scenario's quiet hours end if it falls
    /// inside them. `requested` must be to come (at `now`), and within
    /// [`MAX_SCHEDULE_DAYS`].
    pub(crate) fn campaign_starts_at(
        &self,
        scenario: &ScenarioId,
        requested: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, SendAtError> {
        let loaded = self
            .scenario(scenario)
            .ok_or_else(|| SendAtError::UnknownScenario(scenario.to_string()))?;
        let shown = requested.to_rfc3339();
        if requested <= now {
            return Err(SendAtError::Past(shown));
        }
        if requested - now > chrono::TimeDelta::days(MAX_SCHEDULE_DAYS) {
            return Err(SendAtError::TooFar(shown));
        }
        Ok(crate::scenario::schedule::after_quiet_hours(loaded.timing(), requested))
    }
}

impl Engine {
    /// A push campaign's start: nothing decided for everyone. Each recipient
    /// costs the first send and the pushes the timers of the chain a first
    /// recipient would get are set to make (a branch's arms are counted up to
    /// the branch).
    fn push_start(&self, loaded: &crate::scenario::LoadedScenario, run: RunId) -> CampaignStart {
        let example = crate::ids::LineUserId::parse("U00000000000000000000000000000000").ok();
        let rendered = example.and_then(|user| {
            render_in_run(
                loaded,
                &loaded.start,
                Some(&run),
                Some(self.who(&loaded.scenario.id, &user)),
            )
            .ok()
        });
        let timer_sends = rendered
            .as_ref()
            .map_or(0, |rendered| timer_sends(loaded, &rendered.timers));
        CampaignStart {
            delivery: Delivery::Push,
            messages: Vec::new(),
            version: loaded.scenario.version,
            run,
            asks: None,
            recipient: RecipientStart::default(),
            messages_per_recipient: 1 + timer_sends,
        }
    }
}

/// The pushes `timers` are set to make: a step, each reminder up to
/// `max_reminders`, an expiry's `on_expire`.
fn timer_sends(loaded: &crate::scenario::LoadedScenario, timers: &[TimerPlan]) -> u32 {
    timers
        .iter()
        .map(|plan| match plan.kind {
            TimerKind::Step => 1,
            TimerKind::Remind => loaded
                .question_timers(&plan.node)
                .map_or(0, |timers| timers.max_reminders),
            TimerKind::Expire => loaded
                .question_timers(&plan.node)
                .map_or(0, |timers| u32::from(timers.on_expire.is_some())),
        })
        .sum()
}

/// A tag list: absent is no filter; present must hold 1 to 30 real tags.
fn tag_list(field: &'static str, tags: Option<Vec<String>>) -> Result<Vec<String>, AudienceError> {
    let Some(tags) = tags else {
        return Ok(Vec::new());
    };
    if tags.is_empty() {
        return Err(AudienceError::EmptyList(field));
    }
    if tags.len() > MAX_TAGS {
        return Err(AudienceError::TooManyTags(tags.len()));
    }
    let mut unique: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        if tag.trim().is_empty() || tag.chars().count() > MAX_TAG_CHARS || tag.contains('\0') {
            return Err(AudienceError::BadTag(tag));
        }
        if !unique.contains(&tag) {
            unique.push(tag);
        }
    }
    Ok(unique)
}

/// The sources of `sources.anyOf`, checked as ids (not against
/// `sources.toml`: a link taken down still has friends it brought).
fn source_list(filter: Option<&SourceFilter>) -> Result<Vec<String>, AudienceError> {
    let Some(filter) = filter else {
        return Ok(Vec::new());
    };
    if filter.any_of.is_empty() {
        return Err(AudienceError::EmptyList("sources.anyOf"));
    }
    if filter.any_of.len() > MAX_TAGS {
        return Err(AudienceError::TooManySources(filter.any_of.len()));
    }
    let mut unique: Vec<String> = Vec::with_capacity(filter.any_of.len());
    for source in &filter.any_of {
        if !crate::scenario::sources::valid_source_id(source) {
            return Err(AudienceError::BadSource(source.clone()));
        }
        if !unique.contains(source) {
            unique.push(source.clone());
        }
    }
    Ok(unique)
}

fn date(field: &'static str, raw: Option<&str>) -> Result<Option<NaiveDate>, AudienceError> {
    raw.map(|value| {
        NaiveDate::parse_from_str(value, "%Y-%m-%d").map_err(|_| AudienceError::BadDate {
            field,
            value: value.to_owned(),
        })
    })
    .transpose()
}

/// Epoch milliseconds of the start of `day` in `zone`: midnight, or, when a
/// DST gap swallows midnight, the first instant the clocks show a time again.
/// The same rule as the export's and the timers' days
/// ([`crate::scenario::schedule::zone_day_start`]).
pub(crate) fn start_of_day_ms(zone: chrono_tz::Tz, day: NaiveDate) -> i64 {
    crate::scenario::schedule::zone_day_start(zone, day).timestamp_millis()
}

/// A campaign's id: the same `Idempotency-Key` is the same campaign.
pub(crate) fn campaign_id(idempotency_key: &str) -> Option<String> {
    (!idempotency_key.contains('\0')).then(|| deterministic_id(&["campaign", idempotency_key]))
}

/// The campaign's `customAggregationUnits` name: `c` and the id's first 29 hex
/// digits, within LINE's `^[a-zA-Z0-9_]{1,30}$`.
pub(crate) fn aggregation_unit(campaign_id: &str) -> String {
    let hex: String = campaign_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(29)
        .collect();
    format!("c{hex}")
}

#[cfg(test)]
mod tests;
