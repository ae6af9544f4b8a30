//! What the inbox keeps about an event for processing: the engine's decision,
//! made once at ingest, and the few event fields the effects need. Never the
//! message text (a text trigger's plan says which scenario it starts, not what
//! the user typed).

use crate::engine::{AnswerPlan, CardTapPlan, Decision, FollowPlan, StartPlan, TextPlan};
use crate::ids::LineUserId;
use crate::line::messages::Message;
use crate::line::webhook::{Event, EventKind, MessageContent};
use crate::outbound::{ActionKey, OutboundAction, ReplyContext};
use crate::store::{InboxKey, MessageKey};
use serde::{Deserialize, Serialize};

/// The decisions that have effects to carry out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Plan {
    Answer(AnswerPlan),
    CardTap(CardTapPlan),
    Start(StartPlan),
    Text(TextPlan),
    Follow(FollowPlan),
}

impl Plan {
    /// `None` for decisions without effects to store (ignored events, unsends).
    pub(crate) fn from_decision(decision: Decision) -> Option<Self> {
        match decision {
            Decision::Answer(plan) => Some(Plan::Answer(plan)),
            Decision::CardTap(plan) => Some(Plan::CardTap(plan)),
            Decision::Start(plan) => Some(Plan::Start(plan)),
            Decision::Text(plan) => Some(Plan::Text(plan)),
            Decision::Follow(plan) => Some(Plan::Follow(plan)),
            Decision::Ignore(_) | Decision::Unsend { .. } => None,
        }
    }

    pub(crate) fn user(&self) -> &LineUserId {
        match self {
            Plan::Answer(plan) => &plan.user,
            Plan::CardTap(plan) => &plan.user,
            Plan::Start(plan) => &plan.user,
            Plan::Text(plan) => &plan.user,
            Plan::Follow(plan) => &plan.user,
        }
    }
}

/// One stored event's work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Work {
    pub(crate) webhook_event_id: String,
    pub(crate) event_type: String,
    /// When the event happened (ms since the epoch): the reply token's age and the
    /// start dedup window count from it.
    pub(crate) event_time_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reply_token: Option<String>,
    /// For a text message: its mark, which an unsend races for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<MessageKey>,
    /// The inbox id of the same user's previous event in the same webhook
    /// request: this one waits until that one is no longer pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) after: Option<String>,
    pub(crate) plan: Plan,
}

impl Work {
    pub(crate) fn new(destination: &str, event: &Event, plan: Plan, after: Option<&InboxKey>) -> Self {
        let message = match &event.kind {
            EventKind::Message {
                message: MessageContent::Text { id, .. },
            } => MessageKey::new(destination, id),
            _ => None,
        };
        Self {
            webhook_event_id: event.webhook_event_id.clone(),
            event_type: event.type_name.clone(),
            event_time_ms: event.timestamp,
            reply_token: event.reply_token.clone(),
            message,
            after: after.map(|key| key.as_str().to_owned()),
            plan,
        }
    }

    pub(crate) fn encode(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    pub(crate) fn decode(stored: &str) -> Result<Self, String> {
        // The parser's own message could quote the plan (and its reply token).
        serde_json::from_str(stored).map_err(|error| {
            format!(
                "the stored plan cannot be read: {}",
                crate::line::webhook::describe_error(&error)
            )
        })
    }

    /// The action that sends `messages` for this event, keyed by `key`; `None`
    /// when there is nothing to send. `reply` says whether the token is still
    /// worth a reply (decided now and recorded with the action).
    pub(crate) fn action(
        &self,
        key: ActionKey,
        inbox: &InboxKey,
        scenario: &crate::ids::ScenarioId,
        messages: &[Message],
        reply: bool,
        asks: Option<crate::store::AsksDoc>,
    ) -> Option<OutboundAction> {
        if messages.is_empty() {
            return None;
        }
        Some(OutboundAction {
            key,
            user: self.plan.user().clone(),
            messages: messages.to_vec(),
            reply: self.reply_token.as_ref().filter(|_| reply).map(|token| ReplyContext {
                token: token.clone(),
                event_time_ms: self.event_time_ms,
            }),
            scenario: scenario.clone(),
            webhook_event_id: Some(self.webhook_event_id.clone()),
            inbox_id: Some(inbox.as_str().to_owned()),
            answer_id: None,
            asks,
        })
    }
}
