//! Scenarios: what operators write, loaded and checked once at start.
//!
//! A scenario is a small graph of nodes. Triggers (follow, text) enter it; message
//! nodes chain with `next`; a survey node asks a question with buttons and waits;
//! a Flex image card shows an image whose tap starts a survey scenario; an end node
//! closes it. See the README for the file format.

mod limits;
mod load;
pub mod postback;
mod validate;
mod walk;

pub use load::{LoadError, load_dir};
pub use validate::ScenarioError;
pub use walk::WalkError;

/// The nodes that speak when the scenario reaches `from` (see [`walk::walk`]).
pub fn walk_nodes<'a>(scenario: &'a LoadedScenario, from: &NodeId) -> Result<Vec<&'a Node>, WalkError> {
    walk::walk(|id| scenario.node(id), from)
}

use crate::ids::{NodeId, ScenarioId};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// One scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub id: ScenarioId,
    /// Bumped by the operator when questions change; stored with each answer so
    /// answers to different wordings can be told apart.
    #[serde(default = "first_version")]
    pub version: u32,
    #[serde(default)]
    pub title: Option<String>,
    /// Where manual sends and Flex card taps enter; defaults to the first node that
    /// is not a trigger.
    #[serde(default)]
    pub start: Option<NodeId>,
    pub nodes: Vec<Node>,
}

fn first_version() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Node {
    Trigger(TriggerNode),
    Message(MessageNode),
    Survey(SurveyNode),
    FlexImage(FlexImageNode),
    End(EndNode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerOn {
    /// The user adds the account as a friend (or unblocks it).
    Follow,
    /// The user sends a text message; `keywords` narrows which texts match.
    Text,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerNode {
    pub id: NodeId,
    pub on: TriggerOn,
    /// Matched against the whole message, trimmed and case-insensitively. Empty:
    /// any text matches (at most one scenario may say so).
    #[serde(default)]
    pub keywords: Vec<String>,
    pub next: NodeId,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageNode {
    pub id: NodeId,
    pub text: String,
    #[serde(default)]
    pub next: Option<NodeId>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurveyNode {
    pub id: NodeId,
    pub text: String,
    #[serde(default)]
    pub title: Option<String>,
    /// Shown in notifications and chat lists; defaults to `text`.
    #[serde(default)]
    pub alt_text: Option<String>,
    pub choices: Vec<Choice>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Choice {
    pub label: String,
    /// What is stored as the answer.
    pub value: String,
    /// Added to the user's tags when this choice is the recorded answer.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub next: Option<NodeId>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlexImageNode {
    pub id: NodeId,
    /// HTTPS URL of a JPEG or PNG image.
    pub image_url: String,
    pub alt_text: String,
    #[serde(default = "default_aspect_ratio")]
    pub aspect_ratio: String,
    /// The survey scenario a tap on the image starts.
    pub starts: ScenarioId,
}

fn default_aspect_ratio() -> String {
    "20:13".to_owned()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndNode {
    pub id: NodeId,
    #[serde(default)]
    pub text: Option<String>,
}

impl Node {
    pub fn id(&self) -> &NodeId {
        match self {
            Node::Trigger(node) => &node.id,
            Node::Message(node) => &node.id,
            Node::Survey(node) => &node.id,
            Node::FlexImage(node) => &node.id,
            Node::End(node) => &node.id,
        }
    }
}

impl SurveyNode {
    pub fn choice(&self, value: &str) -> Option<&Choice> {
        self.choices.iter().find(|choice| choice.value == value)
    }
}

/// A scenario that passed validation, with what the runtime looks up often.
#[derive(Debug)]
pub struct LoadedScenario {
    pub scenario: Scenario,
    pub source: PathBuf,
    node_index: HashMap<NodeId, usize>,
    /// Whether any node is a survey: only such scenarios need the "already
    /// answered?" guard, so the others cost no Firestore read.
    pub has_survey: bool,
    pub start: NodeId,
}

impl LoadedScenario {
    /// Indexes a validated scenario. Refuses (rather than panics on) a scenario
    /// without a node to start at or whose chain from `start` cannot be sent, so a
    /// `LoadedScenario` always has a `start` that [`walk_nodes`] accepts.
    pub(super) fn try_new(scenario: Scenario, source: PathBuf) -> Result<Self, ScenarioError> {
        let Some(start) = effective_start(&scenario).cloned() else {
            return Err(ScenarioError {
                file: source,
                scenario: Some(scenario.id.to_string()),
                node: None,
                problem: "has no node other than triggers; it would send nothing".to_owned(),
            });
        };
        let node_index = scenario
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| (node.id().clone(), index))
            .collect();
        let has_survey = scenario.nodes.iter().any(|node| matches!(node, Node::Survey(_)));
        let loaded = Self {
            scenario,
            source,
            node_index,
            has_survey,
            start,
        };
        if let Err(problem) = walk_nodes(&loaded, &loaded.start) {
            return Err(ScenarioError {
                file: loaded.source.clone(),
                scenario: Some(loaded.scenario.id.to_string()),
                node: None,
                problem: validate::start_chain_problem(&loaded.start, &problem),
            });
        }
        Ok(loaded)
    }

    pub fn id(&self) -> &ScenarioId {
        &self.scenario.id
    }

    pub fn node(&self, id: &NodeId) -> Option<&Node> {
        self.node_index.get(id).map(|&index| &self.scenario.nodes[index])
    }
}

/// Where manual sends and Flex card taps enter `scenario`: its `start`, or else
/// its first node that is not a trigger. `None` only for a scenario made of
/// triggers alone, which validation refuses.
pub(crate) fn effective_start(scenario: &Scenario) -> Option<&NodeId> {
    scenario.start.as_ref().or_else(|| {
        scenario
            .nodes
            .iter()
            .find(|node| !matches!(node, Node::Trigger(_)))
            .map(Node::id)
    })
}

/// Where a trigger leads: a scenario and the node after the trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub scenario: ScenarioId,
    pub node: NodeId,
}

/// All loaded scenarios and their trigger tables.
#[derive(Debug, Default)]
pub struct Scenarios {
    by_id: BTreeMap<ScenarioId, LoadedScenario>,
    keyword_triggers: HashMap<String, Entry>,
    any_text_trigger: Option<Entry>,
    follow_trigger: Option<Entry>,
}

impl Scenarios {
    pub fn get(&self, id: &ScenarioId) -> Option<&LoadedScenario> {
        self.by_id.get(id)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &LoadedScenario> {
        self.by_id.values()
    }

    /// The scenario a text message starts: an exact keyword first, then the
    /// catch-all text trigger if one exists.
    pub fn text_trigger(&self, text: &str) -> Option<&Entry> {
        self.keyword_triggers
            .get(&normalize_keyword(text))
            .or(self.any_text_trigger.as_ref())
    }

    pub fn follow_trigger(&self) -> Option<&Entry> {
        self.follow_trigger.as_ref()
    }
}

/// Keywords match the trimmed message case-insensitively.
pub fn normalize_keyword(text: &str) -> String {
    text.trim().to_lowercase()
}
