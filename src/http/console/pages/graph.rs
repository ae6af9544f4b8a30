//! A scenario drawn as a graph: SVG boxes in rows, labelled arrows, no script.

use super::{Nav, page, segment};
use crate::values::ConsoleLang;
use maud::{Markup, html};

/// A node's kind in the operators' words (the scenario file's keyword in
/// English, and after the word in Japanese).
fn kind_name(lang: ConsoleLang, kind: &str) -> String {
    let word = match kind {
        "trigger" => "きっかけ",
        "message" => "メッセージ",
        "survey" => "選択式の質問",
        "text_question" => "記述式の質問",
        "date_question" => "日付の質問",
        "flex_image" => "画像カード",
        "wait" => "待ち時間",
        "end" => "終わり",
        "split" => "A/Bテスト",
        "branch" => "分岐",
        _ => return kind.to_owned(),
    };
    match lang {
        ConsoleLang::Ja => format!("{word}（{kind}）"),
        ConsoleLang::En => kind.to_owned(),
    }
}

/// Box and gap sizes of the scenario graph, in SVG units.
const BOX_WIDTH: usize = 190;
const BOX_HEIGHT: usize = 58;
const GAP_X: usize = 40;
const GAP_Y: usize = 70;

fn box_left(slot: usize) -> usize {
    10 + slot * (BOX_WIDTH + GAP_X)
}

fn box_top(layer: usize) -> usize {
    10 + layer * (BOX_HEIGHT + GAP_Y)
}

/// The path of an arrow: down to the next rows straight; back up, or along
/// its own row, around the right of the boxes.
fn arrow_path(
    from: &crate::reports::scenario_graph::GraphNode,
    to: &crate::reports::scenario_graph::GraphNode,
) -> (String, usize, usize) {
    let (from_x, to_x) = (box_left(from.slot) + BOX_WIDTH / 2, box_left(to.slot) + BOX_WIDTH / 2);
    if to.layer > from.layer {
        let (y1, y2) = (box_top(from.layer) + BOX_HEIGHT, box_top(to.layer));
        (
            format!(
                "M{from_x},{y1} C{from_x},{} {to_x},{} {to_x},{y2}",
                y1 + GAP_Y / 2,
                y2.saturating_sub(GAP_Y / 2)
            ),
            (from_x + to_x) / 2,
            (y1 + y2) / 2,
        )
    } else {
        let (right1, right2) = (box_left(from.slot) + BOX_WIDTH, box_left(to.slot) + BOX_WIDTH);
        let (y1, y2) = (box_top(from.layer) + BOX_HEIGHT / 2, box_top(to.layer) + BOX_HEIGHT / 2);
        let bulge = right1.max(right2) + GAP_X / 2 + 6;
        (
            format!("M{right1},{y1} C{bulge},{y1} {bulge},{y2} {right2},{y2}"),
            bulge,
            (y1 + y2) / 2,
        )
    }
}

/// `/console/scenarios/{id}/graph`: the scenario drawn as boxes and arrows
/// (SVG, no script), the same as a list below, and `check`'s problems.
pub(crate) fn scenario_graph(nav: &Nav, view: &crate::reports::scenario_graph::ScenarioGraph) -> Markup {
    let graph = &view.graph;
    let width = box_left(graph.widest.max(1)) + 20;
    let height = box_top(graph.layers.max(1)) + 10;
    page(
        nav.lang,
        &match nav.lang {
            ConsoleLang::Ja => format!("シナリオ: {}", view.id),
            ConsoleLang::En => format!("Scenario: {}", view.id),
        },
        Some(nav),
        html! {
            section {
                p {
                    @if let Some(title) = &view.title { strong { (title) } " · " }
                    (nav.t("バージョン ", "version ")) span id="scenario-version" { (view.version) }
                    " · " code style="word-break:break-all" { (view.file) }
                    br; span class="muted" title=(view.content_hash) { "SHA-256 " (view.content_hash.get(..16).unwrap_or(&view.content_hash)) "…" }
                }
                @if view.file_changed {
                    p class="flash bad" id="file-changed" {
                        (nav.t(
                            "ディスク上のファイルは起動時に読み込んだものから変わっています。再起動するまでは、ここに表示しているバージョンで動きます。",
                            "The file on disk is not the one loaded at start-up: the service runs the version shown here until it restarts.",
                        ))
                    }
                }
                @if view.problems.is_empty() {
                    p class="flash ok" id="check-ok" {
                        (nav.t(
                            "line-survey check で、今のシナリオファイルに問題は見つかりません。",
                            "line-survey check finds no problems in the scenario files now.",
                        ))
                    }
                } @else {
                    div class="flash bad" id="check-problems" {
                        p {
                            (nav.t(
                                "line-survey check で、今のファイルに問題が見つかりました（このままでは再起動のときに読み込めません）:",
                                "line-survey check finds problems in the files now (a restart would refuse them):",
                            ))
                        }
                        ul { @for problem in &view.problems { li { (problem) } } }
                    }
                }
                p {
                    a href={ "/console/scenarios/" (segment(&view.id)) } { (nav.t("回答一覧", "Answers")) }
                    " · "
                    a href={ "/console/scenarios/" (segment(&view.id)) "/crosstab" } { (nav.t("クロス集計", "Cross-tab")) }
                }
            }
            section {
                h2 { (nav.t("シナリオ図", "Graph")) }
                div class="scroll" {
                    svg id="scenario-graph" xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) viewBox={ "0 0 " (width) " " (height) } style="max-width:none" role="img" aria-label=(match nav.lang {
                        ConsoleLang::Ja => format!("{} のノードと、そのあいだの矢印", view.id),
                        ConsoleLang::En => format!("The nodes of {} and the arrows between them", view.id),
                    }) {
                        defs {
                            marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                                path d="M0,0 L10,5 L0,10 z" fill="#555" {}
                            }
                        }
                        @for edge in &graph.edges {
                            @if let (Some(from), Some(to)) = (graph.nodes.get(edge.from), graph.nodes.get(edge.to)) {
                                @let (path, label_x, label_y) = arrow_path(from, to);
                                path class="edge" d=(path) fill="none" stroke="#555" stroke-width="1.5" marker-end="url(#arrow)" {}
                                @if !edge.label.is_empty() {
                                    text x=(label_x) y=(label_y) font-size="12" text-anchor="middle" fill="#333" stroke="#fff" stroke-width="4" paint-order="stroke" { (edge.label) }
                                }
                            }
                        }
                        @for node in &graph.nodes {
                            g class="node" data-node=(node.id) {
                                rect x=(box_left(node.slot)) y=(box_top(node.layer)) width=(BOX_WIDTH) height=(BOX_HEIGHT) rx="8" fill=(if node.kind == "trigger" { "#e6f8ee" } else { "#fff" }) stroke="#06c755" stroke-width="1.5" {}
                                text x=(box_left(node.slot) + 10) y=(box_top(node.layer) + 20) font-size="12" fill="#555" { (node.kind) " · " (node.id) }
                                text x=(box_left(node.slot) + 10) y=(box_top(node.layer) + 42) font-size="12" fill="#1b1b1b" { (node.text) }
                            }
                        }
                    }
                }
            }
            section {
                h2 { (nav.t("ノード一覧", "Nodes")) }
                div class="scroll" {
                    table id="scenario-nodes" {
                        tr {
                            th { (nav.t("ノード", "Node")) }
                            th { (nav.t("種類", "Kind")) }
                            th { (nav.t("送る内容・動作", "Says or does")) }
                            th { (nav.t("つながる先", "Leads to")) }
                        }
                        @for (i, node) in graph.nodes.iter().enumerate() {
                            tr {
                                td { code { (node.id) } }
                                td { (kind_name(nav.lang, node.kind)) }
                                td { (node.text) }
                                td {
                                    @for edge in graph.edges.iter().filter(|edge| edge.from == i) {
                                        @if let Some(to) = graph.nodes.get(edge.to) {
                                            code { (to.id) }
                                            @if !edge.label.is_empty() { " (" (edge.label) ")" }
                                            br;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}
