//! A user's page (timeline, tags and fields), the user search, and what an
//! operator does for one user: a manual send, an erasure.

use super::{Nav, flash, page, segment, time, time_of_text};
use crate::values::OperatorRole;
use maud::{Markup, html};

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
