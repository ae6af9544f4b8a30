//! The scenario runtime's decisions: pure code that turns an event into a plan.
//! It reads scenarios and the event, nothing else; the dispatcher carries the plan
//! out against Firestore and LINE.

mod render;

pub use render::render_from;

use crate::ids::{LineUserId, NodeId, ScenarioId, answer_id, scenario_marker_id};
use crate::line::messages::Message;
use crate::line::webhook::{Event, EventKind, MessageContent, Mode};
use crate::scenario::postback::{Postback, PostbackError};
use crate::scenario::{Entry, Node, Scenarios};
use std::sync::Arc;

/// The tag every Flex card tap adds, answered or not.
pub const FLEX_TAP_TAG: &str = "flex_image_tap";

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Ignore(Ignored),
    /// Guard 1: a survey answer.
    Answer(AnswerPlan),
    /// Guard 2: a tap on a Flex card that starts a survey scenario.
    CardTap(CardTapPlan),
    /// Guard 3: a follow or text trigger.
    Start(StartPlan),
    /// The user unsent a message: remove any stored copy of its text.
    Unsend {
        message_id: String,
    },
}

/// Why an event has no effect. Logged, never an error: LINE gets 200.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    #[error("the channel is in standby mode; another module owns the chat")]
    Standby,
    #[error("the event has no user id")]
    NoUser,
    #[error("the user id is not acceptable")]
    InvalidUser,
    #[error("event type not handled")]
    UnhandledType,
    #[error("message type not handled")]
    NotText,
    #[error("no trigger matches")]
    NoTrigger,
    #[error("postback data is not ours: {0}")]
    ForeignPostback(PostbackError),
    #[error("postback names an unknown scenario")]
    UnknownScenario,
    #[error("postback names an unknown node")]
    UnknownNode,
    #[error("postback names a node of another kind")]
    WrongNodeKind,
    #[error("postback names an unknown choice")]
    UnknownChoice,
}

/// Record one answer; only if it is the first, send what follows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerPlan {
    pub user: LineUserId,
    pub scenario: ScenarioId,
    pub scenario_version: u32,
    pub node: NodeId,
    pub choice: String,
    pub tags: Vec<String>,
    pub answer_id: String,
    pub marker_id: String,
    pub follow_up: Vec<Message>,
}

/// "Has this user answered `scenario`?" — one get of the marker by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioGuard {
    pub scenario: ScenarioId,
    pub marker_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CardTapPlan {
    pub user: LineUserId,
    pub card_scenario: ScenarioId,
    pub card_node: NodeId,
    /// The survey scenario the card starts, unless the user answered it.
    pub guard: ScenarioGuard,
    pub messages: Vec<Message>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StartPlan {
    pub user: LineUserId,
    pub scenario: ScenarioId,
    /// `None` for scenarios without a survey node: nothing to check, no read.
    pub guard: Option<ScenarioGuard>,
    pub messages: Vec<Message>,
}

#[derive(Clone)]
pub struct Engine {
    scenarios: Arc<Scenarios>,
}

impl Engine {
    pub fn new(scenarios: Arc<Scenarios>) -> Self {
        Self { scenarios }
    }

    pub fn scenarios(&self) -> &Scenarios {
        &self.scenarios
    }

    pub fn decide(&self, event: &Event) -> Decision {
        match self.try_decide(event) {
            Ok(decision) => decision,
            Err(ignored) => Decision::Ignore(ignored),
        }
    }

    fn try_decide(&self, event: &Event) -> Result<Decision, Ignored> {
        // Privacy comes first: even in standby mode an unsent message's text goes.
        if let EventKind::Unsend { unsend } = &event.kind {
            return Ok(Decision::Unsend {
                message_id: unsend.message_id.clone(),
            });
        }
        if event.mode != Mode::Active {
            return Err(Ignored::Standby);
        }
        let acts = matches!(
            event.kind,
            EventKind::Message { .. } | EventKind::Postback { .. } | EventKind::Follow
        );
        if !acts {
            return Err(Ignored::UnhandledType);
        }
        let user = event.user_id().ok_or(Ignored::NoUser)?;
        let user = LineUserId::parse(user).map_err(|_| Ignored::InvalidUser)?;
        match &event.kind {
            EventKind::Follow => {
                let entry = self.scenarios.follow_trigger().ok_or(Ignored::NoTrigger)?;
                Ok(Decision::Start(self.start(user, entry)))
            }
            EventKind::Message {
                message: MessageContent::Text { text, .. },
            } => {
                let entry = self.scenarios.text_trigger(text).ok_or(Ignored::NoTrigger)?;
                Ok(Decision::Start(self.start(user, entry)))
            }
            EventKind::Message { .. } => Err(Ignored::NotText),
            EventKind::Postback { postback } => {
                let postback = Postback::decode(&postback.data).map_err(Ignored::ForeignPostback)?;
                self.postback(user, postback)
            }
            _ => Err(Ignored::UnhandledType),
        }
    }

    fn start(&self, user: LineUserId, entry: &Entry) -> StartPlan {
        let scenario = self.scenarios.get(&entry.scenario).expect("validated trigger target");
        let guard = scenario.has_survey.then(|| ScenarioGuard {
            scenario: entry.scenario.clone(),
            marker_id: scenario_marker_id(&entry.scenario, &user),
        });
        StartPlan {
            messages: render_from(scenario, &entry.node),
            user,
            scenario: entry.scenario.clone(),
            guard,
        }
    }

    /// The messages an operator's manual send delivers: the scenario from its start,
    /// with no guard at all (re-sending is the point of a manual send).
    pub fn manual_start(&self, scenario: &ScenarioId) -> Option<Vec<Message>> {
        let scenario = self.scenarios.get(scenario)?;
        Some(render_from(scenario, &scenario.start))
    }

    fn postback(&self, user: LineUserId, postback: Postback) -> Result<Decision, Ignored> {
        match postback {
            Postback::Answer { scenario, node, choice } => {
                let loaded = self.scenarios.get(&scenario).ok_or(Ignored::UnknownScenario)?;
                let Node::Survey(survey) = loaded.node(&node).ok_or(Ignored::UnknownNode)? else {
                    return Err(Ignored::WrongNodeKind);
                };
                let picked = survey.choice(&choice).ok_or(Ignored::UnknownChoice)?;
                let follow_up = picked
                    .next
                    .as_ref()
                    .map(|next| render_from(loaded, next))
                    .unwrap_or_default();
                Ok(Decision::Answer(AnswerPlan {
                    answer_id: answer_id(&scenario, &node, &user),
                    marker_id: scenario_marker_id(&scenario, &user),
                    scenario_version: loaded.scenario.version,
                    tags: picked.tags.clone(),
                    choice,
                    follow_up,
                    user,
                    scenario,
                    node,
                }))
            }
            Postback::CardTap { scenario, node } => {
                let loaded = self.scenarios.get(&scenario).ok_or(Ignored::UnknownScenario)?;
                let Node::FlexImage(card) = loaded.node(&node).ok_or(Ignored::UnknownNode)? else {
                    return Err(Ignored::WrongNodeKind);
                };
                let target = self.scenarios.get(&card.starts).expect("validated card target");
                Ok(Decision::CardTap(CardTapPlan {
                    guard: ScenarioGuard {
                        scenario: card.starts.clone(),
                        marker_id: scenario_marker_id(&card.starts, &user),
                    },
                    messages: render_from(target, &target.start),
                    user,
                    card_scenario: scenario,
                    card_node: node,
                }))
            }
        }
    }
}
