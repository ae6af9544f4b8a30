//! Turning scenario nodes into LINE messages.

use crate::ids::{NodeId, ScenarioId};
use crate::line::messages::{Action, FlexBubble, FlexImage, Message, QuickReply, QuickReplyItem, Template};
use crate::scenario::postback::Postback;
use crate::scenario::{Choice, DateMode, DateQuestionNode, LoadedScenario, Node, SurveyNode, SurveyStyle, WalkError};
use serde::{Deserialize, Serialize};

/// The date picker's label when the scenario sets none.
const DEFAULT_PICKER_LABEL: &str = "Choose";

/// What reaching a node sends, and the typed or date question it leaves open.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Rendered {
    pub(crate) messages: Vec<Message>,
    /// The text or date question these messages ask (the last node of a chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) opens: Option<QuestionRef>,
}

/// A text or date question of one scenario version: what a user's open question
/// record names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuestionRef {
    pub(crate) scenario: ScenarioId,
    pub(crate) version: u32,
    pub(crate) node: NodeId,
}

/// The messages sent when the scenario reaches `from`: the chain of nodes up to
/// the next one that waits for the user. Validation at load makes every entry
/// point walk to at most five messages; an error here is still an error, never a
/// panic, since input chooses where a walk starts.
pub(crate) fn render_from(scenario: &LoadedScenario, from: &NodeId) -> Result<Rendered, WalkError> {
    let nodes = crate::scenario::walk_nodes(scenario, from)?;
    let opens = nodes.last().and_then(|node| match node {
        Node::TextQuestion(_) | Node::DateQuestion(_) => Some(QuestionRef {
            scenario: scenario.id().clone(),
            version: scenario.scenario.version,
            node: node.id().clone(),
        }),
        _ => None,
    });
    Ok(Rendered {
        messages: nodes.into_iter().filter_map(|node| render(scenario, node)).collect(),
        opens,
    })
}

fn text(text: &str) -> Message {
    Message::Text {
        text: text.to_owned(),
        quick_reply: None,
    }
}

fn render(scenario: &LoadedScenario, node: &Node) -> Option<Message> {
    match node {
        Node::Trigger(_) => None,
        Node::Message(message) => Some(text(&message.text)),
        Node::End(end) => end.text.as_deref().map(text),
        Node::TextQuestion(question) => Some(text(&question.text)),
        Node::Survey(survey) => Some(render_survey(scenario.id(), survey)),
        Node::DateQuestion(question) => Some(render_date(scenario.id(), question)),
        Node::FlexImage(card) => Some(Message::Flex {
            alt_text: card.alt_text.clone(),
            contents: FlexBubble {
                hero: FlexImage {
                    url: card.image_url.clone(),
                    size: "full".to_owned(),
                    aspect_ratio: card.aspect_ratio.clone(),
                    aspect_mode: "cover".to_owned(),
                    action: Action::Postback {
                        label: None,
                        data: Postback::CardTap {
                            scenario: scenario.id().clone(),
                            node: card.id.clone(),
                        }
                        .encode(),
                        display_text: None,
                    },
                },
            },
        }),
    }
}

fn choice_action(scenario: &ScenarioId, survey: &SurveyNode, choice: &Choice) -> Action {
    Action::Postback {
        label: Some(choice.label.clone()),
        data: Postback::Answer {
            scenario: scenario.clone(),
            node: survey.id.clone(),
            choice: choice.value.clone(),
        }
        .encode(),
        display_text: Some(choice.display_text.clone().unwrap_or_else(|| choice.label.clone())),
    }
}

fn render_survey(scenario: &ScenarioId, survey: &SurveyNode) -> Message {
    let actions = survey
        .choices
        .iter()
        .map(|choice| choice_action(scenario, survey, choice));
    match survey.style {
        SurveyStyle::Buttons => Message::Template {
            alt_text: survey.alt_text.clone().unwrap_or_else(|| survey.text.clone()),
            template: Template::Buttons {
                title: survey.title.clone(),
                text: survey.text.clone(),
                actions: actions.collect(),
            },
        },
        SurveyStyle::QuickReply => Message::Text {
            text: survey.text.clone(),
            quick_reply: Some(QuickReply {
                items: actions.map(|action| QuickReplyItem { action }).collect(),
            }),
        },
    }
}

fn render_date(scenario: &ScenarioId, question: &DateQuestionNode) -> Message {
    let mode = match question.mode {
        DateMode::Date => "date",
        DateMode::Time => "time",
        DateMode::Datetime => "datetime",
    };
    Message::Template {
        alt_text: question.text.clone(),
        template: Template::Buttons {
            title: None,
            text: question.text.clone(),
            actions: vec![Action::DatetimePicker {
                label: question
                    .label
                    .clone()
                    .unwrap_or_else(|| DEFAULT_PICKER_LABEL.to_owned()),
                data: Postback::Date {
                    scenario: scenario.clone(),
                    node: question.id.clone(),
                }
                .encode(),
                mode: mode.to_owned(),
                min: question.min.clone(),
                max: question.max.clone(),
            }],
        },
    }
}
