//! Campaigns: the list, one campaign's progress and results, the builder,
//! its preview and confirmation, and the cancel.

use super::{Nav, flash, page, percent, segment, share, time_of_text};
use crate::http::console::campaign_form::CampaignForm;
use crate::pipeline::campaigns::CampaignStatus;
use crate::values::{ConsoleLang, OperatorRole};
use maud::{Markup, html};

/// The campaign builder: the same filters as `POST /admin/campaigns`, kept
/// as the operator typed them (a preview's "Change" comes back here).
pub(crate) fn campaign_builder(
    nav: &Nav,
    scenarios: &[(String, String)],
    asked: &CampaignForm,
    problem: Option<&str>,
) -> Markup {
    let later = asked.when == "later";
    page(
        nav.lang,
        nav.t("新しい一斉配信", "New campaign"),
        Some(nav),
        html! {
            @if let Some(problem) = problem { (flash(Some((false, problem)))) }
            form method="get" action="/console/campaigns/new" id="campaign-builder" {
                input type="hidden" name="preview" value="1";
                section {
                    h2 { (nav.t("送る内容", "What to send")) }
                    p {
                        label for="scenario" { (nav.t("シナリオ", "Scenario")) } br;
                        select id="scenario" name="scenario" {
                            @for (id, title) in scenarios {
                                option value=(id) selected[asked.scenario == *id] { (id) @if !title.is_empty() { " — " (title) } }
                            }
                        }
                    }
                    p { label { input type="checkbox" id="skip_answered" name="skip_answered" value="true" checked[asked.skip_answered == "true"]; (nav.t(" このシナリオにすでに回答したユーザーは除く", " Leave out users who already answered this scenario")) } }
                }
                section {
                    h2 { (nav.t("送る相手", "Who gets it")) }
                    p class="muted" { (nav.t("友だち追加済みのすべてのユーザーから、入力した条件で絞り込みます。複数の値はカンマか改行で区切ってください。空欄の条件は使われません。", "Every user who follows the account, narrowed by what you fill in. Lists take commas or new lines. Empty boxes do not filter.")) }
                    (builder_text("tags_any", nav.t("次のタグのどれかが付いている", "Has any of these tags"), &asked.tags_any))
                    (builder_text("tags_all", nav.t("次のタグがすべて付いている", "Has all of these tags"), &asked.tags_all))
                    (builder_text("tags_none", nav.t("次のタグがどれも付いていない", "Has none of these tags"), &asked.tags_none))
                    (builder_text("answered", nav.t("次のシナリオのすべてに回答した", "Answered each of these scenarios"), &asked.answered))
                    (builder_text("not_answered", nav.t("次のシナリオのどれにも回答していない", "Answered none of these scenarios"), &asked.not_answered))
                    p {
                        label for="first_seen_from" { (nav.t("初回利用日がこの日以降（当日を含む）", "First seen from (date, inclusive)")) } br;
                        input type="date" id="first_seen_from" name="first_seen_from" value=(asked.first_seen_from);
                    }
                    p {
                        label for="first_seen_to" { (nav.t("初回利用日がこの日以前（当日を含む）", "First seen until (date, inclusive)")) } br;
                        input type="date" id="first_seen_to" name="first_seen_to" value=(asked.first_seen_to);
                    }
                    (builder_text("sources", nav.t("次の流入経路のどれかから来た", "Came through any of these source links"), &asked.sources))
                    p {
                        label for="fields" { (nav.t("項目（1行に1つの条件）", "Fields (a condition per line)")) } br;
                        textarea id="fields" name="fields" rows="3" cols="30" placeholder="age >= 20\nplan in gold, silver\nbirthday exists" { (asked.fields) }
                        br; span class="muted" { (nav.t("項目名 = 値、項目名 in a, b、項目名 >= 値、項目名 <= 値、項目名 exists（値がある）、項目名 missing（値がない）。\"007\" のように引用符で囲むと文字として扱います。", "name = value, name in a, b, name >= value, name <= value, name exists, name missing. \"007\" in quotes is text.")) }
                    }
                }
                section {
                    h2 { (nav.t("配信日時", "When")) }
                    p { label { input type="radio" name="when" value="now" id="when-now" checked[!later]; (nav.t(" 今すぐ", " Now")) } }
                    p {
                        label { input type="radio" name="when" value="later" id="when-later" checked[later]; (nav.t(" 日時を指定（日本時間、JST）", " At (Japan time, JST)")) }
                        " "
                        input type="datetime-local" id="send_at" name="send_at" value=(asked.send_at);
                    }
                    p { label { input type="checkbox" id="allow_over_quota" name="allow_over_quota" value="true" checked[asked.allow_over_quota == "true"]; (nav.t(" 今月の上限を超えても送る", " Send even beyond the month's quota")) } }
                    button class="primary" type="submit" id="preview" { (nav.t("プレビュー", "Preview")) }
                    " "
                    span class="muted" { (nav.t("次のページで確定するまで、何も送られません。", "Nothing is sent before you confirm on the next page.")) }
                }
            }
        },
    )
}

/// A list box: a text area, so a pasted column keeps its lines.
fn builder_text(name: &str, label: &str, value: &str) -> Markup {
    html! {
        p {
            label for=(name) { (label) } br;
            textarea id=(name) name=(name) rows="1" cols="30" { (value) }
        }
    }
}

/// The campaign's audience in words, for its confirmation.
fn audience_words(lang: ConsoleLang, audience: &crate::engine::campaign::AudienceRequest) -> Vec<String> {
    let join = |values: &[String]| values.join(lang.t("、", ", "));
    let mut words = Vec::new();
    if let Some(tags) = &audience.tags {
        if let Some(any) = &tags.any_of {
            words.push(match lang {
                ConsoleLang::Ja => format!("タグ {} のどれかが付いている", join(any)),
                ConsoleLang::En => format!("has any of the tags {}", join(any)),
            });
        }
        if let Some(all) = &tags.all_of {
            words.push(match lang {
                ConsoleLang::Ja => format!("タグ {} がすべて付いている", join(all)),
                ConsoleLang::En => format!("has all of the tags {}", join(all)),
            });
        }
        if let Some(none) = &tags.none_of {
            words.push(match lang {
                ConsoleLang::Ja => format!("タグ {} がどれも付いていない", join(none)),
                ConsoleLang::En => format!("has none of the tags {}", join(none)),
            });
        }
    }
    if let Some(answered) = &audience.answered {
        words.push(match lang {
            ConsoleLang::Ja => format!("シナリオ {} のすべてに回答済み", join(answered)),
            ConsoleLang::En => format!("answered {}", join(answered)),
        });
    }
    if let Some(not) = &audience.not_answered {
        words.push(match lang {
            ConsoleLang::Ja => format!("シナリオ {} のどれにも回答していない", join(not)),
            ConsoleLang::En => format!("answered none of {}", join(not)),
        });
    }
    if let Some(from) = &audience.first_seen_from {
        words.push(match lang {
            ConsoleLang::Ja => format!("初回利用日が {from} 以降"),
            ConsoleLang::En => format!("first seen on or after {from}"),
        });
    }
    if let Some(to) = &audience.first_seen_to {
        words.push(match lang {
            ConsoleLang::Ja => format!("初回利用日が {to} 以前"),
            ConsoleLang::En => format!("first seen on or before {to}"),
        });
    }
    if let Some(sources) = &audience.sources {
        words.push(match lang {
            ConsoleLang::Ja => format!("流入経路 {} のどれかから来た", join(&sources.any_of)),
            ConsoleLang::En => format!("came through {}", join(&sources.any_of)),
        });
    }
    if let Some(fields) = &audience.fields {
        for (name, condition) in fields {
            let condition = crate::access::audit::json_summary(condition);
            words.push(match lang {
                ConsoleLang::Ja => format!("項目 {name}: {condition}"),
                ConsoleLang::En => format!("field {name}: {condition}"),
            });
        }
    }
    words
}

/// The confirmation of a campaign: its dry run, and the form that creates
/// it once (the builder's fields again, hidden, and the form's own key).
pub(crate) fn campaign_preview(
    nav: &Nav,
    campaign: &crate::pipeline::campaigns::CampaignRequest,
    asked: &CampaignForm,
    found: &crate::pipeline::campaigns::DryRun,
    key: &str,
    again: &str,
) -> Markup {
    let words = audience_words(nav.lang, &campaign.audience);
    page(
        nav.lang,
        nav.t("新しい一斉配信", "New campaign"),
        Some(nav),
        html! {
            section {
                p {
                    @match nav.lang {
                        ConsoleLang::Ja => {
                            "シナリオ " strong { (campaign.scenario_id) } " を "
                            strong id="audience-count" { (found.count) } " 人のユーザーに"
                            @if let Some(at) = &found.starts_at { "、" span id="starts-at" { (time_of_text(at)) } " から送ります" } @else { "今すぐ送ります" }
                            "。"
                        }
                        ConsoleLang::En => {
                            "This sends " strong { (campaign.scenario_id) } " to "
                            strong id="audience-count" { (found.count) } " users"
                            @if let Some(at) = &found.starts_at { ", starting at " span id="starts-at" { (time_of_text(at)) } } @else { ", now" }
                            "."
                        }
                    }
                }
                ul id="audience-words" {
                    li { (nav.t("友だち追加済み", "follows the account")) }
                    @for word in &words { li { (word) } }
                    @if campaign.skip_answered {
                        li {
                            @match nav.lang {
                                ConsoleLang::Ja => { "シナリオ " (campaign.scenario_id) " にまだ回答していない" }
                                ConsoleLang::En => { "has not answered " (campaign.scenario_id) }
                            }
                        }
                    }
                }
                p {
                    @match nav.lang {
                        ConsoleLang::Ja => {
                            "メッセージは " (found.quota.messages) " 通です"
                            @if let Some(left) = found.quota.remaining { "（今月の残りは " (left) " 通）" }
                            "。"
                            @if found.quota.over() { " " strong { "今月の上限を超えています。" } }
                        }
                        ConsoleLang::En => {
                            (found.quota.messages) " messages"
                            @if let Some(left) = found.quota.remaining { "; the month's quota has " (left) " left" }
                            "."
                            @if found.quota.over() { " " strong { "That is beyond the quota." } }
                        }
                    }
                }
                @if !found.sample.is_empty() {
                    p class="muted" { (nav.t("対象ユーザーの一部:", "Some of them:")) }
                    ul id="audience-sample" {
                        @for user in &found.sample {
                            li { a href={ "/console/users?id=" (segment(user)) } { code { (user) } } }
                        }
                    }
                }
                p class="muted" { (nav.t("配信先は、配信が始まるときにもう一度選び直します。それまでに条件に当てはまるようになったユーザーにも届きます。", "The audience is read again when the campaign starts: users who join the filters before then get it too.")) }
                (campaign_confirm_form(
                    nav,
                    asked,
                    key,
                    if found.starts_at.is_some() {
                        nav.t("一斉配信を予約する", "Schedule the campaign")
                    } else {
                        nav.t("一斉配信を送信する", "Send the campaign")
                    },
                    "confirm-campaign",
                ))
                p { a id="change-campaign" href={ "/console/campaigns/new?" (again) } { (nav.t("変更する", "Change")) } }
            }
        },
    )
}

/// A campaign the service did not create, and the way back: the builder
/// with the values kept, and, when the outcome may be unknown, the same
/// confirm form (the same key: it finds the campaign if it was created).
pub(crate) fn campaign_refused(nav: &Nav, message: &str, again: &str, retry: Option<(&CampaignForm, &str)>) -> Markup {
    page(
        nav.lang,
        nav.t("新しい一斉配信", "New campaign"),
        Some(nav),
        html! {
            (flash(Some((false, message))))
            section {
                @if let Some((asked, key)) = retry {
                    (campaign_confirm_form(nav, asked, key, nav.t("もう一度試す", "Try again"), "retry-campaign"))
                }
                p { a id="change-campaign" href={ "/console/campaigns/new?" (again) } { (nav.t("一斉配信の作成に戻る", "Back to the campaign builder")) } }
            }
        },
    )
}

/// The form that creates the campaign: the builder's fields, hidden, and the
/// form's own key (the campaign's `Idempotency-Key`).
fn campaign_confirm_form(nav: &Nav, asked: &CampaignForm, key: &str, label: &str, id: &str) -> Markup {
    let hidden = serde_urlencoded::to_string(asked)
        .ok()
        .and_then(|encoded| serde_urlencoded::from_str::<Vec<(String, String)>>(&encoded).ok())
        .unwrap_or_default();
    html! {
        form method="post" action="/console/campaigns/new" {
            input type="hidden" name="csrf" value=(nav.csrf);
            input type="hidden" name="key" value=(key);
            @for (name, value) in &hidden { input type="hidden" name=(name) value=(value); }
            button class="primary" type="submit" id=(id) { (label) }
        }
    }
}

/// The confirmation of a campaign's cancel: what will stop, and the form.
pub(crate) fn campaign_cancel(nav: &Nav, status: &CampaignStatus, key: &str) -> Markup {
    let left = status.pending;
    page(
        nav.lang,
        nav.t("一斉配信の取り消し", "Cancel a campaign"),
        Some(nav),
        html! {
            section {
                p {
                    @match nav.lang {
                        ConsoleLang::Ja => {
                            "一斉配信 " strong { (status.scenario_id) } "（" (super::campaign_state(nav.lang, status.state)) "）: "
                            "送信済み " (status.sent) " 人、未送信 " (left) " 人。"
                        }
                        ConsoleLang::En => {
                            "Campaign " strong { (status.scenario_id) } " (" (status.state) "): "
                            (status.sent) " sent, " (left) " not sent yet."
                        }
                    }
                }
                @if status.state == "done" {
                    p { (nav.t("すべて送信済みです。取り消すと、配信先のユーザーにまだ届いていないリマインダー、期限切れ、ステップ配信が止まります。", "Everything went out. Cancelling stops the reminders, expiries and steps its recipients have not got yet.")) }
                } @else {
                    p { (nav.t("取り消すと、まだ送られていない分が止まります。送信済みの分はそのままです。", "Cancelling stops what has not been sent yet. What was sent stays sent.")) }
                }
                form method="post" action={ "/console/campaigns/" (segment(&status.campaign_id)) "/cancel" } {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    input type="hidden" name="key" value=(key);
                    p {
                        label {
                            input type="checkbox" name="timers" value="true" checked[status.state == "done"];
                            (nav.t(" 配信先のユーザーへのまだ送られていないリマインダー、期限切れ、ステップ配信も取り消す", " Also cancel the recipients' reminders, expiries and steps not sent yet"))
                        }
                    }
                    button class="danger" type="submit" id="confirm-cancel" { (nav.t("一斉配信を取り消す", "Cancel the campaign")) }
                    " "
                    a href={ "/console/campaigns/" (segment(&status.campaign_id)) } { (nav.t("取り消さない", "Keep it")) }
                }
            }
        },
    )
}

/// A campaign cancel's result.
pub(crate) fn campaign_cancelled(nav: &Nav, campaign: &str, result: (bool, &str)) -> Markup {
    page(
        nav.lang,
        nav.t("一斉配信の取り消し", "Cancel a campaign"),
        Some(nav),
        html! {
            (flash(Some(result)))
            section { a id="back-to-campaign" href={ "/console/campaigns/" (segment(campaign)) } { (nav.t("一斉配信に戻る", "Back to the campaign")) } }
        },
    )
}

pub(crate) fn campaigns(nav: &Nav, all: &[CampaignStatus]) -> Markup {
    page(
        nav.lang,
        nav.t("一斉配信", "Campaigns"),
        Some(nav),
        html! {
            @if nav.may(OperatorRole::Editor) {
                p { a id="new-campaign" href="/console/campaigns/new" { (nav.t("新しい一斉配信", "New campaign")) } }
            }
            section {
                @if all.is_empty() { p { (nav.t("一斉配信はまだありません。", "No campaigns yet.")) } } @else {
                    div class="scroll" {
                        table {
                            tr {
                                th { (nav.t("一斉配信", "Campaign")) }
                                th { (nav.t("状態", "State")) }
                                th { (nav.t("進み具合", "Progress")) }
                                th class="num" { (nav.t("送信済み", "Sent")) }
                                th class="num" { (nav.t("失敗", "Failed")) }
                                th class="num" { (nav.t("スキップ", "Skipped")) }
                                th class="num" { (nav.t("予定", "Planned")) }
                            }
                            @for campaign in all {
                                @let done = campaign.sent.saturating_add(campaign.failed).saturating_add(campaign.skipped);
                                tr data-campaign=(campaign.campaign_id) {
                                    td {
                                        a href={ "/console/campaigns/" (campaign.campaign_id) } { (campaign.scenario_id) }
                                        br; span class="muted" { (campaign.campaign_id) }
                                    }
                                    td { (super::campaign_state(nav.lang, campaign.state)) }
                                    td { div class="bar" { span style={ "width:" (percent(done, campaign.planned)) "%" } {} } }
                                    td class="num" { (campaign.sent) }
                                    td class="num" { (campaign.failed) }
                                    td class="num" { (campaign.skipped) }
                                    td class="num" { (campaign.planned) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// Seconds after which a campaign's page loads itself again: while its
/// messages are being planned, sent or cancelled (not while it waits for a
/// send time that may be days away, nor once it is over).
fn progress_refresh(state: &str) -> Option<u32> {
    // Longer than the 5 s a campaign's counted results are reused for, so
    // most loads show new counts.
    matches!(state, "planning" | "sending" | "cancelling").then_some(10)
}

/// One campaign: its state and its results, counted exactly.
pub(crate) fn campaign(
    nav: &Nav,
    status: &CampaignStatus,
    results: &crate::reports::campaign_results::CampaignResults,
    created: bool,
) -> Markup {
    let figures = [
        ("Recipients", nav.t("配信先の人数", "Recipients"), results.recipients),
        ("Delivered", nav.t("届いた人数", "Delivered"), results.delivered),
        ("Answered", nav.t("回答した人数", "Answered"), results.tally.answered),
        (
            "Reminded",
            nav.t("リマインダーを送った人数", "Reminded"),
            results.tally.reminded,
        ),
        (
            "Expired",
            nav.t("期限切れになった人数", "Expired"),
            results.tally.expired,
        ),
        (
            "Unfollowed since",
            nav.t("配信後にブロックした人数", "Unfollowed since"),
            results.tally.unfollowed,
        ),
    ];
    let refresh = progress_refresh(status.state);
    let path = format!("/console/campaigns/{}", segment(&status.campaign_id));
    super::page_refreshing(
        nav.lang,
        nav.t("一斉配信の状況", "Campaign"),
        Some(nav),
        html! {
            @if created {
                (flash(Some((true, nav.t("一斉配信を作成しました。このページで進み具合を確認できます。", "The campaign is created. This page shows its progress.")))))
            }
            @if let Some(seconds) = refresh {
                p id="refreshing" class="muted" {
                    @match nav.lang {
                        ConsoleLang::Ja => { "配信が終わるまで、このページは" (seconds) "秒ごとに更新されます。" }
                        ConsoleLang::En => { "This page refreshes every " (seconds) " s until the campaign is through." }
                    }
                }
            }
            section {
                p { (status.scenario_id) " · " span id="campaign-state" { (super::campaign_state(nav.lang, status.state)) } br; span class="muted" { (status.campaign_id) } }
                @if let Some(starts) = &status.starts_at { p { (nav.t("開始予定: ", "Starts at ")) (time_of_text(starts)) } }
                @if nav.may(OperatorRole::Editor) {
                    p {
                        @if matches!(status.state, "scheduled" | "planning" | "sending") {
                            a id="cancel-campaign" href={ "/console/campaigns/" (segment(&status.campaign_id)) "/cancel" } { (nav.t("この一斉配信を取り消す", "Cancel this campaign")) }
                        } @else if status.state == "done" {
                            a id="cancel-campaign" href={ "/console/campaigns/" (segment(&status.campaign_id)) "/cancel" } { (nav.t("まだ送られていないリマインダーとステップ配信を取り消す", "Cancel its reminders and steps not sent yet")) }
                        }
                    }
                }
                div class="scroll" {
                    table {
                        @for (figure, name, value) in figures {
                            tr data-figure=(figure) { th { (name) } td class="num" { (value) } }
                        }
                    }
                }
                @for question in &results.questions {
                    h2 { (question.text) }
                    p class="muted" {
                        (question.node_id) " · "
                        @match nav.lang {
                            ConsoleLang::Ja => { (question.answered) " 人が回答" }
                            ConsoleLang::En => { (question.answered) " answered" }
                        }
                    }
                    @if !question.choices.is_empty() {
                        div class="scroll" {
                            table {
                                @for choice in &question.choices {
                                    tr data-choice=(choice.value) {
                                        td { (choice.label) }
                                        td { div class="bar" { span style={ "width:" (share(choice.count, question.answered)) "%" } {} } }
                                        td class="num" { (choice.count) }
                                    }
                                }
                            }
                        }
                    }
                }
                @if nav.may(OperatorRole::Owner) {
                    p { a href={ "/console/scenarios/" (status.scenario_id) "/answers.csv?campaign=" (status.campaign_id) } { (nav.t("この一斉配信の回答をダウンロード（CSV）", "Download this campaign's answers (CSV)")) } }
                }
            }
        },
        refresh.map(|seconds| (seconds, path.as_str())),
    )
}

#[cfg(test)]
mod tests {
    use super::progress_refresh;

    #[test]
    fn a_campaign_page_refreshes_only_while_its_messages_are_on_their_way() {
        let cases = [
            ("scheduled", None),
            ("planning", Some(10)),
            ("sending", Some(10)),
            ("cancelling", Some(10)),
            ("cancelled", None),
            ("done", None),
            ("something_new", None),
        ];
        for (state, refresh) in cases {
            assert_eq!(progress_refresh(state), refresh, "{state}");
        }
    }
}
