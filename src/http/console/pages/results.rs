//! What the answers say: the scenarios' funnels, the answers' rows, the
//! cross-tab and the friend-add sources.

use super::{Nav, page, rate, segment, time};
use crate::engine::crosstab::CrossTab;
use crate::engine::results::NodeResults;
use crate::reports::export::{HEADER, RowsPage};
use crate::reports::results::ScenarioResults;
use crate::values::OperatorRole;
use maud::{Markup, html};

/// Width of the funnel chart's drawing, in SVG units.
const CHART_WIDTH: u64 = 320;
const ROW_HEIGHT: u64 = 44;

/// A bar's length for `value` on a scale whose longest bar is `max`.
fn bar_length(value: u64, max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    let length = (u128::from(value.min(max)) * u128::from(CHART_WIDTH - 120)) / u128::from(max);
    u64::try_from(length).unwrap_or(0)
}

/// The funnel of a scenario's question nodes: per node, what was sent (light)
/// and what was answered (dark), on one scale.
pub(crate) fn funnel_chart(nodes: &[NodeResults]) -> Markup {
    let max = nodes.iter().map(|node| node.sent.max(node.answered)).max().unwrap_or(0);
    let height = ROW_HEIGHT * nodes.len().max(1) as u64;
    html! {
        svg class="funnel" viewBox={ "0 0 " (CHART_WIDTH) " " (height) } role="img" aria-label="funnel" {
            @for (row, node) in nodes.iter().enumerate() {
                @let y = ROW_HEIGHT * row as u64;
                text x="0" y=(y + 12) font-size="11" { (node.node_id) }
                rect x="0" y=(y + 16) width=(bar_length(node.sent, max)) height="10" fill="#b9ecd0" {}
                rect x="0" y=(y + 28) width=(bar_length(node.answered, max)) height="10" fill="#06c755" {}
                text x=(bar_length(node.sent, max) + 6) y=(y + 25) font-size="10" { "sent " (node.sent) }
                text x=(bar_length(node.answered, max) + 6) y=(y + 37) font-size="10" { "answered " (node.answered) }
            }
        }
    }
}

/// `days`: the range shown (`None`: all time); the others are links.
pub(crate) fn scenarios(nav: &Nav, all: &[ScenarioResults], days: Option<u32>) -> Markup {
    page(
        "Scenarios",
        Some(nav),
        html! {
            p id="range" {
                "Counted over: "
                @for (index, range) in crate::http::console::HOME_RANGES.iter().enumerate() {
                    @if index > 0 { " · " }
                    @let label = range.map_or_else(|| "all time".to_owned(), |days| format!("{days} days"));
                    @let value = range.map_or_else(|| "all".to_owned(), |days| days.to_string());
                    @if *range == days {
                        strong data-range=(value) { (label) }
                    } @else {
                        a href={ "/console?days=" (value) } data-range=(value) { (label) }
                    }
                }
            }
            @if all.is_empty() { section { p { "No scenarios are loaded." } } }
            @for scenario in all {
                section data-scenario=(scenario.scenario_id) {
                    h2 {
                        a href={ "/console/scenarios/" (segment(&scenario.scenario_id)) } {
                            (scenario.title.as_deref().unwrap_or(&scenario.scenario_id))
                        }
                        " " span class="muted" { (scenario.scenario_id) " v" (scenario.version) " · " (scenario.time_zone) }
                    }
                    p {
                        a href={ "/console/scenarios/" (segment(&scenario.scenario_id)) "/crosstab" } { "Cross-tab (クロス集計)" }
                        " · "
                        a class="graph-link" href={ "/console/scenarios/" (segment(&scenario.scenario_id)) "/graph" } { "Graph (シナリオ図)" }
                    }
                    @for split in &scenario.variants {
                        p class="variants" data-split=(split.node) {
                            "A/B split " strong { (split.node) } ": "
                            @for (index, arm) in split.arms.iter().enumerate() {
                                @if index > 0 { " · " }
                                span data-arm=(arm.label) { (arm.label) " " (arm.runs) " runs" }
                            }
                        }
                    }
                    @if scenario.nodes.is_empty() {
                        p class="muted" { "No questions." }
                    } @else {
                        (funnel_chart(&scenario.nodes))
                        div class="scroll" {
                            table {
                                tr { th { "Question" } th class="num" { "Sent" } th class="num" { "Answered" } th class="num" { "Rate" } }
                                @for node in &scenario.nodes {
                                    tr data-node=(node.node_id) {
                                        td { (node.text) br; span class="muted" { (node.node_id) } }
                                        td class="num" data-metric="sent" { (node.sent) }
                                        td class="num" data-metric="answered" { (node.answered) }
                                        td class="num" { (rate(node.response_rate)) }
                                    }
                                    @for (label, arm) in &node.by_variant {
                                        tr class="muted" data-node=(node.node_id) data-variant=(label) {
                                            td { "arm " (label) }
                                            td class="num" data-metric="sent" { (arm.sent) }
                                            td class="num" data-metric="answered" { (arm.answered) }
                                            td class="num" { (rate(arm.response_rate)) }
                                        }
                                    }
                                    @for choice in &node.choices {
                                        tr class="muted" {
                                            td {
                                                "· " (choice.label.as_deref().unwrap_or(&choice.value))
                                                @for (label, count) in &choice.by_variant {
                                                    " " span class="arm" data-variant=(label) { (label) ": " (count) }
                                                }
                                            }
                                            td {}
                                            td class="num" data-choice=(choice.value) { (choice.count) }
                                            td class="num" { (rate(choice.share)) }
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

pub(crate) fn answers(nav: &Nav, scenario: &str, page_of: &RowsPage, after: Option<&str>) -> Markup {
    page(
        &format!("Answers: {scenario}"),
        Some(nav),
        html! {
            section {
                p {
                    @if nav.may(OperatorRole::Owner) {
                        a id="csv" href={ "/console/scenarios/" (segment(scenario)) "/answers.csv" } download { "Download CSV (all answers)" }
                        " · "
                    }
                    a id="crosstab" href={ "/console/scenarios/" (segment(scenario)) "/crosstab" } { "Cross-tab (クロス集計)" }
                    " · "
                    a id="graph" href={ "/console/scenarios/" (segment(scenario)) "/graph" } { "Graph (シナリオ図)" }
                }
                @if page_of.rows.is_empty() {
                    p { "No answers" @if after.is_some() { " after this point" } "." }
                } @else {
                    div class="scroll" {
                        table id="answers" class="rows" {
                            tr { @for name in HEADER { th { (name) } } }
                            @for row in &page_of.rows {
                                tr { @for field in row { td { (field) } } }
                            }
                        }
                    }
                }
                p {
                    @if after.is_some() { a href={ "/console/scenarios/" (segment(scenario)) } { "First page" } " " }
                    @if let Some(next) = &page_of.next {
                        a id="next" href={ "/console/scenarios/" (segment(scenario)) "?after=" (segment(next)) } { "Next page" }
                    }
                }
            }
        },
    )
}

/// What a cross-tab page was asked for, shown back in its form.
pub(crate) struct CrossTabAsked<'a> {
    pub(crate) scenario: &'a str,
    pub(crate) by: &'a str,
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
}

/// A scenario's answers by source, arm, tag or field: a form to choose, then
/// a table per question (a row per choice, a column per value, each cell the
/// count and its share of the column's answers); or what was wrong with the
/// form's values.
pub(crate) fn cross_tab(nav: &Nav, asked: &CrossTabAsked<'_>, tab: Result<&CrossTab, &str>) -> Markup {
    page(
        &format!("Cross-tab: {}", asked.scenario),
        Some(nav),
        html! {
            section {
                form method="get" id="by" {
                    label { "By (集計軸) "
                        input name="by" value=(asked.by) list="dimensions" size="24";
                    }
                    datalist id="dimensions" {
                        option value="source" { "source: first source (流入経路)" }
                        option value="variant" { "variant: A/B arm" }
                        option value="tag:" { "tag:{tag}" }
                        option value="field:" { "field:{name}" }
                    }
                    " "
                    label { "From " input name="from" type="date" value=(asked.from); }
                    " "
                    label { "To " input name="to" type="date" value=(asked.to); }
                    " "
                    button type="submit" class="primary" { "Show" }
                }
                p class="muted" {
                    "Counted from every answer: source, tags and fields as each user has them now; the arm as the question was asked. "
                    a href={ "/console/scenarios/" (segment(asked.scenario)) } { "Answers" }
                }
            }
            @match tab {
                Err(problem) => section { p class="flash bad" id="problem" { (problem) } },
                Ok(tab) => {
                    @if tab.capped {
                        section { p class="muted" { "More values than columns: the rest are counted under その他." } }
                    }
                    @if tab.nodes.is_empty() { section { p { "No questions." } } }
                    @for node in &tab.nodes {
                        section data-node=(node.node_id) {
                            h2 { (node.text) " " span class="muted" { (node.node_id) } }
                            div class="scroll" {
                                table class="crosstab" {
                                    tr {
                                        th {}
                                        @for column in &tab.columns { th class="num" data-column=(column.key) { (column.label) } }
                                        th class="num" { "Total" }
                                    }
                                    tr data-row="answered" {
                                        td { "Answered" }
                                        @for column in &tab.columns {
                                            td class="num" data-column=(column.key) { (node.answered.get(&column.key).copied().unwrap_or(0)) }
                                        }
                                        td class="num" { (node.total) }
                                    }
                                    @for choice in &node.choices {
                                        tr data-choice=(choice.value) {
                                            td { (choice.label.as_deref().unwrap_or(&choice.value)) }
                                            @for column in &tab.columns {
                                                td class="num" data-column=(column.key) {
                                                    (choice.counts.get(&column.key).copied().unwrap_or(0))
                                                    @if let Some(share) = choice.shares.get(&column.key) {
                                                        br; span class="muted" { (rate(Some(*share))) }
                                                    }
                                                }
                                            }
                                            td class="num" {
                                                (choice.total)
                                                br; span class="muted" { (rate((node.total > 0).then(|| choice.total as f64 / node.total as f64))) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                },
            }
        },
    )
}

/// One source on the console's sources page: its counts and latest users.
pub(crate) struct SourceCard<'a> {
    pub(crate) row: &'a crate::reports::sources::SourceRow,
    pub(crate) users: &'a [crate::store::SourceUser],
}

/// Friend-add sources: each link with its QR code, its counts over all days
/// and its latest users (links to their pages).
pub(crate) fn sources(nav: &Nav, cards: Option<&[SourceCard<'_>]>) -> Markup {
    page(
        "Sources",
        Some(nav),
        html! {
            @match cards {
                None => section { p { "Source links are off: set LINE_LOGIN_CHANNEL_ID, LINE_LOGIN_CHANNEL_SECRET, PUBLIC_BASE_URL and FRIEND_URL (see the README)." } },
                Some([]) => section { p { "No sources in SOURCES_FILE." } },
                Some(cards) => @for card in cards {
                    section class="source" id={ "source-" (card.row.id) } {
                        h2 { (card.row.label) " " span class="muted" { "(" (card.row.id) ")" } }
                        p { "Link: " code class="link" { (card.row.link) } }
                        img class="qr" width="160" height="160" alt={ "QR code of " (card.row.link) }
                            src={ "/console/sources/" (segment(&card.row.id)) "/qr.png" };
                        div class="scroll" {
                            table {
                                tr { th class="num" { "Logins" } th class="num" { "New friends" } th class="num" { "Unfollows" } }
                                tr {
                                    td class="num logins" { (card.row.counts.logins) }
                                    td class="num new-friends" { (card.row.counts.new_friends) }
                                    td class="num unfollows" { (card.row.counts.unfollows) }
                                }
                            }
                        }
                        @if !card.users.is_empty() {
                            h2 { "Latest users" }
                            div class="scroll" {
                                table class="users" {
                                    tr { th { "User" } th { "Standing" } th { "Recorded" } }
                                    @for user in card.users {
                                        tr {
                                            td { a href={ "/console/users?id=" (segment(&user.line_user_id)) } { (user.line_user_id) } }
                                            td { (standing(user.standing)) }
                                            td { (time(user.recorded_at_ms)) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                },
            }
        },
    )
}

fn standing(standing: crate::values::SourceStanding) -> &'static str {
    match standing {
        crate::values::SourceStanding::Waiting => "not a friend yet",
        crate::values::SourceStanding::Friend => "new friend",
        crate::values::SourceStanding::WasFriend => "already a friend",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stay_within_the_chart_and_keep_their_order() {
        // (value, max, expected length)
        let cases = [
            (0, 0, 0),
            (5, 0, 0),
            (0, 10, 0),
            (10, 10, 200),
            (5, 10, 100),
            (1, 3, 66),
            (u64::MAX, u64::MAX, 200),
            (20, 10, 200),
        ];
        for (value, max, expected) in cases {
            assert_eq!(bar_length(value, max), expected, "{value} of {max}");
        }
    }

    #[test]
    fn japanese_text_and_markup_in_values_are_escaped_not_interpreted() {
        let nodes = vec![NodeResults {
            node_id: "<script>評価</script>".to_owned(),
            kind: "survey",
            text: "満足度は？".to_owned(),
            sent: 3,
            answered: 2,
            response_rate: Some(2.0 / 3.0),
            by_variant: Default::default(),
            choices: Vec::new(),
            latest: None,
        }];
        let svg = funnel_chart(&nodes).into_string();
        assert!(svg.contains("&lt;script&gt;評価&lt;/script&gt;"), "{svg}");
        assert!(!svg.contains("<script>"));
    }
}
