//! Campaigns: the list, one campaign's progress and results, the builder,
//! its preview and confirmation, and the cancel.

use super::{Nav, flash, page, percent, segment, share, time_of_text};
use crate::http::console::campaign_form::CampaignForm;
use crate::pipeline::campaigns::CampaignStatus;
use crate::values::OperatorRole;
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
        "New campaign",
        Some(nav),
        html! {
            @if let Some(problem) = problem { (flash(Some((false, problem)))) }
            form method="get" action="/console/campaigns/new" id="campaign-builder" {
                input type="hidden" name="preview" value="1";
                section {
                    h2 { "What to send" }
                    p {
                        label for="scenario" { "Scenario" } br;
                        select id="scenario" name="scenario" {
                            @for (id, title) in scenarios {
                                option value=(id) selected[asked.scenario == *id] { (id) @if !title.is_empty() { " — " (title) } }
                            }
                        }
                    }
                    p { label { input type="checkbox" id="skip_answered" name="skip_answered" value="true" checked[asked.skip_answered == "true"]; " Leave out users who already answered this scenario" } }
                }
                section {
                    h2 { "Who gets it" }
                    p class="muted" { "Every user who follows the account, narrowed by what you fill in. Lists take commas or new lines. Empty boxes do not filter." }
                    (builder_text("tags_any", "Has any of these tags", &asked.tags_any))
                    (builder_text("tags_all", "Has all of these tags", &asked.tags_all))
                    (builder_text("tags_none", "Has none of these tags", &asked.tags_none))
                    (builder_text("answered", "Answered each of these scenarios", &asked.answered))
                    (builder_text("not_answered", "Answered none of these scenarios", &asked.not_answered))
                    p {
                        label for="first_seen_from" { "First seen from (date, inclusive)" } br;
                        input type="date" id="first_seen_from" name="first_seen_from" value=(asked.first_seen_from);
                    }
                    p {
                        label for="first_seen_to" { "First seen until (date, inclusive)" } br;
                        input type="date" id="first_seen_to" name="first_seen_to" value=(asked.first_seen_to);
                    }
                    (builder_text("sources", "Came through any of these source links", &asked.sources))
                    p {
                        label for="fields" { "Fields (a condition per line)" } br;
                        textarea id="fields" name="fields" rows="3" cols="30" placeholder="age >= 20\nplan in gold, silver\nbirthday exists" { (asked.fields) }
                        br; span class="muted" { "name = value, name in a, b, name >= value, name <= value, name exists, name missing. \"007\" in quotes is text." }
                    }
                }
                section {
                    h2 { "When" }
                    p { label { input type="radio" name="when" value="now" id="when-now" checked[!later]; " Now" } }
                    p {
                        label { input type="radio" name="when" value="later" id="when-later" checked[later]; " At (Japan time, JST)" }
                        " "
                        input type="datetime-local" id="send_at" name="send_at" value=(asked.send_at);
                    }
                    p { label { input type="checkbox" id="allow_over_quota" name="allow_over_quota" value="true" checked[asked.allow_over_quota == "true"]; " Send even beyond the month's quota" } }
                    button class="primary" type="submit" id="preview" { "Preview" }
                    " "
                    span class="muted" { "Nothing is sent before you confirm on the next page." }
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
fn audience_words(audience: &crate::engine::campaign::AudienceRequest) -> Vec<String> {
    let join = |values: &[String]| values.join(", ");
    let mut words = Vec::new();
    if let Some(tags) = &audience.tags {
        if let Some(any) = &tags.any_of {
            words.push(format!("has any of the tags {}", join(any)));
        }
        if let Some(all) = &tags.all_of {
            words.push(format!("has all of the tags {}", join(all)));
        }
        if let Some(none) = &tags.none_of {
            words.push(format!("has none of the tags {}", join(none)));
        }
    }
    if let Some(answered) = &audience.answered {
        words.push(format!("answered {}", join(answered)));
    }
    if let Some(not) = &audience.not_answered {
        words.push(format!("answered none of {}", join(not)));
    }
    if let Some(from) = &audience.first_seen_from {
        words.push(format!("first seen on or after {from}"));
    }
    if let Some(to) = &audience.first_seen_to {
        words.push(format!("first seen on or before {to}"));
    }
    if let Some(sources) = &audience.sources {
        words.push(format!("came through {}", join(&sources.any_of)));
    }
    if let Some(fields) = &audience.fields {
        for (name, condition) in fields {
            words.push(format!(
                "field {name}: {}",
                crate::access::audit::json_summary(condition)
            ));
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
    let words = audience_words(&campaign.audience);
    page(
        "New campaign",
        Some(nav),
        html! {
            section {
                p {
                    "This sends " strong { (campaign.scenario_id) } " to "
                    strong id="audience-count" { (found.count) } " users"
                    @if let Some(at) = &found.starts_at { ", starting at " span id="starts-at" { (time_of_text(at)) } } @else { ", now" }
                    "."
                }
                ul id="audience-words" {
                    li { "follows the account" }
                    @for word in &words { li { (word) } }
                    @if campaign.skip_answered { li { "has not answered " (campaign.scenario_id) } }
                }
                p {
                    (found.quota.messages) " messages"
                    @if let Some(left) = found.quota.remaining { "; the month's quota has " (left) " left" }
                    "."
                    @if found.quota.over() { " " strong { "That is beyond the quota." } }
                }
                @if !found.sample.is_empty() {
                    p class="muted" { "Some of them:" }
                    ul id="audience-sample" {
                        @for user in &found.sample {
                            li { a href={ "/console/users?id=" (segment(user)) } { code { (user) } } }
                        }
                    }
                }
                p class="muted" { "The audience is read again when the campaign starts: users who join the filters before then get it too." }
                (campaign_confirm_form(
                    nav,
                    asked,
                    key,
                    if found.starts_at.is_some() { "Schedule the campaign" } else { "Send the campaign" },
                    "confirm-campaign",
                ))
                p { a id="change-campaign" href={ "/console/campaigns/new?" (again) } { "Change" } }
            }
        },
    )
}

/// A campaign the service did not create, and the way back: the builder
/// with the values kept, and, when the outcome may be unknown, the same
/// confirm form (the same key: it finds the campaign if it was created).
pub(crate) fn campaign_refused(nav: &Nav, message: &str, again: &str, retry: Option<(&CampaignForm, &str)>) -> Markup {
    page(
        "New campaign",
        Some(nav),
        html! {
            (flash(Some((false, message))))
            section {
                @if let Some((asked, key)) = retry {
                    (campaign_confirm_form(nav, asked, key, "Try again", "retry-campaign"))
                }
                p { a id="change-campaign" href={ "/console/campaigns/new?" (again) } { "Back to the campaign builder" } }
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
pub(crate) fn campaign_cancel(nav: &Nav, status: &CampaignStatus) -> Markup {
    let left = status.pending;
    page(
        "Cancel a campaign",
        Some(nav),
        html! {
            section {
                p {
                    "Campaign " strong { (status.scenario_id) } " (" (status.state) "): "
                    (status.sent) " sent, " (left) " not sent yet."
                }
                @if status.state == "done" {
                    p { "Everything went out. Cancelling stops the reminders, expiries and steps its recipients have not got yet." }
                } @else {
                    p { "Cancelling stops what has not been sent yet. What was sent stays sent." }
                }
                form method="post" action={ "/console/campaigns/" (segment(&status.campaign_id)) "/cancel" } {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    p {
                        label {
                            input type="checkbox" name="timers" value="true" checked[status.state == "done"];
                            " Also cancel the recipients' reminders, expiries and steps not sent yet"
                        }
                    }
                    button class="danger" type="submit" id="confirm-cancel" { "Cancel the campaign" }
                    " "
                    a href={ "/console/campaigns/" (segment(&status.campaign_id)) } { "Keep it" }
                }
            }
        },
    )
}

/// A campaign cancel's result.
pub(crate) fn campaign_cancelled(nav: &Nav, campaign: &str, result: (bool, &str)) -> Markup {
    page(
        "Cancel a campaign",
        Some(nav),
        html! {
            (flash(Some(result)))
            section { a id="back-to-campaign" href={ "/console/campaigns/" (segment(campaign)) } { "Back to the campaign" } }
        },
    )
}

pub(crate) fn campaigns(nav: &Nav, all: &[CampaignStatus]) -> Markup {
    page(
        "Campaigns",
        Some(nav),
        html! {
            @if nav.may(OperatorRole::Editor) {
                p { a id="new-campaign" href="/console/campaigns/new" { "New campaign" } }
            }
            section {
                @if all.is_empty() { p { "No campaigns yet." } } @else {
                    div class="scroll" {
                        table {
                            tr { th { "Campaign" } th { "State" } th { "Progress" } th class="num" { "Sent" } th class="num" { "Failed" } th class="num" { "Skipped" } th class="num" { "Planned" } }
                            @for campaign in all {
                                @let done = campaign.sent.saturating_add(campaign.failed).saturating_add(campaign.skipped);
                                tr data-campaign=(campaign.campaign_id) {
                                    td {
                                        a href={ "/console/campaigns/" (campaign.campaign_id) } { (campaign.scenario_id) }
                                        br; span class="muted" { (campaign.campaign_id) }
                                    }
                                    td { (campaign.state) }
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

/// One campaign: its state and its results, counted exactly.
pub(crate) fn campaign(
    nav: &Nav,
    status: &CampaignStatus,
    results: &crate::reports::campaign_results::CampaignResults,
    created: bool,
) -> Markup {
    let figures = [
        ("Recipients", results.recipients),
        ("Delivered", results.delivered),
        ("Answered", results.tally.answered),
        ("Reminded", results.tally.reminded),
        ("Expired", results.tally.expired),
        ("Unfollowed since", results.tally.unfollowed),
    ];
    page(
        "Campaign",
        Some(nav),
        html! {
            @if created {
                (flash(Some((true, "The campaign is created. This page shows its progress; reload it to see more."))))
            }
            section {
                p { (status.scenario_id) " · " span id="campaign-state" { (status.state) } br; span class="muted" { (status.campaign_id) } }
                @if let Some(starts) = &status.starts_at { p { "Starts at " (time_of_text(starts)) } }
                @if nav.may(OperatorRole::Editor) {
                    p {
                        @if matches!(status.state, "scheduled" | "planning" | "sending") {
                            a id="cancel-campaign" href={ "/console/campaigns/" (segment(&status.campaign_id)) "/cancel" } { "Cancel this campaign" }
                        } @else if status.state == "done" {
                            a id="cancel-campaign" href={ "/console/campaigns/" (segment(&status.campaign_id)) "/cancel" } { "Cancel its reminders and steps not sent yet" }
                        }
                    }
                }
                div class="scroll" {
                    table {
                        @for (name, value) in figures {
                            tr data-figure=(name) { th { (name) } td class="num" { (value) } }
                        }
                    }
                }
                @for question in &results.questions {
                    h2 { (question.text) }
                    p class="muted" { (question.node_id) " · " (question.answered) " answered" }
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
                    p { a href={ "/console/scenarios/" (status.scenario_id) "/answers.csv?campaign=" (status.campaign_id) } { "Download this campaign's answers (CSV)" } }
                }
            }
        },
    )
}
