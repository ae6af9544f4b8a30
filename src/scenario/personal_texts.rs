//! Which texts of a node may hold placeholders, and `check`'s rules for them:
//! operator texts (messages, questions, reminders, invalid, answered and hint
//! texts, end texts, alt texts) may; labels, display texts and titles, whose
//! limits are tiny, may not. A placeholder must be known, a `{field.x}` must
//! name a field some scenario sets, and an `{answer.n}` must name a question of
//! the same scenario that comes before the text.

use super::placeholders::{Key, placeholders};
use super::{Node, Scenario};
use crate::ids::NodeId;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The texts of `node` that are rendered, by key.
fn personal_texts(node: &Node) -> Vec<(&'static str, &str)> {
    let mut texts: Vec<(&'static str, Option<&str>)> = Vec::new();
    match node {
        Node::Message(message) => texts.push(("text", Some(&message.text))),
        Node::Survey(survey) => texts.extend([
            ("text", Some(survey.text.as_str())),
            ("alt_text", survey.alt_text.as_deref()),
            ("answered_text", survey.answered_text.as_deref()),
            ("remind_text", survey.remind_text.as_deref()),
        ]),
        Node::TextQuestion(question) => texts.extend([
            ("text", Some(question.text.as_str())),
            ("invalid_text", question.invalid_text.as_deref()),
            ("answered_text", question.answered_text.as_deref()),
            ("remind_text", question.remind_text.as_deref()),
        ]),
        Node::DateQuestion(question) => texts.extend([
            ("text", Some(question.text.as_str())),
            ("answered_text", question.answered_text.as_deref()),
            ("hint_text", question.hint_text.as_deref()),
            ("remind_text", question.remind_text.as_deref()),
        ]),
        Node::FlexImage(card) => texts.push(("alt_text", Some(&card.alt_text))),
        Node::End(end) => texts.push(("text", end.text.as_deref())),
        Node::Trigger(_) | Node::Wait(_) | Node::Split(_) | Node::Branch(_) => {}
    }
    texts
        .into_iter()
        .filter_map(|(key, text)| text.map(|text| (key, text)))
        .collect()
}

/// The texts of `node` that are sent as written.
fn plain_texts(node: &Node) -> Vec<(String, &str)> {
    let mut texts = Vec::new();
    match node {
        Node::Survey(survey) => {
            texts.extend(survey.title.as_deref().map(|title| ("title".to_owned(), title)));
            for (index, choice) in survey.choices.iter().enumerate() {
                texts.push((format!("choice {} label", index + 1), choice.label.as_str()));
                if let Some(display) = &choice.display_text {
                    texts.push((format!("choice {} display_text", index + 1), display.as_str()));
                }
            }
        }
        Node::DateQuestion(question) => {
            texts.extend(question.label.as_deref().map(|label| ("label".to_owned(), label)));
        }
        _ => {}
    }
    texts
}

/// For each question of `scenario`, the nodes that come after it (reached
/// through its answers' `next`, and on from there).
fn later_nodes(scenario: &Scenario) -> HashMap<&NodeId, HashSet<&NodeId>> {
    let by_id: HashMap<&NodeId, &Node> = scenario.nodes.iter().map(|node| (node.id(), node)).collect();
    let mut later = HashMap::new();
    for question in scenario.nodes.iter().filter(|node| node.is_question()) {
        let mut seen: HashSet<&NodeId> = HashSet::new();
        let mut queue: Vec<&NodeId> = super::validate::entry_targets(question);
        while let Some(id) = queue.pop() {
            if seen.insert(id)
                && let Some(node) = by_id.get(id)
            {
                queue.extend(super::validate::entry_targets(node));
            }
        }
        later.insert(question.id(), seen);
    }
    later
}

/// The nodes whose answers `scenario`'s texts name (`{answer.n}`).
pub(super) fn answer_nodes(scenario: &Scenario) -> Vec<NodeId> {
    let mut nodes = BTreeSet::new();
    for node in &scenario.nodes {
        for (_, text) in personal_texts(node) {
            for placeholder in placeholders(text).unwrap_or_default() {
                if let Key::Answer(asked) = placeholder.key {
                    nodes.insert(asked);
                }
            }
        }
    }
    nodes.into_iter().filter_map(|node| NodeId::parse(node).ok()).collect()
}

/// What is wrong with the placeholders of `scenario`'s texts, by node.
/// `fields` are the field names any scenario sets.
pub(super) fn problems<'a>(scenario: &'a Scenario, fields: &BTreeSet<&str>) -> Vec<(&'a NodeId, String)> {
    let later = later_nodes(scenario);
    let mut problems = Vec::new();
    for node in &scenario.nodes {
        for (key, text) in plain_texts(node) {
            if placeholders(text).map_or(text.contains('{'), |found| !found.is_empty()) {
                problems.push((
                    node.id(),
                    format!("{key}: placeholders are not rendered in labels, display texts or titles"),
                ));
            }
        }
        for (key, text) in personal_texts(node) {
            let found = match placeholders(text) {
                Ok(found) => found,
                Err(error) => {
                    problems.push((node.id(), format!("{key}: {error}")));
                    continue;
                }
            };
            // LINE refuses an empty text, and with it the whole call.
            if !found.is_empty() && super::placeholders::render(text, |_| None).trim().is_empty() {
                problems.push((
                    node.id(),
                    format!("{key}: renders empty when its values are missing; give a placeholder a fallback ({{name|お客さま}})"),
                ));
            }
            for placeholder in found {
                match &placeholder.key {
                    Key::Name => {}
                    Key::Field(name) if !fields.contains(name.as_str()) => problems.push((
                        node.id(),
                        format!("{key}: {{field.{name}}} names a field no scenario sets (set, or a question's field)"),
                    )),
                    Key::Field(_) => {}
                    Key::Answer(asked) => {
                        // A question's `answered_text` goes to a user who answered it.
                        let own_answer = key == "answered_text" && node.id().as_str() == asked;
                        let before = own_answer
                            || later
                                .iter()
                                .find(|(question, _)| question.as_str() == asked)
                                .is_some_and(|(_, after)| after.contains(node.id()));
                        if !before {
                            problems.push((
                                node.id(),
                                format!(
                                    "{key}: {{answer.{asked}}} must name a question of this scenario that comes before this node"
                                ),
                            ));
                        }
                    }
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(nodes: &str) -> Scenario {
        toml::from_str(&format!("id = \"s\"\nversion = 1\n{nodes}")).expect("a scenario")
    }

    const RATING: &str = r#"
[[nodes]]
id = "rating"
kind = "survey"
text = "{name|お客さま}、いかがでしたか"
choices = [{ label = "良い", value = "good", next = "thanks", set = { plan = "gold" } }]
remind_text = "前回: {answer.rating}"
answered_text = "{answer.rating}でご回答済みです"

[[nodes]]
id = "thanks"
kind = "message"
text = "{answer.rating}、{field.plan}、{{literal}}"
"#;

    #[test]
    fn known_placeholders_before_their_text_pass() {
        let scenario = scenario(RATING);
        let fields = BTreeSet::from(["plan"]);
        let found: Vec<(String, String)> = problems(&scenario, &fields)
            .into_iter()
            .map(|(node, problem)| (node.to_string(), problem))
            .collect();
        // The reminder of `rating` is sent before its answer: it cannot name it.
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "rating");
        assert!(
            found[0].1.starts_with("remind_text: {answer.rating} must name"),
            "{found:?}"
        );
    }

    #[test]
    fn unknown_fields_placeholders_and_labels_are_refused() {
        let cases = [
            (r#"text = "{nickname}""#, "text: unknown placeholder {nickname}"),
            (r#"text = "{field.shoe_size}""#, "names a field no scenario sets"),
            (r#"text = "{name""#, "is never closed"),
            (r#"text = "a }""#, "closes nothing"),
            (r#"text = "{answer.nowhere}""#, "must name a question of this scenario"),
            (r#"text = " {name} ""#, "renders empty when its values are missing"),
        ];
        for (text, expected) in cases {
            let scenario = scenario(&format!("[[nodes]]\nid = \"m\"\nkind = \"message\"\n{text}\n"));
            let found = problems(&scenario, &BTreeSet::new());
            assert!(
                found.iter().any(|(_, problem)| problem.contains(expected)),
                "{text}: {found:?}"
            );
        }
        let label = scenario(
            r#"
[[nodes]]
id = "q"
kind = "survey"
text = "Q"
choices = [{ label = "{name}", value = "a" }]
"#,
        );
        let found = problems(&label, &BTreeSet::new());
        assert_eq!(found.len(), 1);
        assert!(
            found[0].1.contains("choice 1 label: placeholders are not rendered"),
            "{found:?}"
        );
    }
}
