//! Effect commits: guard 1's answer commit, and the commit of a trigger's or a
//! card tap's effects. Each is one `Commit` RPC: all of it lands or none does.
//!
//! The first write of each is the inbox record's move to `done`, conditional on
//! the version the worker holds: a worker that was superseded (its lease ran out
//! and another instance took the event) commits nothing. Firestore reports the
//! first failing precondition, so a conflict on the inbox reads as `Changed`.

use super::docs::collections::{SCENARIO_ANSWERS, SURVEY_RESPONSES, USERS};
use super::docs::{AnswerDoc, LedgerDoc};
use super::inbox::InboxKey;
use super::messages::MessageKey;
use super::questions::QuestionChange;
use super::timers::TimerDoc;
use super::writes::{
    CommitOutcome, Expect, array_remove, array_union, create, expecting, increment_by, maximum, merge, merge_deleting,
    merge_paths, minimum, transform_only,
};
use super::{Store, StoreError, Version};
use crate::values::{AnswerValue, FieldValue, UserChanges};
use firestore::FirestoreInstant;
use gcloud_sdk::google::firestore::v1::Write;
use serde::Serialize;
use std::collections::BTreeMap;

/// One answer to record (guard 1), as the store writes it.
pub(crate) struct AnswerRecord<'a> {
    pub(crate) answer_id: &'a str,
    pub(crate) marker_id: &'a str,
    pub(crate) scenario_id: &'a str,
    pub(crate) node_id: &'a str,
    pub(crate) user: &'a str,
    pub(crate) value: &'a AnswerValue,
    pub(crate) value_type: &'a str,
    /// The answer's own tags, recorded on it.
    pub(crate) tags: &'a [String],
    /// Everything the commit does to the user's tags and fields (the answer's
    /// tags included).
    pub(crate) changes: UserChanges,
    pub(crate) scenario_version: u32,
    pub(crate) webhook_event_id: &'a str,
    /// The open question this answer closes or replaces, and the question its
    /// follow-up opens (one write: the same document).
    pub(crate) question: Option<QuestionChange>,
    /// A typed answer's message: its mark names the answer, and its kept text goes.
    pub(crate) message: Option<&'a MessageKey>,
    /// The timers the follow-up schedules.
    pub(crate) timers: &'a [(String, TimerDoc)],
    /// The question's own pending timers (reminder, expiry), cancelled by the
    /// answer conditional on the version read: an expiry that fires first makes
    /// the answer record nothing.
    pub(crate) cancels: &'a [(String, Version)],
    /// Today in the scenario's time zone (`YYYY-MM-DD`): the day whose result
    /// counters the answer raises.
    pub(crate) day: String,
    /// The A/B arm the question is behind: on the answer and the counts by arm.
    pub(crate) variant: Option<&'a str>,
    /// The arm the user's run takes, for the marker: the question's, or the
    /// one the follow-up's split took.
    pub(crate) run_variant: Option<&'a str>,
    /// `users/{id}` as a branch of the follow-up read it: the commit lands only
    /// if the user's record is unchanged since.
    pub(crate) user_read: Option<Expect>,
    /// The campaign whose run the question was asked in.
    pub(crate) campaign_id: Option<&'a str>,
}

/// A guarded start (guards 2 and 3): recorded on the user's marker, conditional
/// on the marker as the guard read it.
pub(crate) struct StartRecord<'a> {
    pub(crate) marker_id: &'a str,
    pub(crate) scenario_id: &'a str,
    pub(crate) user: &'a str,
    /// The marker's version when read; `None`: it did not exist.
    pub(crate) read: Option<Version>,
    /// The event time of the start.
    pub(crate) started_at: FirestoreInstant,
    /// The inbox record of the starting event.
    pub(crate) started_by: &'a str,
    /// The run this start begins, and the scenario version it is pinned to.
    pub(crate) run: &'a str,
    pub(crate) run_version: u32,
    /// The split arm the run's first messages took.
    pub(crate) variant: Option<&'a str>,
}

/// An unguarded start of a run (a manual send): the marker names the run, so
/// the timers of an earlier run find themselves superseded.
pub(crate) struct RunRecord<'a> {
    pub(crate) marker_id: &'a str,
    pub(crate) scenario_id: &'a str,
    pub(crate) user: &'a str,
    pub(crate) run: &'a str,
    pub(crate) run_version: u32,
    /// The split arm the run's first messages took.
    pub(crate) variant: Option<&'a str>,
    /// The campaign whose run this is.
    pub(crate) campaign_id: Option<&'a str>,
}

/// A campaign a write to `users/{id}` records.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CampaignMark<'a> {
    /// Its message reached the user (the settle of their chunk).
    Received(&'a str),
    /// The user answered a question of its run.
    Answered(&'a str),
    /// A reminder of its run reached the user.
    Reminded(&'a str),
    /// The user's question of its run was closed by its expiry.
    Expired(&'a str),
}

/// The effects of a trigger or a card tap.
#[derive(Default)]
pub(crate) struct EffectWrites<'a> {
    /// A tag for the user (a card tap's `flex_image_tap`).
    pub(crate) tag: Option<(&'a str, &'a str)>,
    /// A rich menu tap's menu, added to the user's `richMenuTaps` (with `tag`).
    pub(crate) menu_tap: Option<&'a str>,
    pub(crate) start: Option<StartRecord<'a>>,
    /// The text message whose effect this is: its mark is created, so an unsend
    /// that came first makes this commit fail, and one that comes later finds it.
    pub(crate) message: Option<&'a MessageKey>,
    /// The text message whose kept text goes with this commit.
    pub(crate) forget_text: Option<&'a MessageKey>,
    /// The question the messages ask, or the change to the open one.
    pub(crate) question: Option<QuestionChange>,
    /// The timers the messages schedule.
    pub(crate) timers: &'a [(String, TimerDoc)],
    /// The ledger entry of what to send (always the last write).
    pub(crate) action: Option<(&'a str, &'a LedgerDoc)>,
    /// What the messages' nodes do to the user's tags and fields.
    pub(crate) changes: Option<(&'a str, &'a UserChanges)>,
    /// The record of a notice these messages are, conditional on it as read.
    pub(crate) notice: Option<super::NoticeWrite<'a>>,
    /// `users/{id}` as a branch of the messages read it: the commit lands only
    /// if the user's record is unchanged since.
    pub(crate) user_read: Option<Expect>,
}

/// How an effect commit ended.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Landed, with the version of the ledger entry written by it (if any).
    Committed(Option<Version>),
    /// A `create` met an existing document (for an answer: it was answered).
    AlreadyExists,
    /// A precondition failed: the inbox record or the marker moved on.
    Changed,
    /// It may or may not have landed.
    Unknown(StoreError),
    Failed(StoreError),
}

impl From<CommitOutcome> for Effect {
    fn from(outcome: CommitOutcome) -> Self {
        match outcome {
            CommitOutcome::Committed(versions) => Effect::Committed(versions.last().copied().flatten()),
            CommitOutcome::AlreadyExists => Effect::AlreadyExists,
            CommitOutcome::Changed => Effect::Changed,
            CommitOutcome::Unknown(error) => Effect::Unknown(error),
            CommitOutcome::Failed(error) => Effect::Failed(error),
        }
    }
}

impl Store {
    /// Writes the inbox's "done", the answer (create, so `exists = false`), the
    /// user's new tags (array union), the scenario marker and the follow-up's
    /// ledger entry in one atomic commit. `AlreadyExists` means none of it was
    /// applied: the user had answered (the ledger entry of an answer's follow-up
    /// only ever exists beside its answer).
    pub(crate) async fn commit_answer(
        &self,
        inbox: &InboxKey,
        version: Version,
        answer: &AnswerRecord<'_>,
        follow_up: Option<(&str, &LedgerDoc)>,
    ) -> Effect {
        match self.answer_writes(inbox, version, answer, follow_up) {
            Ok(writes) => self.commit(writes).await.into(),
            Err(error) => Effect::Failed(error),
        }
    }

    fn answer_writes(
        &self,
        inbox: &InboxKey,
        version: Version,
        answer: &AnswerRecord<'_>,
        follow_up: Option<(&str, &LedgerDoc)>,
    ) -> Result<Vec<Write>, StoreError> {
        let now = self.now();
        let doc = AnswerDoc {
            scenario_id: answer.scenario_id.to_owned(),
            node_id: answer.node_id.to_owned(),
            line_user_id: answer.user.to_owned(),
            value: Some(answer.value.clone()),
            value_type: answer.value_type.to_owned(),
            tags: answer.tags.to_vec(),
            scenario_version: answer.scenario_version,
            answered_at: now,
            webhook_event_id: answer.webhook_event_id.to_owned(),
            variant: answer.variant.map(str::to_owned),
            campaign_id: answer.campaign_id.map(str::to_owned),
        };
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Answered<'a> {
            scenario_id: &'a str,
            line_user_id: &'a str,
            last_answer_id: &'a str,
            #[serde(with = "firestore::serialize_as_timestamp")]
            last_answered_at: FirestoreInstant,
            #[serde(skip_serializing_if = "Option::is_none")]
            variant: Option<&'a str>,
        }
        let marker = Answered {
            scenario_id: answer.scenario_id,
            line_user_id: answer.user,
            last_answer_id: answer.answer_id,
            last_answered_at: now,
            variant: answer.run_variant,
        };
        let mut writes = vec![
            self.inbox_done_write(inbox, version)?,
            create(self.document_path(SURVEY_RESPONSES, answer.answer_id), &doc)?,
            // Exact: this commit lands once, as guard 1's create does.
            self.answer_count_write(&doc, &answer.day)?,
            // A merge, not a set: the marker's last start stays, and a guard that
            // read the marker before this commit finds it changed.
            merge(
                self.document_path(SCENARIO_ANSWERS, answer.marker_id),
                &marker,
                Vec::new(),
            )?,
        ];
        writes.extend(self.user_writes(
            answer.user,
            &answer.changes,
            Some(now),
            answer.user_read,
            answer.campaign_id.map(CampaignMark::Answered),
        )?);
        if let Some(message) = answer.message {
            writes.push(self.message_processed_write(message, Some(answer.answer_id))?);
            writes.push(self.forget_text_write(message));
        }
        if let Some(change) = &answer.question {
            writes.push(self.question_write(change)?);
        }
        for (timer_id, read) in answer.cancels {
            // The outcome the answer path reads back as "answered, not expired"
            // (`pipeline::timers::ANSWERED_CANCEL`).
            writes.push(self.timer_cancel_write(timer_id, *read, "answered")?);
        }
        for (timer_id, doc) in answer.timers {
            writes.push(self.timer_write(timer_id, doc)?);
        }
        if let Some((ledger_id, entry)) = follow_up {
            writes.extend(self.sent_count_write(entry)?);
            writes.push(self.ledger_create_write(ledger_id, entry)?);
        }
        Ok(writes)
    }

    /// The effects of a trigger or a card tap, in one atomic commit with the
    /// inbox's "done".
    pub(crate) async fn commit_effects(
        &self,
        inbox: &InboxKey,
        version: Version,
        effects: &EffectWrites<'_>,
    ) -> Effect {
        match self.effect_writes(inbox, version, effects) {
            Ok(writes) => self.commit(writes).await.into(),
            Err(error) => Effect::Failed(error),
        }
    }

    fn effect_writes(
        &self,
        inbox: &InboxKey,
        version: Version,
        effects: &EffectWrites<'_>,
    ) -> Result<Vec<Write>, StoreError> {
        let mut writes = vec![self.inbox_done_write(inbox, version)?];
        if let Some(message) = effects.message {
            writes.push(self.message_processed_write(message, None)?);
        }
        if let Some(message) = effects.forget_text {
            writes.push(self.forget_text_write(message));
        }
        if let Some(change) = &effects.question {
            writes.push(self.question_write(change)?);
        }
        if let Some(notice) = &effects.notice {
            writes.push(self.notice_write(notice)?);
        }
        if let Some(start) = &effects.start {
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Started<'a> {
                scenario_id: &'a str,
                line_user_id: &'a str,
                #[serde(with = "firestore::serialize_as_timestamp")]
                last_started_at: FirestoreInstant,
                last_started_by: &'a str,
                run: &'a str,
                run_version: u32,
                #[serde(skip_serializing_if = "Option::is_none")]
                variant: Option<&'a str>,
            }
            let started = Started {
                scenario_id: start.scenario_id,
                line_user_id: start.user,
                last_started_at: start.started_at,
                last_started_by: start.started_by,
                run: start.run,
                run_version: start.run_version,
                variant: start.variant,
            };
            let expect = start.read.map_or(Expect::Absent, Expect::At);
            // A new run is no campaign's: the campaign of the run before goes.
            writes.push(expecting(
                merge_deleting(
                    self.document_path(SCENARIO_ANSWERS, start.marker_id),
                    &started,
                    &["campaignId"],
                    Vec::new(),
                )?,
                expect,
            ));
        }
        // The user is seen (a campaign's audience reads it), with the card's tag
        // and what the messages' nodes do.
        let seen = effects
            .tag
            .map(|(user, _)| user)
            .or(effects.start.as_ref().map(|start| start.user))
            .or(effects.changes.map(|(user, _)| user));
        if let Some(user) = seen {
            let mut changes = UserChanges::default();
            if let Some((_, tag)) = effects.tag {
                changes.add_tags([&tag.to_owned()]);
            }
            if let Some((_, later)) = effects.changes {
                changes = changes.then(later);
            }
            writes.extend(self.user_change_writes(user, &changes, Some(self.now()), effects.user_read)?);
            if let Some(menu) = effects.menu_tap {
                writes.push(transform_only(
                    self.document_path(USERS, user),
                    vec![array_union("richMenuTaps", &[menu.to_owned()])],
                ));
            }
        }
        for (timer_id, doc) in effects.timers {
            writes.push(self.timer_write(timer_id, doc)?);
        }
        if let Some((ledger_id, entry)) = effects.action {
            writes.extend(self.sent_count_write(entry)?);
            writes.push(self.ledger_create_write(ledger_id, entry)?);
        }
        Ok(writes)
    }

    /// The marker write of a run started without a guard (a manual send).
    pub(crate) fn run_write(&self, run: &RunRecord<'_>) -> Result<Write, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Run<'a> {
            scenario_id: &'a str,
            line_user_id: &'a str,
            run: &'a str,
            run_version: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            variant: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            campaign_id: Option<&'a str>,
        }
        let fields = Run {
            scenario_id: run.scenario_id,
            line_user_id: run.user,
            run: run.run,
            run_version: run.run_version,
            variant: run.variant,
            campaign_id: run.campaign_id,
        };
        // A run that is no campaign's drops the campaign of the run before it.
        let drop: &[&str] = if run.campaign_id.is_none() {
            &["campaignId"]
        } else {
            &[]
        };
        Ok(merge_deleting(
            self.document_path(SCENARIO_ANSWERS, run.marker_id),
            &fields,
            drop,
            Vec::new(),
        )?)
    }

    /// `users/{lineUserId}`: tags added and removed by array transforms and
    /// fields set by path, without reading the document, so concurrent writers
    /// never undo each other. `seen` also moves first/last seen; `expect` makes
    /// the write conditional. A tag removal is a second write to the same
    /// document in the same commit (one write takes one transform per field;
    /// `changes` never adds and removes the same tag, so their order does not
    /// matter).
    pub(super) fn user_change_writes(
        &self,
        user: &str,
        changes: &UserChanges,
        seen: Option<FirestoreInstant>,
        expect: Option<Expect>,
    ) -> Result<Vec<Write>, StoreError> {
        self.user_writes(user, changes, seen, expect, None)
    }

    /// [`Self::user_change_writes`], and the campaign the write is part of:
    /// recorded on the user (`campaigns`: received it; `answeredCampaigns`:
    /// answered in its run), never removed, so a campaign's results count
    /// its recipients who answered and who unfollowed since, exactly.
    pub(super) fn user_writes(
        &self,
        user: &str,
        changes: &UserChanges,
        seen: Option<FirestoreInstant>,
        expect: Option<Expect>,
        campaign: Option<CampaignMark<'_>>,
    ) -> Result<Vec<Write>, StoreError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct UserFields<'a> {
            line_user_id: &'a str,
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            fields: &'a BTreeMap<String, FieldValue>,
            #[serde(skip_serializing_if = "Option::is_none")]
            rich_menu: Option<&'a str>,
        }
        // A step's write always moves the record's version, so a branch that
        // read the record before it (conditional on that version) sees it,
        // even when the step's tags and fields change nothing.
        let mut transforms = vec![super::writes::commit_time("changedAt")];
        if let Some(now) = seen {
            let now_ms = now.as_millisecond();
            transforms.extend([minimum("firstSeenMs", now_ms), maximum("lastSeenMs", now_ms)]);
        }
        if !changes.tag.is_empty() {
            transforms.push(array_union("tags", &changes.tag));
        }
        match campaign {
            Some(CampaignMark::Received(id)) => transforms.push(array_union("campaigns", &[id.to_owned()])),
            Some(CampaignMark::Answered(id)) => transforms.push(array_union("answeredCampaigns", &[id.to_owned()])),
            Some(CampaignMark::Reminded(id)) => transforms.push(array_union("remindedCampaigns", &[id.to_owned()])),
            Some(CampaignMark::Expired(id)) => transforms.push(array_union("expiredCampaigns", &[id.to_owned()])),
            None => {}
        }
        let path = self.document_path(USERS, user);
        let fields = UserFields {
            line_user_id: user,
            fields: &changes.set,
            rich_menu: changes.rich_menu.as_deref(),
        };
        // Each field by its own path: `fields` as a whole would replace the map.
        let mut masked: Vec<String> = changes.set.keys().map(|name| format!("fields.{name}")).collect();
        if changes.rich_menu.is_some() {
            // The decision and its sequence number: the link call applies the
            // newest, and checks the number did not move while it called.
            masked.push("richMenu".to_owned());
            transforms.push(increment_by("richMenuSeq", 1));
        }
        let write = merge_paths(path.clone(), &fields, &masked, transforms)?;
        let mut writes = vec![match expect {
            Some(expect) => expecting(write, expect),
            None => write,
        }];
        if !changes.untag.is_empty() {
            writes.push(transform_only(path, vec![array_remove("tags", &changes.untag)]));
        }
        if changes.rich_menu.is_some() {
            let (id, entry) = self.rich_menu_sync_entry(user);
            writes.push(self.ledger_create_write(&id, &entry)?);
        }
        Ok(writes)
    }
}
