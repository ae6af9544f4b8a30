//! Notices instead of silence: `answered_text` when a tap answers a question
//! the user already answered, `hint_text` when text is typed at a date picker.
//! Each reaches a user at most once per question and interval, however many
//! duplicates arrive: the store keeps one record per (kind, question, user)
//! with the event time of the last notice, and a commit conditional on it.

use super::Engine;
use super::typed::OpenQuestion;
use crate::ids::{LineUserId, NodeId, ScenarioId, deterministic_id};
use crate::line::messages::Message;
use crate::scenario::Notice;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum NoticeKind {
    /// `answered_text`.
    Answered,
    /// `hint_text`.
    Hint,
}

impl NoticeKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Answered => "answered",
            NoticeKind::Hint => "hint",
        }
    }
}

/// One notice to send, if its interval allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NoticePlan {
    pub(crate) kind: NoticeKind,
    pub(crate) scenario: ScenarioId,
    pub(crate) node: NodeId,
    pub(crate) text: String,
    /// At most one notice per this many milliseconds (of event time).
    pub(crate) every_ms: i64,
}

/// A date picker got text instead of a pick: send its hint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HintPlan {
    pub(crate) user: LineUserId,
    pub(crate) notice: NoticePlan,
}

impl NoticePlan {
    pub(crate) fn of(kind: NoticeKind, scenario: &ScenarioId, node: &NodeId, notice: Notice<'_>) -> Self {
        Self {
            kind,
            scenario: scenario.clone(),
            node: node.clone(),
            text: notice.text.to_owned(),
            every_ms: i64::try_from(notice.every().as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// The id of the record that keeps when `user` last got this notice.
    pub(crate) fn record_id(&self, user: &LineUserId) -> String {
        deterministic_id(&[
            "notice",
            self.kind.as_str(),
            self.scenario.as_str(),
            self.node.as_str(),
            user.as_str(),
        ])
    }

    pub(crate) fn messages(&self) -> Vec<Message> {
        vec![Message::Text {
            text: self.text.clone(),
            quick_reply: None,
        }]
    }

    /// Whether an event at `event_ms` may get the notice, given the event time
    /// of the last one sent (`None`: never). An event older than the last
    /// notice never gets another.
    pub(crate) fn due(&self, last_ms: Option<i64>, event_ms: i64) -> bool {
        last_ms.is_none_or(|last| event_ms >= last.saturating_add(self.every_ms))
    }
}

impl Engine {
    /// The hint for text typed while `open` (a date question with `hint_text`)
    /// waits for a pick at `event_ms`; `None` when it has no hint or lapsed.
    pub(crate) fn hint_for(&self, open: &OpenQuestion, event_ms: i64) -> Option<NoticePlan> {
        if !self.is_open_at(open, event_ms) {
            return None;
        }
        let loaded = self.scenario(&open.question.scenario)?;
        let notice = loaded.node(&open.question.node)?.hint_notice()?;
        Some(NoticePlan::of(
            NoticeKind::Hint,
            &open.question.scenario,
            &open.question.node,
            notice,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(every_ms: i64) -> NoticePlan {
        NoticePlan {
            kind: NoticeKind::Answered,
            scenario: ScenarioId::parse("s").expect("valid"),
            node: NodeId::parse("q").expect("valid"),
            text: "ご回答済みです。".to_owned(),
            every_ms,
        }
    }

    #[test]
    fn a_notice_is_due_once_per_interval_of_event_time() {
        let every = 600_000;
        let cases = [
            (None, 0, true),
            (Some(1_000), 1_000, false),
            (Some(1_000), 1_999, false),
            (Some(1_000), 600_999, false),
            (Some(1_000), 601_000, true),
            (Some(1_000), 500, false),
            (Some(i64::MAX - 1), i64::MAX - 1, false),
        ];
        for (last, event, due) in cases {
            assert_eq!(plan(every).due(last, event), due, "{last:?} {event}");
        }
    }

    #[test]
    fn records_are_per_kind_question_and_user() {
        let user = LineUserId::parse("U1").expect("valid");
        let other = LineUserId::parse("U2").expect("valid");
        let answered = plan(1);
        let hint = NoticePlan {
            kind: NoticeKind::Hint,
            ..plan(1)
        };
        assert_eq!(
            answered.record_id(&user),
            plan(5).record_id(&user),
            "the interval is not in the id"
        );
        assert_ne!(answered.record_id(&user), hint.record_id(&user));
        assert_ne!(answered.record_id(&user), answered.record_id(&other));
        assert_eq!(answered.record_id(&user).len(), 40);
    }
}
