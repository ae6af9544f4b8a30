//! Notices instead of silence (`answered_text`, `hint_text`): at most one per
//! user, question and interval, however many duplicates arrive. The record of
//! the last notice is read, and the commit that writes the notice's ledger
//! entry is conditional on it: of duplicates processed together, one commits
//! and the others read a fresh record and send nothing.

use super::PipelineError;
use super::hold::{Failure, Found, Hold};
use super::work::Work;
use super::worker::EventWorker;
use crate::engine::NoticePlan;
use crate::ids::LineUserId;
use crate::outbound::{ActionKey, StagedAction};
use crate::store::{Effect, EffectWrites, EntryCounts, MessageKey, NoticeWrite};

/// Commit rounds before giving up for this attempt (a round lost to a
/// concurrent duplicate ends in a fresh read that sends nothing).
const ROUNDS: usize = 3;

/// How a notice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Noticed {
    Sent,
    /// One was sent within the interval: nothing sent.
    Withheld,
    /// The user unsent the text first.
    Unsent,
}

impl EventWorker {
    /// Sends `notice` to `user` for this event unless one went out within its
    /// interval; the event is done either way. `message` is the text message
    /// the notice answers (its mark races an unsend).
    pub(super) async fn notice(
        &self,
        hold: &Hold,
        work: &Work,
        user: &LineUserId,
        notice: &NoticePlan,
        message: Option<&MessageKey>,
    ) -> Result<Noticed, Failure> {
        let id = notice.record_id(user);
        let messages = notice.messages();
        let action = work.action(
            ActionKey::event(hold.key.as_str()),
            &hold.key,
            &notice.scenario,
            &messages,
            self.sender.reply_is_fresh(work),
            EntryCounts::default(),
        );
        let action = self
            .personal
            .fill(action, self.versions.current(), &super::branches::StepSoFar::default())
            .await?
            .0;
        let mut staged = action.map(|action| action.stage(&self.store)).transpose()?;
        for _ in 0..ROUNDS {
            let read = self.store.notice(&id).await?;
            let last_ms = read.as_ref().map(|read| read.doc.last_event_at.as_millisecond());
            if !notice.due(last_ms, work.event_time_ms) {
                self.done_forgetting(hold, message).await?;
                return Ok(Noticed::Withheld);
            }
            if let Some(staged) = staged.as_mut() {
                staged.renew_lease(&self.store);
            }
            let effects = EffectWrites {
                message,
                forget_text: message,
                notice: Some(NoticeWrite {
                    id: &id,
                    doc: self.store.notice_doc(
                        user.as_str(),
                        notice.scenario.as_str(),
                        notice.node.as_str(),
                        notice.kind.as_str(),
                        work.event_time_ms,
                    ),
                    read: read.as_ref().map(|read| read.version),
                }),
                action: staged.as_ref().map(StagedAction::entry),
                ..EffectWrites::default()
            };
            let found = match self.store.commit_effects(&hold.key, hold.version, &effects).await {
                Effect::Committed(version) => {
                    self.sender.send_staged(staged.as_ref(), version).await;
                    return Ok(Noticed::Sent);
                }
                // A duplicate created the record first, or the message's mark
                // exists (unsent first): nothing was applied.
                Effect::AlreadyExists => {
                    if let Some(message) = message
                        && self.store.message_unsent(message).await?
                    {
                        self.done_forgetting(hold, Some(message)).await?;
                        return Ok(Noticed::Unsent);
                    }
                    continue;
                }
                Effect::Changed => hold.find_out_patiently(&self.store, staged.as_ref()).await?,
                Effect::Unknown(error) => {
                    tracing::warn!(error = %error, "the notice commit's outcome is unknown; reading what happened");
                    hold.find_out_patiently(&self.store, staged.as_ref()).await?
                }
                Effect::Failed(error) => return Err(error.into()),
            };
            match found {
                Found::Landed(version) => {
                    self.sender.send_staged(staged.as_ref(), version).await;
                    return Ok(Noticed::Sent);
                }
                Found::NotLanded => continue,
                Found::Superseded => return Err(Failure::Superseded),
            }
        }
        Err(PipelineError::Contention("the notice record kept changing".into()).into())
    }
}
