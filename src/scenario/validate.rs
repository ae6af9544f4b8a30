//! Checks a scenario file against the engine's rules and LINE's limits. Every
//! problem is collected (not just the first) and names its file, scenario and node.

use super::limits::*;
use super::postback::Postback;
use super::walk::{WalkError, walk_every_way};
use super::{
    DEFAULT_ANSWER_WINDOW, Node, QuestionTimers, Scenario, SurveyNode, SurveyStyle, TriggerOn, effective_start,
    normalize_keyword, parse_duration, parse_quiet_hours, parse_time_zone,
};
use crate::ids::{NodeId, check_id};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One problem in one scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: PathBuf,
    pub scenario: Option<String>,
    pub node: Option<String>,
    pub problem: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(scenario) = &self.scenario {
            write!(f, "scenario {scenario:?}: ")?;
        }
        if let Some(node) = &self.node {
            write!(f, "node {node:?}: ")?;
        }
        f.write_str(&self.problem)
    }
}

impl std::error::Error for ScenarioError {}

/// Collects problems for one file.
pub(super) struct Report<'a> {
    file: &'a Path,
    scenario: String,
    pub errors: Vec<ScenarioError>,
}

impl<'a> Report<'a> {
    pub fn new(file: &'a Path, scenario: &str) -> Self {
        Self {
            file,
            scenario: scenario.to_owned(),
            errors: Vec::new(),
        }
    }

    fn scenario_problem(&mut self, problem: impl Into<String>) {
        self.push(None, problem.into());
    }

    fn node_problem(&mut self, node: &NodeId, problem: impl Into<String>) {
        self.push(Some(node.to_string()), problem.into());
    }

    fn push(&mut self, node: Option<String>, problem: String) {
        self.errors.push(ScenarioError {
            file: self.file.to_owned(),
            scenario: Some(self.scenario.clone()),
            node,
            problem,
        });
    }

    fn text(&mut self, node: &NodeId, what: &str, text: &str, max: usize) {
        self.counted(node, what, text, max, Counting::Utf16);
    }

    fn label(&mut self, node: &NodeId, what: &str, text: &str, max: usize) {
        self.counted(node, what, text, max, Counting::Graphemes);
    }

    fn counted(&mut self, node: &NodeId, what: &str, text: &str, max: usize, counting: Counting) {
        let length = counting.count(text);
        if length == 0 || text.trim().is_empty() {
            self.node_problem(node, format!("{what} is empty"));
        } else if length > max {
            self.node_problem(
                node,
                format!("{what} is {length} characters; LINE allows at most {max}"),
            );
        }
    }
}

/// Checks one scenario on its own. Cross-scenario rules live in [`check_set`].
pub(super) fn check_scenario(scenario: &Scenario, report: &mut Report<'_>) {
    if let Err(problem) = check_id(scenario.id.as_str()) {
        report.scenario_problem(format!("scenario id {problem}"));
    }
    if !scenario.nodes.iter().any(|node| !matches!(node, Node::Trigger(_))) {
        report.scenario_problem("has no node other than triggers; it would send nothing");
    }
    if let Some(window) = &scenario.answer_window
        && let Err(problem) = parse_duration(window)
    {
        report.scenario_problem(format!("answer_window {problem}"));
    }
    if let Some(zone) = &scenario.time_zone
        && let Err(problem) = parse_time_zone(zone)
    {
        report.scenario_problem(format!("time_zone {problem}"));
    }
    if let Some(quiet) = &scenario.quiet_hours
        && let Err(problem) = parse_quiet_hours(quiet)
    {
        report.scenario_problem(format!("quiet_hours {problem}"));
    }
    if let Some(lateness) = &scenario.max_lateness
        && let Err(problem) = parse_duration(lateness)
    {
        report.scenario_problem(format!("max_lateness {problem}"));
    }
    let mut seen = HashSet::new();
    for node in &scenario.nodes {
        let id = node.id();
        if let Err(problem) = check_id(id.as_str()) {
            report.node_problem(id, format!("node id {problem}"));
        }
        if !seen.insert(id) {
            report.node_problem(id, "node id is used twice in this scenario");
        }
        check_node(scenario, node, report);
    }
    let by_id: HashMap<&NodeId, &Node> = scenario.nodes.iter().map(|node| (node.id(), node)).collect();
    let lookup = |id: &NodeId| by_id.get(id).copied();
    // Every place the scenario can be entered from must lead to a finite chain of
    // at most five messages: the triggers, the `next` links the runtime follows
    // (a wait's `next` and a question's `on_expire` too, sent later by push),
    // and the start (manual sends and Flex card taps). Each problem is reported
    // once per entry point, on the node the link belongs to.
    let mut walked = HashSet::new();
    for node in &scenario.nodes {
        for target in entry_targets(node) {
            if !walked.insert((node.id(), target)) {
                continue;
            }
            if let Err(problem) = walk_every_way(lookup, target) {
                report.node_problem(node.id(), problem.to_string());
            }
        }
    }
    // A node's answers carry the variant of the one split every run reaching it
    // passed.
    let mut entries: Vec<&NodeId> = effective_start(scenario).into_iter().collect();
    entries.extend(scenario.nodes.iter().filter_map(|node| match node {
        Node::Trigger(trigger) => Some(&trigger.next),
        _ => None,
    }));
    if let Err((node, problem)) = super::split::variant_splits(&scenario.nodes, &entries) {
        report.node_problem(&node, problem);
    }
    // No start at all is the "no node other than triggers" problem above.
    if let Some(problem) = start_problem(scenario, lookup) {
        report.scenario_problem(problem);
    }
}

/// Why the scenario cannot be entered at its effective start (see
/// [`effective_start`]); `None` when it can, or when it has no start at all.
fn start_problem<'a>(scenario: &Scenario, lookup: impl Fn(&NodeId) -> Option<&'a Node> + Copy) -> Option<String> {
    let start = effective_start(scenario)?;
    match lookup(start) {
        None => Some(format!("`start` names node {:?}, which does not exist", start.as_str())),
        Some(Node::Trigger(_)) => Some("`start` must not be a trigger node".to_owned()),
        Some(_) => walk_every_way(lookup, start)
            .err()
            .map(|problem| start_chain_problem(start, &problem)),
    }
}

/// The problem text for a chain from `start` that cannot be sent.
pub(super) fn start_chain_problem(start: &NodeId, problem: &WalkError) -> String {
    format!(
        "the chain from `start` (node {:?}) cannot be sent: {problem}",
        start.as_str()
    )
}

/// The `next` links out of a node that the runtime follows (a split's arms, a
/// question's `on_expire` included).
pub(super) fn entry_targets(node: &Node) -> Vec<&NodeId> {
    let on_expire = node.timer_spec().and_then(|spec| spec.on_expire);
    let mut targets = links(node);
    targets.extend(on_expire);
    targets
}

fn links(node: &Node) -> Vec<&NodeId> {
    match node {
        Node::Trigger(trigger) => vec![&trigger.next],
        Node::Message(message) => message.next.iter().collect(),
        Node::Survey(survey) => survey
            .choices
            .iter()
            .filter_map(|choice| choice.next.as_ref())
            .collect(),
        Node::TextQuestion(question) => question.next.iter().chain(&question.on_give_up).collect(),
        Node::DateQuestion(question) => question.next.iter().collect(),
        Node::Wait(wait) => vec![&wait.next],
        Node::Split(split) => split.arms.iter().map(|arm| &arm.next).collect(),
        Node::Branch(branch) => branch.targets().collect(),
        Node::FlexImage(_) | Node::End(_) => Vec::new(),
    }
}

/// The longest string a `set` may write, and the longest typed answer a
/// question's `field` may hold (in characters as a person counts them).
pub const MAX_FIELD_TEXT_CHARS: usize = 500;

/// The most distinct field names all scenarios together may write: each user
/// holds at most this many fields.
pub const MAX_FIELD_NAMES: usize = 50;

/// Whether `name` is a field name: `[a-z][a-z0-9_]{0,39}` (safe in a Firestore
/// field path and a placeholder without quoting).
pub fn is_field_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|first| first.is_ascii_lowercase())
        && name.len() <= 40
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Tags, untag and set of one node or choice (`what` names the choice).
fn check_actions(report: &mut Report<'_>, node: &NodeId, what: &str, actions: &crate::scenario::Actions<'_>) {
    if actions.untag.iter().any(|tag| tag.trim().is_empty()) {
        report.node_problem(node, format!("{what}untag has an empty tag"));
    }
    if let Some(both) = actions.tags.iter().find(|tag| actions.untag.contains(tag)) {
        report.node_problem(node, format!("{what}tag {both:?} is both in tags and in untag"));
    }
    for (name, value) in actions.set {
        if !is_field_name(name) {
            report.node_problem(
                node,
                format!("{what}set: field name {name:?} must look like [a-z][a-z0-9_]{{0,39}}"),
            );
        }
        if let crate::values::FieldValue::Text(text) = value {
            let chars = Counting::Graphemes.count(text);
            if chars > MAX_FIELD_TEXT_CHARS {
                report.node_problem(
                    node,
                    format!("{what}set: the value of {name:?} is {chars} characters; at most {MAX_FIELD_TEXT_CHARS}"),
                );
            }
        }
        if let crate::values::FieldValue::Number(number) = value
            && !number.is_finite()
        {
            report.node_problem(node, format!("{what}set: the value of {name:?} is not a finite number"));
        }
    }
    if let Some(problem) = actions.rich_menu.and_then(rich_menu_problem) {
        report.node_problem(node, format!("{what}{problem}"));
    }
}

/// Why `rich_menu = "..."` names no menu a file could have (`default`
/// unlinks the user's menu).
pub(crate) fn rich_menu_problem(menu: &str) -> Option<String> {
    (menu != "default" && crate::ids::MenuId::parse(menu).is_err()).then(|| {
        format!(
            "rich_menu {menu:?} must be a menu file's id ({}) or \"default\"",
            crate::ids::MenuId::RULE
        )
    })
}

/// A question's `field`: a valid name, and for a text question an answer of
/// bounded length.
fn check_answer_field(report: &mut Report<'_>, node: &Node) {
    let Some((_, Some(field))) = node.answer_actions() else {
        return;
    };
    if !is_field_name(field) {
        report.node_problem(
            node.id(),
            format!("field name {field:?} must look like [a-z][a-z0-9_]{{0,39}}"),
        );
    }
    if let Node::TextQuestion(question) = node {
        use crate::scenario::Validation;
        let bounded = match &question.validate {
            Some(Validation::Length { max: Some(max), .. }) => *max <= MAX_FIELD_TEXT_CHARS,
            Some(Validation::Number { .. } | Validation::Email | Validation::PhoneJp | Validation::PostalCodeJp) => {
                true
            }
            Some(Validation::Length { max: None, .. } | Validation::Pattern { .. }) | None => false,
        };
        if !bounded {
            report.node_problem(
                node.id(),
                format!(
                    "field {field:?} needs a bounded answer: a `length` rule with max <= {MAX_FIELD_TEXT_CHARS}, or a number, email, phone_jp or postal_code_jp rule"
                ),
            );
        }
    }
}

fn check_node(scenario: &Scenario, node: &Node, report: &mut Report<'_>) {
    if let Some(actions) = node.reach_actions() {
        check_tags(report, node.id(), actions.tags);
    }
    if let Node::Survey(survey) = node {
        check_tags(report, node.id(), &survey.tags);
    }
    for actions in node
        .reach_actions()
        .into_iter()
        .chain(node.answer_actions().map(|(a, _)| a))
    {
        check_actions(report, node.id(), "", &actions);
    }
    if let Node::Survey(survey) = node {
        for choice in &survey.choices {
            check_actions(
                report,
                node.id(),
                &format!("choice {:?}: ", choice.value),
                &choice.actions(),
            );
        }
    }
    check_answer_field(report, node);
    check_notices(report, node);
    if let Some(spec) = node.timer_spec() {
        match spec.compile() {
            Err(problems) => {
                for problem in problems {
                    report.node_problem(node.id(), problem);
                }
            }
            Ok(Some(timers)) if matches!(node, Node::TextQuestion(_) | Node::DateQuestion(_)) => {
                check_expiry_within_window(scenario, node, &timers, report);
            }
            Ok(_) => {}
        }
        if let Some(text) = spec.remind_text {
            report.text(node.id(), "remind_text", text, MAX_TEXT_MESSAGE_CHARS);
        }
    }
    match node {
        Node::Trigger(trigger) => {
            if trigger.on == TriggerOn::Follow && !trigger.keywords.is_empty() {
                report.node_problem(&trigger.id, "a follow trigger takes no keywords");
            }
            if trigger.keywords.iter().any(|keyword| keyword.trim().is_empty()) {
                report.node_problem(&trigger.id, "a keyword is empty");
            }
        }
        Node::Message(message) => report.text(&message.id, "text", &message.text, MAX_TEXT_MESSAGE_CHARS),
        Node::Survey(survey) => check_survey(scenario, survey, report),
        Node::TextQuestion(question) => {
            report.text(&question.id, "text", &question.text, MAX_TEXT_MESSAGE_CHARS);
            if let Some(text) = &question.invalid_text {
                report.text(&question.id, "invalid_text", text, MAX_TEXT_MESSAGE_CHARS);
            }
            check_tags(report, &question.id, &question.tags);
            if question.max_attempts == 0 {
                report.node_problem(&question.id, "max_attempts must be at least 1");
            }
            if let Some(validation) = &question.validate
                && let Err(problem) = crate::scenario::typed::Rule::new(validation)
            {
                report.node_problem(&question.id, format!("validate: {problem}"));
            }
        }
        Node::DateQuestion(question) => {
            report.label(&question.id, "text", &question.text, MAX_BUTTONS_TEXT_CHARS);
            if utf16(&question.text) > MAX_ALT_TEXT_CHARS {
                report.node_problem(&question.id, "text is too long to double as alt_text");
            }
            if let Some(label) = &question.label {
                report.label(&question.id, "label", label, MAX_LABEL_CHARS);
            }
            check_tags(report, &question.id, &question.tags);
            let bounds = [("min", &question.min), ("max", &question.max)];
            let mut parsed = Vec::new();
            for (what, bound) in bounds {
                if let Some(bound) = bound {
                    match crate::scenario::typed::parse_picked(question.mode, bound) {
                        Ok(value) if crate::scenario::typed::within_line_range(value) => parsed.push(value),
                        Ok(_) => report.node_problem(
                            &question.id,
                            format!("{what} {bound:?} is outside LINE's range (1900-01-01 to 2100-12-31)"),
                        ),
                        Err(problem) => report.node_problem(&question.id, format!("{what} {problem}")),
                    }
                }
            }
            // LINE requires max to be strictly greater than min.
            if let [min, max] = parsed.as_slice()
                && min >= max
            {
                report.node_problem(&question.id, "min must be earlier than max");
            }
            let data = Postback::Date {
                scenario: scenario.id.clone(),
                node: question.id.clone(),
            }
            .encode_in_run(Some(&longest_asked()));
            check_postback_length(report, &question.id, &data);
        }
        Node::FlexImage(card) => {
            report.text(&card.id, "alt_text", &card.alt_text, MAX_ALT_TEXT_CHARS);
            if !card.image_url.starts_with("https://") {
                report.node_problem(&card.id, "image_url must be an https:// URL");
            }
            if utf16(&card.image_url) > MAX_IMAGE_URL_CHARS {
                report.node_problem(
                    &card.id,
                    format!("image_url is longer than {MAX_IMAGE_URL_CHARS} characters"),
                );
            }
            if !is_aspect_ratio(&card.aspect_ratio) {
                report.node_problem(&card.id, "aspect_ratio must look like \"20:13\"");
            }
            let data = Postback::CardTap {
                scenario: scenario.id.clone(),
                node: card.id.clone(),
            }
            .encode();
            check_postback_length(report, &card.id, &data);
        }
        Node::Wait(wait) => {
            if let Err(problem) = wait.compile_delay() {
                report.node_problem(&wait.id, problem);
            }
        }
        Node::End(end) => {
            if let Some(text) = &end.text {
                report.text(&end.id, "text", text, MAX_TEXT_MESSAGE_CHARS);
            }
        }
        Node::Split(split) => check_split(scenario, report, split),
        Node::Branch(branch) => check_branch(scenario, report, branch),
    }
}

/// `answered_text` and `hint_text`: texts within LINE's limit, intervals
/// that are durations (from one minute to 30 days), never an interval alone.
fn check_notices(report: &mut Report<'_>, node: &Node) {
    const LONGEST: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);
    let (answered_every, hint_every) = match node {
        Node::Survey(node) => (node.answered_text_every.as_deref(), None),
        Node::TextQuestion(node) => (node.answered_text_every.as_deref(), None),
        Node::DateQuestion(node) => (node.answered_text_every.as_deref(), node.hint_text_every.as_deref()),
        _ => return,
    };
    for (key, notice, every) in [
        ("answered_text", node.answered_notice(), answered_every),
        ("hint_text", node.hint_notice(), hint_every),
    ] {
        if let Some(notice) = notice {
            report.text(node.id(), key, notice.text, MAX_TEXT_MESSAGE_CHARS);
            if notice.text.trim().is_empty() {
                report.node_problem(node.id(), format!("{key} is empty"));
            }
        }
        let Some(every) = every else { continue };
        if notice.is_none() {
            report.node_problem(node.id(), format!("{key}_every needs {key}"));
            continue;
        }
        match super::parse_duration(every) {
            Ok(every) if every < std::time::Duration::from_secs(60) || every > LONGEST => {
                report.node_problem(node.id(), format!("{key}_every must be from 1m to 30d"));
            }
            Ok(_) => {}
            Err(problem) => report.node_problem(node.id(), format!("{key}_every {problem}")),
        }
    }
}

/// The most arms one branch may have.
pub const MAX_BRANCH_ARMS: usize = 20;

/// A branch's conditions: each names something, lists are not empty, bounds
/// are in order and of one kind, and an `answer` of this scenario names a
/// question (of another scenario: checked across scenarios).
fn check_branch(scenario: &Scenario, report: &mut Report<'_>, branch: &super::BranchNode) {
    if branch.arms.is_empty() || branch.arms.len() > MAX_BRANCH_ARMS {
        report.node_problem(
            &branch.id,
            format!("a branch has 1 to {MAX_BRANCH_ARMS} arms, not {}", branch.arms.len()),
        );
    }
    for (index, arm) in branch.arms.iter().enumerate() {
        let mut problem = |text: String| report.node_problem(&branch.id, format!("arm {}: {text}", index + 1));
        for problem_text in condition_problems(&arm.when) {
            problem(problem_text);
        }
        if let Some(text) = arm.rich_menu.as_deref().and_then(rich_menu_problem) {
            problem(text);
        }
        if let Some(answer) = &arm.when.answer
            && answer.scenario.as_ref().is_none_or(|other| other == &scenario.id)
        {
            match scenario.nodes.iter().find(|node| node.id() == &answer.node) {
                None => problem(format!(
                    "`answer` names node {:?}, which does not exist",
                    answer.node.as_str()
                )),
                Some(node) if !node.is_question() => problem(format!(
                    "`answer` names node {:?}, which is not a question",
                    answer.node.as_str()
                )),
                Some(node) => {
                    for text in answer_kind_problems(node, answer) {
                        problem(text);
                    }
                }
            }
        }
    }
}

/// An `answer` condition that can never hold for the kind of question it
/// names: `min`/`max` on a choice (its values are texts: use `in`), an `in`
/// value that is no choice, a number bound on a date.
pub(super) fn answer_kind_problems(node: &Node, answer: &super::branch::AnswerCondition) -> Vec<String> {
    let mut problems = Vec::new();
    let bounds = answer.min.iter().chain(&answer.max);
    match node {
        Node::Survey(survey) => {
            if answer.min.is_some() || answer.max.is_some() {
                problems.push(format!(
                    "`answer` on choice question {:?}: its values are texts; compare them with `in`, not min/max",
                    survey.id.as_str()
                ));
            }
            for value in answer.one_of.iter().flatten() {
                if survey.choice(value).is_none() {
                    problems.push(format!(
                        "`answer`: {value:?} is not a choice value of {:?}",
                        survey.id.as_str()
                    ));
                }
            }
        }
        Node::DateQuestion(question)
            if bounds
                .into_iter()
                .any(|bound| !matches!(bound, crate::values::FieldValue::Text(_))) =>
        {
            problems.push(format!(
                "`answer` on date question {:?}: min/max are dates as text (\"2027-01-01\"), not numbers",
                question.id.as_str()
            ));
        }
        _ => {}
    }
    problems
}

/// What is wrong with one `when`, scenario references aside.
fn condition_problems(when: &super::Condition) -> Vec<String> {
    use super::branch::compare;
    let mut problems = Vec::new();
    let names_nothing = when.tags.is_none()
        && when.answered.is_none()
        && when.not_answered.is_none()
        && when.first_seen_from.is_none()
        && when.first_seen_to.is_none()
        && when.answer.is_none()
        && when.field.is_none();
    if names_nothing {
        problems.push(
            "`when` names no condition (tags, answered, notAnswered, firstSeenFrom, firstSeenTo, answer, field)"
                .to_owned(),
        );
    }
    if let Some(tags) = &when.tags {
        for (key, list) in [
            ("anyOf", &tags.any_of),
            ("allOf", &tags.all_of),
            ("noneOf", &tags.none_of),
        ] {
            if list
                .as_ref()
                .is_some_and(|list| list.is_empty() || list.iter().any(|tag| tag.trim().is_empty()))
            {
                problems.push(format!("tags.{key} is empty or holds an empty tag"));
            }
        }
        if tags.any_of.is_none() && tags.all_of.is_none() && tags.none_of.is_none() {
            problems.push("`tags` names no list (anyOf, allOf, noneOf)".to_owned());
        }
    }
    for (key, list) in [("answered", &when.answered), ("notAnswered", &when.not_answered)] {
        if list.as_ref().is_some_and(Vec::is_empty) {
            problems.push(format!("{key} is an empty list"));
        }
    }
    let day = |value: &Option<String>| {
        value
            .as_deref()
            .map(|day| chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d"))
    };
    let (from, to) = (day(&when.first_seen_from), day(&when.first_seen_to));
    for (key, parsed, raw) in [
        ("firstSeenFrom", &from, &when.first_seen_from),
        ("firstSeenTo", &to, &when.first_seen_to),
    ] {
        if parsed.as_ref().is_some_and(Result::is_err) {
            problems.push(format!(
                "{key} {:?} is not a day written YYYY-MM-DD",
                raw.as_deref().unwrap_or_default()
            ));
        }
    }
    if let (Some(Ok(from)), Some(Ok(to))) = (from, to)
        && from > to
    {
        problems.push(format!("firstSeenFrom {from} is after firstSeenTo {to}"));
    }
    if let Some(answer) = &when.answer {
        if answer.one_of.as_ref().is_some_and(Vec::is_empty) {
            problems.push("answer.in is an empty list".to_owned());
        }
        if let (Some(min), Some(max)) = (&answer.min, &answer.max) {
            match compare(min, max) {
                Some(std::cmp::Ordering::Greater) => problems.push("answer: min is greater than max".to_owned()),
                None => problems.push("answer: min and max are of different kinds".to_owned()),
                Some(_) => {}
            }
        }
    }
    if let Some(field) = &when.field {
        if !is_field_name(&field.name) {
            problems.push(format!(
                "field {:?} is not a field name ([a-z][a-z0-9_]{{0,39}})",
                field.name
            ));
        }
        if field.equals.is_none() && field.one_of.is_none() && field.exists.is_none() {
            problems.push(format!("field {:?} needs equals, in or exists", field.name));
        }
        if field.one_of.as_ref().is_some_and(Vec::is_empty) {
            problems.push(format!("field {:?}: `in` is an empty list", field.name));
        }
    }
    problems
}

fn check_split(scenario: &Scenario, report: &mut Report<'_>, split: &super::SplitNode) {
    use super::split::{MAX_ARMS, MAX_LABEL_BYTES, MAX_LABEL_CHARS, MAX_WEIGHT, MIN_ARMS};
    if !(MIN_ARMS..=MAX_ARMS).contains(&split.arms.len()) {
        report.node_problem(
            &split.id,
            format!("a split has {MIN_ARMS} to {MAX_ARMS} arms, not {}", split.arms.len()),
        );
    }
    let mut labels = HashSet::new();
    for arm in &split.arms {
        let length = Counting::Graphemes.count(&arm.label);
        // Labels become Firestore field-path segments and report keys: no
        // invisible characters, no padding, and a bounded size in bytes.
        let invisible = |c: char| {
            c.is_control()
                || matches!(c, '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}')
        };
        if arm.label.trim().is_empty() || arm.label.chars().any(invisible) || arm.label.trim() != arm.label {
            report.node_problem(
                &split.id,
                format!(
                    "arm label {:?} is empty, starts or ends with a space, or holds a control or invisible character",
                    arm.label
                ),
            );
        } else if arm.label.len() > MAX_LABEL_BYTES {
            report.node_problem(
                &split.id,
                format!(
                    "arm label {:?} is {} bytes in UTF-8; at most {MAX_LABEL_BYTES}",
                    arm.label,
                    arm.label.len()
                ),
            );
        } else if length > MAX_LABEL_CHARS {
            report.node_problem(
                &split.id,
                format!(
                    "arm label {:?} is {length} characters; at most {MAX_LABEL_CHARS}",
                    arm.label
                ),
            );
        }
        if !labels.insert(arm.label.as_str()) {
            report.node_problem(&split.id, format!("arm label {:?} is used twice", arm.label));
        }
        if !(1..=MAX_WEIGHT).contains(&arm.weight) {
            report.node_problem(
                &split.id,
                format!(
                    "arm {:?}: weight must be a whole number from 1 to {MAX_WEIGHT}, not {}",
                    arm.label, arm.weight
                ),
            );
        }
        // A run's arm is counted with the first messages it sends, so an arm
        // must send something before it waits (a split behind it is refused
        // elsewhere; a missing node too).
        let lookup = |id: &NodeId| scenario.nodes.iter().find(|node| node.id() == id);
        if let Ok(nodes) = super::walk::walk(lookup, &arm.next, |_| None)
            && !nodes.iter().any(|node| super::walk::speaks(node))
        {
            report.node_problem(
                &split.id,
                format!(
                    "arm {:?} sends no message before it waits; a split's arm must send its first message at once",
                    arm.label
                ),
            );
        }
    }
}

fn check_survey(scenario: &Scenario, survey: &SurveyNode, report: &mut Report<'_>) {
    let most = match survey.style {
        SurveyStyle::Buttons => {
            let text_max = if survey.title.is_some() {
                MAX_BUTTONS_TEXT_WITH_TITLE_CHARS
            } else {
                MAX_BUTTONS_TEXT_CHARS
            };
            report.label(&survey.id, "text", &survey.text, text_max);
            if let Some(title) = &survey.title {
                report.label(&survey.id, "title", title, MAX_TITLE_CHARS);
            }
            MAX_BUTTONS
        }
        SurveyStyle::QuickReply => {
            report.text(&survey.id, "text", &survey.text, MAX_TEXT_MESSAGE_CHARS);
            if survey.title.is_some() {
                report.node_problem(&survey.id, "a quick reply question has no title; put it in the text");
            }
            MAX_QUICK_REPLIES
        }
    };
    if let Some(alt_text) = &survey.alt_text {
        report.text(&survey.id, "alt_text", alt_text, MAX_ALT_TEXT_CHARS);
    } else if survey.style == SurveyStyle::Buttons && utf16(&survey.text) > MAX_ALT_TEXT_CHARS {
        report.node_problem(&survey.id, "text is too long to double as alt_text; set alt_text");
    }
    if survey.choices.is_empty() || survey.choices.len() > most {
        let style = match survey.style {
            SurveyStyle::Buttons => "a buttons template",
            SurveyStyle::QuickReply => "a quick reply question",
        };
        report.node_problem(
            &survey.id,
            format!("has {} choices; {style} takes 1 to {most}", survey.choices.len()),
        );
    }
    let mut values = HashSet::new();
    for choice in &survey.choices {
        report.label(
            &survey.id,
            &format!("label of choice {:?}", choice.value),
            &choice.label,
            MAX_LABEL_CHARS,
        );
        if let Some(display_text) = &choice.display_text {
            report.label(
                &survey.id,
                &format!("display_text of choice {:?}", choice.value),
                display_text,
                MAX_DISPLAY_TEXT_CHARS,
            );
        }
        if let Err(problem) = check_id(&choice.value) {
            report.node_problem(&survey.id, format!("choice value {:?} {problem}", choice.value));
        }
        if !values.insert(&choice.value) {
            report.node_problem(&survey.id, format!("choice value {:?} is used twice", choice.value));
        }
        if choice.tags.iter().any(|tag| tag.trim().is_empty()) {
            report.node_problem(&survey.id, format!("choice {:?} has an empty tag", choice.value));
        }
        let data = Postback::Answer {
            scenario: scenario.id.clone(),
            node: survey.id.clone(),
            choice: choice.value.clone(),
        }
        .encode_in_run(Some(&longest_asked()));
        check_postback_length(report, &survey.id, &data);
    }
}

/// The longest run and version a button can carry: postback data must fit
/// with them.
fn longest_asked() -> crate::scenario::postback::Asked {
    crate::scenario::postback::Asked {
        run: crate::ids::RunId::begun_by("any"),
        version: Some(u32::MAX),
    }
}

fn check_tags(report: &mut Report<'_>, node: &NodeId, tags: &[String]) {
    if tags.iter().any(|tag| tag.trim().is_empty()) {
        report.node_problem(node, "has an empty tag");
    }
}

fn check_postback_length(report: &mut Report<'_>, node: &NodeId, data: &str) {
    let length = utf16(data);
    if length > MAX_POSTBACK_DATA_CHARS {
        report.node_problem(
            node,
            format!("its postback data would be {length} characters; LINE allows {MAX_POSTBACK_DATA_CHARS} (shorten the ids or values)"),
        );
    }
}

fn is_aspect_ratio(ratio: &str) -> bool {
    let mut parts = ratio.split(':');
    let mut number = || {
        parts
            .next()
            .is_some_and(|part| part.parse::<u32>().is_ok_and(|n| n > 0))
    };
    number() && number() && parts.next().is_none()
}

/// Rules that span scenarios: unique ids, Flex cards that start existing survey
/// scenarios, and triggers that never compete for the same input.
pub(super) fn check_set(scenarios: &[(&Scenario, &Path)]) -> Vec<ScenarioError> {
    let mut errors = Vec::new();
    let mut problem = |file: &Path, scenario: &str, node: Option<&NodeId>, text: String| {
        errors.push(ScenarioError {
            file: file.to_owned(),
            scenario: Some(scenario.to_owned()),
            node: node.map(ToString::to_string),
            problem: text,
        });
    };
    let mut files_by_id: HashMap<&str, &Path> = HashMap::new();
    for &(scenario, file) in scenarios {
        if let Some(first) = files_by_id.insert(scenario.id.as_str(), file) {
            problem(
                file,
                scenario.id.as_str(),
                None,
                format!("scenario id is also used in {}", first.display()),
            );
        }
    }
    let by_id: HashMap<&str, &Scenario> = scenarios
        .iter()
        .map(|&(scenario, _)| (scenario.id.as_str(), scenario))
        .collect();
    // Every field name any scenario writes: each user holds at most this many.
    let mut field_names: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut first_over: Option<(&Path, &str, &NodeId, &str)> = None;
    for &(scenario, file) in scenarios {
        for node in &scenario.nodes {
            let answer_field = node.answer_actions().and_then(|(_, field)| field);
            let names = node
                .all_actions()
                .into_iter()
                .flat_map(|actions| actions.set.keys().map(String::as_str))
                .chain(answer_field);
            for name in names {
                if field_names.insert(name) && field_names.len() > MAX_FIELD_NAMES && first_over.is_none() {
                    first_over = Some((file, scenario.id.as_str(), node.id(), name));
                }
            }
        }
    }
    if let Some((file, scenario, node, name)) = first_over {
        problem(
            file,
            scenario,
            Some(node),
            format!(
                "field {name:?} is field number {} across all scenarios; at most {MAX_FIELD_NAMES} (each user holds them all)",
                MAX_FIELD_NAMES + 1
            ),
        );
    }
    for &(scenario, file) in scenarios {
        for (node, text) in super::personal_texts::problems(scenario, &field_names) {
            problem(file, scenario.id.as_str(), Some(node), text);
        }
    }
    let mut claimed: HashMap<String, String> = HashMap::new();
    for &(scenario, file) in scenarios {
        for node in &scenario.nodes {
            if let Node::Branch(branch) = node {
                for (index, arm) in branch.arms.iter().enumerate() {
                    let mut refer = |text: String| {
                        problem(
                            file,
                            scenario.id.as_str(),
                            Some(&branch.id),
                            format!("arm {}: {text}", index + 1),
                        );
                    };
                    for named in arm.when.scenarios_read() {
                        if !by_id.contains_key(named.as_str()) {
                            refer(format!("names scenario {:?}, which does not exist", named.as_str()));
                        }
                    }
                    if let Some(answer) = &arm.when.answer
                        && let Some(other) = answer.scenario.as_ref().filter(|other| *other != &scenario.id)
                    {
                        match by_id.get(other.as_str()) {
                            None => refer(format!(
                                "`answer` names scenario {:?}, which does not exist",
                                other.as_str()
                            )),
                            Some(target) => match target.nodes.iter().find(|node| node.id() == &answer.node) {
                                Some(node) if node.is_question() => {
                                    for text in answer_kind_problems(node, answer) {
                                        refer(text);
                                    }
                                }
                                _ => refer(format!(
                                    "`answer` names node {:?} of scenario {:?}, which is not a question there",
                                    answer.node.as_str(),
                                    other.as_str()
                                )),
                            },
                        }
                    }
                }
            }
            match node {
                Node::FlexImage(card) => match by_id.get(card.starts.as_str()) {
                    None => problem(
                        file,
                        scenario.id.as_str(),
                        Some(&card.id),
                        format!(
                            "`starts` names scenario {:?}, which does not exist",
                            card.starts.as_str()
                        ),
                    ),
                    Some(target) if !target.nodes.iter().any(Node::is_question) => problem(
                        file,
                        scenario.id.as_str(),
                        Some(&card.id),
                        format!(
                            "`starts` names scenario {:?}, which asks no question",
                            card.starts.as_str()
                        ),
                    ),
                    // A tap sends the target's chain from its start: the card is an
                    // entry point of that scenario and is refused if it cannot be sent.
                    Some(target) => {
                        let lookup = |id: &NodeId| target.nodes.iter().find(|node| node.id() == id);
                        if let Some(reason) = start_problem(target, lookup) {
                            problem(
                                file,
                                scenario.id.as_str(),
                                Some(&card.id),
                                format!(
                                    "`starts` names scenario {:?}, which cannot be started: {reason}",
                                    card.starts.as_str()
                                ),
                            );
                        }
                    }
                },
                Node::Trigger(trigger) => {
                    let inputs: Vec<String> = match (trigger.on, trigger.keywords.is_empty()) {
                        (TriggerOn::Follow, _) => vec!["the follow event".to_owned()],
                        (TriggerOn::Text, true) => vec!["any text".to_owned()],
                        (TriggerOn::Text, false) => trigger
                            .keywords
                            .iter()
                            .map(|keyword| format!("keyword {:?}", normalize_keyword(keyword)))
                            .collect(),
                    };
                    let here = format!("scenario {:?}, node {:?}", scenario.id.as_str(), trigger.id.as_str());
                    for input in inputs {
                        if let Some(other) = claimed.insert(input.clone(), here.clone()) {
                            problem(
                                file,
                                scenario.id.as_str(),
                                Some(&trigger.id),
                                format!("{input} already starts {other}; each input may start one scenario"),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
    }
    errors
}

fn utf16(text: &str) -> usize {
    Counting::Utf16.count(text)
}

/// A text or date question answers only within the scenario's answer window
/// (from the question, or from its last reminder), so an expiry later than that
/// would leave the question open (no `on_expire` yet) while every answer is
/// already refused.
fn check_expiry_within_window(scenario: &Scenario, node: &Node, timers: &QuestionTimers, report: &mut Report<'_>) {
    let Some(expire) = timers.expire_after else {
        return;
    };
    let window = match scenario.answer_window.as_deref().map(parse_duration) {
        None => DEFAULT_ANSWER_WINDOW,
        Some(Ok(window)) => window,
        // Reported on its own above.
        Some(Err(_)) => return,
    };
    // The last reminder sent before the expiry opens the window again.
    let last_reminder = timers.remind_after.map_or(Duration::ZERO, |every| {
        (1..=timers.max_reminders)
            .map(|count| every.saturating_mul(count))
            .filter(|at| *at < expire)
            .max()
            .unwrap_or(Duration::ZERO)
    });
    let answerable = last_reminder.saturating_add(window);
    if expire > answerable {
        let after = if last_reminder.is_zero() {
            String::new()
        } else {
            format!(
                " after the last reminder ({} in)",
                humantime::format_duration(last_reminder)
            )
        };
        report.node_problem(
            node.id(),
            format!(
                "expire_after of {} is longer than the answer_window of {}{after}: \
                 an answer typed after the window is refused while the question has not expired; \
                 shorten expire_after or set a longer answer_window",
                humantime::format_duration(expire),
                humantime::format_duration(window)
            ),
        );
    }
}
