//! The event an outbound action answers, and the action built from it.

use crate::engine::AnswerPlan;
use crate::ids::{LineUserId, ScenarioId};
use crate::line::messages::Message;
use crate::line::webhook::Event;
use crate::outbound::{OutboundAction, ReplyContext};
use crate::store::InboxKey;

/// The event an action answers: where its reply token and correlation ids come from.
pub(super) struct Cause<'a> {
    pub(super) event: &'a Event,
    pub(super) key: &'a InboxKey,
    /// The event's reply token, if still fresh enough to be worth a reply.
    pub(super) reply: Option<ReplyContext>,
}

impl Cause<'_> {
    /// `None` when there is nothing to send.
    pub(super) fn action(
        &self,
        action_key: String,
        to: impl Recipient,
        messages: &[Message],
    ) -> Option<OutboundAction> {
        if messages.is_empty() {
            return None;
        }
        let (user, scenario) = to.recipient();
        Some(OutboundAction {
            action_key,
            user: user.clone(),
            messages: messages.to_vec(),
            reply: self.reply.clone(),
            scenario: scenario.clone(),
            webhook_event_id: Some(self.event.webhook_event_id.clone()),
            inbox_id: Some(self.key.as_str().to_owned()),
            answer_id: None,
        })
    }
}

/// Who an action goes to, and for which scenario.
pub(super) trait Recipient {
    fn recipient(&self) -> (&LineUserId, &ScenarioId);
}

impl Recipient for &AnswerPlan {
    fn recipient(&self) -> (&LineUserId, &ScenarioId) {
        (&self.user, &self.scenario)
    }
}

impl Recipient for (&LineUserId, &ScenarioId) {
    fn recipient(&self) -> (&LineUserId, &ScenarioId) {
        (self.0, self.1)
    }
}

pub(super) fn reply_context(event: &Event) -> Option<ReplyContext> {
    event.reply_token.as_ref().map(|token| ReplyContext {
        token: token.clone(),
        event_time_ms: event.timestamp,
    })
}
