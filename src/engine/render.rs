//! Turning scenario nodes into LINE messages.

use crate::ids::{NodeId, RunId, ScenarioId, TimerKind};
use crate::line::messages::{Action, FlexBubble, FlexImage, Message, QuickReply, QuickReplyItem, Template};
use crate::scenario::postback::{Asked, Postback};
use crate::scenario::{
    Choice, DateMode, DateQuestionNode, LoadedScenario, Node, SurveyNode, SurveyStyle, WalkError, Who,
};
use crate::values::UserChanges;
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
    /// What the commit that sends these messages schedules: a wait's step, or
    /// the reminder and expiry of the question they ask. Only in a run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) timers: Vec<TimerPlan>,
    /// The question node these messages ask (the last node of a chain, of any
    /// question kind): its "sent" count goes up with their ledger entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asks: Option<NodeId>,
    /// What the nodes of the chain do to the user's tags and fields: they land
    /// in the commit that records the step, with its ledger entry.
    #[serde(default, skip_serializing_if = "UserChanges::is_empty")]
    pub(crate) changes: UserChanges,
    /// The split this chain passed and the arm it took: recorded on the run's
    /// marker, and counted (the arm's runs) with the chain's ledger entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) variant: Option<Variant>,
    /// The arm whose counts the asked question's "sent" goes to (it is behind
    /// a split, passed in this chain or earlier in the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asks_variant: Option<String>,
    /// The branch node the chain stopped at: decided with the user's state
    /// (see `Engine::resolve_branches`) before anything is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) branch: Option<NodeId>,
}

impl Rendered {
    /// This chain, then `rest`: the chain after the branch it stopped at.
    pub(crate) fn followed_by(self, rest: Rendered) -> Rendered {
        let mut messages = self.messages;
        messages.extend(rest.messages);
        Rendered {
            messages,
            opens: rest.opens,
            timers: rest.timers,
            asks: rest.asks,
            changes: self.changes.then(&rest.changes),
            variant: self.variant.or(rest.variant),
            asks_variant: rest.asks_variant,
            branch: rest.branch,
        }
    }
}

/// A split's arm, as a run took it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Variant {
    pub(crate) node: NodeId,
    pub(crate) label: String,
}

/// A timer to schedule, before its due time is computed (at commit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TimerPlan {
    pub(crate) kind: TimerKind,
    pub(crate) scenario: ScenarioId,
    pub(crate) version: u32,
    pub(crate) run: RunId,
    /// The wait node (a step) or the question (a reminder, an expiry).
    pub(crate) node: NodeId,
}

/// A text or date question of one scenario version: what a user's open question
/// record names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct QuestionRef {
    pub(crate) scenario: ScenarioId,
    pub(crate) version: u32,
    pub(crate) node: NodeId,
    /// The run that asked it: its answer continues that run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<RunId>,
}

/// The messages sent when the scenario reaches `from`: the chain of nodes up to
/// the next one that waits for the user. Validation at load makes every entry
/// point walk to at most five messages; an error here is still an error, never a
/// panic, since input chooses where a walk starts.
/// A split on the way is taken in the arm of `who` (without anyone, it is an
/// error).
pub(crate) fn render_from(
    scenario: &LoadedScenario,
    from: &NodeId,
    who: Option<Who<'_>>,
) -> Result<Rendered, WalkError> {
    render_in_run(scenario, from, None, who)
}

/// Like [`render_from`], in `run`: buttons carry the run, and the timers the
/// chain's last node asks for are planned.
pub(crate) fn render_in_run(
    scenario: &LoadedScenario,
    from: &NodeId,
    run: Option<&RunId>,
    who: Option<Who<'_>>,
) -> Result<Rendered, WalkError> {
    let nodes = crate::scenario::walk_nodes(scenario, from, who)?;
    let variant = who.and_then(|who| {
        nodes.iter().find_map(|node| match node {
            Node::Split(split) => split.arms.get(who.arm(split)).map(|arm| Variant {
                node: split.id.clone(),
                label: arm.label.clone(),
            }),
            _ => None,
        })
    });
    let timers = match (run, nodes.last()) {
        (Some(run), Some(last)) => timers_of(scenario, last, run),
        _ => Vec::new(),
    };
    let opens = nodes.last().and_then(|node| match node {
        Node::TextQuestion(_) | Node::DateQuestion(_) => Some(QuestionRef {
            scenario: scenario.id().clone(),
            version: scenario.scenario.version,
            node: node.id().clone(),
            run: run.cloned(),
        }),
        _ => None,
    });
    let asks = nodes
        .last()
        .filter(|node| matches!(node, Node::Survey(_) | Node::TextQuestion(_) | Node::DateQuestion(_)))
        .map(|node| node.id().clone());
    let mut changes = UserChanges::default();
    for actions in nodes.iter().filter_map(|node| node.reach_actions()) {
        actions.apply_to(&mut changes);
    }
    let asks_variant = match (&asks, who) {
        (Some(asks), Some(who)) => scenario.variant_of(asks, who).map(|(_, label)| label.to_owned()),
        _ => None,
    };
    let branch = nodes
        .last()
        .filter(|node| matches!(node, Node::Branch(_)))
        .map(|node| node.id().clone());
    Ok(Rendered {
        branch,
        changes,
        variant,
        asks_variant,
        messages: nodes
            .into_iter()
            .filter_map(|node| render(scenario, node, run))
            .collect(),
        opens,
        timers,
        asks,
    })
}

/// The message a question node sends again (a reminder), in `run`.
pub(crate) fn render_question(scenario: &LoadedScenario, node: &Node, run: &RunId) -> Option<Message> {
    render(scenario, node, Some(run))
}

/// The timers reaching `last` schedules: a wait's step; a question's reminder
/// and expiry.
fn timers_of(scenario: &LoadedScenario, last: &Node, run: &RunId) -> Vec<TimerPlan> {
    let plan = |kind| TimerPlan {
        kind,
        scenario: scenario.id().clone(),
        version: scenario.scenario.version,
        run: run.clone(),
        node: last.id().clone(),
    };
    if let Node::Wait(_) = last {
        return vec![plan(TimerKind::Step)];
    }
    let Some(timers) = scenario.question_timers(last.id()) else {
        return Vec::new();
    };
    let mut planned = Vec::new();
    if timers.remind_after.is_some() {
        planned.push(plan(TimerKind::Remind));
    }
    if timers.expire_after.is_some() {
        planned.push(plan(TimerKind::Expire));
    }
    planned
}

fn text(text: &str) -> Message {
    Message::Text {
        text: text.to_owned(),
        quick_reply: None,
    }
}

fn render(scenario: &LoadedScenario, node: &Node, run: Option<&RunId>) -> Option<Message> {
    let asked = run.map(|run| Asked {
        run: run.clone(),
        version: Some(scenario.scenario.version),
    });
    let asked = asked.as_ref();
    match node {
        Node::Trigger(_) | Node::Wait(_) | Node::Split(_) | Node::Branch(_) => None,
        Node::Message(message) => Some(text(&message.text)),
        Node::End(end) => end.text.as_deref().map(text),
        Node::TextQuestion(question) => Some(text(&question.text)),
        Node::Survey(survey) => Some(render_survey(scenario.id(), survey, asked)),
        Node::DateQuestion(question) => Some(render_date(scenario.id(), question, asked)),
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

fn choice_action(scenario: &ScenarioId, survey: &SurveyNode, choice: &Choice, asked: Option<&Asked>) -> Action {
    Action::Postback {
        label: Some(choice.label.clone()),
        data: Postback::Answer {
            scenario: scenario.clone(),
            node: survey.id.clone(),
            choice: choice.value.clone(),
        }
        .encode_in_run(asked),
        display_text: Some(choice.display_text.clone().unwrap_or_else(|| choice.label.clone())),
    }
}

fn render_survey(scenario: &ScenarioId, survey: &SurveyNode, asked: Option<&Asked>) -> Message {
    let actions = survey
        .choices
        .iter()
        .map(|choice| choice_action(scenario, survey, choice, asked));
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

fn render_date(scenario: &ScenarioId, question: &DateQuestionNode, asked: Option<&Asked>) -> Message {
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
                .encode_in_run(asked),
                mode: mode.to_owned(),
                min: question.min.clone(),
                max: question.max.clone(),
            }],
        },
    }
}
