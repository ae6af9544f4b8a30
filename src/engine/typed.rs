//! A text that may answer the user's open question: is the question still open,
//! and is the text a valid answer? Pure; the pipeline reads the open question and
//! the kept text, and commits conditional on the question as read.

use super::render::{QuestionRef, Rendered};
use super::{Answering, Engine, Ignored, rendered_in};
use crate::ids::LineUserId;
use crate::line::messages::Message;
use crate::scenario::Node;
use crate::scenario::typed::{AnswerValue, Invalid};

/// Sent after an invalid answer when the question sets no `invalid_text`.
pub(crate) const DEFAULT_INVALID_TEXT: &str =
    "入力内容を確認して、もう一度送ってください。(Please check your answer and send it again.)";

/// A user's open question, as the pipeline read it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpenQuestion {
    pub(crate) question: QuestionRef,
    /// Invalid answers so far.
    pub(crate) attempts: u32,
    pub(crate) opened_at_ms: i64,
    /// When a reminder last asked it again (the answer window runs from then).
    pub(crate) reminded_at_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TypedDecision {
    /// The question lapsed, was asked after the text was sent, or no longer
    /// exists as a text question: the text is an ordinary message (its keyword,
    /// if any, may fire).
    NotOpen,
    /// The question takes dates (from the picker), not text: the text is an
    /// ordinary message and the question stays open.
    NotTyped,
    /// A valid answer: recorded through guard 1.
    Answer(Box<super::AnswerPlan>),
    /// An invalid answer with attempts left: counted, and `invalid_text` sent.
    Invalid {
        reason: Invalid,
        messages: Vec<Message>,
        attempts: u32,
    },
    /// The last attempt was invalid: the question closes and `on_give_up`'s chain
    /// (if any) is sent.
    GiveUp { reason: Invalid, then: Box<Rendered> },
}

impl Engine {
    /// Whether a user action at `event_ms` may answer `open`: it was sent after
    /// the question was asked (a text typed before it, such as the loser of a
    /// race whose winner asked the next question, answers nothing) and within
    /// the scenario's answer window.
    pub(crate) fn is_open_at(&self, open: &OpenQuestion, event_ms: i64) -> bool {
        let Some(loaded) = self.scenario(&open.question.scenario) else {
            return false;
        };
        let window_ms = i64::try_from(loaded.answer_window.as_millis()).unwrap_or(i64::MAX);
        let window_from = open
            .reminded_at_ms
            .map_or(open.opened_at_ms, |at| at.max(open.opened_at_ms));
        event_ms >= open.opened_at_ms && event_ms.saturating_sub(window_from) < window_ms
    }

    /// Whether `open` takes typed text (a text question, not a date question).
    pub(crate) fn takes_text(&self, open: &OpenQuestion) -> bool {
        self.scenario(&open.question.scenario)
            .and_then(|loaded| loaded.node(&open.question.node))
            .is_some_and(|node| matches!(node, Node::TextQuestion(_)))
    }

    /// Decides what `text`, sent at `event_ms`, does to the user's open question.
    pub(crate) fn typed_answer(
        &self,
        user: &LineUserId,
        open: &OpenQuestion,
        text: &str,
        event_ms: i64,
    ) -> Result<TypedDecision, Ignored> {
        let Some(loaded) = self.scenario(&open.question.scenario) else {
            return Ok(TypedDecision::NotOpen);
        };
        if !self.is_open_at(open, event_ms) {
            return Ok(TypedDecision::NotOpen);
        }
        let question = match loaded.node(&open.question.node) {
            Some(Node::TextQuestion(question)) => question,
            Some(Node::DateQuestion(_)) => return Ok(TypedDecision::NotTyped),
            _ => return Ok(TypedDecision::NotOpen),
        };
        let Some(rule) = loaded.rule(&question.id) else {
            return Ok(TypedDecision::NotOpen);
        };
        let reason = match rule.check(text) {
            Ok(value) => {
                let value_type = match value {
                    AnswerValue::Integer(_) | AnswerValue::Number(_) => "number",
                    AnswerValue::Text(_) => "text",
                };
                let answer = Answering {
                    variants: &self.variants,
                    loaded,
                    node: question.id.clone(),
                    user: user.clone(),
                    value,
                    value_type,
                    choice: None,
                    next: question.next.as_ref(),
                    closes: Some(open.question.clone()),
                    run: open.question.run.clone(),
                };
                return Ok(TypedDecision::Answer(Box::new(answer.plan()?)));
            }
            Err(reason) => reason,
        };
        let attempts = open.attempts.saturating_add(1);
        if attempts >= question.max_attempts {
            let then = match &question.on_give_up {
                Some(next) => rendered_in(loaded, next, open.question.run.as_ref(), self.who(loaded.id(), user))?,
                None => Rendered::default(),
            };
            return Ok(TypedDecision::GiveUp {
                reason,
                then: Box::new(then),
            });
        }
        let text = question.invalid_text.as_deref().unwrap_or(DEFAULT_INVALID_TEXT);
        Ok(TypedDecision::Invalid {
            reason,
            messages: vec![Message::Text {
                text: text.to_owned(),
                quick_reply: None,
            }],
            attempts,
        })
    }
}
