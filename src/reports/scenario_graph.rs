//! A loaded scenario as a graph for the console (`/console/scenarios/{id}/graph`):
//! its nodes in layers from where users enter, the arrows between them with
//! what leads along each (a choice, an arm, a wait), and the problems
//! `line-survey check` finds in the scenario files as they are on disk now.
//! Reads only; the layout is pure and drawn by the page as SVG.

use crate::engine::Engine;
use crate::ids::{NodeId, ScenarioId};
use crate::scenario::{Node, Scenario, TriggerOn};
use crate::values::ConsoleLang;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;

/// Width of a node's text shown in its box, and of an arrow's label, in
/// half-width characters (a Japanese character counts two): what fits the
/// box the page draws.
const TEXT_WIDTH: usize = 24;
const LABEL_WIDTH: usize = 18;

/// One box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GraphNode {
    pub(crate) id: String,
    /// The node's kind as the scenario file names it (`survey`, `wait`, ...).
    pub(crate) kind: &'static str,
    /// The start of what it says or does, shortened.
    pub(crate) text: String,
    /// Rows from the entry points (0: triggers and the start).
    pub(crate) layer: usize,
    /// Its place in its row.
    pub(crate) slot: usize,
}

/// One arrow, between nodes by their index in [`Graph::nodes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GraphEdge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) label: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Graph {
    pub(crate) nodes: Vec<GraphNode>,
    pub(crate) edges: Vec<GraphEdge>,
    /// How many rows, and the most boxes in one row.
    pub(crate) layers: usize,
    pub(crate) widest: usize,
}

/// How wide a character shows: two for the wide scripts (kana, kanji,
/// hangul, full-width forms), one for the rest.
fn width_of(c: char) -> usize {
    if u32::from(c) >= 0x1100 { 2 } else { 1 }
}

/// `text` on one line, cut with `…` to at most `limit` half-widths.
fn shorten(text: &str, limit: usize) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let flat = flat.trim();
    if flat.chars().map(width_of).sum::<usize>() <= limit {
        return flat.to_owned();
    }
    let mut short = String::new();
    let mut used = 0;
    for c in flat.chars() {
        // Room is kept for the `…` (one half-width).
        if used + width_of(c) + 1 > limit {
            break;
        }
        used += width_of(c);
        short.push(c);
    }
    short.push('…');
    short
}

/// A node's kind and the text its box shows.
fn describe(node: &Node, lang: ConsoleLang) -> (&'static str, String) {
    let ja = lang == ConsoleLang::Ja;
    match node {
        Node::Trigger(trigger) => match trigger.on {
            TriggerOn::Follow => ("trigger", lang.t("友だち追加", "friend added").to_owned()),
            TriggerOn::Text if trigger.keywords.is_empty() => {
                ("trigger", lang.t("どんなテキストでも", "any text").to_owned())
            }
            TriggerOn::Text if ja => ("trigger", format!("テキスト: {}", trigger.keywords.join(", "))),
            TriggerOn::Text => ("trigger", format!("text: {}", trigger.keywords.join(", "))),
        },
        Node::Message(message) => ("message", message.text.clone()),
        Node::Survey(survey) => ("survey", survey.text.clone()),
        Node::TextQuestion(question) => ("text_question", question.text.clone()),
        Node::DateQuestion(question) => ("date_question", question.text.clone()),
        Node::FlexImage(image) if ja => ("flex_image", format!("{} を開始", image.starts)),
        Node::FlexImage(image) => ("flex_image", format!("starts {}", image.starts)),
        Node::Wait(wait) => (
            "wait",
            match (&wait.after, &wait.at, ja) {
                (Some(after), _, true) => format!("{after} 後"),
                (Some(after), _, false) => format!("after {after}"),
                (None, Some(at), _) => match (wait.after_days, ja) {
                    (Some(days), true) if days > 0 => format!("{days}日後の {at}"),
                    (Some(days), false) if days > 0 => format!("at {at}, {days} day(s) later"),
                    (_, true) => format!("{at} に"),
                    (_, false) => format!("at {at}"),
                },
                (None, None, _) => String::new(),
            },
        ),
        Node::End(end) => ("end", end.text.clone().unwrap_or_default()),
        Node::Split(split) if ja => ("split", format!("{}パターン", split.arms.len())),
        Node::Split(split) => ("split", format!("{} arms", split.arms.len())),
        Node::Branch(branch) if ja => ("branch", format!("条件 {}つ", branch.arms.len())),
        Node::Branch(branch) => ("branch", format!("{} conditions", branch.arms.len())),
    }
}

/// Where a node leads, with what leads there.
fn arrows(node: &Node, lang: ConsoleLang) -> Vec<(&NodeId, String)> {
    match node {
        Node::Trigger(trigger) => vec![(&trigger.next, String::new())],
        Node::Message(message) => message.next.iter().map(|next| (next, String::new())).collect(),
        Node::Survey(survey) => survey
            .choices
            .iter()
            .filter_map(|choice| choice.next.as_ref().map(|next| (next, choice.label.clone())))
            .collect(),
        Node::TextQuestion(question) => question
            .next
            .iter()
            .map(|next| (next, lang.t("回答", "answer").to_owned()))
            .chain(
                question
                    .on_give_up
                    .iter()
                    .map(|next| (next, lang.t("あきらめた", "gave up").to_owned())),
            )
            .collect(),
        Node::DateQuestion(question) => question
            .next
            .iter()
            .map(|next| (next, lang.t("日付", "date").to_owned()))
            .collect(),
        Node::Wait(wait) => vec![(&wait.next, lang.t("待った後", "later").to_owned())],
        Node::Split(split) => split
            .arms
            .iter()
            .map(|arm| (&arm.next, format!("{} ({})", arm.label, arm.weight)))
            .collect(),
        Node::Branch(branch) => branch
            .arms
            .iter()
            .enumerate()
            .map(|(i, arm)| {
                let label = match lang {
                    ConsoleLang::Ja => format!("条件{}", i + 1),
                    ConsoleLang::En => format!("if {}", i + 1),
                };
                (&arm.next, label)
            })
            .chain(std::iter::once((
                &branch.otherwise,
                lang.t("それ以外", "else").to_owned(),
            )))
            .collect(),
        Node::FlexImage(_) | Node::End(_) => Vec::new(),
    }
}

/// Gives each node not yet in a row the row of the fewest arrows from
/// `seeds` (row 0), breadth first.
fn place_rows(layer: &mut [Option<usize>], edges: &[GraphEdge], seeds: Vec<usize>) {
    let mut queue = VecDeque::new();
    for seed in seeds {
        if layer[seed].is_none() {
            layer[seed] = Some(0);
            queue.push_back(seed);
        }
    }
    while let Some(from) = queue.pop_front() {
        let next_layer = layer[from].unwrap_or(0) + 1;
        for edge in edges.iter().filter(|edge| edge.from == from) {
            if layer[edge.to].is_none() {
                layer[edge.to] = Some(next_layer);
                queue.push_back(edge.to);
            }
        }
    }
}

/// The scenario's graph: rows by the fewest arrows from an entry point (a
/// trigger or a node nothing leads to, else the start), each row in file
/// order.
pub(crate) fn graph_of(scenario: &Scenario, start: &NodeId, lang: ConsoleLang) -> Graph {
    let index: HashMap<&NodeId, usize> = scenario
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.id(), i))
        .collect();
    let mut edges = Vec::new();
    let mut incoming = vec![0usize; scenario.nodes.len()];
    for (from, node) in scenario.nodes.iter().enumerate() {
        for (next, label) in arrows(node, lang) {
            if let Some(&to) = index.get(next) {
                incoming[to] += 1;
                edges.push(GraphEdge {
                    from,
                    to,
                    label: shorten(&label, LABEL_WIDTH),
                });
            }
        }
    }
    let mut layer: Vec<Option<usize>> = vec![None; scenario.nodes.len()];
    // Rows from the triggers and what nothing leads to; then from the start
    // (where manual sends and campaigns enter) if those never reach it.
    let roots: Vec<usize> = scenario
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, node)| matches!(node, Node::Trigger(_)) || incoming[*i] == 0)
        .map(|(i, _)| i)
        .collect();
    place_rows(&mut layer, &edges, roots);
    if let Some(&first) = index.get(start)
        && layer[first].is_none()
    {
        place_rows(&mut layer, &edges, vec![first]);
    }
    // Only a cycle nothing enters is left: it goes below the rest.
    let deepest = layer.iter().flatten().max().map_or(0, |deepest| deepest + 1);
    let mut per_layer: HashMap<usize, usize> = HashMap::new();
    let nodes: Vec<GraphNode> = scenario
        .nodes
        .iter()
        .zip(&layer)
        .map(|(node, layer)| {
            let layer = layer.unwrap_or(deepest);
            let slot = per_layer.entry(layer).or_default();
            let (kind, text) = describe(node, lang);
            let placed = GraphNode {
                id: node.id().to_string(),
                kind,
                text: shorten(&text, TEXT_WIDTH),
                layer,
                slot: *slot,
            };
            *slot += 1;
            placed
        })
        .collect();
    Graph {
        layers: nodes.iter().map(|node| node.layer + 1).max().unwrap_or(0),
        widest: per_layer.values().copied().max().unwrap_or(0),
        nodes,
        edges,
    }
}

/// A scenario's page: what is loaded, its graph, and what `check` says of
/// the files now.
#[derive(Debug)]
pub(crate) struct ScenarioGraph {
    pub(crate) id: String,
    pub(crate) title: Option<String>,
    pub(crate) version: u32,
    pub(crate) file: String,
    pub(crate) content_hash: String,
    pub(crate) graph: Graph,
    /// Problems `line-survey check` lists for this scenario's file now, or
    /// for the folder as a whole (a file that does not parse names no
    /// scenario).
    pub(crate) problems: Vec<String>,
    /// The file on disk is not what was loaded at start-up (edited since, or
    /// gone): a restart loads what is there, if `check` passes.
    pub(crate) file_changed: bool,
}

/// The scenarios the service loaded, and the folder they came from.
#[derive(Clone)]
pub(crate) struct ScenarioGraphs {
    engine: Engine,
    dir: PathBuf,
}

impl ScenarioGraphs {
    pub(crate) fn new(engine: Engine, dir: PathBuf) -> Self {
        Self { engine, dir }
    }

    /// The page of scenario `id`; `None` when no such scenario is loaded.
    pub(crate) async fn of(&self, id: &ScenarioId, lang: ConsoleLang) -> Option<ScenarioGraph> {
        let loaded = self.engine.scenarios().get(id)?;
        let file = loaded.source.clone();
        let dir = self.dir.clone();
        let scenario_id = id.to_string();
        // A few small files, read off the async threads.
        let on_disk = tokio::task::spawn_blocking(move || {
            let now = std::fs::read_to_string(&file).ok();
            let problems = match crate::scenario::load_dir(&dir) {
                Ok(_) => Vec::new(),
                Err(crate::scenario::LoadError::Invalid(errors)) => errors
                    .iter()
                    .filter(|error| {
                        error.scenario.as_deref().is_none_or(|named| named == scenario_id) || error.file == file
                    })
                    .map(ToString::to_string)
                    .collect(),
                Err(other) => vec![other.to_string()],
            };
            (now, problems)
        })
        .await;
        let (now, problems) = on_disk.unwrap_or((None, vec!["the scenario files could not be read".to_owned()]));
        Some(ScenarioGraph {
            id: loaded.scenario.id.to_string(),
            title: loaded.scenario.title.clone(),
            version: loaded.scenario.version,
            file: loaded.source.display().to_string(),
            content_hash: loaded.content_hash.clone(),
            graph: graph_of(&loaded.scenario, &loaded.start, lang),
            problems,
            file_changed: now.as_deref() != Some(loaded.content.as_str()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(text: &str) -> (Scenario, NodeId) {
        let loaded = crate::scenario::load_version(text, PathBuf::from("t.toml")).expect("a valid scenario");
        let start = loaded.start.clone();
        (loaded.scenario, start)
    }

    const BRANCHING: &str = r#"
id = "lunch"
title = "ランチ"

[[nodes]]
kind = "trigger"
id = "hello"
on = "text"
keywords = ["lunch"]
next = "ask"

[[nodes]]
kind = "survey"
id = "ask"
text = "今日のランチはいかがでしたか？\n(one tap)"
choices = [
  { label = "おいしい", value = "good", next = "thanks" },
  { label = "いまいち", value = "bad", next = "wait" },
]

[[nodes]]
kind = "wait"
id = "wait"
after = "1d"
next = "thanks"

[[nodes]]
kind = "end"
id = "thanks"
text = "ありがとうございました。またのご来店をお待ちしております。"
"#;

    #[test]
    fn nodes_sit_in_rows_by_the_fewest_arrows_from_an_entry() {
        let (scenario, start) = scenario(BRANCHING);
        let graph = graph_of(&scenario, &start, ConsoleLang::En);
        let placed: Vec<(&str, &str, usize, usize)> = graph
            .nodes
            .iter()
            .map(|node| (node.id.as_str(), node.kind, node.layer, node.slot))
            .collect();
        assert_eq!(
            placed,
            vec![
                ("hello", "trigger", 0, 0),
                ("ask", "survey", 1, 0),
                ("wait", "wait", 2, 0),
                ("thanks", "end", 2, 1),
            ]
        );
        let arrows: Vec<(usize, usize, &str)> = graph
            .edges
            .iter()
            .map(|edge| (edge.from, edge.to, edge.label.as_str()))
            .collect();
        assert_eq!(
            arrows,
            vec![(0, 1, ""), (1, 3, "おいしい"), (1, 2, "いまいち"), (2, 3, "later")]
        );
        assert_eq!((graph.layers, graph.widest), (3, 2));
        // Texts are flattened and shortened by how wide they show.
        assert_eq!(graph.nodes[1].text, "今日のランチはいかがで…");
        assert_eq!(graph.nodes[3].text, "ありがとうございました…");
    }

    #[test]
    fn a_start_nothing_else_reaches_heads_its_own_rows() {
        let (scenario, start) = scenario(
            r#"
id = "loop"

[[nodes]]
kind = "survey"
id = "again"
text = "もう一度?"
choices = [{ label = "はい", value = "yes", next = "again" }, { label = "いいえ", value = "no" }]
"#,
        );
        let graph = graph_of(&scenario, &start, ConsoleLang::En);
        assert_eq!((graph.nodes[0].layer, graph.layers), (0, 1));
        assert_eq!(
            graph.edges,
            vec![GraphEdge {
                from: 0,
                to: 0,
                label: "はい".into()
            }]
        );
    }

    #[test]
    fn labels_say_what_leads_along_each_arrow() {
        let cases = [
            ("a".repeat(40), format!("{}…", "a".repeat(LABEL_WIDTH - 1))),
            ("a".repeat(LABEL_WIDTH), "a".repeat(LABEL_WIDTH)),
            ("short".to_owned(), "short".to_owned()),
            ("two\nlines".to_owned(), "two lines".to_owned()),
            ("とてもおいしかったです".to_owned(), "とてもおいしかっ…".to_owned()),
            ("おいしい".to_owned(), "おいしい".to_owned()),
            ("ＡＢＣ abc".to_owned(), "ＡＢＣ abc".to_owned()),
            (String::new(), String::new()),
        ];
        for (raw, shown) in cases {
            assert_eq!(shorten(&raw, LABEL_WIDTH), shown, "{raw:?}");
        }
    }
}
