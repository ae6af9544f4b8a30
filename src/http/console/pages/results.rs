//! What the answers say: the scenarios' funnels, the answers' rows, the
//! cross-tab and the friend-add sources.

use super::{Nav, page, rate, segment, time, time_of_text};
use crate::engine::crosstab::CrossTab;
use crate::engine::results::{NodeResults, nps};
use crate::reports::export::{HEADER, RowsPage};
use crate::reports::results::ScenarioResults;
use crate::values::{ConsoleLang, OperatorRole};
use maud::{Markup, html};
use unicode_segmentation::UnicodeSegmentation;

/// Width of the funnel chart's drawing, in SVG units (and its width on a
/// page wide enough: it shrinks to fit a phone's).
const CHART_WIDTH: u64 = 320;
const ROW_HEIGHT: u64 = 44;
/// How many columns of a question's text fit a row of the chart at its font
/// size (11 units): a column is about half the font size wide, a Japanese
/// character two columns.
const LABEL_COLUMNS: usize = 50;

/// A bar's length for `value` on a scale whose longest bar is `max`.
fn bar_length(value: u64, max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    let length = (u128::from(value.min(max)) * u128::from(CHART_WIDTH - 120)) / u128::from(max);
    u64::try_from(length).unwrap_or(0)
}

/// The columns a character takes: two for East Asian wide and fullwidth ones
/// (CJK, kana, Hangul, fullwidth forms, most emoji), one for the others.
fn columns(c: char) -> usize {
    let wide = matches!(
        u32::from(c),
        0x1100..=0x115F
            | 0x2E80..=0x303E
            | 0x3041..=0x33FF
            | 0x3400..=0x4DBF
            | 0x4E00..=0x9FFF
            | 0xA000..=0xA4CF
            | 0xAC00..=0xD7A3
            | 0xF900..=0xFAFF
            | 0xFE30..=0xFE4F
            | 0xFF00..=0xFF60
            | 0xFFE0..=0xFFE6
            | 0x1F300..=0x1F64F
            | 0x1F900..=0x1F9FF
            | 0x20000..=0x3FFFD
    );
    if wide { 2 } else { 1 }
}

/// `text` on one line (runs of whitespace, line breaks too, as one space),
/// cut to `max` columns with "…" (counted as two: Japanese fonts draw it
/// wide) when longer; never within a character as the user sees it.
fn fit(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let width = |grapheme: &str| grapheme.chars().next().map_or(0, columns);
    if line.graphemes(true).map(width).sum::<usize>() <= max {
        return line;
    }
    let mut cut = String::new();
    let mut used = 0;
    for grapheme in line.graphemes(true) {
        used += width(grapheme);
        if used + 2 > max {
            break;
        }
        cut.push_str(grapheme);
    }
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// The funnel of a scenario's question nodes: per node, its text (the node
/// id as the row's tooltip), what was sent (light) and what was answered
/// (dark), on one scale. Drawn at its own size, smaller on a narrow screen.
pub(crate) fn funnel_chart(lang: ConsoleLang, nodes: &[NodeResults]) -> Markup {
    let max = nodes.iter().map(|node| node.sent.max(node.answered)).max().unwrap_or(0);
    let height = ROW_HEIGHT * nodes.len().max(1) as u64;
    html! {
        svg class="funnel" width=(CHART_WIDTH) height=(height) viewBox={ "0 0 " (CHART_WIDTH) " " (height) } role="img"
            aria-label=(lang.t("質問ごとの送信数と回答数", "funnel")) {
            @for (row, node) in nodes.iter().enumerate() {
                @let y = ROW_HEIGHT * row as u64;
                g {
                    title { (node.node_id) }
                    text x="0" y=(y + 12) font-size="11" { (fit(&node.text, LABEL_COLUMNS)) }
                    rect x="0" y=(y + 16) width=(bar_length(node.sent, max)) height="10" fill="#b9ecd0" {}
                    rect x="0" y=(y + 28) width=(bar_length(node.answered, max)) height="10" fill="#06c755" {}
                    text x=(bar_length(node.sent, max) + 6) y=(y + 25) font-size="10" { (lang.t("送信 ", "sent ")) (node.sent) }
                    text x=(bar_length(node.answered, max) + 6) y=(y + 37) font-size="10" { (lang.t("回答 ", "answered ")) (node.answered) }
                }
            }
        }
    }
}

/// `days`: the range shown (`None`: all time); the others are links. Under
/// a 0-10 question its NPS; under a free-text question its latest answers.
pub(crate) fn scenarios(nav: &Nav, all: &[ScenarioResults], days: Option<u32>) -> Markup {
    page(
        nav.lang,
        nav.t("シナリオ", "Scenarios"),
        Some(nav),
        html! {
            p id="range" {
                (nav.t("集計期間: ", "Counted over: "))
                @for (index, range) in crate::http::console::HOME_RANGES.iter().enumerate() {
                    @if index > 0 { " · " }
                    @let label = match (range, nav.lang) {
                        (None, lang) => lang.t("全期間", "all time").to_owned(),
                        (Some(days), ConsoleLang::Ja) => format!("{days}日間"),
                        (Some(days), ConsoleLang::En) => format!("{days} days"),
                    };
                    @let value = range.map_or_else(|| "all".to_owned(), |days| days.to_string());
                    @if *range == days {
                        strong data-range=(value) { (label) }
                    } @else {
                        a href={ "/console?days=" (value) } data-range=(value) { (label) }
                    }
                }
            }
            @if all.is_empty() { section { p { (nav.t("読み込まれているシナリオはありません。", "No scenarios are loaded.")) } } }
            @for scenario in all {
                section data-scenario=(scenario.scenario_id) {
                    h2 {
                        a href={ "/console/scenarios/" (segment(&scenario.scenario_id)) } {
                            (scenario.title.as_deref().unwrap_or(&scenario.scenario_id))
                        }
                        " " span class="muted" { (scenario.scenario_id) " v" (scenario.version) " · " (scenario.time_zone) }
                    }
                    p {
                        a href={ "/console/scenarios/" (segment(&scenario.scenario_id)) "/crosstab" } { (nav.t("クロス集計", "Cross-tab (クロス集計)")) }
                        " · "
                        a class="graph-link" href={ "/console/scenarios/" (segment(&scenario.scenario_id)) "/graph" } { (nav.t("シナリオ図", "Graph (シナリオ図)")) }
                    }
                    @for split in &scenario.variants {
                        p class="variants" data-split=(split.node) {
                            (nav.t("A/Bテスト ", "A/B split ")) strong { (split.node) } ": "
                            @for (index, arm) in split.arms.iter().enumerate() {
                                @if index > 0 { " · " }
                                span data-arm=(arm.label) { (arm.label) " " (arm.runs) (nav.t("回", " runs")) }
                            }
                        }
                    }
                    @if scenario.nodes.is_empty() {
                        p class="muted" { (nav.t("質問はありません。", "No questions.")) }
                    } @else {
                        (funnel_chart(nav.lang, &scenario.nodes))
                        div class="scroll" {
                            table {
                                tr {
                                    th { (nav.t("質問", "Question")) }
                                    th class="num" { (nav.t("送信数", "Sent")) }
                                    th class="num" { (nav.t("回答数", "Answered")) }
                                    th class="num" { (nav.t("回答率", "Rate")) }
                                }
                                @for node in &scenario.nodes {
                                    tr data-node=(node.node_id) {
                                        td { (node.text) br; span class="muted" { (node.node_id) } }
                                        td class="num" data-metric="sent" { (node.sent) }
                                        td class="num" data-metric="answered" { (node.answered) }
                                        td class="num" { (rate(node.response_rate)) }
                                    }
                                    @if let Some(score) = nps(node) {
                                        tr {
                                            td colspan="4" {
                                                strong class="nps" data-node=(node.node_id)
                                                    title=(nav.t("9〜10の回答の割合 − 0〜6の回答の割合", "percent of answers 9-10 minus percent of 0-6")) {
                                                    "NPS: " (score)
                                                }
                                            }
                                        }
                                    }
                                    @for (label, arm) in &node.by_variant {
                                        tr class="muted" data-node=(node.node_id) data-variant=(label) {
                                            td { (nav.t("パターン ", "arm ")) (label) }
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
                        @for node in &scenario.nodes {
                            @if let Some(latest) = node.latest.as_deref().filter(|latest| !latest.is_empty()) {
                                h3 class="muted" { (nav.t("最近の回答: ", "Latest answers: ")) (node.text) }
                                div class="scroll" {
                                    table class="latest" data-node=(node.node_id) {
                                        tr {
                                            th { (nav.t("回答日時", "Answered at")) }
                                            th { (nav.t("最近の回答", "Latest answers")) }
                                            th { (nav.t("ユーザー", "User")) }
                                        }
                                        @for answer in latest {
                                            tr {
                                                td class="when" { (time_of_text(&answer.answered_at)) }
                                                td style="white-space:pre-wrap" {
                                                    @if answer.value.is_empty() {
                                                        span class="muted" { (nav.t("（内容は削除済み）", "(value removed)")) }
                                                    } @else {
                                                        (answer.value)
                                                    }
                                                }
                                                td { a href={ "/console/users?id=" (segment(&answer.user_id)) } { (answer.user_id) } }
                                            }
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

/// The answers page's filters as typed, shown back in its form and carried
/// by its links (next page, CSV).
pub(crate) struct AnswerFilters<'a> {
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    pub(crate) tag: &'a str,
}

impl AnswerFilters<'_> {
    /// `from=..&to=..&tag=..`, the empty ones left out.
    fn query(&self) -> String {
        let pairs: Vec<(&str, &str)> = [("from", self.from), ("to", self.to), ("tag", self.tag)]
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect();
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }
}

/// `/console/scenarios/{id}`: the scenario's answers, one row per user and
/// run, newest first, a column per question; filtered by days and a tag.
pub(crate) fn answer_runs(
    nav: &Nav,
    scenario: &str,
    filters: &AnswerFilters<'_>,
    found: Result<&crate::reports::answer_runs::RunsPage, &str>,
    paged: bool,
) -> Markup {
    let base = format!("/console/scenarios/{}", segment(scenario));
    let query = filters.query();
    let joined = |first: char| {
        if query.is_empty() {
            String::new()
        } else {
            format!("{first}{query}")
        }
    };
    page(
        nav.lang,
        &match nav.lang {
            ConsoleLang::Ja => format!("回答: {scenario}"),
            ConsoleLang::En => format!("Answers: {scenario}"),
        },
        Some(nav),
        html! {
            section {
                form method="get" action=(base) id="answer-filter" {
                    label { (nav.t("開始日 ", "From ")) input type="date" name="from" value=(filters.from); }
                    " "
                    label { (nav.t("終了日 ", "To ")) input type="date" name="to" value=(filters.to); }
                    " "
                    label { (nav.t("タグ ", "Tag ")) input type="text" name="tag" value=(filters.tag) size="12" maxlength="100"; }
                    " "
                    button class="primary" type="submit" { (nav.t("絞り込む", "Filter")) }
                }
                p class="muted" {
                    (nav.t(
                        "一人の一回の回答（一斉配信ごと、または自分で始めた回）を一行に、新しい順に表示します。日付はシナリオのタイムゾーンで両端を含み、タグは今付いているものです。",
                        "A row per user and run (each campaign's, or the one they started), newest first. Days are inclusive in the scenario's time zone; the tag is one the user has now.",
                    ))
                }
                p {
                    @if nav.may(OperatorRole::Owner) {
                        a id="csv" href={ (base) "/answers.csv" (joined('?')) } download { (nav.t("CSVをダウンロード（この絞り込みで）", "Download CSV (these filters)")) }
                        " · "
                    }
                    a id="by-answer" href={ (base) "?by=answer" } { (nav.t("回答ごとの一覧", "Every answer")) }
                    " · "
                    a id="crosstab" href={ (base) "/crosstab" } { (nav.t("クロス集計", "Cross-tab (クロス集計)")) }
                    " · "
                    a id="graph" href={ (base) "/graph" } { (nav.t("シナリオ図", "Graph (シナリオ図)")) }
                }
            }
            section {
                @match found {
                    Err(problem) => p class="flash bad" id="problem" { (problem) },
                    Ok(found) => {
                        @if found.rows.is_empty() && found.next.is_some() {
                            p id="no-runs-here" {
                                (nav.t(
                                    "ここまでに該当する回答はありません。続きは次のページにあります。",
                                    "No answers match up to here; more follow on the next page.",
                                ))
                            }
                        } @else if found.rows.is_empty() {
                            p id="no-runs" { (nav.t("該当する回答はありません。", "No answers match.")) }
                        } @else {
                            div class="scroll" {
                                table id="runs" {
                                    tr {
                                        th { (nav.t("最新の回答", "Latest answer")) }
                                        th { (nav.t("ユーザー", "User")) }
                                        @for question in &found.questions {
                                            th title=(question.node) { (question.text) }
                                        }
                                    }
                                    @for row in &found.rows {
                                        tr data-user=(row.key.user) data-campaign=(row.key.campaign.as_deref().unwrap_or("")) {
                                            td class="when" { (super::time_in(row.latest_ms, found.zone)) }
                                            td {
                                                a href={ "/console/users?id=" (segment(&row.key.user)) } {
                                                    @match &row.name {
                                                        Some(name) => (name),
                                                        None => code { (row.key.user.get(..9).unwrap_or(&row.key.user)) "…" },
                                                    }
                                                }
                                                @if let Some(campaign) = &row.key.campaign {
                                                    br;
                                                    a class="muted" href={ "/console/campaigns/" (segment(campaign)) } { (nav.t("一斉配信", "campaign")) }
                                                }
                                            }
                                            @for cell in &row.cells { td style="white-space:pre-wrap" { (cell) } }
                                        }
                                    }
                                }
                            }
                        }
                        p {
                            @if paged { a href={ (base) (joined('?')) } { (nav.t("最初のページ", "First page")) } " " }
                            @if let Some(next) = &found.next {
                                a id="next" href={ (base) "?after=" (segment(next)) (joined('&')) } { (nav.t("次のページ", "Next page")) }
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
        nav.lang,
        &match nav.lang {
            ConsoleLang::Ja => format!("回答: {scenario}"),
            ConsoleLang::En => format!("Answers: {scenario}"),
        },
        Some(nav),
        html! {
            section {
                p {
                    @if nav.may(OperatorRole::Owner) {
                        a id="csv" href={ "/console/scenarios/" (segment(scenario)) "/answers.csv" } download { (nav.t("CSVをダウンロード（全回答）", "Download CSV (all answers)")) }
                        " · "
                    }
                    a id="crosstab" href={ "/console/scenarios/" (segment(scenario)) "/crosstab" } { (nav.t("クロス集計", "Cross-tab (クロス集計)")) }
                    " · "
                    a id="graph" href={ "/console/scenarios/" (segment(scenario)) "/graph" } { (nav.t("シナリオ図", "Graph (シナリオ図)")) }
                }
                @if page_of.rows.is_empty() {
                    p {
                        @if after.is_some() {
                            (nav.t("これより後の回答はありません。", "No answers after this point."))
                        } @else {
                            (nav.t("回答はありません。", "No answers."))
                        }
                    }
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
                    @if after.is_some() { a href={ "/console/scenarios/" (segment(scenario)) "?by=answer" } { (nav.t("最初のページ", "First page")) } " " }
                    @if let Some(next) = &page_of.next {
                        a id="next" href={ "/console/scenarios/" (segment(scenario)) "?by=answer&after=" (segment(next)) } { (nav.t("次のページ", "Next page")) }
                    }
                    " · "
                    a id="by-run" href={ "/console/scenarios/" (segment(scenario)) } { (nav.t("ユーザーと回ごとの表示", "One row per user and run")) }
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
        nav.lang,
        &match nav.lang {
            ConsoleLang::Ja => format!("クロス集計: {}", asked.scenario),
            ConsoleLang::En => format!("Cross-tab: {}", asked.scenario),
        },
        Some(nav),
        html! {
            section {
                form method="get" id="by" {
                    label { (nav.t("集計軸 ", "By (集計軸) "))
                        input name="by" value=(asked.by) list="dimensions" size="24";
                    }
                    datalist id="dimensions" {
                        option value="source" { (nav.t("source: 最初の流入経路", "source: first source (流入経路)")) }
                        option value="variant" { (nav.t("variant: A/Bテストのパターン", "variant: A/B arm")) }
                        option value="tag:" { (nav.t("tag:{タグ}", "tag:{tag}")) }
                        option value="field:" { (nav.t("field:{項目名}", "field:{name}")) }
                    }
                    " "
                    label { (nav.t("開始日 ", "From ")) input name="from" type="date" value=(asked.from); }
                    " "
                    label { (nav.t("終了日 ", "To ")) input name="to" type="date" value=(asked.to); }
                    " "
                    button type="submit" class="primary" { (nav.t("表示", "Show")) }
                }
                p class="muted" {
                    (nav.t(
                        "すべての回答から集計します。流入経路・タグ・項目は各ユーザーの今の値、パターンは質問を送ったときのものです。",
                        "Counted from every answer: source, tags and fields as each user has them now; the arm as the question was asked. ",
                    ))
                    a href={ "/console/scenarios/" (segment(asked.scenario)) } { (nav.t("回答一覧", "Answers")) }
                }
            }
            @match tab {
                Err(problem) => section { p class="flash bad" id="problem" { (problem) } },
                Ok(tab) => {
                    @if tab.capped {
                        section { p class="muted" { (nav.t("値が多く列に入りきらないため、残りは「その他」にまとめています。", "More values than columns: the rest are counted under その他.")) } }
                    }
                    @if tab.nodes.is_empty() { section { p { (nav.t("質問はありません。", "No questions.")) } } }
                    @for node in &tab.nodes {
                        section data-node=(node.node_id) {
                            h2 { (node.text) " " span class="muted" { (node.node_id) } }
                            div class="scroll" {
                                table class="crosstab" {
                                    tr {
                                        th {}
                                        @for column in &tab.columns { th class="num" data-column=(column.key) { (column.label) } }
                                        th class="num" { (nav.t("合計", "Total")) }
                                    }
                                    tr data-row="answered" {
                                        td { (nav.t("回答数", "Answered")) }
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
        nav.lang,
        nav.t("流入経路", "Sources"),
        Some(nav),
        html! {
            @match cards {
                None => section { p { (nav.t(
                    "流入経路のリンクは使えません。LINE_LOGIN_CHANNEL_ID、LINE_LOGIN_CHANNEL_SECRET、PUBLIC_BASE_URL、FRIEND_URL を設定してください（README を参照）。",
                    "Source links are off: set LINE_LOGIN_CHANNEL_ID, LINE_LOGIN_CHANNEL_SECRET, PUBLIC_BASE_URL and FRIEND_URL (see the README).",
                )) } },
                Some([]) => section { p { (nav.t("SOURCES_FILE に流入経路がありません。", "No sources in SOURCES_FILE.")) } },
                Some(cards) => @for card in cards {
                    section class="source" id={ "source-" (card.row.id) } {
                        h2 { (card.row.label) " " span class="muted" { "(" (card.row.id) ")" } }
                        p { (nav.t("リンク: ", "Link: ")) code class="link" { (card.row.link) } }
                        img class="qr" width="160" height="160" alt=(match nav.lang {
                            ConsoleLang::Ja => format!("{} のQRコード", card.row.link),
                            ConsoleLang::En => format!("QR code of {}", card.row.link),
                        })
                            src={ "/console/sources/" (segment(&card.row.id)) "/qr.png" };
                        div class="scroll" {
                            table {
                                tr {
                                    th class="num" { (nav.t("ログイン", "Logins")) }
                                    th class="num" { (nav.t("友だち追加", "New friends")) }
                                    th class="num" { (nav.t("ブロック", "Unfollows")) }
                                }
                                tr {
                                    td class="num logins" { (card.row.counts.logins) }
                                    td class="num new-friends" { (card.row.counts.new_friends) }
                                    td class="num unfollows" { (card.row.counts.unfollows) }
                                }
                            }
                        }
                        @if !card.users.is_empty() {
                            h2 { (nav.t("最近のユーザー", "Latest users")) }
                            div class="scroll" {
                                table class="users" {
                                    tr {
                                        th { (nav.t("ユーザー", "User")) }
                                        th { (nav.t("状態", "Standing")) }
                                        th { (nav.t("記録日時", "Recorded")) }
                                    }
                                    @for user in card.users {
                                        tr {
                                            td { a href={ "/console/users?id=" (segment(&user.line_user_id)) } { (user.line_user_id) } }
                                            td { (standing(nav.lang, user.standing)) }
                                            td class="when" { (time(user.recorded_at_ms)) }
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

fn standing(lang: ConsoleLang, standing: crate::values::SourceStanding) -> &'static str {
    match standing {
        crate::values::SourceStanding::Waiting => lang.t("友だち追加前", "not a friend yet"),
        crate::values::SourceStanding::Friend => lang.t("新しく友だち追加", "new friend"),
        crate::values::SourceStanding::WasFriend => lang.t("以前から友だち", "already a friend"),
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
            text: "<b>満足度</b>は？".to_owned(),
            sent: 3,
            answered: 2,
            response_rate: Some(2.0 / 3.0),
            by_variant: Default::default(),
            choices: Vec::new(),
            latest: None,
        }];
        for lang in [ConsoleLang::Ja, ConsoleLang::En] {
            let svg = funnel_chart(lang, &nodes).into_string();
            assert!(
                svg.contains("<title>&lt;script&gt;評価&lt;/script&gt;</title>"),
                "{svg}"
            );
            assert!(svg.contains("&lt;b&gt;満足度&lt;/b&gt;は？"), "{svg}");
            assert!(!svg.contains("<script>") && !svg.contains("<b>"), "{svg}");
        }
    }

    #[test]
    fn the_chart_is_drawn_at_its_own_size_with_the_questions_words() {
        let node = |id: &str, text: &str| NodeResults {
            node_id: id.to_owned(),
            kind: "survey",
            text: text.to_owned(),
            sent: 4,
            answered: 1,
            response_rate: Some(0.25),
            by_variant: Default::default(),
            choices: Vec::new(),
            latest: None,
        };
        let nodes = [node("rating", "満足度は？"), node("nps", "How likely?")];
        let ja = funnel_chart(ConsoleLang::Ja, &nodes).into_string();
        assert!(ja.contains(r#"width="320" height="88" viewBox="0 0 320 88""#), "{ja}");
        assert!(
            ja.contains(">満足度は？</text>") && ja.contains("<title>rating</title>"),
            "{ja}"
        );
        assert!(ja.contains(">送信 4</text>") && ja.contains(">回答 1</text>"), "{ja}");
        let en = funnel_chart(ConsoleLang::En, &nodes).into_string();
        assert!(
            en.contains(">sent 4</text>") && en.contains(">answered 1</text>"),
            "{en}"
        );
        let empty = funnel_chart(ConsoleLang::En, &[]).into_string();
        assert!(empty.contains(r#"width="320" height="44""#), "{empty}");
    }

    #[test]
    fn the_home_page_shows_nps_and_latest_free_text_answers_escaped() {
        use crate::engine::results::{ChoiceResults, LatestAnswer};
        let question = |id: &str, kind: &'static str| NodeResults {
            node_id: id.to_owned(),
            kind,
            text: format!("{id}?"),
            sent: 4,
            answered: 4,
            response_rate: Some(1.0),
            by_variant: Default::default(),
            choices: Vec::new(),
            latest: None,
        };
        let mut score = question("nps", "survey");
        score.choices = (0..=10)
            .map(|value: u64| ChoiceResults {
                value: value.to_string(),
                label: Some(value.to_string()),
                count: u64::from(value >= 9) * 3 + u64::from(value == 0),
                share: None,
                by_variant: Default::default(),
            })
            .collect();
        let mut comment = question("comment", "text_question");
        comment.latest = Some(vec![
            LatestAnswer {
                answer_id: "a2".to_owned(),
                user_id: "U/1?".to_owned(),
                value: "<i>美味しかった</i>".to_owned(),
                answered_at: "2026-12-01T15:30:00.000Z".to_owned(),
            },
            LatestAnswer {
                answer_id: "a1".to_owned(),
                user_id: "U2".to_owned(),
                value: String::new(),
                answered_at: "2026-12-01T15:00:00.000+09:00".to_owned(),
            },
        ]);
        let results = ScenarioResults {
            scenario_id: "feedback".to_owned(),
            title: None,
            version: 1,
            time_zone: "Asia/Tokyo".to_owned(),
            from: None,
            to: None,
            nodes: vec![
                score,
                question("plain", "survey"),
                comment,
                question("quiet", "text_question"),
            ],
            variants: Vec::new(),
            cross_tab: None,
        };
        let nav = |lang| Nav {
            csrf: "csrf",
            who: "owner@example.com",
            role: OperatorRole::Owner,
            lang,
        };
        let en = scenarios(&nav(ConsoleLang::En), std::slice::from_ref(&results), Some(30)).into_string();
        let ja = scenarios(&nav(ConsoleLang::Ja), std::slice::from_ref(&results), Some(30)).into_string();
        for page in [&en, &ja] {
            // 6 promoters, 1 detractor of 7: 71.4.
            assert!(page.contains(r#"class="nps" data-node="nps""#), "{page}");
            assert!(page.contains(">NPS: 71</strong>"), "{page}");
            assert_eq!(page.matches("NPS: ").count(), 1, "only the 0-10 question: {page}");
            assert_eq!(page.matches(r#"<table class="latest""#).count(), 1, "{page}");
            assert!(page.contains(r#"<table class="latest" data-node="comment">"#), "{page}");
            assert!(
                page.contains("&lt;i&gt;美味しかった&lt;/i&gt;") && !page.contains("<i>"),
                "{page}"
            );
            assert!(
                page.contains(r#"<a href="/console/users?id=U%2F1%3F">U/1?</a>"#),
                "{page}"
            );
            assert!(page.contains("2026-12-02 00:30:00 JST"), "{page}");
        }
        assert!(en.contains("Counted over: ") && en.contains(r#"<strong data-range="30">30 days</strong>"#));
        assert!(
            en.contains(r#"data-range="all">all time</a>"#) && en.contains("(value removed)"),
            "{en}"
        );
        assert!(ja.contains("集計期間: ") && ja.contains(r#"<strong data-range="30">30日間</strong>"#));
        assert!(
            ja.contains(r#"data-range="all">全期間</a>"#) && ja.contains("（内容は削除済み）"),
            "{ja}"
        );
    }

    #[test]
    fn labels_are_cut_to_the_charts_width_counting_wide_characters_twice() {
        // (text, columns, label)
        let cases = [
            ("short", 10, "short"),
            ("exactly10!", 10, "exactly10!"),
            ("eleven chars", 10, "eleven c…"),
            ("満足度は？", 10, "満足度は？"),
            ("満足度はいかが？", 10, "満足度は…"),
            ("ｶﾀｶﾅ半角です", 10, "ｶﾀｶﾅ半角…"),
            ("two\nlines  and   spaces", 30, "two lines and spaces"),
            ("a cut before a space", 8, "a cut…"),
            ("が\u{3099}が\u{3099}が\u{3099}", 5, "が\u{3099}…"),
            ("", 10, ""),
        ];
        for (text, max, expected) in cases {
            assert_eq!(fit(text, max), expected, "{text:?} in {max}");
        }
        let long = "あ".repeat(LABEL_COLUMNS);
        let label = fit(&long, LABEL_COLUMNS);
        assert_eq!(label.chars().count(), LABEL_COLUMNS / 2, "{label}");
        assert!(label.ends_with('…'));
    }
}
