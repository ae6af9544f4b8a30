//! Scenarios: what operators write, loaded and checked once at start.
//!
//! A scenario is a small graph of nodes. Triggers (follow, text) enter it; message
//! nodes chain with `next`; a survey node asks a question with buttons and waits;
//! a Flex image card shows an image whose tap starts a survey scenario; a wait
//! node pauses the scenario until a later time (a step of step delivery); an end
//! node closes it. See the README for the file format.

pub mod branch;
pub mod limits;
mod load;
mod personal_texts;
pub mod placeholders;
pub mod postback;
pub mod rich_menus;
pub mod schedule;
pub mod sources;
pub mod split;
pub mod typed;
mod validate;
mod walk;

pub use load::{LoadError, load_dir, load_version};
pub use validate::{MAX_FIELD_NAMES, MAX_FIELD_TEXT_CHARS, ScenarioError, is_field_name};
pub use walk::WalkError;

pub use branch::{BranchArm, BranchNode, Condition, UserState};
pub use split::{SplitArm, SplitNode, Who};

/// The nodes that speak when the scenario reaches `from` (see [`walk::walk`]),
/// splits passed in the arm `who` takes (without anyone, a split is an error).
pub fn walk_nodes<'a>(
    scenario: &'a LoadedScenario,
    from: &NodeId,
    who: Option<Who<'_>>,
) -> Result<Vec<&'a Node>, WalkError> {
    walk::walk(|id| scenario.node(id), from, |split| who.map(|who| who.arm(split)))
}

use crate::ids::{NodeId, ScenarioId};
use crate::values::{FieldValue, UserChanges};
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
    /// The IANA time zone that `at` times and `quiet_hours` are read in, such as
    /// "Asia/Tokyo" (the default) or "America/New_York".
    #[serde(default)]
    pub time_zone: Option<String>,
    /// Local hours in which no step or reminder is sent, such as "21:00-09:00"
    /// (may wrap midnight). One that falls due inside them is moved to the end of
    /// the window. Expiry is not moved.
    #[serde(default)]
    pub quiet_hours: Option<String>,
    /// How late a step or reminder may still be sent, such as "6h" (the
    /// default). One found later than that is skipped and recorded, not sent.
    #[serde(default)]
    pub max_lateness: Option<String>,
    pub nodes: Vec<Node>,
}

fn first_version() -> u32 {
    1
}

/// The open question's default answer window.
pub const DEFAULT_ANSWER_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The time zone of a scenario that names none.
pub const DEFAULT_TIME_ZONE: chrono_tz::Tz = chrono_tz::Asia::Tokyo;

/// How late a step may be sent when the scenario sets no `max_lateness`.
pub const DEFAULT_MAX_LATENESS: Duration = Duration::from_secs(6 * 60 * 60);

/// How many reminders a question with `remind_after` sends when it sets no
/// `max_reminders`.
pub const DEFAULT_MAX_REMINDERS: u32 = 1;

/// The most reminders one question may send.
pub const MAX_REMINDERS: u32 = 10;

/// The longest wait, reminder or expiry delay a scenario may set (about ten
/// years): a typo such as "100000d" is refused instead of scheduled.
pub const MAX_DELAY: Duration = Duration::from_secs(3650 * 24 * 60 * 60);

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
    Wait(WaitNode),
    End(EndNode),
    /// An A/B test: each user goes down one arm, by weight.
    Split(SplitNode),
    /// The first arm whose condition holds for the user leads on, else `else`.
    Branch(BranchNode),
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
    /// May name the user: `{name|お客さま}`, `{field.plan}`, `{answer.node}` (a
    /// fallback after `|`; `{{` and `}}` are literal braces).
    pub text: String,
    #[serde(default)]
    pub next: Option<NodeId>,
    /// Added to the user's tags when the scenario reaches this node.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Removed from the user's tags in the same commit (after `tags` of earlier steps).
    #[serde(default)]
    pub untag: Vec<String>,
    /// User fields written in the same commit (`users/{id}.fields.<name>`):
    /// strings of at most 500 characters, numbers or booleans.
    #[serde(default)]
    pub set: BTreeMap<String, FieldValue>,
    /// Links this rich menu (a menu file's id) to the user in the same step,
    /// or `"default"` to unlink theirs (the account's default shows).
    #[serde(default)]
    pub rich_menu: Option<String>,
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
    /// May name the user: `{name|お客さま}`, `{field.plan}`, `{answer.node}` (a
    /// fallback after `|`; `{{` and `}}` are literal braces).
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
    /// Added to the user's tags on any answer (before the choice's own).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Removed from the user's tags in the same commit (after `tags` of earlier steps).
    #[serde(default)]
    pub untag: Vec<String>,
    /// User fields written in the same commit (`users/{id}.fields.<name>`):
    /// strings of at most 500 characters, numbers or booleans.
    #[serde(default)]
    pub set: BTreeMap<String, FieldValue>,
    /// Links this rich menu (a menu file's id) to the user in the same step,
    /// or `"default"` to unlink theirs (the account's default shows).
    #[serde(default)]
    pub rich_menu: Option<String>,
    /// A user field the answer's value is also written to.
    #[serde(default)]
    pub field: Option<String>,
    /// Sent (by reply) when a tap answers this question after the user already
    /// answered it: at most once per user and question per
    /// `answered_text_every`.
    #[serde(default)]
    pub answered_text: Option<String>,
    /// How often `answered_text` may be sent to one user, such as "10m" (the
    /// default); needs `answered_text`.
    #[serde(default)]
    pub answered_text_every: Option<String>,
    // The five timer keys below repeat on every question kind: `deny_unknown_fields`
    // rules out `#[serde(flatten)]`, and a typo in a key must stay an error.
    // `LoadedScenario::question_timers` gathers them, compiled, in one place.
    /// Sends a reminder this long after the question if it is still unanswered,
    /// such as "1d".
    #[serde(default)]
    pub remind_after: Option<String>,
    /// The reminder's text (at most 5000 characters); needs `remind_after`.
    #[serde(default)]
    pub remind_text: Option<String>,
    /// How many reminders at most, 1 (the default) to 10; needs `remind_after`.
    #[serde(default)]
    pub max_reminders: Option<u32>,
    /// Closes the question this long after it was asked, such as "3d"; later
    /// taps on its buttons record nothing.
    #[serde(default)]
    pub expire_after: Option<String>,
    /// Where the scenario goes when the question expires; needs `expire_after`.
    /// Without it, expiry ends the scenario quietly.
    #[serde(default)]
    pub on_expire: Option<NodeId>,
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
    /// Removed from the user's tags in the same commit (after `tags` of earlier steps).
    #[serde(default)]
    pub untag: Vec<String>,
    /// User fields written in the same commit (`users/{id}.fields.<name>`):
    /// strings of at most 500 characters, numbers or booleans.
    #[serde(default)]
    pub set: BTreeMap<String, FieldValue>,
    /// Links this rich menu (a menu file's id) to the user in the same step,
    /// or `"default"` to unlink theirs (the account's default shows).
    #[serde(default)]
    pub rich_menu: Option<String>,
    #[serde(default)]
    pub next: Option<NodeId>,
}

/// A question answered by typing: the next text the user sends while it is open.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextQuestionNode {
    pub id: NodeId,
    /// May name the user: `{name|お客さま}`, `{field.plan}`, `{answer.node}` (a
    /// fallback after `|`; `{{` and `}}` are literal braces).
    pub text: String,
    /// Added to the user's tags when the answer is recorded.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Removed from the user's tags in the same commit (after `tags` of earlier steps).
    #[serde(default)]
    pub untag: Vec<String>,
    /// User fields written in the same commit (`users/{id}.fields.<name>`):
    /// strings of at most 500 characters, numbers or booleans.
    #[serde(default)]
    pub set: BTreeMap<String, FieldValue>,
    /// Links this rich menu (a menu file's id) to the user in the same step,
    /// or `"default"` to unlink theirs (the account's default shows).
    #[serde(default)]
    pub rich_menu: Option<String>,
    /// A user field the answer's value is also written to.
    #[serde(default)]
    pub field: Option<String>,
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
    /// Sent (by reply) when a tap answers this question after the user already
    /// answered it: at most once per user and question per
    /// `answered_text_every`.
    #[serde(default)]
    pub answered_text: Option<String>,
    /// How often `answered_text` may be sent to one user, such as "10m" (the
    /// default); needs `answered_text`.
    #[serde(default)]
    pub answered_text_every: Option<String>,
    /// Sends a reminder this long after the question if it is still unanswered,
    /// such as "1d".
    #[serde(default)]
    pub remind_after: Option<String>,
    /// The reminder's text (at most 5000 characters); needs `remind_after`.
    #[serde(default)]
    pub remind_text: Option<String>,
    /// How many reminders at most, 1 (the default) to 10; needs `remind_after`.
    #[serde(default)]
    pub max_reminders: Option<u32>,
    /// Closes the question this long after it was asked, such as "3d"; a later
    /// answer records nothing.
    #[serde(default)]
    pub expire_after: Option<String>,
    /// Where the scenario goes when the question expires; needs `expire_after`.
    /// Without it, expiry ends the scenario quietly.
    #[serde(default)]
    pub on_expire: Option<NodeId>,
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
    /// May name the user: `{name|お客さま}`, `{field.plan}`, `{answer.node}` (a
    /// fallback after `|`; `{{` and `}}` are literal braces).
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
    /// Removed from the user's tags in the same commit (after `tags` of earlier steps).
    #[serde(default)]
    pub untag: Vec<String>,
    /// User fields written in the same commit (`users/{id}.fields.<name>`):
    /// strings of at most 500 characters, numbers or booleans.
    #[serde(default)]
    pub set: BTreeMap<String, FieldValue>,
    /// Links this rich menu (a menu file's id) to the user in the same step,
    /// or `"default"` to unlink theirs (the account's default shows).
    #[serde(default)]
    pub rich_menu: Option<String>,
    /// A user field the answer's value is also written to.
    #[serde(default)]
    pub field: Option<String>,
    #[serde(default)]
    pub next: Option<NodeId>,
    /// Sent (by reply) when a tap answers this question after the user already
    /// answered it: at most once per user and question per
    /// `answered_text_every`.
    #[serde(default)]
    pub answered_text: Option<String>,
    /// How often `answered_text` may be sent to one user, such as "10m" (the
    /// default); needs `answered_text`.
    #[serde(default)]
    pub answered_text_every: Option<String>,
    /// Sent (by reply) when the user types text while the picker waits,
    /// instead of dropping it: at most once per user and question per
    /// `hint_text_every`. A keyword the text matches still starts its scenario.
    #[serde(default)]
    pub hint_text: Option<String>,
    /// How often `hint_text` may be sent to one user, such as "10m" (the
    /// default); needs `hint_text`.
    #[serde(default)]
    pub hint_text_every: Option<String>,
    /// Sends a reminder this long after the question if it is still unanswered,
    /// such as "1d".
    #[serde(default)]
    pub remind_after: Option<String>,
    /// The reminder's text (at most 5000 characters); needs `remind_after`.
    #[serde(default)]
    pub remind_text: Option<String>,
    /// How many reminders at most, 1 (the default) to 10; needs `remind_after`.
    #[serde(default)]
    pub max_reminders: Option<u32>,
    /// Closes the question this long after it was asked, such as "3d"; a later
    /// answer records nothing.
    #[serde(default)]
    pub expire_after: Option<String>,
    /// Where the scenario goes when the question expires; needs `expire_after`.
    /// Without it, expiry ends the scenario quietly.
    #[serde(default)]
    pub on_expire: Option<NodeId>,
}

/// How often one notice (`answered_text`, `hint_text`) may reach one user, by default.
pub const DEFAULT_NOTICE_EVERY: Duration = Duration::from_secs(600);

/// A notice a question sends instead of silence: its text and how often.
#[derive(Debug, Clone, Copy)]
pub struct Notice<'a> {
    pub text: &'a str,
    /// As written (`None`: [`DEFAULT_NOTICE_EVERY`]).
    pub every: Option<&'a str>,
}

impl Notice<'_> {
    /// How often it may be sent (validation refused what does not parse).
    pub fn every(&self) -> Duration {
        self.every
            .and_then(|every| parse_duration(every).ok())
            .unwrap_or(DEFAULT_NOTICE_EVERY)
    }
}

impl Node {
    /// The question's `answered_text`, if it has one.
    pub fn answered_notice(&self) -> Option<Notice<'_>> {
        let (text, every) = match self {
            Node::Survey(node) => (&node.answered_text, &node.answered_text_every),
            Node::TextQuestion(node) => (&node.answered_text, &node.answered_text_every),
            Node::DateQuestion(node) => (&node.answered_text, &node.answered_text_every),
            _ => return None,
        };
        Some(Notice {
            text: text.as_deref()?,
            every: every.as_deref(),
        })
    }

    /// A date question's `hint_text`, if it has one.
    pub fn hint_notice(&self) -> Option<Notice<'_>> {
        match self {
            Node::DateQuestion(node) => Some(Notice {
                text: node.hint_text.as_deref()?,
                every: node.hint_text_every.as_deref(),
            }),
            _ => None,
        }
    }
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

/// Pauses the scenario: `next` is sent later, by push, either `after` a delay or
/// `at` a local time of day (`after_days` days later). Set exactly one of
/// `after` and `at`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitNode {
    pub id: NodeId,
    /// How long to wait, such as "90m", "1d" or "3d".
    #[serde(default)]
    pub after: Option<String>,
    /// The local time (24-hour "HH:MM", in the scenario's `time_zone`) to send
    /// `next` at: today's if still ahead, else tomorrow's, or `after_days` days
    /// later.
    #[serde(default)]
    pub at: Option<String>,
    /// With `at`: how many days later (default 0, the next such time).
    #[serde(default)]
    pub after_days: Option<u32>,
    /// What is sent when the wait is over.
    pub next: NodeId,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndNode {
    pub id: NodeId,
    /// May name the user: `{name|お客さま}`, `{field.plan}`, `{answer.node}` (a
    /// fallback after `|`; `{{` and `}}` are literal braces).
    #[serde(default)]
    pub text: Option<String>,
    /// Added to the user's tags when the scenario reaches this node.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Removed from the user's tags in the same commit (after `tags` of earlier steps).
    #[serde(default)]
    pub untag: Vec<String>,
    /// User fields written in the same commit (`users/{id}.fields.<name>`):
    /// strings of at most 500 characters, numbers or booleans.
    #[serde(default)]
    pub set: BTreeMap<String, FieldValue>,
    /// Links this rich menu (a menu file's id) to the user in the same step,
    /// or `"default"` to unlink theirs (the account's default shows).
    #[serde(default)]
    pub rich_menu: Option<String>,
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
            Node::Wait(node) => &node.id,
            Node::End(node) => &node.id,
            Node::Split(node) => &node.id,
            Node::Branch(node) => &node.id,
        }
    }
}

/// What one node or choice does to the user's record: tags added, tags
/// removed, fields set.
#[derive(Debug, Clone, Copy)]
pub struct Actions<'a> {
    pub tags: &'a [String],
    pub untag: &'a [String],
    pub set: &'a BTreeMap<String, FieldValue>,
    pub rich_menu: Option<&'a str>,
}

impl Actions<'_> {
    /// Adds these actions after `changes`.
    pub fn apply_to(&self, changes: &mut UserChanges) {
        changes.add_tags(self.tags);
        changes.remove_tags(self.untag);
        changes.set_fields(self.set);
        if let Some(menu) = self.rich_menu {
            changes.rich_menu = Some(menu.to_owned());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.untag.is_empty() && self.set.is_empty() && self.rich_menu.is_none()
    }
}

impl Node {
    /// What reaching this node does to the user (message and end nodes); a
    /// question's actions apply on its answer instead ([`Node::answer_actions`]).
    pub fn reach_actions(&self) -> Option<Actions<'_>> {
        match self {
            Node::Message(node) => Some(Actions {
                tags: &node.tags,
                untag: &node.untag,
                set: &node.set,
                rich_menu: node.rich_menu.as_deref(),
            }),
            Node::End(node) => Some(Actions {
                tags: &node.tags,
                untag: &node.untag,
                set: &node.set,
                rich_menu: node.rich_menu.as_deref(),
            }),
            _ => None,
        }
    }

    /// What a valid answer to this question does to the user (the question's
    /// own keys; a choice's come after them), and the field its value goes to.
    pub fn answer_actions(&self) -> Option<(Actions<'_>, Option<&str>)> {
        macro_rules! of {
            ($node:expr) => {
                Some((
                    Actions {
                        tags: &$node.tags,
                        untag: &$node.untag,
                        set: &$node.set,
                        rich_menu: $node.rich_menu.as_deref(),
                    },
                    $node.field.as_deref(),
                ))
            };
        }
        match self {
            Node::Survey(node) => of!(node),
            Node::TextQuestion(node) => of!(node),
            Node::DateQuestion(node) => of!(node),
            _ => None,
        }
    }

    /// Every set of actions the node carries (its own, and each choice's), for
    /// validation.
    pub fn all_actions(&self) -> Vec<Actions<'_>> {
        let mut all: Vec<Actions<'_>> = self
            .reach_actions()
            .into_iter()
            .chain(self.answer_actions().map(|(actions, _)| actions))
            .collect();
        if let Node::Survey(survey) = self {
            all.extend(survey.choices.iter().map(Choice::actions));
        }
        all
    }
}

impl Choice {
    pub fn actions(&self) -> Actions<'_> {
        Actions {
            tags: &self.tags,
            untag: &self.untag,
            set: &self.set,
            rich_menu: self.rich_menu.as_deref(),
        }
    }
}

impl Node {
    /// Whether the node asks a question whose answer is recorded (guard 1).
    pub fn is_question(&self) -> bool {
        matches!(self, Node::Survey(_) | Node::TextQuestion(_) | Node::DateQuestion(_))
    }

    /// A question's reminder and expiry settings as written (`None` for nodes
    /// that are not questions).
    pub(crate) fn timer_spec(&self) -> Option<TimerSpec<'_>> {
        macro_rules! spec {
            ($node:expr) => {
                TimerSpec {
                    remind_after: $node.remind_after.as_deref(),
                    remind_text: $node.remind_text.as_deref(),
                    max_reminders: $node.max_reminders,
                    expire_after: $node.expire_after.as_deref(),
                    on_expire: $node.on_expire.as_ref(),
                }
            };
        }
        match self {
            Node::Survey(node) => Some(spec!(node)),
            Node::TextQuestion(node) => Some(spec!(node)),
            Node::DateQuestion(node) => Some(spec!(node)),
            _ => None,
        }
    }
}

/// The five reminder and expiry fields every question kind has.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TimerSpec<'a> {
    pub remind_after: Option<&'a str>,
    pub remind_text: Option<&'a str>,
    pub max_reminders: Option<u32>,
    pub expire_after: Option<&'a str>,
    pub on_expire: Option<&'a NodeId>,
}

/// When a scenario's steps and reminders may be sent, compiled from its
/// `time_zone`, `quiet_hours` and `max_lateness`.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub zone: chrono_tz::Tz,
    pub quiet_hours: Option<QuietHours>,
    pub max_lateness: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            zone: DEFAULT_TIME_ZONE,
            quiet_hours: None,
            max_lateness: DEFAULT_MAX_LATENESS,
        }
    }
}

/// Local hours `[start, end)` in which nothing is sent; wraps midnight when
/// `start > end`. `start != end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietHours {
    pub start: chrono::NaiveTime,
    pub end: chrono::NaiveTime,
}

/// A wait node's delay, compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delay {
    /// This long after the wait is reached.
    After(Duration),
    /// At this local time, `days` days after the day the wait is reached (0: the
    /// next such time).
    At { time: chrono::NaiveTime, days: u32 },
}

/// A question's reminders and expiry, compiled. Exists only for questions with
/// `remind_after` or `expire_after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionTimers {
    pub remind_after: Option<Duration>,
    pub remind_text: Option<String>,
    /// At least 1 (the default), at most [`MAX_REMINDERS`]; meaningful only with
    /// `remind_after`.
    pub max_reminders: u32,
    pub expire_after: Option<Duration>,
    pub on_expire: Option<NodeId>,
}

/// Parses a 24-hour local time "HH:MM" (such as "09:00" or "21:30").
pub fn parse_clock(text: &str) -> Result<chrono::NaiveTime, String> {
    let bad = || format!("{text:?} is not a 24-hour time such as \"09:00\" or \"21:30\"");
    let (hours, minutes) = text.trim().split_once(':').ok_or_else(bad)?;
    let digits = |part: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&part.len()) && part.bytes().all(|b| b.is_ascii_digit())
    };
    if !digits(hours, 1..=2) || !digits(minutes, 2..=2) {
        return Err(bad());
    }
    let (hours, minutes) = (hours.parse().map_err(|_| bad())?, minutes.parse().map_err(|_| bad())?);
    chrono::NaiveTime::from_hms_opt(hours, minutes, 0).ok_or_else(bad)
}

/// Parses quiet hours such as "21:00-09:00" (wrapping midnight) or "12:00-13:00".
pub fn parse_quiet_hours(text: &str) -> Result<QuietHours, String> {
    let (start, end) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?} is not a range of local times such as \"21:00-09:00\""))?;
    let start = parse_clock(start)?;
    let end = parse_clock(end)?;
    if start == end {
        return Err(format!("{text:?} starts and ends at the same time"));
    }
    Ok(QuietHours { start, end })
}

/// Parses an IANA time zone name such as "Asia/Tokyo".
pub fn parse_time_zone(name: &str) -> Result<chrono_tz::Tz, String> {
    name.trim()
        .parse::<chrono_tz::Tz>()
        .map_err(|_| format!("{name:?} is not an IANA time zone name such as \"Asia/Tokyo\""))
}

/// Parses a delay of a wait, reminder or expiry: a duration that is not zero and
/// at most [`MAX_DELAY`].
pub(crate) fn parse_delay(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text)?;
    if duration > MAX_DELAY {
        return Err(format!("{text:?} is longer than 3650 days"));
    }
    Ok(duration)
}

impl Scenario {
    /// The scenario's `time_zone`, `quiet_hours` and `max_lateness`, compiled.
    /// `Err` names the key at fault.
    pub(crate) fn compile_timing(&self) -> Result<Timing, String> {
        let zone = match &self.time_zone {
            None => DEFAULT_TIME_ZONE,
            Some(name) => parse_time_zone(name).map_err(|problem| format!("time_zone {problem}"))?,
        };
        let quiet_hours = match &self.quiet_hours {
            None => None,
            Some(text) => Some(parse_quiet_hours(text).map_err(|problem| format!("quiet_hours {problem}"))?),
        };
        let max_lateness = match &self.max_lateness {
            None => DEFAULT_MAX_LATENESS,
            Some(text) => parse_duration(text).map_err(|problem| format!("max_lateness {problem}"))?,
        };
        Ok(Timing {
            zone,
            quiet_hours,
            max_lateness,
        })
    }
}

impl WaitNode {
    /// The wait's delay, compiled. `Err` names the key at fault.
    pub(crate) fn compile_delay(&self) -> Result<Delay, String> {
        match (&self.after, &self.at) {
            (Some(_), Some(_)) => Err("set either `after` or `at`, not both".to_owned()),
            (None, None) => Err("needs `after` (such as \"1d\") or `at` (such as \"10:00\")".to_owned()),
            (Some(_), None) if self.after_days.is_some() => {
                Err("after_days goes with `at`; with `after`, put the days in it (such as \"3d\")".to_owned())
            }
            (Some(after), None) => parse_delay(after)
                .map(Delay::After)
                .map_err(|problem| format!("after {problem}")),
            (None, Some(at)) => {
                let time = parse_clock(at).map_err(|problem| format!("at {problem}"))?;
                let days = self.after_days.unwrap_or(0);
                if days > 3650 {
                    return Err(format!("after_days is {days}; at most 3650"));
                }
                Ok(Delay::At { time, days })
            }
        }
    }
}

impl TimerSpec<'_> {
    /// Whether the question has a reminder or an expiry.
    pub(crate) fn is_set(&self) -> bool {
        self.remind_after.is_some() || self.expire_after.is_some()
    }

    /// Compiles the question's timers; `Ok(None)` when it has none. Lists every
    /// problem.
    pub(crate) fn compile(&self) -> Result<Option<QuestionTimers>, Vec<String>> {
        let mut problems = Vec::new();
        let mut delay = |key: &str, text: Option<&str>| {
            text.and_then(|text| match parse_delay(text) {
                Ok(delay) => Some(delay),
                Err(problem) => {
                    problems.push(format!("{key} {problem}"));
                    None
                }
            })
        };
        let remind_after = delay("remind_after", self.remind_after);
        let expire_after = delay("expire_after", self.expire_after);
        if self.remind_after.is_none() {
            if self.remind_text.is_some() {
                problems.push("remind_text needs remind_after".to_owned());
            }
            if self.max_reminders.is_some() {
                problems.push("max_reminders needs remind_after".to_owned());
            }
        }
        if self.expire_after.is_none() && self.on_expire.is_some() {
            problems.push("on_expire needs expire_after".to_owned());
        }
        let max_reminders = self.max_reminders.unwrap_or(DEFAULT_MAX_REMINDERS);
        if !(1..=MAX_REMINDERS).contains(&max_reminders) {
            problems.push(format!(
                "max_reminders is {max_reminders}; it must be 1 to {MAX_REMINDERS}"
            ));
        }
        if let (Some(remind), Some(expire)) = (remind_after, expire_after)
            && remind >= expire
        {
            problems.push("remind_after must be shorter than expire_after".to_owned());
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(self.is_set().then(|| QuestionTimers {
            remind_after,
            remind_text: self.remind_text.map(str::to_owned),
            max_reminders,
            expire_after,
            on_expire: self.on_expire.cloned(),
        }))
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
    timing: Timing,
    /// Each wait node's delay.
    delays: HashMap<NodeId, Delay>,
    /// The reminders and expiry of each question that has either.
    timers: HashMap<NodeId, QuestionTimers>,
    /// For each node only reached through a split, that split.
    variant_splits: HashMap<NodeId, NodeId>,
    /// The file's text, as read.
    pub content: String,
    /// Hex SHA-256 of the file's bytes as read (of `content`).
    pub content_hash: String,
    /// The questions whose answers the scenario's texts name (`{answer.n}`):
    /// a branch's read of the user takes them too.
    pub placeholder_answers: Vec<NodeId>,
}

impl LoadedScenario {
    /// Indexes a validated scenario. Refuses (rather than panics on) a scenario
    /// without a node to start at or whose chain from `start` cannot be sent, so a
    /// `LoadedScenario` always has a `start` that [`walk_nodes`] accepts.
    /// `content` is the file's text, as read.
    pub(super) fn try_new(scenario: Scenario, source: PathBuf, content: String) -> Result<Self, ScenarioError> {
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
        let timing = scenario.compile_timing().map_err(|problem| ScenarioError {
            file: source.clone(),
            scenario: Some(scenario.id.to_string()),
            node: None,
            problem,
        })?;
        let mut delays = HashMap::new();
        let mut timers = HashMap::new();
        for node in &scenario.nodes {
            let problem = |problem: String| ScenarioError {
                file: source.clone(),
                scenario: Some(scenario.id.to_string()),
                node: Some(node.id().to_string()),
                problem,
            };
            if let Node::Wait(wait) = node {
                delays.insert(wait.id.clone(), wait.compile_delay().map_err(problem)?);
            } else if let Some(spec) = node.timer_spec()
                && let Some(compiled) = spec.compile().map_err(|problems| problem(problems.join("; ")))?
            {
                timers.insert(node.id().clone(), compiled);
            }
        }
        let mut entries: Vec<&NodeId> = vec![&start];
        entries.extend(scenario.nodes.iter().filter_map(|node| match node {
            Node::Trigger(trigger) => Some(&trigger.next),
            _ => None,
        }));
        let variant_splits =
            split::variant_splits(&scenario.nodes, &entries).map_err(|(node, problem)| ScenarioError {
                file: source.clone(),
                scenario: Some(scenario.id.to_string()),
                node: Some(node.to_string()),
                problem,
            })?;
        let content_hash = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(content.as_bytes()))
        };
        let placeholder_answers = personal_texts::answer_nodes(&scenario);
        let loaded = Self {
            scenario,
            source,
            node_index,
            has_survey,
            start,
            answer_window,
            answer_tag,
            rules,
            timing,
            delays,
            timers,
            variant_splits,
            content,
            content_hash,
            placeholder_answers,
        };
        if let Err(problem) = walk::walk_every_way(|id| loaded.node(id), &loaded.start) {
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

    /// The split whose arm the answers to `node` belong to, and the label of
    /// the arm `who` takes there; `None` when no split leads to `node`.
    pub fn variant_of(&self, node: &NodeId, who: Who<'_>) -> Option<(&NodeId, &str)> {
        let split = self.variant_splits.get(node)?;
        match self.node(split)? {
            Node::Split(split) => {
                let arm = split.arms.get(who.arm(split))?;
                Some((&split.id, arm.label.as_str()))
            }
            _ => None,
        }
    }

    /// The split the answers to `node` belong to, if any.
    pub fn variant_split(&self, node: &NodeId) -> Option<&SplitNode> {
        match self.node(self.variant_splits.get(node)?)? {
            Node::Split(split) => Some(split),
            _ => None,
        }
    }

    /// The scenario's split nodes, in file order.
    pub fn splits(&self) -> impl Iterator<Item = &SplitNode> {
        self.scenario.nodes.iter().filter_map(|node| match node {
            Node::Split(split) => Some(split),
            _ => None,
        })
    }

    /// The compiled rule of text question `id` (`None` for other nodes).
    pub fn rule(&self, id: &NodeId) -> Option<&typed::Rule> {
        self.rules.get(id)
    }

    /// The scenario's time zone, quiet hours and maximum lateness.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// The delay of wait node `wait` (`None` for other nodes).
    pub fn delay(&self, wait: &NodeId) -> Option<&Delay> {
        self.delays.get(wait)
    }

    /// The reminders and expiry of question `question`; `None` unless it sets
    /// `remind_after` or `expire_after`.
    pub fn question_timers(&self, question: &NodeId) -> Option<&QuestionTimers> {
        self.timers.get(question)
    }

    /// Whether the scenario schedules anything: a wait node, or a question with
    /// a reminder or an expiry.
    pub fn has_timers(&self) -> bool {
        !self.delays.is_empty() || !self.timers.is_empty()
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
    /// Whether any scenario has a text question (or a date question with
    /// `hint_text`): only then can a text message answer an open question,
    /// which ingest then reads (the text is kept only for a text question).
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
