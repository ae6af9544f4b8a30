//! Dead letters (what the service parked) and the confirmation of a replay.

use super::{Nav, flash, page, segment, time};
use crate::store::DeadLetterDoc;
use crate::values::OperatorRole;
use maud::{Markup, html};

/// `confirm`: the letter whose replay the console just refused to send without a
/// confirmation; its row offers "Replay anyway".
pub(crate) fn dead_letters(
    nav: &Nav,
    letters: &[(String, DeadLetterDoc)],
    result: Option<(bool, &str)>,
    confirm: Option<&str>,
) -> Markup {
    page(
        "Dead letters",
        Some(nav),
        html! {
            (flash(result))
            section {
                @if letters.is_empty() { p id="no-letters" { "Nothing is parked." } } @else {
                    div class="scroll" {
                        table {
                            tr { th { "Parked" } th { "Kind" } th { "Reason" } th { "User" } th {} }
                            @for (id, letter) in letters {
                                tr data-letter=(id) {
                                    td { (time(letter.parked_at.as_millisecond())) }
                                    td { (letter.kind.as_str()) }
                                    td { (letter.reason) br; span class="muted" { "attempts " (letter.attempts) } }
                                    td {
                                        @if let Some(user) = &letter.line_user_id {
                                            a href={ "/console/users?id=" (segment(user)) } { (user) }
                                        }
                                    }
                                    td {
                                        @if nav.may(OperatorRole::Editor) && letter.kind != crate::store::DeadLetterKind::CampaignChunk {
                                            a class="button replay" href={ "/console/dead-letters/" (segment(id)) "/replay" } { "Replay…" }
                                        }
                                        @if confirm == Some(id.as_str()) && nav.may(OperatorRole::Editor) {
                                            form method="post" action={ "/console/dead-letters/" (segment(id)) "/replay" } {
                                                input type="hidden" name="csrf" value=(nav.csrf);
                                                input type="hidden" name="force" value="true";
                                                input type="hidden" name="seen" value=(letter.parked_at.as_millisecond());
                                                button class="danger" type="submit" id="replay-anyway" { "Replay anyway" }
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
pub(crate) fn replay_confirm(nav: &Nav, id: &str, letter: &DeadLetterDoc, risk: Option<&str>) -> Markup {
    use crate::store::DeadLetterKind;
    let does = match letter.kind {
        DeadLetterKind::Event => {
            "runs the user's event again: what they answered is recorded if it was not, and the bot's next message is sent once."
        }
        DeadLetterKind::Outbound | DeadLetterKind::UncertainReply => {
            "sends the parked message to the user again, by push (the month's quota counts it); a parked rich menu link is linked again."
        }
        DeadLetterKind::CampaignChunk => {
            "nothing: a campaign chunk LINE refused is not replayed. Fix the scenario and start a new campaign (leave out who answered)."
        }
    };
    let action = format!("/console/dead-letters/{}/replay", segment(id));
    page(
        "Replay a dead letter",
        Some(nav),
        html! {
            section {
                div class="scroll" {
                    table {
                        tr { th { "Parked" } td { (time(letter.parked_at.as_millisecond())) } }
                        tr { th { "Kind" } td { (letter.kind.as_str()) } }
                        tr { th { "Why" } td id="letter-reason" { (letter.reason) } }
                        tr { th { "Attempts" } td { (letter.attempts) } }
                        @if let Some(user) = &letter.line_user_id {
                            tr { th { "User" } td { a href={ "/console/users?id=" (segment(user)) } { (user) } } }
                        }
                    }
                }
                p id="replay-does" { "A replay " (does) }
                @if let Some(risk) = risk {
                    p class="flash bad" id="replay-risk" { "Careful: " (risk) "." }
                }
                @if letter.kind != DeadLetterKind::CampaignChunk {
                    form method="post" action=(action) {
                        input type="hidden" name="csrf" value=(nav.csrf);
                        @if risk.is_some() {
                            input type="hidden" name="force" value="true";
                            input type="hidden" name="seen" value=(letter.parked_at.as_millisecond());
                            button class="danger" type="submit" id="replay-anyway" { "Replay anyway" }
                        } @else {
                            button class="primary" type="submit" id="confirm-replay" { "Replay" }
                        }
                        " "
                        a href="/console/dead-letters" { "Keep it parked" }
                    }
                }
            }
        },
    )
}
