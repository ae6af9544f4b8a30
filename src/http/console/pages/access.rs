//! Signing in, personal API tokens and the audit log.

use super::{Nav, flash, page, role_name, segment, time};
use crate::values::{ConsoleLang, OperatorRole};
use maud::{Markup, html};

pub(crate) fn login(lang: ConsoleLang, csrf: &str, error: Option<&str>) -> Markup {
    page(
        lang,
        lang.t("ログイン", "Log in"),
        None,
        html! {
            section {
                (flash(error.map(|error| (false, error))))
                form method="post" action="/console/login" id="password-login" {
                    input type="hidden" name="csrf" value=(csrf);
                    p {
                        label for="email" { (lang.t("メールアドレス", "Email")) } br;
                        input type="email" id="email" name="email" autocomplete="username" required;
                    }
                    p {
                        label for="password" { (lang.t("パスワード", "Password")) } br;
                        input type="password" id="password" name="password" autocomplete="current-password" required;
                    }
                    button class="primary" type="submit" id="sign-in" { (lang.t("ログイン", "Log in")) }
                }
            }
            section {
                h2 { (lang.t("管理者トークン", "Admin token")) }
                p class="muted" { (lang.t("初回の設定やスクリプト用です。オーナーとしてログインします。", "For the first run and for scripts: it signs in as an owner.")) }
                form method="post" action="/console/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    p {
                        label for="token" { (lang.t("管理者トークン", "Admin token")) } br;
                        input type="password" id="token" name="token" autocomplete="off" required;
                    }
                    button class="primary" type="submit" id="login" { (lang.t("トークンでログイン", "Log in with the token")) }
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
        nav.lang,
        nav.t("APIトークン", "API tokens"),
        Some(nav),
        html! {
            (flash(message))
            @if let Some(token) = created {
                section id="created" {
                    p { (nav.t("新しいトークンです。今すぐコピーしてください。このトークンは二度と表示されません。", "Your new token. Copy it now: it is not shown again.")) }
                    p { code id="new-token" { (token) } }
                    p class="muted" {
                        @match nav.lang {
                            ConsoleLang::Ja => { "/admin へのリクエストでは " code { "Authorization: Bearer " (token) } " の形で使います。" }
                            ConsoleLang::En => { "Use it as " code { "Authorization: Bearer " (token) } " on /admin." }
                        }
                    }
                }
            }
            @match tokens {
                None => section { p id="no-operator" { (nav.t("個人用トークンはオペレーターごとに発行されます。作成するには、メールアドレスでログインしてください。", "Personal tokens belong to operators: sign in with your email to make one.")) } },
                Some(tokens) => {
                    section {
                        h2 { (nav.t("新しいトークン", "New token")) }
                        form method="post" action="/console/tokens" {
                            input type="hidden" name="csrf" value=(nav.csrf);
                            p { label for="label" { (nav.t("名前", "Label")) } br; input type="text" id="label" name="label" maxlength="60" required; }
                            p {
                                label for="role" { (nav.t("権限", "Role")) } br;
                                select id="role" name="role" {
                                    @for role in roles.iter().filter(|role| nav.may(**role)) {
                                        option value=(role.as_str()) { (role_name(nav.lang, *role)) }
                                    }
                                }
                            }
                            button class="primary" type="submit" id="create-token" { (nav.t("作成", "Create")) }
                        }
                    }
                    section {
                        @if tokens.is_empty() { p id="no-tokens" { (nav.t("トークンはまだありません。", "No tokens yet.")) } } @else {
                            div class="scroll" {
                                table id="tokens" {
                                    tr { th { (nav.t("トークン", "Token")) } th { (nav.t("名前", "Label")) } th { (nav.t("権限", "Role")) } th { (nav.t("作成日時", "Created")) } th {} }
                                    @for token in tokens {
                                        tr data-token=(token.id) {
                                            td { code { (token.doc.prefix) "…" } }
                                            td { (token.doc.label) }
                                            td { (role_name(nav.lang, token.doc.role)) }
                                            td class="when" { (time(token.doc.created_ms)) }
                                            td {
                                                @if token.doc.revoked { (nav.t("無効化済み", "revoked")) } @else {
                                                    form method="post" action={ "/console/tokens/" (segment(&token.id)) "/revoke" } {
                                                        input type="hidden" name="csrf" value=(nav.csrf);
                                                        button class="danger" type="submit" { (nav.t("無効にする", "Revoke")) }
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
        nav.lang,
        nav.t("操作履歴", "Audit log"),
        Some(nav),
        html! {
            section {
                form method="get" action="/console/audit" id="audit-filter" {
                    p {
                        label for="operator" { (nav.t("オペレーター", "Operator")) } " "
                        input type="text" id="operator" name="operator" value=(value(&asked.operator)) placeholder="staff@shop.example";
                        " "
                        label for="action" { (nav.t("操作", "Action")) } " "
                        input type="text" id="action" name="action" value=(value(&asked.action)) placeholder="manual_send";
                    }
                    p {
                        label for="from" { (nav.t("開始日", "From")) } " "
                        input type="date" id="from" name="from" value=(value(&asked.from));
                        " "
                        label for="to" { (nav.t("終了日", "To")) } " "
                        input type="date" id="to" name="to" value=(value(&asked.to));
                        " "
                        button class="primary" type="submit" { (nav.t("絞り込む", "Filter")) }
                    }
                    p class="muted" { (nav.t("時刻は日本時間（JST、UTC+9）です。開始日と終了日の当日も含みます。", "Times are Japan time (JST, UTC+9); days are inclusive.")) }
                }
            }
            section {
                @match rows {
                    Err(problem) => { (flash(Some((false, problem)))) }
                    Ok(rows) => {
                        @if rows.is_empty() { p id="no-entries" { (nav.t("記録はありません。", "No entries.")) } } @else {
                            div class="scroll" {
                                table id="audit" class="rows" {
                                    tr {
                                        th { (nav.t("日時（日本時間）", "When (JST)")) }
                                        th { (nav.t("オペレーター", "Operator")) }
                                        th { (nav.t("操作", "Action")) }
                                        th { (nav.t("結果", "Result")) }
                                        th { (nav.t("ルート", "Route")) }
                                        th { (nav.t("対象", "Touched")) }
                                        th { (nav.t("概要", "Summary")) }
                                    }
                                    @for row in rows {
                                        tr data-entry=(row.id) data-action=(row.action) {
                                            td { (row.at.get(..19).unwrap_or(&row.at).replace('T', " ")) }
                                            td {
                                                (row.operator)
                                                @if let Some(token) = &row.token { br; span class="muted" { (nav.t("トークン ", "token ")) (token) "…" } }
                                                br; span class="muted" { (row.via) }
                                            }
                                            td { (row.action) }
                                            td { (row.result) @if let Some(status) = row.status { " (" (status) ")" } }
                                            td { code { (row.route) } }
                                            td {
                                                @for id in &row.touched { (id) br; }
                                                @if row.touched_count > row.touched.len() as u64 { span class="muted" {
                                                    @match nav.lang {
                                                        ConsoleLang::Ja => { "… 全 " (row.touched_count) " 件" }
                                                        ConsoleLang::En => { "… " (row.touched_count) " in all" }
                                                    }
                                                } }
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
