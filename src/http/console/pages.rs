//! The console's pages: compiled templates (maud), one stylesheet inline, no
//! script and nothing fetched from elsewhere. Every value is escaped by maud;
//! tables scroll sideways inside their box, so a page fits a phone's width.

use super::campaign_form::CampaignForm;
use crate::engine::crosstab::CrossTab;
use crate::engine::results::NodeResults;
use crate::pipeline::campaigns::CampaignStatus;
use crate::reports::export::{HEADER, RowsPage};
use crate::reports::results::ScenarioResults;
use crate::store::DeadLetterDoc;
use crate::values::OperatorRole;
use maud::{DOCTYPE, Markup, PreEscaped, html};

const STYLE: &str = "
*{box-sizing:border-box}
body{margin:0;font-family:system-ui,-apple-system,'Hiragino Sans','Noto Sans CJK JP','Yu Gothic',sans-serif;color:#1b1b1b;background:#f6f7f9;line-height:1.5}
header{background:#06c755;color:#fff;padding:.6rem 1rem;display:flex;flex-wrap:wrap;gap:.4rem 1rem;align-items:center}
header a,header button{color:#fff;text-decoration:none;font-weight:600;background:none;border:0;font:inherit;cursor:pointer;padding:0}
header form{margin-left:auto}
main{padding:1rem;max-width:60rem;margin:auto}
section{background:#fff;border-radius:.5rem;padding:1rem;margin-bottom:1rem;box-shadow:0 1px 2px #0002}
h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.1rem;margin:0 0 .6rem}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.9rem;min-width:100%}
th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #e3e3e3;vertical-align:top;word-break:break-word}
th{white-space:nowrap;word-break:normal}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
table.rows td,table.rows th{white-space:nowrap;word-break:normal}
svg{max-width:100%;height:auto;display:block}
.flash{padding:.6rem 1rem;border-radius:.4rem;margin-bottom:1rem}
.ok{background:#e6f8ee}.bad{background:#fdecea}
input,button.primary,button.danger{font:inherit;padding:.5rem .7rem;border-radius:.4rem;border:1px solid #bbb;max-width:100%}
button.primary,a.button{background:#06c755;color:#fff;border:0;cursor:pointer}
a.button{display:inline-block;padding:.4rem .7rem;border-radius:.4rem;text-decoration:none;white-space:nowrap}
button.danger{background:#c0392b;color:#fff;border:0;cursor:pointer;margin-top:.3rem}
.bar{background:#e3e3e3;border-radius:.3rem;height:.7rem;overflow:hidden}.bar span{display:block;height:100%;background:#06c755}
.muted{color:#666;font-size:.85rem}
";

/// What the header shows for a logged-in operator, and what the pages offer
/// them (the server checks each role again: a hidden button is not a check).
pub(crate) struct Nav<'a> {
    pub(crate) csrf: &'a str,
    /// The operator's email, or `ADMIN_TOKEN`.
    pub(crate) who: &'a str,
    pub(crate) role: OperatorRole,
}

impl Nav<'_> {
    fn may(&self, needed: OperatorRole) -> bool {
        self.role.allows(needed)
    }
}

fn page(title: &str, nav: Option<&Nav>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="ja" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · line-survey" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "line-survey" }
                    @if let Some(nav) = nav {
                        a href="/console" { "Scenarios" }
                        a href="/console/dead-letters" { "Dead letters" }
                        a href="/console/users" { "Users" }
                        a href="/console/campaigns" { "Campaigns" }
                        a href="/console/sources" { "Sources" }
                        a href="/console/tokens" { "API tokens" }
                        @if nav.may(OperatorRole::Owner) { a href="/console/audit" { "Audit log" } }
                        span id="who" class="who" { (nav.who) " (" (nav.role.as_str()) ")" }
                        form method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(nav.csrf);
                            button type="submit" id="logout" { "Log out" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

fn flash(message: Option<(bool, &str)>) -> Markup {
    html! {
        @if let Some((ok, text)) = message {
            p class={ "flash " (if ok { "ok" } else { "bad" }) } id="flash" { (text) }
        }
    }
}

pub(crate) fn login(csrf: &str, error: Option<&str>) -> Markup {
    page(
        "Log in",
        None,
        html! {
            section {
                (flash(error.map(|error| (false, error))))
                form method="post" action="/console/login" id="password-login" {
                    input type="hidden" name="csrf" value=(csrf);
                    p {
                        label for="email" { "Email" } br;
                        input type="email" id="email" name="email" autocomplete="username" required;
                    }
                    p {
                        label for="password" { "Password" } br;
                        input type="password" id="password" name="password" autocomplete="current-password" required;
                    }
                    button class="primary" type="submit" id="sign-in" { "Log in" }
                }
            }
            section {
                h2 { "Admin token" }
                p class="muted" { "For the first run and for scripts: it signs in as an owner." }
                form method="post" action="/console/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    p {
                        label for="token" { "Admin token" } br;
                        input type="password" id="token" name="token" autocomplete="off" required;
                    }
                    button class="primary" type="submit" id="login" { "Log in with the token" }
                }
            }
        },
    )
}

/// `/console/tokens`: the operator's personal API tokens. `tokens` is `None`
/// for an admin-token session (no person to own one); `created` is a token
/// just made, shown this once.
pub(crate) fn api_tokens(
    nav: &Nav,
    tokens: Option<&[crate::access::ListedApiToken]>,
    created: Option<&str>,
    message: Option<(bool, &str)>,
) -> Markup {
    let roles = [OperatorRole::Viewer, OperatorRole::Editor, OperatorRole::Owner];
    page(
        "API tokens",
        Some(nav),
        html! {
            (flash(message))
            @if let Some(token) = created {
                section id="created" {
                    p { "Your new token. Copy it now: it is not shown again." }
                    p { code id="new-token" { (token) } }
                    p class="muted" { "Use it as " code { "Authorization: Bearer " (token) } " on /admin." }
                }
            }
            @match tokens {
                None => section { p id="no-operator" { "Personal tokens belong to operators: sign in with your email to make one." } },
                Some(tokens) => {
                    section {
                        h2 { "New token" }
                        form method="post" action="/console/tokens" {
                            input type="hidden" name="csrf" value=(nav.csrf);
                            p { label for="label" { "Label" } br; input type="text" id="label" name="label" maxlength="60" required; }
                            p {
                                label for="role" { "Role" } br;
                                select id="role" name="role" {
                                    @for role in roles.iter().filter(|role| nav.may(**role)) {
                                        option value=(role.as_str()) { (role.as_str()) }
                                    }
                                }
                            }
                            button class="primary" type="submit" id="create-token" { "Create" }
                        }
                    }
                    section {
                        @if tokens.is_empty() { p id="no-tokens" { "No tokens yet." } } @else {
                            div class="scroll" {
                                table id="tokens" {
                                    tr { th { "Token" } th { "Label" } th { "Role" } th { "Created" } th {} }
                                    @for token in tokens {
                                        tr data-token=(token.id) {
                                            td { code { (token.doc.prefix) "…" } }
                                            td { (token.doc.label) }
                                            td { (token.doc.role.as_str()) }
                                            td { (time(token.doc.created_ms)) }
                                            td {
                                                @if token.doc.revoked { "revoked" } @else {
                                                    form method="post" action={ "/console/tokens/" (segment(&token.id)) "/revoke" } {
                                                        input type="hidden" name="csrf" value=(nav.csrf);
                                                        button class="danger" type="submit" { "Revoke" }
                                                    }
                                                }
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

/// A field's value as shown: texts as typed, numbers and yes/no in words.
fn field_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Bool(true) => "yes".to_owned(),
        serde_json::Value::Bool(false) => "no".to_owned(),
        other => other.to_string(),
    }
}

/// A user's tags and fields, and for editors the forms that change them by
/// hand (each change is audited as theirs).
fn tags_and_fields(nav: &Nav, story: &serde_json::Value) -> Markup {
    let user = story["userId"].as_str().unwrap_or_default();
    let tags: Vec<&str> = story["user"]["tags"]
        .as_array()
        .map(|tags| tags.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<(&String, &serde_json::Value)> = story["fields"]
        .as_object()
        .map(|fields| fields.iter().collect())
        .unwrap_or_default();
    let editor = nav.may(OperatorRole::Editor);
    let hidden = |op: &str| {
        html! {
            input type="hidden" name="csrf" value=(nav.csrf);
            input type="hidden" name="user" value=(user);
            input type="hidden" name="op" value=(op);
        }
    };
    html! {
        section id="tags-and-fields" {
            h2 { "Tags and fields" }
            div class="scroll" {
                table id="user-tags" {
                    tr { th { "Tag" } th {} }
                    @for tag in &tags {
                        tr data-tag=(tag) {
                            td { (tag) }
                            td {
                                @if editor {
                                    form method="post" action="/console/users/edit" {
                                        (hidden("remove_tag"))
                                        input type="hidden" name="tag" value=(tag);
                                        button class="danger" type="submit" { "Remove" }
                                    }
                                }
                            }
                        }
                    }
                }
                table id="user-fields" {
                    tr { th { "Field" } th { "Value" } th {} }
                    @for (name, value) in &fields {
                        tr data-field=(name) {
                            td { (name) }
                            td { (field_text(value)) }
                            td {
                                @if editor {
                                    form method="post" action="/console/users/edit" {
                                        (hidden("remove_field"))
                                        input type="hidden" name="field" value=(name);
                                        button class="danger" type="submit" { "Remove" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if editor && story["known"].as_bool() == Some(true) {
                form method="post" action="/console/users/edit" id="add-tag" {
                    (hidden("add_tag"))
                    label for="new-tag" { "Add a tag" } " "
                    input type="text" id="new-tag" name="tag" maxlength="100" required;
                    " "
                    button class="primary" type="submit" { "Add" }
                }
                form method="post" action="/console/users/edit" id="set-field" {
                    (hidden("set_field"))
                    p {
                        label for="field-name" { "Field" } " "
                        input type="text" id="field-name" name="field" maxlength="40" pattern="[a-z][a-z0-9_]{0,39}" required;
                        " "
                        label for="field-value" { "Value" } " "
                        input type="text" id="field-value" name="value" maxlength="500";
                        " "
                        select name="kind" id="field-kind" {
                            option value="text" { "text" }
                            option value="number" { "number" }
                            option value="yes_no" { "yes / no" }
                        }
                        " "
                        button class="primary" type="submit" { "Set" }
                    }
                }
                p class="muted" { "Changes by hand are recorded in the audit log as yours." }
            }
        }
    }
}

/// `/console/users/send?id=U...`: the scenarios an operator may send the user.
pub(crate) fn send_choice(nav: &Nav, user: &str, scenarios: &[(String, String)]) -> Markup {
    page(
        "Send a scenario",
        Some(nav),
        html! {
            section {
                p { "To " code { (user) } }
                form method="get" action="/console/users/send" id="send-choice" {
                    input type="hidden" name="id" value=(user);
                    p {
                        label for="scenario" { "Scenario" } br;
                        select id="scenario" name="scenario" {
                            @for (id, title) in scenarios {
                                option value=(id) { (id) @if !title.is_empty() { " — " (title) } }
                            }
                        }
                    }
                    button class="primary" type="submit" id="preview" { "Preview" }
                }
            }
        },
    )
}

/// The confirmation of a send: what the user will get, rendered for them,
/// and the form that sends it once (its `key` is this form's own).
pub(crate) fn send_preview(nav: &Nav, user: &str, scenario: &str, messages: &[String], key: &str) -> Markup {
    page(
        "Send a scenario",
        Some(nav),
        html! {
            section {
                p { "This sends " strong { (scenario) } " to " code { (user) } " now, by push, whether or not they answered it before. They will get:" }
                ol id="preview-messages" {
                    @for message in messages { li style="white-space:pre-wrap" { (message) } }
                }
                form method="post" action="/console/users/send" {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    input type="hidden" name="user" value=(user);
                    input type="hidden" name="scenario" value=(scenario);
                    input type="hidden" name="key" value=(key);
                    button class="primary" type="submit" id="confirm-send" { "Send" }
                    " "
                    a href={ "/console/users?id=" (segment(user)) } { "Cancel" }
                }
            }
        },
    )
}

/// The confirmation of an erasure: what goes, what stays.
pub(crate) fn erase_confirm(nav: &Nav, user: &str) -> Markup {
    page(
        "Erase a user's personal data",
        Some(nav),
        html! {
            section {
                p { "This erases the personal data stored of " code { (user) } ":" }
                ul {
                    li { "the value of every answer (typed text, numbers, dates, choices): the answers stay as empty records, so counts stay" }
                    li { "every field, and the cached display name" }
                    li { "the open question, if any" }
                }
                p { "It keeps the user id, tags, follow state and times, the messages the bot sent (scenario text only), and the audit log. It cannot be undone. Download the data first if the user asked for it." }
                form method="post" action="/console/users/erase" {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    input type="hidden" name="user" value=(user);
                    button class="danger" type="submit" id="confirm-erase" { "Erase" }
                    " "
                    a href={ "/console/users?id=" (segment(user)) } { "Keep it" }
                }
            }
        },
    )
}

/// A send's result.
pub(crate) fn send_result(nav: &Nav, user: &str, result: (bool, &str)) -> Markup {
    page(
        "Send a scenario",
        Some(nav),
        html! {
            (flash(Some(result)))
            section { a id="back-to-user" href={ "/console/users?id=" (segment(user)) } { "Back to the user" } }
        },
    )
}

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

/// `/console/audit`: the audit log, newest first, with its filters.
pub(crate) fn audit(
    nav: &Nav,
    asked: &crate::reports::audit::AuditQuery,
    rows: Result<&[crate::reports::audit::AuditRow], &str>,
) -> Markup {
    let value = |field: &Option<String>| field.clone().unwrap_or_default();
    page(
        "Audit log",
        Some(nav),
        html! {
            section {
                form method="get" action="/console/audit" id="audit-filter" {
                    p {
                        label for="operator" { "Operator" } " "
                        input type="text" id="operator" name="operator" value=(value(&asked.operator)) placeholder="staff@shop.example";
                        " "
                        label for="action" { "Action" } " "
                        input type="text" id="action" name="action" value=(value(&asked.action)) placeholder="manual_send";
                    }
                    p {
                        label for="from" { "From" } " "
                        input type="date" id="from" name="from" value=(value(&asked.from));
                        " "
                        label for="to" { "To" } " "
                        input type="date" id="to" name="to" value=(value(&asked.to));
                        " "
                        button class="primary" type="submit" { "Filter" }
                    }
                    p class="muted" { "Times are Japan time (JST, UTC+9); days are inclusive." }
                }
            }
            section {
                @match rows {
                    Err(problem) => { (flash(Some((false, problem)))) }
                    Ok(rows) => {
                        @if rows.is_empty() { p id="no-entries" { "No entries." } } @else {
                            div class="scroll" {
                                table id="audit" class="rows" {
                                    tr { th { "When (JST)" } th { "Operator" } th { "Action" } th { "Result" } th { "Route" } th { "Touched" } th { "Summary" } }
                                    @for row in rows {
                                        tr data-entry=(row.id) data-action=(row.action) {
                                            td { (row.at.get(..19).unwrap_or(&row.at).replace('T', " ")) }
                                            td {
                                                (row.operator)
                                                @if let Some(token) = &row.token { br; span class="muted" { "token " (token) "…" } }
                                                br; span class="muted" { (row.via) }
                                            }
                                            td { (row.action) }
                                            td { (row.result) @if let Some(status) = row.status { " (" (status) ")" } }
                                            td { code { (row.route) } }
                                            td {
                                                @for id in &row.touched { (id) br; }
                                                @if row.touched_count > row.touched.len() as u64 { span class="muted" { "… " (row.touched_count) " in all" } }
                                            }
                                            td {
                                                @for (key, value) in &row.summary { span class="muted" { (key) } " " (value) br; }
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

/// A refused request (an expired form, a missing CSRF token): no details.
pub(crate) fn refused(message: &str) -> Markup {
    page(
        "Refused",
        None,
        html! { section { (flash(Some((false, message)))) a href="/console" { "Back to the console" } } },
    )
}

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

fn rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "–".to_owned(), |rate| format!("{:.1}%", rate * 100.0))
}

/// `days`: the range shown (`None`: all time); the others are links.
pub(crate) fn scenarios(nav: &Nav, all: &[ScenarioResults], days: Option<u32>) -> Markup {
    page(
        "Scenarios",
        Some(nav),
        html! {
            p id="range" {
                "Counted over: "
                @for (index, range) in super::HOME_RANGES.iter().enumerate() {
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

/// The search by display name or tag.
fn search_form(text: &str, by: &str) -> Markup {
    html! {
        section {
            form method="get" action="/console/users" id="user-search" {
                label for="q" { "Find users by display name (its start) or tag" } br;
                input id="q" name="q" value=(text) size="24" maxlength="100" placeholder="田中 / 常連";
                " "
                select id="by" name="by" {
                    option value="name" selected[by == "name"] { "by name" }
                    option value="tag" selected[by == "tag"] { "by tag" }
                }
                " "
                button class="primary" type="submit" id="find-users" { "Find" }
            }
        }
    }
}

/// `/console/users?q=...&by=name|tag`: the users found, each linked to
/// their page.
pub(crate) fn user_search(
    nav: &Nav,
    text: &str,
    by: &str,
    found: Option<&crate::reports::users::Found>,
    error: Option<&str>,
) -> Markup {
    page(
        "Users",
        Some(nav),
        html! {
            (search_form(text, by))
            (flash(error.map(|error| (false, error))))
            @if let Some(found) = found {
                section id="found-users" {
                    @if found.users.is_empty() {
                        p id="none-found" { "No user found. A name search matches the start of the LINE display name as cached (names are cached once a message names the user)." }
                    } @else {
                        div class="scroll" {
                            table {
                                tr { th { "Name" } th { "User" } th { "Follows" } th { "Last seen" } }
                                @for user in &found.users {
                                    tr data-user=(user.id) {
                                        td { (user.display_name.as_deref().unwrap_or("—")) }
                                        td { a href={ "/console/users?id=" (segment(&user.id)) } { code { (user.id) } } }
                                        td { @match user.following { Some(true) => "yes", Some(false) => "no", None => "—" } }
                                        td { @if let Some(ms) = user.last_seen_ms { (time(ms)) } @else { "—" } }
                                    }
                                }
                            }
                        }
                        @if found.more {
                            p class="muted" id="more-found" { "More users match than the " (found.users.len()) " shown: narrow the search." }
                        }
                    }
                }
            }
        },
    )
}

/// A user's timeline; `entries` are the timeline's entries as JSON (their
/// shape is the admin API's).
pub(crate) fn user(nav: &Nav, query: &str, story: Option<&serde_json::Value>, error: Option<&str>) -> Markup {
    page(
        "Users",
        Some(nav),
        html! {
            section {
                form method="get" action="/console/users" {
                    label for="id" { "LINE user id" } br;
                    input id="id" name="id" value=(query) size="36" placeholder="U0123456789abcdef0123456789abcdef";
                    " "
                    button class="primary" type="submit" { "Show timeline" }
                }
            }
            (search_form("", "name"))
            (flash(error.map(|error| (false, error))))
            @if let Some(story) = story {
                section id="timeline" {
                    h2 { (story["userId"].as_str().unwrap_or_default()) }
                    p id="log-hash" class="muted" {
                        "In the log: " code { (story["userIdHash"].as_str().unwrap_or_default()) }
                    }
                    @if nav.may(OperatorRole::Editor) {
                        p { a id="send-scenario" href={ "/console/users/send?id=" (segment(story["userId"].as_str().unwrap_or_default())) } { "Send a scenario to this user" } }
                    }
                    (tags_and_fields(nav, story))
                    @if nav.may(OperatorRole::Owner) {
                        p {
                            a id="user-data" href={ "/console/users/data?id=" (segment(story["userId"].as_str().unwrap_or_default())) } { "Download this user's data (JSON)" }
                            " · "
                            a id="erase-user" href={ "/console/users/erase?id=" (segment(story["userId"].as_str().unwrap_or_default())) } { "Erase this user's personal data" }
                        }
                    }
                    p class="muted" {
                        @match story["user"]["following"].as_bool() {
                            Some(true) => "Following",
                            Some(false) => "Not following",
                            None => "No follow or unfollow recorded",
                        }
                        @if let Some(tags) = story["user"]["tags"].as_array() {
                            " · tags: " @for (i, tag) in tags.iter().enumerate() {
                                @if i > 0 { ", " } (tag.as_str().unwrap_or_default())
                            }
                        }
                        @if story["truncated"].as_bool() == Some(true) { " · not everything is listed (over 200 entries, or over 500 records in one collection)" }
                    }
                    p id="rich-menu" class="muted" {
                        "Rich menu: "
                        @match story["user"]["richMenu"].as_str() {
                            Some("default") => "the account's default (unlinked)",
                            Some(menu) => strong { (menu) },
                            None => "the account's default (none asked for)",
                        }
                        @if let Some(taps) = story["user"]["richMenuTaps"].as_array().filter(|taps| !taps.is_empty()) {
                            " · tapped: " @for (i, menu) in taps.iter().enumerate() {
                                @if i > 0 { ", " } (menu.as_str().unwrap_or_default())
                            }
                        }
                    }
                    @if let Some(fields) = story["user"]["fields"].as_object().filter(|fields| !fields.is_empty()) {
                        div class="scroll" {
                            table id="fields" {
                                tr { th { "Field" } th { "Value" } }
                                @for (name, value) in fields {
                                    tr { td { (name) } td { (value.as_str().map_or_else(|| value.to_string(), str::to_owned)) } }
                                }
                            }
                        }
                    }
                    @if let Some(answered) = story["answered"].as_array().filter(|answered| !answered.is_empty()) {
                        p id="answered" { "Answered: "
                            @for (i, scenario) in answered.iter().enumerate() {
                                @if i > 0 { ", " } (scenario["scenarioId"].as_str().unwrap_or_default())
                            }
                        }
                    }
                    @if let Some(question) = story["openQuestion"].as_object() {
                        p { "Open question: " (question.get("scenarioId").and_then(|v| v.as_str()).unwrap_or_default())
                            " / " (question.get("nodeId").and_then(|v| v.as_str()).unwrap_or_default()) }
                    }
                    div class="scroll" {
                        table {
                            tr { th { "When (JST)" } th { "What" } th { "Details" } }
                            @for entry in story["entries"].as_array().map(Vec::as_slice).unwrap_or_default() {
                                tr data-entry=(entry["type"].as_str().unwrap_or_default()) {
                                    td { (time_of_text(entry["at"].as_str().unwrap_or_default())) }
                                    td { (entry["type"].as_str().unwrap_or_default()) }
                                    td { (details(entry)) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// An entry's fields other than its type and time, as `name: value` pairs.
fn details(entry: &serde_json::Value) -> Markup {
    let fields = entry
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(name, value)| !matches!(name.as_str(), "type" | "at") && !value.is_null());
    html! {
        @for (name, value) in fields {
            span class="muted" { (name) ": " }
            @match value {
                serde_json::Value::String(text) => (text),
                other => (other.to_string()),
            }
            br;
        }
    }
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
        &format!("Scenario: {}", view.id),
        Some(nav),
        html! {
            section {
                p {
                    @if let Some(title) = &view.title { strong { (title) } " · " }
                    "version " span id="scenario-version" { (view.version) }
                    " · " code style="word-break:break-all" { (view.file) }
                    br; span class="muted" title=(view.content_hash) { "SHA-256 " (view.content_hash.get(..16).unwrap_or(&view.content_hash)) "…" }
                }
                @if view.file_changed {
                    p class="flash bad" id="file-changed" { "The file on disk is not the one loaded at start-up: the service runs the version shown here until it restarts." }
                }
                @if view.problems.is_empty() {
                    p class="flash ok" id="check-ok" { "line-survey check finds no problems in the scenario files now." }
                } @else {
                    div class="flash bad" id="check-problems" {
                        p { "line-survey check finds problems in the files now (a restart would refuse them):" }
                        ul { @for problem in &view.problems { li { (problem) } } }
                    }
                }
                p { a href={ "/console/scenarios/" (segment(&view.id)) } { "Answers" } " · " a href={ "/console/scenarios/" (segment(&view.id)) "/crosstab" } { "Cross-tab" } }
            }
            section {
                h2 { "Graph" }
                div class="scroll" {
                    svg id="scenario-graph" xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) viewBox={ "0 0 " (width) " " (height) } style="max-width:none" role="img" aria-label={ "The nodes of " (view.id) " and the arrows between them" } {
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
                h2 { "Nodes" }
                div class="scroll" {
                    table id="scenario-nodes" {
                        tr { th { "Node" } th { "Kind" } th { "Says or does" } th { "Leads to" } }
                        @for (i, node) in graph.nodes.iter().enumerate() {
                            tr {
                                td { code { (node.id) } }
                                td { (node.kind) }
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

/// `part` of `whole` in whole percent, 0 when there is no whole.
fn share(part: u64, whole: u64) -> u64 {
    if whole == 0 { 0 } else { percent(part, whole) }
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

/// `part` of `whole` in whole percent, 0 to 100.
fn percent(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 100;
    }
    u64::try_from(u128::from(part.min(whole)) * 100 / u128::from(whole)).unwrap_or(100)
}

/// `text` as one URL path segment or query value: every byte but ASCII letters
/// and digits percent-encoded, so an id with `/`, `?`, `#` or `%` links to itself.
fn segment(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// An RFC 3339 instant (the API's) as [`time`] shows it; anything else as is.
fn time_of_text(at: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(at).map_or_else(|_| at.to_owned(), |at| time(at.timestamp_millis()))
}

/// An instant as operators in Japan read it: Japan time, the zone shown.
fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|at| {
            at.with_timezone(&crate::scenario::DEFAULT_TIME_ZONE)
                .format("%Y-%m-%d %H:%M:%S JST")
                .to_string()
        })
        .unwrap_or_default()
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
    fn ids_in_links_are_percent_encoded() {
        for (id, encoded) in [
            ("lunch", "lunch"),
            ("a/b?c#d%", "a%2Fb%3Fc%23d%25"),
            ("満足", "%E6%BA%80%E8%B6%B3"),
        ] {
            assert_eq!(segment(id), encoded);
        }
    }

    #[test]
    fn times_show_in_japan_time_with_the_zone() {
        assert_eq!(time(0), "1970-01-01 09:00:00 JST");
        assert_eq!(time_of_text("2026-12-01T15:30:00.000Z"), "2026-12-02 00:30:00 JST");
        assert_eq!(time_of_text("not a time"), "not a time");
    }

    #[test]
    fn percents_are_whole_and_bounded() {
        for (part, whole, expected) in [
            (0, 0, 100),
            (0, 9, 0),
            (3, 9, 33),
            (9, 9, 100),
            (12, 9, 100),
            (u64::MAX, u64::MAX, 100),
        ] {
            assert_eq!(percent(part, whole), expected, "{part} of {whole}");
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
