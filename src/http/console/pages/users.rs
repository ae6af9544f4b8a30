//! A user's page (timeline, tags and fields), the user search, and what an
//! operator does for one user: a manual send, an erasure.

use super::{Nav, flash, page, segment, time, time_of_text_in};
use crate::values::{ConsoleLang, OperatorRole};
use maud::{Markup, html};

/// A field's value as shown: texts as typed, numbers and yes/no in words.
fn field_text(lang: ConsoleLang, value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Bool(true) => lang.t("はい", "yes").to_owned(),
        serde_json::Value::Bool(false) => lang.t("いいえ", "no").to_owned(),
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
            // The page's own key: a reload or a double click changes once.
            input type="hidden" name="key" value=(story["formKey"].as_str().unwrap_or_default());
        }
    };
    html! {
        section id="tags-and-fields" {
            h2 { (nav.t("タグと項目", "Tags and fields")) }
            div class="scroll" {
                table id="user-tags" {
                    tr { th { (nav.t("タグ", "Tag")) } th {} }
                    @for tag in &tags {
                        tr data-tag=(tag) {
                            td { (tag) }
                            td {
                                @if editor {
                                    form method="post" action="/console/users/edit" {
                                        (hidden("remove_tag"))
                                        input type="hidden" name="tag" value=(tag);
                                        button class="danger" type="submit" { (nav.t("削除", "Remove")) }
                                    }
                                }
                            }
                        }
                    }
                }
                table id="user-fields" {
                    tr { th { (nav.t("項目", "Field")) } th { (nav.t("値", "Value")) } th {} }
                    @for (name, value) in &fields {
                        tr data-field=(name) {
                            td { (name) }
                            td { (field_text(nav.lang, value)) }
                            td {
                                @if editor {
                                    form method="post" action="/console/users/edit" {
                                        (hidden("remove_field"))
                                        input type="hidden" name="field" value=(name);
                                        button class="danger" type="submit" { (nav.t("削除", "Remove")) }
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
                    label for="new-tag" { (nav.t("タグを追加", "Add a tag")) } " "
                    input type="text" id="new-tag" name="tag" maxlength="100" required;
                    " "
                    button class="primary" type="submit" { (nav.t("追加", "Add")) }
                }
                form method="post" action="/console/users/edit" id="set-field" {
                    (hidden("set_field"))
                    p {
                        label for="field-name" { (nav.t("項目", "Field")) } " "
                        input type="text" id="field-name" name="field" maxlength="40" pattern="[a-z][a-z0-9_]{0,39}" required;
                        " "
                        label for="field-value" { (nav.t("値", "Value")) } " "
                        input type="text" id="field-value" name="value" maxlength="500";
                        " "
                        select name="kind" id="field-kind" {
                            option value="text" { (nav.t("テキスト", "text")) }
                            option value="number" { (nav.t("数値", "number")) }
                            option value="yes_no" { (nav.t("はい / いいえ", "yes / no")) }
                        }
                        " "
                        button class="primary" type="submit" { (nav.t("設定", "Set")) }
                    }
                }
                p class="muted" { (nav.t("手動での変更は、あなたの操作として操作履歴に記録されます。", "Changes by hand are recorded in the audit log as yours.")) }
            }
        }
    }
}

/// `/console/users/send?id=U...`: the scenarios an operator may send the user.
pub(crate) fn send_choice(nav: &Nav, user: &str, scenarios: &[(String, String)]) -> Markup {
    page(
        nav.lang,
        nav.t("シナリオを送信", "Send a scenario"),
        Some(nav),
        html! {
            section {
                p { (nav.t("送信先: ", "To ")) code { (user) } }
                form method="get" action="/console/users/send" id="send-choice" {
                    input type="hidden" name="id" value=(user);
                    p {
                        label for="scenario" { (nav.t("シナリオ", "Scenario")) } br;
                        select id="scenario" name="scenario" {
                            @for (id, title) in scenarios {
                                option value=(id) { (id) @if !title.is_empty() { " — " (title) } }
                            }
                        }
                    }
                    button class="primary" type="submit" id="preview" { (nav.t("プレビュー", "Preview")) }
                }
            }
        },
    )
}

/// The confirmation of a send: what the user will get, rendered for them,
/// and the form that sends it once (its `key` is this form's own).
pub(crate) fn send_preview(nav: &Nav, user: &str, scenario: &str, messages: &[String], key: &str) -> Markup {
    page(
        nav.lang,
        nav.t("シナリオを送信", "Send a scenario"),
        Some(nav),
        html! {
            section {
                p {
                    @match nav.lang {
                        ConsoleLang::Ja => {
                            "シナリオ " strong { (scenario) } " を " code { (user) } " に今すぐプッシュメッセージで送信します（以前に回答済みでも送信されます）。届く内容は次のとおりです。"
                        }
                        ConsoleLang::En => {
                            "This sends " strong { (scenario) } " to " code { (user) } " now, by push, whether or not they answered it before. They will get:"
                        }
                    }
                }
                ol id="preview-messages" {
                    @for message in messages { li style="white-space:pre-wrap" { (message) } }
                }
                form method="post" action="/console/users/send" {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    input type="hidden" name="user" value=(user);
                    input type="hidden" name="scenario" value=(scenario);
                    input type="hidden" name="key" value=(key);
                    button class="primary" type="submit" id="confirm-send" { (nav.t("送信", "Send")) }
                    " "
                    a href={ "/console/users?id=" (segment(user)) } { (nav.t("キャンセル", "Cancel")) }
                }
            }
        },
    )
}

/// The confirmation of an erasure: what goes, what stays.
pub(crate) fn erase_confirm(nav: &Nav, user: &str, key: &str) -> Markup {
    page(
        nav.lang,
        nav.t("ユーザーの個人データを消去", "Erase a user's personal data"),
        Some(nav),
        html! {
            section {
                p {
                    @match nav.lang {
                        ConsoleLang::Ja => { code { (user) } " について保存されている、次の個人データを消去します。" }
                        ConsoleLang::En => { "This erases the personal data stored of " code { (user) } ":" }
                    }
                }
                ul {
                    li { (nav.t("すべての回答の値（入力された文字、数値、日付、選んだ選択肢）。回答は中身のない記録として残るため、集計の件数は変わりません", "the value of every answer (typed text, numbers, dates, choices): the answers stay as empty records, so counts stay")) }
                    li { (nav.t("すべての項目と、保存されている表示名", "every field, and the cached display name")) }
                    li { (nav.t("回答待ちの質問（ある場合）", "the open question, if any")) }
                }
                p { (nav.t("ユーザーID、タグ、友だち追加の状態と日時、ボットが送ったメッセージ（シナリオの文面のみ）、操作履歴は残ります。この操作は元に戻せません。ユーザーからデータの提供を求められている場合は、先にデータをダウンロードしてください。", "It keeps the user id, tags, follow state and times, the messages the bot sent (scenario text only), and the audit log. It cannot be undone. Download the data first if the user asked for it.")) }
                form method="post" action="/console/users/erase" {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    input type="hidden" name="key" value=(key);
                    input type="hidden" name="user" value=(user);
                    button class="danger" type="submit" id="confirm-erase" { (nav.t("消去する", "Erase")) }
                    " "
                    a href={ "/console/users?id=" (segment(user)) } { (nav.t("消去しない", "Keep it")) }
                }
            }
        },
    )
}

/// What a change by hand will do, and the form that does it.
/// `asked` is the form as typed, carried by the confirmation with the
/// user and the page's key.
pub(crate) fn hand_edit_confirm(
    nav: &Nav,
    (user, key): (&str, &str),
    asked: &crate::engine::hand_edit::HandEditForm<'_>,
    edit: &crate::engine::hand_edit::HandEdit,
) -> Markup {
    use crate::engine::hand_edit::HandEdit;
    let value_text = |value: &crate::values::FieldValue| match value {
        crate::values::FieldValue::Text(text) => text.clone(),
        crate::values::FieldValue::Bool(yes) => nav
            .t(if *yes { "はい" } else { "いいえ" }, if *yes { "yes" } else { "no" })
            .to_owned(),
        crate::values::FieldValue::Integer(number) => number.to_string(),
        crate::values::FieldValue::Number(number) => number.to_string(),
    };
    let does = match (edit, nav.lang) {
        (HandEdit::AddTag(tag), ConsoleLang::Ja) => format!("タグ「{tag}」を付けます。"),
        (HandEdit::AddTag(tag), ConsoleLang::En) => format!("This adds the tag “{tag}”."),
        (HandEdit::RemoveTag(tag), ConsoleLang::Ja) => format!("タグ「{tag}」を外します。"),
        (HandEdit::RemoveTag(tag), ConsoleLang::En) => format!("This removes the tag “{tag}”."),
        (HandEdit::SetField(name, value), ConsoleLang::Ja) => {
            format!("項目 {name} を「{}」にします。", value_text(value))
        }
        (HandEdit::SetField(name, value), ConsoleLang::En) => {
            format!("This sets the field {name} to “{}”.", value_text(value))
        }
        (HandEdit::RemoveField(name), ConsoleLang::Ja) => format!("項目 {name} を削除します。"),
        (HandEdit::RemoveField(name), ConsoleLang::En) => format!("This removes the field {name}."),
    };
    page(
        nav.lang,
        nav.t("タグと項目の変更", "Change tags and fields"),
        Some(nav),
        html! {
            section {
                p id="edit-does" { (does) }
                p class="muted" {
                    (nav.t("対象: ", "User: ")) code { (user) } " · "
                    (nav.t("この変更はあなたの操作として操作履歴に残ります。", "The change is recorded in the audit log as yours."))
                }
                form method="post" action="/console/users/edit" {
                    input type="hidden" name="csrf" value=(nav.csrf);
                    input type="hidden" name="user" value=(user);
                    input type="hidden" name="op" value=(asked.op);
                    input type="hidden" name="tag" value=(asked.tag);
                    input type="hidden" name="field" value=(asked.field);
                    input type="hidden" name="value" value=(asked.value);
                    input type="hidden" name="kind" value=(asked.kind);
                    input type="hidden" name="key" value=(key);
                    input type="hidden" name="confirm" value="yes";
                    button class="primary" type="submit" id="confirm-edit" { (nav.t("変更する", "Change")) }
                    " "
                    a href={ "/console/users?id=" (segment(user)) } { (nav.t("やめる", "Keep it as it is")) }
                }
            }
        },
    )
}

/// A timer cancel's result, from the user's timeline.
pub(crate) fn timer_cancelled(nav: &Nav, user: &str, result: (bool, &str)) -> Markup {
    page(
        nav.lang,
        nav.t("予定の取り消し", "Cancel a timer"),
        Some(nav),
        html! {
            (flash(Some(result)))
            section { a id="back-to-user" href={ "/console/users?id=" (segment(user)) } { (nav.t("ユーザーのページに戻る", "Back to the user")) } }
        },
    )
}

/// A send's result.
pub(crate) fn send_result(nav: &Nav, user: &str, result: (bool, &str)) -> Markup {
    page(
        nav.lang,
        nav.t("シナリオを送信", "Send a scenario"),
        Some(nav),
        html! {
            (flash(Some(result)))
            section { a id="back-to-user" href={ "/console/users?id=" (segment(user)) } { (nav.t("ユーザーのページに戻る", "Back to the user")) } }
        },
    )
}

/// The search by display name or tag.
fn search_form(lang: ConsoleLang, text: &str, by: &str) -> Markup {
    html! {
        section {
            form method="get" action="/console/users" id="user-search" {
                label for="q" { (lang.t("表示名（先頭の文字）またはタグでユーザーを検索", "Find users by display name (its start) or tag")) } br;
                input id="q" name="q" value=(text) size="24" maxlength="100" placeholder="田中 / 常連";
                " "
                select id="by" name="by" {
                    option value="name" selected[by == "name"] { (lang.t("表示名で", "by name")) }
                    option value="tag" selected[by == "tag"] { (lang.t("タグで", "by tag")) }
                }
                " "
                button class="primary" type="submit" id="find-users" { (lang.t("検索", "Find")) }
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
        nav.lang,
        nav.t("ユーザー", "Users"),
        Some(nav),
        html! {
            (search_form(nav.lang, text, by))
            (flash(error.map(|error| (false, error))))
            @if let Some(found) = found {
                section id="found-users" {
                    @if found.users.is_empty() {
                        p id="none-found" { (nav.t("該当するユーザーはいません。表示名での検索は、保存されているLINEの表示名の先頭の文字で探します（表示名は、名前入りのメッセージを送ったときに保存されます）。", "No user found. A name search matches the start of the LINE display name as cached (names are cached once a message names the user).")) }
                    } @else {
                        div class="scroll" {
                            table {
                                tr { th { (nav.t("表示名", "Name")) } th { (nav.t("ユーザー", "User")) } th { (nav.t("友だち追加済み", "Follows")) } th { (nav.t("最終利用", "Last seen")) } }
                                @for user in &found.users {
                                    tr data-user=(user.id) {
                                        td { (user.display_name.as_deref().unwrap_or("—")) }
                                        td { a href={ "/console/users?id=" (segment(&user.id)) } { code { (user.id) } } }
                                        td { @match user.following { Some(true) => (nav.t("はい", "yes")), Some(false) => (nav.t("いいえ", "no")), None => "—" } }
                                        td class="when" { @if let Some(ms) = user.last_seen_ms { (time(ms)) } @else { "—" } }
                                    }
                                }
                            }
                        }
                        @if found.more {
                            p class="muted" id="more-found" {
                                @match nav.lang {
                                    ConsoleLang::Ja => { "該当するユーザーは、表示中の " (found.users.len()) " 人より多くいます。条件を絞り込んでください。" }
                                    ConsoleLang::En => { "More users match than the " (found.users.len()) " shown: narrow the search." }
                                }
                            }
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
        nav.lang,
        nav.t("ユーザー", "Users"),
        Some(nav),
        html! {
            section {
                form method="get" action="/console/users" {
                    label for="id" { (nav.t("LINEユーザーID", "LINE user id")) } br;
                    input id="id" name="id" value=(query) size="36" placeholder="U0123456789abcdef0123456789abcdef";
                    " "
                    button class="primary" type="submit" { (nav.t("タイムラインを表示", "Show timeline")) }
                }
            }
            (search_form(nav.lang, "", "name"))
            (flash(error.map(|error| (false, error))))
            @if let Some(story) = story {
                section id="timeline" {
                    h2 { (story["userId"].as_str().unwrap_or_default()) }
                    p id="log-hash" class="muted" {
                        (nav.t("ログでの表記: ", "In the log: ")) code { (story["userIdHash"].as_str().unwrap_or_default()) }
                    }
                    @if nav.may(OperatorRole::Editor) {
                        p { a id="send-scenario" href={ "/console/users/send?id=" (segment(story["userId"].as_str().unwrap_or_default())) } { (nav.t("このユーザーにシナリオを送信", "Send a scenario to this user")) } }
                    }
                    (tags_and_fields(nav, story))
                    @if nav.may(OperatorRole::Owner) {
                        p {
                            a id="user-data" href={ "/console/users/data?id=" (segment(story["userId"].as_str().unwrap_or_default())) } { (nav.t("このユーザーのデータをダウンロード（JSON）", "Download this user's data (JSON)")) }
                            " · "
                            a id="erase-user" href={ "/console/users/erase?id=" (segment(story["userId"].as_str().unwrap_or_default())) } { (nav.t("このユーザーの個人データを消去", "Erase this user's personal data")) }
                        }
                    }
                    p class="muted" {
                        @match story["user"]["following"].as_bool() {
                            Some(true) => (nav.t("友だち追加済み", "Following")),
                            Some(false) => (nav.t("友だち解除済み", "Not following")),
                            None => (nav.t("友だち追加・解除の記録なし", "No follow or unfollow recorded")),
                        }
                        @if let Some(tags) = story["user"]["tags"].as_array() {
                            (nav.t(" · タグ: ", " · tags: ")) @for (i, tag) in tags.iter().enumerate() {
                                @if i > 0 { ", " } (tag.as_str().unwrap_or_default())
                            }
                        }
                        @if story["truncated"].as_bool() == Some(true) { (nav.t(" · 一部のみ表示しています（記録が200件を超えているか、1種類のデータが500件を超えています）", " · not everything is listed (over 200 entries, or over 500 records in one collection)")) }
                    }
                    p id="rich-menu" class="muted" {
                        (nav.t("リッチメニュー: ", "Rich menu: "))
                        @match story["user"]["richMenu"].as_str() {
                            Some("default") => (nav.t("アカウントのデフォルト（個別の設定を解除）", "the account's default (unlinked)")),
                            Some(menu) => strong { (menu) },
                            None => (nav.t("アカウントのデフォルト（個別の設定なし）", "the account's default (none asked for)")),
                        }
                        @if let Some(taps) = story["user"]["richMenuTaps"].as_array().filter(|taps| !taps.is_empty()) {
                            (nav.t(" · タップ済み: ", " · tapped: ")) @for (i, menu) in taps.iter().enumerate() {
                                @if i > 0 { ", " } (menu.as_str().unwrap_or_default())
                            }
                        }
                    }
                    @if let Some(answered) = story["answered"].as_array().filter(|answered| !answered.is_empty()) {
                        p id="answered" { (nav.t("回答済み: ", "Answered: "))
                            @for (i, scenario) in answered.iter().enumerate() {
                                @if i > 0 { ", " } (scenario["scenarioId"].as_str().unwrap_or_default())
                            }
                        }
                    }
                    @if let Some(question) = story["openQuestion"].as_object() {
                        p { (nav.t("回答待ちの質問: ", "Open question: ")) (question.get("scenarioId").and_then(|v| v.as_str()).unwrap_or_default())
                            " / " (question.get("nodeId").and_then(|v| v.as_str()).unwrap_or_default()) }
                    }
                    div class="scroll" {
                        table {
                            tr { th { (nav.t("日時", "When")) } th { (nav.t("できごと", "What happened")) } th { (nav.t("詳細", "Details")) } }
                            @for entry in story["entries"].as_array().map(Vec::as_slice).unwrap_or_default() {
                                @let kind = entry["type"].as_str().unwrap_or_default();
                                tr data-entry=(kind) {
                                    td class="when" { (time_of_text_in(entry["at"].as_str().unwrap_or_default(), entry["zone"].as_str())) }
                                    td class="story" {
                                        (super::timeline::entry_words(nav.lang, entry))
                                        @for line in entry["said"].as_array().map(Vec::as_slice).unwrap_or_default() {
                                            br; span class="muted said" style="white-space:pre-wrap" { "「" (line.as_str().unwrap_or_default()) "」" }
                                        }
                                    }
                                    td {
                                        @if kind == "timer" && entry["state"] == "pending" && nav.may(OperatorRole::Editor) {
                                            form method="post" action={ "/console/users/timers/" (segment(entry["id"].as_str().unwrap_or_default())) "/cancel" } {
                                                input type="hidden" name="csrf" value=(nav.csrf);
                                                input type="hidden" name="user" value=(story["userId"].as_str().unwrap_or_default());
                                                button class="danger cancel-timer" type="submit" { (nav.t("取り消す", "Cancel")) }
                                            }
                                        }
                                        details {
                                            summary { (nav.t("ID など", "Ids")) }
                                            (details(entry))
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

/// An entry's fields other than its type and time, as `name: value` pairs.
fn details(entry: &serde_json::Value) -> Markup {
    let fields = entry.as_object().into_iter().flatten().filter(|(name, value)| {
        !matches!(
            name.as_str(),
            "type"
                | "at"
                | "said"
                | "asksText"
                | "zone"
                | "scenarioTitle"
                | "questionText"
                | "choiceLabel"
                | "startsRun"
        ) && !value.is_null()
    });
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
