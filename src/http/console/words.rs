//! What the lower floors' refusals say, in the console's language: the
//! English is their own message (the API's), the Japanese says the same for
//! an operator. Values the operator typed are quoted back as typed.

use crate::access::AccessError;
use crate::engine::campaign::{
    AudienceError, MAX_FIELD_CONDITIONS, MAX_SCENARIOS, MAX_SCHEDULE_DAYS, MAX_TAGS, SendAtError,
};
use crate::engine::crosstab::CrossByError;
use crate::engine::hand_edit::{HandEditError, MAX_TAG_CHARS};
use crate::engine::results::RangeError;
use crate::values::ConsoleLang;

/// A date range's problem (results, cross-tabs, the answers page, the CSV).
pub(crate) fn range(lang: ConsoleLang, problem: &RangeError) -> String {
    match (lang, problem) {
        (ConsoleLang::En, problem) => problem.to_string(),
        (ConsoleLang::Ja, RangeError::BadDate { field, value }) => {
            format!("{field} は YYYY-MM-DD の日付で入れてください（{value:?} は日付ではありません）。")
        }
        (ConsoleLang::Ja, RangeError::Inverted { from, to }) => {
            format!("開始日（{from}）が終了日（{to}）より後です。")
        }
    }
}

/// A cross-tab's `by`.
pub(crate) fn cross_by(lang: ConsoleLang, problem: &CrossByError) -> String {
    match (lang, problem) {
        (ConsoleLang::En, problem) => problem.to_string(),
        (ConsoleLang::Ja, CrossByError::Unknown(by)) => {
            format!("{by:?} では集計できません。source、variant、tag:タグ、field:項目名 のどれかにしてください。")
        }
        (ConsoleLang::Ja, CrossByError::BadTag) => {
            format!("tag: のあとに1〜{MAX_TAG_CHARS}文字のタグを入れてください。")
        }
        (ConsoleLang::Ja, CrossByError::BadField(name)) => {
            format!("field:{name:?} は項目名ではありません（半角英小文字で始まり、英小文字・数字・_）。")
        }
    }
}

/// A campaign's audience.
pub(crate) fn audience(lang: ConsoleLang, problem: &AudienceError) -> String {
    match (lang, problem) {
        (ConsoleLang::En, problem) => problem.to_string(),
        (ConsoleLang::Ja, AudienceError::UnknownScenario(id)) => format!("{id:?} というシナリオはありません。"),
        (ConsoleLang::Ja, AudienceError::EmptyList(name)) => {
            format!("{name} が空です。絞り込まないときは空欄のままにしてください。")
        }
        (ConsoleLang::Ja, AudienceError::TooManyTags(count)) => {
            format!("タグが{count}個あります。{MAX_TAGS}個までにしてください。")
        }
        (ConsoleLang::Ja, AudienceError::TooManyScenarios(count)) => {
            format!("シナリオが{count}個あります。{MAX_SCENARIOS}個までにしてください。")
        }
        (ConsoleLang::Ja, AudienceError::BadTag(tag)) => {
            format!("{tag:?} はタグとして使えません（1〜{MAX_TAG_CHARS}文字）。")
        }
        (ConsoleLang::Ja, AudienceError::BadDate { field, value }) => {
            format!("{field} の {value:?} は日付ではありません（YYYY-MM-DD）。")
        }
        (ConsoleLang::Ja, AudienceError::InvertedDates { from, to }) => {
            format!("初回利用日の開始（{from}）が終了（{to}）より後です。")
        }
        (ConsoleLang::Ja, AudienceError::BadField(name, problem)) => {
            format!("項目 {name} の条件に問題があります: {problem}")
        }
        (ConsoleLang::Ja, AudienceError::TooManyFields(count)) => {
            format!("項目の条件が{count}個あります。{MAX_FIELD_CONDITIONS}個までにしてください。")
        }
        (ConsoleLang::Ja, AudienceError::TooManySources(count)) => {
            format!("流入経路が{count}個あります。{MAX_TAGS}個までにしてください。")
        }
        (ConsoleLang::Ja, AudienceError::BadSource(id)) => {
            format!("{id:?} は流入経路のIDではありません（半角英小文字・数字・_、40文字まで）。")
        }
    }
}

/// A campaign's send time.
pub(crate) fn send_at(lang: ConsoleLang, problem: &SendAtError) -> String {
    match (lang, problem) {
        (ConsoleLang::En, problem) => problem.to_string(),
        (ConsoleLang::Ja, SendAtError::Past(at)) => {
            format!("送信日時 {at} は過ぎています。これからの日時を選ぶか、今すぐ送ってください。")
        }
        (ConsoleLang::Ja, SendAtError::TooFar(at)) => {
            format!("送信日時 {at} は{MAX_SCHEDULE_DAYS}日より先です。")
        }
        (ConsoleLang::Ja, SendAtError::UnknownScenario(id)) => format!("{id:?} というシナリオはありません。"),
    }
}

/// A personal API token's refusal.
pub(crate) fn access(lang: ConsoleLang, problem: &AccessError) -> String {
    match (lang, problem) {
        (ConsoleLang::Ja, AccessError::NoOperator) => {
            "個人のAPIトークンは、メールアドレスでログインしたオペレーターだけが作れます。".to_owned()
        }
        (ConsoleLang::Ja, AccessError::RoleAboveOperator(role)) => {
            format!("トークンの権限は、自分の権限（{role}）より上にできません。")
        }
        (ConsoleLang::Ja, AccessError::BadLabel) => "トークンの名前は1〜60文字で、制御文字は使えません。".to_owned(),
        (ConsoleLang::Ja, AccessError::UnknownToken) => "そのトークンはあなたのものではないか、ありません。".to_owned(),
        (ConsoleLang::Ja, AccessError::TooManyTokens) => {
            "トークンが上限に達しています。使わなくなったものを無効にしてください。".to_owned()
        }
        (ConsoleLang::Ja, AccessError::Busy) => "ログインが集中しています。少し待ってからお試しください。".to_owned(),
        (_, problem) => problem.to_string(),
    }
}

/// A change of tags or fields by hand.
pub(crate) fn hand_edit(lang: ConsoleLang, problem: &HandEditError) -> String {
    match (lang, problem) {
        (ConsoleLang::En, problem) => problem.to_string(),
        (ConsoleLang::Ja, HandEditError::BadTag) => {
            format!("タグは1〜{MAX_TAG_CHARS}文字で、制御文字は使えません。")
        }
        (ConsoleLang::Ja, HandEditError::BadFieldName) => {
            "項目名は半角の英小文字で始まり、英小文字・数字・_ で40文字までです（例: plan, birth_month）。".to_owned()
        }
        (ConsoleLang::Ja, HandEditError::BadText) => format!(
            "テキストの項目は{}文字までで、制御文字は使えません。",
            crate::scenario::MAX_FIELD_TEXT_CHARS
        ),
        (ConsoleLang::Ja, HandEditError::BadNumber(text)) => format!("{text:?} は数値ではありません。"),
        (ConsoleLang::Ja, HandEditError::BadYesNo) => "はい/いいえ の項目は yes か no です。".to_owned(),
        (ConsoleLang::Ja, HandEditError::TooManyFields) => format!(
            "このユーザーの項目はすでに{}個あります。先にどれかを削除してください。",
            crate::scenario::MAX_FIELD_NAMES
        ),
        (ConsoleLang::Ja, HandEditError::UnknownOp(op)) => format!("{op:?} という変更はありません。"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each Japanese text is a sentence of its own, never the English.
    fn japanese(ja: &str, en: &str) {
        assert_ne!(ja, en);
        assert!(ja.ends_with('。') || ja.contains(": "), "{ja}");
        assert!(ja.chars().any(|c| ('\u{3040}'..='\u{30ff}').contains(&c)), "{ja}");
    }

    #[test]
    fn refusals_read_in_japanese_and_keep_their_english() {
        let ranges = [
            (
                RangeError::BadDate {
                    field: "from",
                    value: "2026-13-01".into(),
                },
                "from must be a date written YYYY-MM-DD, not \"2026-13-01\"",
            ),
            (
                RangeError::Inverted {
                    from: chrono::NaiveDate::from_ymd_opt(2026, 12, 7).unwrap_or_default(),
                    to: chrono::NaiveDate::from_ymd_opt(2026, 12, 1).unwrap_or_default(),
                },
                "from (2026-12-07) is after to (2026-12-01)",
            ),
        ];
        for (problem, english) in ranges {
            assert_eq!(range(ConsoleLang::En, &problem), english);
            japanese(&range(ConsoleLang::Ja, &problem), english);
        }
        let audiences = [
            AudienceError::UnknownScenario("x".into()),
            AudienceError::EmptyList("tags.anyOf"),
            AudienceError::TooManyTags(31),
            AudienceError::BadTag(String::new()),
            AudienceError::BadSource("A".into()),
            AudienceError::BadField("age".into(), "min must be a number".into()),
        ];
        for problem in audiences {
            japanese(&audience(ConsoleLang::Ja, &problem), &problem.to_string());
            assert_eq!(audience(ConsoleLang::En, &problem), problem.to_string());
        }
        for problem in [
            SendAtError::Past("2026-01-01T00:00:00+09:00".into()),
            SendAtError::TooFar("x".into()),
        ] {
            japanese(&send_at(ConsoleLang::Ja, &problem), &problem.to_string());
        }
        for problem in [
            CrossByError::Unknown("city".into()),
            CrossByError::BadTag,
            CrossByError::BadField("A".into()),
        ] {
            japanese(&cross_by(ConsoleLang::Ja, &problem), &problem.to_string());
        }
        for problem in [
            AccessError::BadLabel,
            AccessError::TooManyTokens,
            AccessError::UnknownToken,
        ] {
            japanese(&access(ConsoleLang::Ja, &problem), &problem.to_string());
            assert_eq!(access(ConsoleLang::En, &problem), problem.to_string());
        }
    }
}
