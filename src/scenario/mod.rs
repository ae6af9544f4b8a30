//! Scenarios: what operators write, loaded and checked once at start.
//!
//! A scenario is a small graph of nodes. Triggers (follow, text) enter it; message
//! nodes chain with `next`; a survey node asks a question with buttons and waits;
//! a Flex image card shows an image whose tap starts a survey scenario; an end node
//! closes it. See the README for the file format.

mod limits;
mod load;
pub mod postback;
pub mod typed;
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
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// One scenario file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
    /// The tag every answer to this scenario adds, whatever the question; defaults
    /// to `answered:{id}`. An empty string adds none.
    #[serde(default)]
    pub answer_tag: Option<String>,
    /// How long a typed or date question stays open for its answer, such as
    /// "24h", "90m" or "3d". Defaults to 24 hours.
    #[serde(default)]
    pub answer_window: Option<String>,
    pub nodes: Vec<Node>,
}

fn first_version() -> u32 {
    1
}

/// The open question's default answer window.
pub const DEFAULT_ANSWER_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

impl Scenario {
    /// The tag every answer adds (`None`: the operator turned it off).
    pub fn answer_tag(&self) -> Option<String> {
        match &self.answer_tag {
            Some(tag) if tag.trim().is_empty() => None,
            Some(tag) => Some(tag.clone()),
            None => Some(format!("answered:{}", self.id)),
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Node {
    Trigger(TriggerNode),
    Message(MessageNode),
    Survey(SurveyNode),
    TextQuestion(TextQuestionNode),
    DateQuestion(DateQuestionNode),
    FlexImage(FlexImageNode),
    End(EndNode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TriggerOn {
    /// The user adds the account as a friend (or unblocks it).
    Follow,
    /// The user sends a text message; `keywords` narrows which texts match.
    Text,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerNode {
    pub id: NodeId,
    pub on: TriggerOn,
    /// Matched against the whole message after NFKC normalisation, trimmed and
    /// case-insensitively (so "ＳＵＲＶＥＹ" matches "survey"). Empty: any text
    /// matches (at most one scenario may say so).
    #[serde(default)]
    pub keywords: Vec<String>,
    pub next: NodeId,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageNode {
    pub id: NodeId,
    pub text: String,
    #[serde(default)]
    pub next: Option<NodeId>,
}

/// How a choice question is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SurveyStyle {
    /// A buttons template: 1 to 4 choices, kept in the chat.
    #[default]
    Buttons,
    /// A text message with quick reply buttons: 1 to 13 choices, gone once tapped.
    QuickReply,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SurveyNode {
    pub id: NodeId,
    pub text: String,
    #[serde(default)]
    pub style: SurveyStyle,
    /// A buttons template's title (not with quick replies).
    #[serde(default)]
    pub title: Option<String>,
    /// Shown in notifications and chat lists; defaults to `text`.
    #[serde(default)]
    pub alt_text: Option<String>,
    pub choices: Vec<Choice>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Choice {
    pub label: String,
    /// What is stored as the answer.
    pub value: String,
    /// What appears in the chat as the user's message when tapped; defaults to
    /// the label.
    #[serde(default)]
    pub display_text: Option<String>,
    /// Added to the user's tags when this choice is the recorded answer.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub next: Option<NodeId>,
}

/// A question answered by typing: the next text the user sends while it is open.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextQuestionNode {
    pub id: NodeId,
    pub text: String,
    /// Added to the user's tags when the answer is recorded.
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub next: Option<NodeId>,
    /// What an answer must look like; any non-empty text when absent.
    #[serde(default)]
    pub validate: Option<Validation>,
    /// Sent after an invalid answer; defaults to a short generic request to try again.
    #[serde(default)]
    pub invalid_text: Option<String>,
    /// Invalid answers accepted before giving up (default 3).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The node to go to after `max_attempts` invalid answers; by default the
    /// scenario ends quietly.
    #[serde(default)]
    pub on_give_up: Option<NodeId>,
}

fn default_max_attempts() -> u32 {
    3
}

/// The rule a typed answer must follow. Input is NFKC-normalised and trimmed
/// first, so full-width digits and letters are accepted.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Validation {
    /// A number, stored as a number.
    Number {
        #[serde(default)]
        min: Option<f64>,
        #[serde(default)]
        max: Option<f64>,
        #[serde(default)]
        integer: bool,
    },
    Email,
    /// A Japanese phone number (0 then 9 or 10 digits, hyphens allowed, or +81).
    /// Stored as digits only.
    PhoneJp,
    /// A Japanese postal code (1234567 or 123-4567), stored as 123-4567.
    PostalCodeJp,
    /// Text of `min` to `max` characters (as a person counts them).
    Length {
        #[serde(default)]
        min: Option<usize>,
        #[serde(default)]
        max: Option<usize>,
    },
    /// Text the regular expression matches as a whole (Rust `regex` syntax).
    Pattern {
        pattern: String,
    },
}

/// LINE's datetime picker modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DateMode {
    /// `2026-12-01`
    Date,
    /// `10:30`
    Time,
    /// `2026-12-01T10:30`
    Datetime,
}

/// A question answered with LINE's datetime picker.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DateQuestionNode {
    pub id: NodeId,
    pub text: String,
    #[serde(default = "default_date_mode")]
    pub mode: DateMode,
    /// The picker button's label; defaults to "Choose".
    #[serde(default)]
    pub label: Option<String>,
    /// Earliest and latest values, in the mode's format.
    #[serde(default)]
    pub min: Option<String>,
    #[serde(default)]
    pub max: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub next: Option<NodeId>,
}

fn default_date_mode() -> DateMode {
    DateMode::Date
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
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

#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
            Node::TextQuestion(node) => &node.id,
            Node::DateQuestion(node) => &node.id,
            Node::FlexImage(node) => &node.id,
            Node::End(node) => &node.id,
        }
    }
}

impl Node {
    /// Whether the node asks a question whose answer is recorded (guard 1).
    pub fn is_question(&self) -> bool {
        matches!(self, Node::Survey(_) | Node::TextQuestion(_) | Node::DateQuestion(_))
    }
}

/// Parses a duration such as "90m", "24h", "3d" or "1h 30m" (humantime's format),
/// refusing zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text.trim()) {
        Ok(duration) if duration.is_zero() => Err(format!("{text:?} is zero")),
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!(
            "{text:?} is not a duration such as \"90m\", \"24h\" or \"3d\": {error}"
        )),
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
    /// Whether any node asks a question: only such scenarios need the "already
    /// answered?" guard, so the others cost no Firestore read.
    pub has_survey: bool,
    pub start: NodeId,
    /// How long a typed or date question of this scenario stays open.
    pub answer_window: Duration,
    /// The tag every answer adds ([`Scenario::answer_tag`]).
    pub answer_tag: Option<String>,
    /// Each text question's compiled rule.
    rules: HashMap<NodeId, typed::Rule>,
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
        let has_survey = scenario.nodes.iter().any(Node::is_question);
        let answer_window = match scenario.answer_window.as_deref().map(parse_duration) {
            None => DEFAULT_ANSWER_WINDOW,
            Some(Ok(window)) => window,
            Some(Err(problem)) => {
                return Err(ScenarioError {
                    file: source,
                    scenario: Some(scenario.id.to_string()),
                    node: None,
                    problem: format!("answer_window {problem}"),
                });
            }
        };
        let answer_tag = scenario.answer_tag();
        let mut rules = HashMap::new();
        for node in &scenario.nodes {
            if let Node::TextQuestion(question) = node {
                let rule = match &question.validate {
                    None => typed::Rule::free_text(),
                    Some(validation) => typed::Rule::new(validation).map_err(|problem| ScenarioError {
                        file: source.clone(),
                        scenario: Some(scenario.id.to_string()),
                        node: Some(question.id.to_string()),
                        problem: format!("validate: {problem}"),
                    })?,
                };
                rules.insert(question.id.clone(), rule);
            }
        }
        let loaded = Self {
            scenario,
            source,
            node_index,
            has_survey,
            start,
            answer_window,
            answer_tag,
            rules,
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

    /// The compiled rule of text question `id` (`None` for other nodes).
    pub fn rule(&self, id: &NodeId) -> Option<&typed::Rule> {
        self.rules.get(id)
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
    /// Whether any scenario has a text question: only then can a text message be
    /// an answer, and only then is its text kept until it is processed.
    takes_typed_answers: bool,
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

    pub fn takes_typed_answers(&self) -> bool {
        self.takes_typed_answers
    }

    pub fn follow_trigger(&self) -> Option<&Entry> {
        self.follow_trigger.as_ref()
    }
}

/// Keywords match the message after NFKC normalisation (full-width letters and
/// half-width kana become their usual forms), trimmed (ideographic spaces too)
/// and lower-cased.
pub fn normalize_keyword(text: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    text.nfkc().collect::<String>().trim().to_lowercase()
}
