//! What the inbox keeps about an event for processing: the engine's decision,
//! made once at ingest, and the few event fields the effects need. Never the
//! message text (a text trigger's plan says which scenario it starts, not what
//! the user typed).

use crate::engine::{AnswerPlan, CardTapPlan, Decision, FollowPlan, HintPlan, MenuTapPlan, StartPlan, TextPlan};
use crate::ids::LineUserId;
use crate::line::messages::Message;
use crate::line::webhook::{Event, EventKind, MessageContent};
use crate::outbound::{ActionKey, OutboundAction, ReplyContext};
use crate::store::{InboxKey, MessageKey};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The largest difference between LINE's clock and the service's that
/// [`Work::line_now`] takes for skew (with the event's delivery time).
pub(crate) const MAX_SKEW_MS: i64 = 30_000;

/// The decisions that have effects to carry out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
// One plan per event, decoded and held once: a box would save no copy worth it.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Plan {
    Answer(AnswerPlan),
    CardTap(CardTapPlan),
    Start(StartPlan),
    MenuTap(MenuTapPlan),
    Text(TextPlan),
    Follow(FollowPlan),
    Hint(HintPlan),
}

impl Plan {
    /// `None` for decisions without effects to store (ignored events, unsends).
    pub(crate) fn from_decision(decision: Decision) -> Option<Self> {
        match decision {
            Decision::Answer(plan) => Some(Plan::Answer(plan)),
            Decision::CardTap(plan) => Some(Plan::CardTap(plan)),
            Decision::Start(plan) => Some(Plan::Start(plan)),
            Decision::MenuTap(plan) => Some(Plan::MenuTap(plan)),
            Decision::Text(plan) => Some(Plan::Text(plan)),
            Decision::Follow(plan) => Some(Plan::Follow(plan)),
            Decision::Hint(plan) => Some(Plan::Hint(plan)),
            Decision::Ignore(_) | Decision::Unsend { .. } => None,
        }
    }

    pub(crate) fn user(&self) -> &LineUserId {
        match self {
            Plan::Answer(plan) => &plan.user,
            Plan::CardTap(plan) => &plan.run_start.user,
            Plan::Start(plan) => &plan.run_start.user,
            Plan::MenuTap(plan) => &plan.start.run_start.user,
            Plan::Text(plan) => &plan.user,
            Plan::Follow(plan) => &plan.user,
            Plan::Hint(plan) => &plan.user,
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
    /// When the service stored it, by the service's clock (ms); absent in
    /// records stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) received_ms: Option<i64>,
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
    pub(crate) fn new(
        destination: &str,
        event: &Event,
        plan: Plan,
        after: Option<&InboxKey>,
        received_ms: i64,
    ) -> Self {
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
            received_ms: Some(received_ms),
            message,
            after: after.map(|key| key.as_str().to_owned()),
            plan,
        }
    }

    /// An event the service raises itself (a friend-add source's start): no
    /// reply token, no message, its time the service's.
    pub(crate) fn raised(event_id: &str, event_type: &str, now_ms: i64, plan: Plan) -> Self {
        Self {
            webhook_event_id: event_id.to_owned(),
            event_type: event_type.to_owned(),
            event_time_ms: now_ms,
            reply_token: None,
            received_ms: Some(now_ms),
            message: None,
            after: None,
            plan,
        }
    }

    /// Now on LINE's clock, as this event tells it: LINE's timestamp plus how long
    /// the service has held the event (a difference on the service's own clock),
    /// so the skew between the two clocks cancels out. A question opened for the
    /// event is stamped with it, since later answers are judged by their LINE
    /// timestamps. An event that reached the service more than [`MAX_SKEW_MS`]
    /// away from its timestamp is a late delivery (or a clock far off), not skew:
    /// then the service's clock is the better guess.
    pub(crate) fn line_now(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let Some(received) = self.received_ms else {
            return now;
        };
        if received.abs_diff(self.event_time_ms) > MAX_SKEW_MS.unsigned_abs() {
            return now;
        }
        let held = now.timestamp_millis().saturating_sub(received).max(0);
        DateTime::from_timestamp_millis(self.event_time_ms.saturating_add(held)).unwrap_or(now)
    }

    /// When the reply token was issued, as the service's clock read then: the
    /// earlier of LINE's timestamp and the service's receipt, so a token never
    /// looks younger than it is, whichever clock runs ahead (a service clock
    /// ahead of LINE's makes tokens look older by the skew: a push instead of a
    /// reply, never a stale reply).
    pub(crate) fn reply_issued_ms(&self) -> i64 {
        self.received_ms
            .map_or(self.event_time_ms, |received| received.min(self.event_time_ms))
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
        counts: crate::store::EntryCounts,
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
                event_time_ms: self.reply_issued_ms(),
            }),
            scenario: scenario.clone(),
            webhook_event_id: Some(self.webhook_event_id.clone()),
            inbox_id: Some(inbox.as_str().to_owned()),
            answer_id: None,
            counts,
            personal: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inbox plans as the version before the shared run start stored them: a
    /// card tap, and a text whose keyword starts a scenario.
    const CARD_TAP: &str = r#"{"webhookEventId":"01HX","eventType":"postback","eventTimeMs":1700000000000,"plan":{"kind":"card_tap","user":"Uaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","card_scenario":"cards","card_node":"card","guard":{"scenario":"satisfaction","marker_id":"m1"},"messages":[{"type":"text","text":"hello"}],"opens":{"scenario":"satisfaction","version":2,"node":"name","run":"0123456789abcdef"},"run":"0123456789abcdef","run_version":2,"timers":[{"kind":"remind","scenario":"satisfaction","version":2,"run":"0123456789abcdef","node":"name"}],"asks":"name"}}"#;
    const KEYWORD: &str = r#"{"webhookEventId":"01HY","eventType":"message","eventTimeMs":1700000000000,"plan":{"kind":"text","user":"Uaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","keyword":{"user":"Uaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","scenario":"hours","guard":null,"messages":[{"type":"text","text":"9-17"}]}}}"#;

    #[test]
    fn line_now_and_the_reply_tokens_age_cancel_the_clocks_skew() {
        let Ok(mut work) = Work::decode(KEYWORD) else {
            panic!("a stored text plan reads")
        };
        let at = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
        let event = work.event_time_ms;
        // (received by the service's clock, now by the service's clock,
        //  expected LINE now, expected reply token issue time)
        let cases = [
            // Clocks agree, held 300 ms.
            (Some(event + 100), event + 400, event + 300, event),
            // The service's clock 20 s ahead of LINE's.
            (Some(event + 20_100), event + 20_400, event + 300, event),
            // The service's clock 20 s behind.
            (Some(event - 19_900), event - 19_600, event + 300, event - 19_900),
            // Delivered 10 minutes late (a redelivery), or 40 s late (a cold
            // start): the service's clock.
            (Some(event + 40_000), event + 40_300, event + 40_300, event),
            (Some(event + 600_000), event + 600_300, event + 600_300, event),
            // A record from before the receipt was kept: the service's clock.
            (None, event + 20_400, event + 20_400, event),
        ];
        for (received, now, line_now, issued) in cases {
            work.received_ms = received;
            assert_eq!(work.line_now(at(now)), at(line_now), "received {received:?}, now {now}");
            assert_eq!(work.reply_issued_ms(), issued, "received {received:?}");
        }
    }

    #[test]
    fn plans_stored_before_the_shared_run_start_read_and_keep_their_shape() {
        let Ok(tap) = Work::decode(CARD_TAP) else {
            panic!("a stored card tap reads")
        };
        let Plan::CardTap(plan) = &tap.plan else {
            panic!("a card tap")
        };
        assert_eq!(plan.run_start.user.as_str(), "Uaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
        assert_eq!(plan.guard.scenario.as_str(), "satisfaction");
        assert_eq!(plan.card_node.as_str(), "card");
        assert_eq!(plan.run_start.messages.len(), 1);
        assert_eq!(
            plan.run_start.run.as_ref().map(crate::ids::RunId::as_str),
            Some("0123456789abcdef")
        );
        assert_eq!(plan.run_start.run_version, Some(2));
        assert_eq!(plan.run_start.timers.len(), 1);
        assert_eq!(
            plan.run_start.asks.as_ref().map(crate::ids::NodeId::as_str),
            Some("name")
        );
        assert_eq!(
            plan.run_start.opens.as_ref().map(|opens| opens.node.as_str()),
            Some("name")
        );

        let Ok(text) = Work::decode(KEYWORD) else {
            panic!("a stored text plan reads")
        };
        let Plan::Text(TextPlan {
            keyword: Some(start), ..
        }) = &text.plan
        else {
            panic!("a text with a keyword start")
        };
        assert_eq!(start.scenario.as_str(), "hours");
        assert_eq!(start.guard, None);
        assert_eq!(start.run_start.run, None);
        assert!(start.run_start.timers.is_empty());

        // Written again, each is the same JSON (key order aside; `guard: null`
        // is how a start without a guard is written).
        for (stored, work) in [(CARD_TAP, tap), (KEYWORD, text)] {
            let again: serde_json::Value = work
                .encode()
                .ok()
                .and_then(|json| serde_json::from_str(&json).ok())
                .unwrap_or_default();
            let before: serde_json::Value = serde_json::from_str(stored).unwrap_or_default();
            assert_eq!(again, before);
        }
    }
}
