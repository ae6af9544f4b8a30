//! A user's timeline told in words: what the user did and what the bot did
//! about it ("回答: good", "リマインダー 12/03 10:00（予定）"), from the
//! entries of `GET /admin/users/{id}/timeline`. Ids stay out of the sentence:
//! the page folds them behind a toggle.

use crate::values::ConsoleLang;
use serde_json::Value;

fn text<'a>(entry: &'a Value, name: &str) -> &'a str {
    entry[name].as_str().unwrap_or_default()
}

fn count(entry: &Value, name: &str) -> usize {
    entry[name].as_array().map_or(0, Vec::len)
}

/// An RFC 3339 instant as `12/03 10:00` in the zone named `zone` (the
/// entry's scenario's), Japan time without one.
pub(super) fn short_time(at: &str, zone: Option<&str>) -> String {
    let zone = zone
        .and_then(|zone| zone.parse::<chrono_tz::Tz>().ok())
        .unwrap_or(crate::scenario::DEFAULT_TIME_ZONE);
    chrono::DateTime::parse_from_rfc3339(at).map_or_else(
        |_| at.to_owned(),
        |at| at.with_timezone(&zone).format("%m/%d %H:%M").to_string(),
    )
}

/// A recorded answer's value as the user gave it (a number stays a number),
/// followed by its choice's label when the scenario labels it otherwise.
fn answer_value(value: &Value, label: Option<&str>) -> String {
    let value = match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    match label {
        Some(label) if label != value => format!("{value} {label}"),
        _ => value,
    }
}

/// The scenario an entry belongs to, by its title (its id without one).
fn scenario_name(entry: &Value) -> &str {
    entry["scenarioTitle"]
        .as_str()
        .filter(|title| !title.is_empty())
        .unwrap_or_else(|| text(entry, "scenarioId"))
}

/// The question an answer or a timer is about: the scenario's name and the
/// question's text, or the ids when the loaded scenario no longer has it.
fn question_place(lang: ConsoleLang, entry: &Value) -> String {
    match (entry["questionText"].as_str(), lang) {
        (Some(question), ConsoleLang::Ja) => format!("{}「{question}」", scenario_name(entry)),
        (Some(question), ConsoleLang::En) => format!("{} “{question}”", scenario_name(entry)),
        (None, _) => format!("{} / {}", text(entry, "scenarioId"), text(entry, "nodeId")),
    }
}

/// Why a timer ended or was skipped, as the service recorded it.
fn timer_outcome(lang: ConsoleLang, why: &str) -> &str {
    if lang == ConsoleLang::En {
        return why;
    }
    match why {
        "sent" => "送信",
        "reminded" => "リマインド送信",
        "expired" => "期限で締切",
        "expired_late" => "遅れて締切（送信なし）",
        "expired_opted_out" | "opted_out" => "配信停止中",
        "answered" => "回答済み",
        "not_open" => "質問が開いていない",
        "late" => "予定から遅れすぎ",
        "unfollowed" => "ブロック中",
        "superseded" => "新しい回答の流れに交代",
        "unknown_scenario" => "シナリオがない",
        "unknown_node" => "質問がシナリオにない",
        "cancelled_by_operator" => "オペレーターが取り消し",
        "campaign_cancelled" => "一斉配信の取り消し",
        other => other,
    }
}

/// What one timeline entry says, in the console's language.
pub(super) fn entry_words(lang: ConsoleLang, entry: &Value) -> String {
    let ja = lang == ConsoleLang::Ja;
    match text(entry, "type") {
        "event" => event_words(lang, entry),
        "answer" => {
            let place = question_place(lang, entry);
            let label = entry["choiceLabel"].as_str();
            let tags: Vec<&str> = entry["tags"]
                .as_array()
                .map(|tags| tags.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut words = match (&entry["value"], ja) {
                (Value::Null, true) => format!("回答（内容は削除済み）: {place}"),
                (Value::Null, false) => format!("Answer (its value was removed): {place}"),
                (value, true) => format!("回答: {}（{place}）", answer_value(value, label)),
                (value, false) => format!("Answered {} ({place})", answer_value(value, label)),
            };
            if !tags.is_empty() {
                words.push_str(&if ja {
                    format!("、タグ {}", tags.join(", "))
                } else {
                    format!("; tags {}", tags.join(", "))
                });
            }
            words
        }
        "message" => message_words(lang, entry),
        "dead_letter" => {
            if ja {
                format!("配信失敗として保留: {}", text(entry, "reason"))
            } else {
                format!("Parked as a dead letter: {}", text(entry, "reason"))
            }
        }
        "timer" => {
            let kind = match text(entry, "kind") {
                "remind" => lang.t("リマインダー", "Reminder"),
                "expire" => lang.t("回答期限", "Answer deadline"),
                "step" => lang.t("ステップ配信", "Step"),
                other => other,
            };
            let state = super::timer_state(lang, text(entry, "state"));
            let when = short_time(text(entry, "at"), entry["zone"].as_str());
            let place = question_place(lang, entry);
            // Why it was skipped or ended, as the service recorded it.
            let why = entry["outcome"]
                .as_str()
                .filter(|why| !why.is_empty())
                .map(|why| timer_outcome(lang, why));
            match (ja, why) {
                (true, Some(why)) => format!("{kind} {when}（{state}・{why}）: {place}"),
                (true, None) => format!("{kind} {when}（{state}）: {place}"),
                (false, Some(why)) => format!("{kind} {when} ({state}, {why}): {place}"),
                (false, None) => format!("{kind} {when} ({state}): {place}"),
            }
        }
        other => other.to_owned(),
    }
}

/// A message of the bot's: what it was, and whether it went out.
fn message_words(lang: ConsoleLang, entry: &Value) -> String {
    let scenario = scenario_name(entry);
    let state = match text(entry, "state") {
        "pending" => lang.t("送信待ち", "waiting to be sent"),
        "sent" => lang.t("送信済み", "sent"),
        "logged" => lang.t("記録のみ（送信なし）", "logged, not sent"),
        "uncertain" => lang.t("届いたか不明", "not known whether it arrived"),
        "failed" => lang.t("送れず", "not sent: it failed"),
        other => other,
    };
    let route = match text(entry, "route") {
        "reply" => lang.t("返信", "reply"),
        "push" => lang.t("プッシュ", "push"),
        "rich_menu" => {
            return match lang {
                ConsoleLang::Ja => format!("リッチメニューの切り替え「{scenario}」（{state}）"),
                ConsoleLang::En => format!("Rich menu link of {scenario} ({state})"),
            };
        }
        other => other,
    };
    // Only a message that went out was "sent"; the others are the bot's
    // message as recorded.
    let went = text(entry, "state") == "sent";
    let starts = entry["startsRun"].as_bool() == Some(true);
    if let (Some(question), true) = (entry["asksText"].as_str(), starts) {
        return match (lang, went) {
            (ConsoleLang::Ja, true) => format!("アンケート「{scenario}」を開始: 質問「{question}」を送信（{route}）"),
            (ConsoleLang::Ja, false) => {
                format!("アンケート「{scenario}」を開始: 質問「{question}」（{route}・{state}）")
            }
            (ConsoleLang::En, true) => format!("Started “{scenario}”: asked “{question}” ({route}, sent)"),
            (ConsoleLang::En, false) => format!("Started “{scenario}”: the question “{question}” ({route}, {state})"),
        };
    }
    if let Some(question) = entry["asksText"].as_str() {
        return match (lang, went) {
            (ConsoleLang::Ja, true) => format!("ボットが質問「{question}」を送信（{route}）"),
            (ConsoleLang::Ja, false) => format!("ボットの質問「{question}」（{route}・{state}）"),
            (ConsoleLang::En, true) => format!("The bot asked “{question}” ({route}, sent)"),
            (ConsoleLang::En, false) => format!("The bot's question “{question}” ({route}, {state})"),
        };
    }
    match (entry["asks"].as_str(), lang, went) {
        (Some(node), ConsoleLang::Ja, true) => format!("ボットが「{scenario}」の質問 {node} を送信（{route}）"),
        (Some(node), ConsoleLang::Ja, false) => format!("ボットの「{scenario}」の質問 {node}（{route}・{state}）"),
        (Some(node), ConsoleLang::En, true) => format!("The bot asked {node} of {scenario} ({route}, sent)"),
        (Some(node), ConsoleLang::En, false) => format!("The bot's question {node} of {scenario} ({route}, {state})"),
        (None, ConsoleLang::Ja, true) => format!("ボットが「{scenario}」のメッセージを送信（{route}）"),
        (None, ConsoleLang::Ja, false) => format!("ボットの「{scenario}」のメッセージ（{route}・{state}）"),
        (None, ConsoleLang::En, true) => format!("The bot sent a message of {scenario} ({route}, sent)"),
        (None, ConsoleLang::En, false) => format!("The bot's message of {scenario} ({route}, {state})"),
    }
}

/// A webhook event: what the user did, and whether it was recorded.
fn event_words(lang: ConsoleLang, entry: &Value) -> String {
    let did = match text(entry, "kind") {
        "message" => lang.t("メッセージを受信", "Sent a message"),
        "postback" => lang.t("ボタンをタップ", "Tapped a button"),
        "follow" => lang.t("友だち追加", "Added the account as a friend"),
        "unfollow" => lang.t("ブロック（友だち解除）", "Blocked the account"),
        "unsend" => lang.t("メッセージの送信取り消し", "Unsent a message"),
        "source" => lang.t("流入経路リンクからログイン", "Logged in through a source link"),
        other => other,
    };
    let (answers, messages) = (count(entry, "answerIds"), count(entry, "messageIds"));
    let result = match text(entry, "outcome") {
        "pending" => lang.t("処理中", "being processed").to_owned(),
        "dead" => lang
            .t("処理できず配信失敗へ", "could not be processed: see the dead letters")
            .to_owned(),
        _ if answers > 0 => match lang {
            ConsoleLang::Ja => format!("回答を{answers}件記録"),
            ConsoleLang::En => format!("{answers} answer(s) recorded"),
        },
        _ if text(entry, "kind") == "postback" && messages == 0 => lang
            .t(
                "既に回答済みまたは締切のため記録せず",
                "nothing recorded: already answered or closed",
            )
            .to_owned(),
        _ => lang.t("処理済み", "done").to_owned(),
    };
    match lang {
        ConsoleLang::Ja => format!("{did}（{result}）"),
        ConsoleLang::En => format!("{did} ({result})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_entry_reads_as_a_sentence_in_either_language() {
        let cases = [
            (
                json!({"type": "answer", "scenarioId": "lunch", "nodeId": "rating", "value": "4", "tags": ["満足"]}),
                "回答: 4（lunch / rating）、タグ 満足",
                "Answered 4 (lunch / rating); tags 満足",
            ),
            (
                json!({"type": "answer", "scenarioId": "sat", "scenarioTitle": "満足度", "nodeId": "rating",
                       "questionText": "今日の満足度は？", "value": "4", "choiceLabel": "満足", "tags": []}),
                "回答: 4 満足（満足度「今日の満足度は？」）",
                "Answered 4 満足 (満足度 “今日の満足度は？”)",
            ),
            (
                // A label that says the value again is not repeated.
                json!({"type": "answer", "scenarioId": "sat", "nodeId": "rating",
                       "questionText": "Rate us", "value": "5", "choiceLabel": "5", "tags": []}),
                "回答: 5（sat「Rate us」）",
                "Answered 5 (sat “Rate us”)",
            ),
            (
                json!({"type": "message", "scenarioId": "sat", "scenarioTitle": "満足度", "state": "sent", "route": "reply",
                       "asks": "rating", "asksText": "今日の満足度は？", "startsRun": true}),
                "アンケート「満足度」を開始: 質問「今日の満足度は？」を送信（返信）",
                "Started “満足度”: asked “今日の満足度は？” (reply, sent)",
            ),
            (
                json!({"type": "message", "scenarioId": "sat", "scenarioTitle": "満足度", "state": "pending", "route": "push",
                       "asks": "rating", "asksText": "今日の満足度は？", "startsRun": true}),
                "アンケート「満足度」を開始: 質問「今日の満足度は？」（プッシュ・送信待ち）",
                "Started “満足度”: the question “今日の満足度は？” (push, waiting to be sent)",
            ),
            (
                json!({"type": "message", "scenarioId": "sat", "scenarioTitle": "満足度", "state": "sent", "route": "push", "asks": null}),
                "ボットが「満足度」のメッセージを送信（プッシュ）",
                "The bot sent a message of 満足度 (push, sent)",
            ),
            (
                json!({"type": "timer", "kind": "remind", "state": "pending", "at": "2026-12-03T01:00:00Z", "scenarioId": "sat",
                       "scenarioTitle": "満足度", "nodeId": "rating", "questionText": "今日の満足度は？"}),
                "リマインダー 12/03 10:00（予定）: 満足度「今日の満足度は？」",
                "Reminder 12/03 10:00 (pending): 満足度 “今日の満足度は？”",
            ),
            (
                json!({"type": "timer", "kind": "step", "state": "cancelled", "outcome": "cancelled_by_operator",
                       "at": "2026-12-03T01:00:00Z", "scenarioId": "sat", "nodeId": "gone"}),
                "ステップ配信 12/03 10:00（取り消し済み・オペレーターが取り消し）: sat / gone",
                "Step 12/03 10:00 (cancelled, cancelled_by_operator): sat / gone",
            ),
            (
                json!({"type": "answer", "scenarioId": "lunch", "nodeId": "age", "value": 31, "tags": []}),
                "回答: 31（lunch / age）",
                "Answered 31 (lunch / age)",
            ),
            (
                json!({"type": "answer", "scenarioId": "lunch", "nodeId": "comment", "value": null, "tags": []}),
                "回答（内容は削除済み）: lunch / comment",
                "Answer (its value was removed): lunch / comment",
            ),
            (
                json!({"type": "event", "kind": "postback", "outcome": "done", "answerIds": ["a"], "messageIds": ["m"]}),
                "ボタンをタップ（回答を1件記録）",
                "Tapped a button (1 answer(s) recorded)",
            ),
            (
                json!({"type": "event", "kind": "postback", "outcome": "done", "answerIds": [], "messageIds": []}),
                "ボタンをタップ（既に回答済みまたは締切のため記録せず）",
                "Tapped a button (nothing recorded: already answered or closed)",
            ),
            (
                json!({"type": "event", "kind": "follow", "outcome": "dead"}),
                "友だち追加（処理できず配信失敗へ）",
                "Added the account as a friend (could not be processed: see the dead letters)",
            ),
            (
                json!({"type": "message", "scenarioId": "lunch", "state": "sent", "route": "reply", "asks": "rating"}),
                "ボットが「lunch」の質問 rating を送信（返信）",
                "The bot asked rating of lunch (reply, sent)",
            ),
            (
                json!({"type": "message", "scenarioId": "lunch", "state": "failed", "route": "push", "asks": null}),
                "ボットの「lunch」のメッセージ（プッシュ・送れず）",
                "The bot's message of lunch (push, not sent: it failed)",
            ),
            (
                json!({"type": "message", "scenarioId": "lunch", "state": "sent", "route": "push", "asks": "rating", "asksText": "満足度は？"}),
                "ボットが質問「満足度は？」を送信（プッシュ）",
                "The bot asked “満足度は？” (push, sent)",
            ),
            (
                json!({"type": "message", "scenarioId": "menus", "state": "sent", "route": "rich_menu", "asks": null}),
                "リッチメニューの切り替え「menus」（送信済み）",
                "Rich menu link of menus (sent)",
            ),
            (
                json!({"type": "timer", "kind": "expire", "state": "skipped", "outcome": "answered", "at": "2026-12-03T01:00:00Z", "scenarioId": "lunch", "nodeId": "rating"}),
                "回答期限 12/03 10:00（見送り・回答済み）: lunch / rating",
                "Answer deadline 12/03 10:00 (skipped, answered): lunch / rating",
            ),
            (
                json!({"type": "timer", "kind": "remind", "state": "cancelled", "at": "2026-12-03T01:00:00Z", "scenarioId": "lunch", "nodeId": "rating"}),
                "リマインダー 12/03 10:00（取り消し済み）: lunch / rating",
                "Reminder 12/03 10:00 (cancelled): lunch / rating",
            ),
            (
                json!({"type": "dead_letter", "reason": "LINE refused (400)"}),
                "配信失敗として保留: LINE refused (400)",
                "Parked as a dead letter: LINE refused (400)",
            ),
            (json!({"type": "something_new"}), "something_new", "something_new"),
        ];
        for (entry, ja, en) in cases {
            assert_eq!(entry_words(ConsoleLang::Ja, &entry), ja, "{entry}");
            assert_eq!(entry_words(ConsoleLang::En, &entry), en, "{entry}");
        }
    }

    #[test]
    fn short_times_are_japan_time() {
        assert_eq!(short_time("2026-12-02T15:30:00.000Z", None), "12/03 00:30");
        assert_eq!(
            short_time("2026-12-02T15:30:00.000Z", Some("Asia/Kolkata")),
            "12/02 21:00"
        );
        assert_eq!(short_time("not a time", Some("Asia/Tokyo")), "not a time");
    }
}
