//! Dead letters (what the service parked) and the confirmation of a replay.

use super::{Nav, flash, page, segment, time};
use crate::store::{DeadLetterDoc, DeadLetterKind};
use crate::values::{ConsoleLang, OperatorRole};
use maud::{Markup, html};

/// A dead letter's kind as operators read it: in Japanese a word, in English
/// the kind as the API names it.
fn kind_name(lang: ConsoleLang, kind: DeadLetterKind) -> &'static str {
    match kind {
        DeadLetterKind::Event => lang.t("受信イベント", kind.as_str()),
        DeadLetterKind::Outbound => lang.t("送信メッセージ", kind.as_str()),
        DeadLetterKind::UncertainReply => lang.t("結果不明の返信", kind.as_str()),
        DeadLetterKind::CampaignChunk => lang.t("一斉配信の一部", kind.as_str()),
    }
}

/// `confirm`: the letter whose replay the console just refused to send without a
/// confirmation; its row offers "Replay anyway".
pub(crate) fn dead_letters(
    nav: &Nav,
    letters: &[(String, DeadLetterDoc)],
    result: Option<(bool, &str)>,
    confirm: Option<&str>,
) -> Markup {
    page(
        nav.lang,
        nav.t("配信失敗", "Dead letters"),
        Some(nav),
        html! {
            (flash(result))
            section {
                @if letters.is_empty() { p id="no-letters" { (nav.t("配信失敗はありません。", "Nothing is parked.")) } } @else {
                    div class="scroll" {
                        table {
                            tr {
                                th { (nav.t("記録日時", "Parked")) }
                                th { (nav.t("種類", "Kind")) }
                                th { (nav.t("理由", "Reason")) }
                                th { (nav.t("ユーザー", "User")) }
                                th {}
                            }
                            @for (id, letter) in letters {
                                tr data-letter=(id) {
                                    td class="when" { (time(letter.parked_at.as_millisecond())) }
                                    td { (kind_name(nav.lang, letter.kind)) }
                                    td {
                                        (letter.reason) br;
                                        span class="muted" {
                                            @match nav.lang {
                                                ConsoleLang::Ja => { "試行 " (letter.attempts) " 回" }
                                                ConsoleLang::En => { "attempts " (letter.attempts) }
                                            }
                                        }
                                    }
                                    td {
                                        @if let Some(user) = &letter.line_user_id {
                                            a href={ "/console/users?id=" (segment(user)) } { (user) }
                                        }
                                    }
                                    td {
                                        @if nav.may(OperatorRole::Editor) && letter.kind != DeadLetterKind::CampaignChunk {
                                            a class="button replay" href={ "/console/dead-letters/" (segment(id)) "/replay" } { (nav.t("再送…", "Replay…")) }
                                        }
                                        @if confirm == Some(id.as_str()) && nav.may(OperatorRole::Editor) {
                                            form method="post" action={ "/console/dead-letters/" (segment(id)) "/replay" } {
                                                input type="hidden" name="csrf" value=(nav.csrf);
                                                input type="hidden" name="force" value="true";
                                                input type="hidden" name="seen" value=(letter.parked_at.as_millisecond());
                                                button class="danger" type="submit" id="replay-anyway" { (nav.t("それでも再送", "Replay anyway")) }
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

/// A dead letter's replay, confirmed first: what it is, why it was parked
/// (LINE's message and details), what a replay does, and, when it may reach
/// the user twice, the risk with a "Replay anyway" in place of "Replay".
pub(crate) fn replay_confirm(nav: &Nav, id: &str, letter: &DeadLetterDoc, risk: Option<&str>, key: &str) -> Markup {
    let does = match letter.kind {
        DeadLetterKind::Event => nav.t(
            "再送すると、ユーザーのイベントをもう一度処理します。まだ記録されていない回答は記録され、ボットの次のメッセージが1回だけ送られます。",
            "A replay runs the user's event again: what they answered is recorded if it was not, and the bot's next message is sent once.",
        ),
        DeadLetterKind::Outbound | DeadLetterKind::UncertainReply => nav.t(
            "再送すると、止まっていたメッセージをプッシュでユーザーにもう一度送ります（今月の上限に数えられます）。止まっていたリッチメニューの切り替えも、もう一度行います。",
            "A replay sends the parked message to the user again, by push (the month's quota counts it); a parked rich menu link is linked again.",
        ),
        DeadLetterKind::CampaignChunk => nav.t(
            "LINEに受け付けられなかった一斉配信の一部は再送できません。シナリオを直して、新しい一斉配信を始めてください（回答済みのユーザーは除いてください）。",
            "A replay nothing: a campaign chunk LINE refused is not replayed. Fix the scenario and start a new campaign (leave out who answered).",
        ),
    };
    let action = format!("/console/dead-letters/{}/replay", segment(id));
    page(
        nav.lang,
        nav.t("配信失敗の再送", "Replay a dead letter"),
        Some(nav),
        html! {
            section {
                div class="scroll" {
                    table {
                        tr { th { (nav.t("記録日時", "Parked")) } td class="when" { (time(letter.parked_at.as_millisecond())) } }
                        tr { th { (nav.t("種類", "Kind")) } td { (kind_name(nav.lang, letter.kind)) } }
                        tr { th { (nav.t("理由", "Why")) } td id="letter-reason" { (letter.reason) } }
                        tr { th { (nav.t("試行回数", "Attempts")) } td { (letter.attempts) } }
                        @if let Some(user) = &letter.line_user_id {
                            tr { th { (nav.t("ユーザー", "User")) } td { a href={ "/console/users?id=" (segment(user)) } { (user) } } }
                        }
                    }
                }
                p id="replay-does" { (does) }
                @if let Some(risk) = risk {
                    p class="flash bad" id="replay-risk" { (nav.t("注意: ", "Careful: ")) (risk) (nav.t("。", ".")) }
                }
                @if letter.kind != DeadLetterKind::CampaignChunk {
                    form method="post" action=(action) {
                        input type="hidden" name="csrf" value=(nav.csrf);
                        input type="hidden" name="key" value=(key);
                        @if risk.is_some() {
                            input type="hidden" name="force" value="true";
                            input type="hidden" name="seen" value=(letter.parked_at.as_millisecond());
                            button class="danger" type="submit" id="replay-anyway" { (nav.t("それでも再送", "Replay anyway")) }
                        } @else {
                            button class="primary" type="submit" id="confirm-replay" { (nav.t("再送する", "Replay")) }
                        }
                        " "
                        a href="/console/dead-letters" { (nav.t("再送しない", "Keep it parked")) }
                    }
                }
            }
        },
    )
}
