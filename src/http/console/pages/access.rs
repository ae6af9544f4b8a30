//! Signing in, personal API tokens and the audit log.

use super::{Nav, flash, page, segment, time};
use crate::values::OperatorRole;
use maud::{Markup, html};

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
