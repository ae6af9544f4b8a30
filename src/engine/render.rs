//! Turning scenario nodes into LINE messages.

use crate::ids::NodeId;
use crate::line::messages::{Action, FlexBubble, FlexImage, Message, Template};
use crate::scenario::postback::Postback;
use crate::scenario::{LoadedScenario, Node, WalkError};

/// The messages sent when the scenario reaches `from`: the chain of nodes up to
/// the next one that waits for the user. Validation at load makes every entry
/// point walk to at most five messages; an error here is still an error, never a
/// panic, since input chooses where a walk starts.
pub(crate) fn render_from(scenario: &LoadedScenario, from: &NodeId) -> Result<Vec<Message>, WalkError> {
    Ok(crate::scenario::walk_nodes(scenario, from)?
        .into_iter()
        .filter_map(|node| render(scenario, node))
        .collect())
}

fn render(scenario: &LoadedScenario, node: &Node) -> Option<Message> {
    match node {
        Node::Trigger(_) => None,
        Node::Message(message) => Some(Message::Text {
            text: message.text.clone(),
        }),
        Node::End(end) => end.text.clone().map(|text| Message::Text { text }),
        Node::Survey(survey) => Some(Message::Template {
            alt_text: survey.alt_text.clone().unwrap_or_else(|| survey.text.clone()),
            template: Template::Buttons {
                title: survey.title.clone(),
                text: survey.text.clone(),
                actions: survey
                    .choices
                    .iter()
                    .map(|choice| Action::Postback {
                        label: Some(choice.label.clone()),
                        data: Postback::Answer {
                            scenario: scenario.id().clone(),
                            node: survey.id.clone(),
                            choice: choice.value.clone(),
                        }
                        .encode(),
                        display_text: Some(choice.label.clone()),
                    })
                    .collect(),
            },
        }),
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
