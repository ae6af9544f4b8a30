//! The console's campaign builder form (`/console/campaigns/new`), read into
//! the same [`CampaignRequest`] `POST /admin/campaigns` takes, so a campaign
//! built in the console reaches the same audience as one sent through the
//! API. Pure: the pipeline checks the audience again when it runs.
//!
//! Lists (tags, scenarios, sources) are separated by commas (`,`, `、`, `，`)
//! or new lines. Field conditions take a line each: `age >= 20`, `age <= 29`,
//! `plan = gold`, `plan in gold, silver`, `birthday exists`,
//! `birthday missing`; a value in double quotes is text (`code = "007"`),
//! otherwise yes/no (`true`/`false`, `はい`/`いいえ`), a number, or text. A
//! line that sets a part of a condition twice, or an empty or mistyped
//! value (`age == 3`), is refused rather than read as another filter.

use crate::engine::campaign::{AudienceRequest, FieldCondition, SourceFilter, TagFilter};
use crate::ids::ScenarioId;
use crate::pipeline::campaigns::CampaignRequest;
use crate::values::FieldValue;
use chrono::{FixedOffset, NaiveDateTime, TimeZone};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Japan time: the console shows and reads every time in it.
const JST_SECONDS: i32 = 9 * 3600;
/// Lines the field box may hold (the audience takes at most 20 fields).
const MAX_FIELD_LINES: usize = 40;

/// The builder's fields, as the browser sends them (in the query of the
/// preview, in the body of the confirmed create).
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct CampaignForm {
    pub(crate) scenario: String,
    pub(crate) tags_any: String,
    pub(crate) tags_all: String,
    pub(crate) tags_none: String,
    pub(crate) answered: String,
    pub(crate) not_answered: String,
    /// `YYYY-MM-DD`, in the campaign scenario's time zone (as the API).
    pub(crate) first_seen_from: String,
    pub(crate) first_seen_to: String,
    pub(crate) sources: String,
    pub(crate) fields: String,
    /// `"true"` when checked.
    pub(crate) skip_answered: String,
    /// `"now"` or `"later"`.
    pub(crate) when: String,
    /// `YYYY-MM-DDTHH:MM` (a `datetime-local` input), Japan time.
    pub(crate) send_at: String,
    pub(crate) allow_over_quota: String,
}

/// What is wrong with a form, in words for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FormProblem {
    #[error("Choose a scenario.")]
    NoScenario,
    #[error("{0:?} is not a scenario id.")]
    BadScenario(String),
    #[error(
        "Field condition {0:?} is not one of: name = value, name in a, b, name >= value, name <= value, name exists, name missing."
    )]
    BadFieldLine(String),
    #[error("The field conditions have more than {MAX_FIELD_LINES} lines.")]
    TooManyFieldLines,
    #[error("Choose a send time, or send now.")]
    NoSendTime,
    #[error("{0:?} is not a date and time (YYYY-MM-DD HH:MM).")]
    BadSendTime(String),
    #[error("Choose when to send: now or at a time.")]
    BadWhen,
}

impl FormProblem {
    /// The problem in the console's language.
    pub(crate) fn in_lang(&self, lang: crate::values::ConsoleLang) -> String {
        use crate::values::ConsoleLang;
        match (lang, self) {
            (ConsoleLang::En, problem) => problem.to_string(),
            (ConsoleLang::Ja, FormProblem::NoScenario) => "シナリオを選んでください。".to_owned(),
            (ConsoleLang::Ja, FormProblem::BadScenario(id)) => format!("{id:?} はシナリオのIDではありません。"),
            (ConsoleLang::Ja, FormProblem::BadFieldLine(line)) => format!(
                "項目の条件 {line:?} は、次のどれにも当てはまりません: 名前 = 値、名前 in a, b、名前 >= 値、名前 <= 値、名前 exists、名前 missing。"
            ),
            (ConsoleLang::Ja, FormProblem::TooManyFieldLines) => {
                format!("項目の条件は{MAX_FIELD_LINES}行までです。")
            }
            (ConsoleLang::Ja, FormProblem::NoSendTime) => "送る日時を選ぶか、今すぐ送るを選んでください。".to_owned(),
            (ConsoleLang::Ja, FormProblem::BadSendTime(text)) => {
                format!("{text:?} は日時ではありません（YYYY-MM-DD HH:MM）。")
            }
            (ConsoleLang::Ja, FormProblem::BadWhen) => {
                "いつ送るかを選んでください: 今すぐ、または日時を指定。".to_owned()
            }
        }
    }
}

impl CampaignForm {
    /// The campaign this form asks for.
    pub(crate) fn request(&self) -> Result<CampaignRequest, FormProblem> {
        let scenario = self.scenario.trim();
        if scenario.is_empty() {
            return Err(FormProblem::NoScenario);
        }
        let scenario_id =
            ScenarioId::parse(scenario.to_owned()).map_err(|_| FormProblem::BadScenario(scenario.to_owned()))?;
        let tags = TagFilter {
            any_of: list(&self.tags_any),
            all_of: list(&self.tags_all),
            none_of: list(&self.tags_none),
        };
        let audience = AudienceRequest {
            tags: (tags != TagFilter::default()).then_some(tags),
            answered: list(&self.answered),
            not_answered: list(&self.not_answered),
            first_seen_from: text(&self.first_seen_from),
            first_seen_to: text(&self.first_seen_to),
            fields: fields(&self.fields)?,
            sources: list(&self.sources).map(|any_of| SourceFilter { any_of }),
        };
        let send_at = match self.when.as_str() {
            "" | "now" => None,
            "later" => Some(send_at(&self.send_at)?),
            _ => return Err(FormProblem::BadWhen),
        };
        Ok(CampaignRequest {
            scenario_id,
            audience,
            skip_answered: self.skip_answered == "true",
            calls_per_second: None,
            send_at,
            allow_over_quota: self.allow_over_quota == "true",
        })
    }
}

fn text(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// A list box's entries; `None` when it names none (no filter).
fn list(raw: &str) -> Option<Vec<String>> {
    let entries: Vec<String> = raw.split([',', '、', '，', '\n', '\r']).filter_map(text).collect();
    (!entries.is_empty()).then_some(entries)
}

/// A condition's value: text in double quotes as it stands; otherwise
/// yes/no (as the console shows them, or true/false), a number, or text.
/// `None` for nothing, or for what reads as a mistyped operator (`age == 3`).
fn value(raw: &str) -> Option<FieldValue> {
    let raw = raw.trim();
    if let Some(quoted) = raw.strip_prefix('"').and_then(|rest| rest.strip_suffix('"'))
        && raw.len() >= 2
    {
        return Some(FieldValue::Text(quoted.to_owned()));
    }
    if raw.is_empty() || raw.starts_with(['=', '<', '>']) {
        return None;
    }
    match raw {
        "yes" | "true" | "はい" => return Some(FieldValue::Bool(true)),
        "no" | "false" | "いいえ" => return Some(FieldValue::Bool(false)),
        _ => {}
    }
    if let Ok(integer) = raw.parse::<i64>() {
        return Some(FieldValue::Integer(integer));
    }
    Some(match raw.parse::<f64>() {
        Ok(number) if number.is_finite() => FieldValue::Number(number),
        _ => FieldValue::Text(raw.to_owned()),
    })
}

/// Sets a condition's part once: a second line setting it again is refused
/// rather than silently replacing the first.
fn set_once<T>(slot: &mut Option<T>, value: Option<T>, bad: impl Fn() -> FormProblem) -> Result<(), FormProblem> {
    if slot.is_some() {
        return Err(bad());
    }
    *slot = Some(value.ok_or_else(bad)?);
    Ok(())
}

/// The field box: a condition per line, lines on one field combined.
fn fields(raw: &str) -> Result<Option<BTreeMap<String, FieldCondition>>, FormProblem> {
    let lines: Vec<&str> = raw.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    if lines.len() > MAX_FIELD_LINES {
        return Err(FormProblem::TooManyFieldLines);
    }
    let mut conditions: BTreeMap<String, FieldCondition> = BTreeMap::new();
    for line in lines {
        let bad = || FormProblem::BadFieldLine(line.chars().take(80).collect());
        // The name runs to the first character a field name cannot hold.
        let end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(line.len());
        let (name, rest) = line.split_at(end);
        let rest = rest.trim_start();
        if name.is_empty() {
            return Err(bad());
        }
        let condition = conditions.entry(name.to_owned()).or_default();
        if rest == "exists" {
            set_once(&mut condition.exists, Some(true), bad)?;
        } else if rest == "missing" {
            set_once(&mut condition.exists, Some(false), bad)?;
        } else if let Some(values) = rest.strip_prefix("in ") {
            let values: Option<Vec<FieldValue>> = values
                .split([',', '、', '，'])
                .filter_map(text)
                .map(|raw| value(&raw))
                .collect();
            set_once(&mut condition.one_of, values.filter(|values| !values.is_empty()), bad)?;
        } else if let Some(at_least) = rest.strip_prefix(">=") {
            set_once(&mut condition.min, value(at_least), bad)?;
        } else if let Some(at_most) = rest.strip_prefix("<=") {
            set_once(&mut condition.max, value(at_most), bad)?;
        } else if let Some(equals) = rest.strip_prefix('=') {
            set_once(&mut condition.equals, value(equals), bad)?;
        } else {
            return Err(bad());
        }
    }
    Ok((!conditions.is_empty()).then_some(conditions))
}

/// A `datetime-local` value read as Japan time.
fn send_at(raw: &str) -> Result<chrono::DateTime<FixedOffset>, FormProblem> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(FormProblem::NoSendTime);
    }
    let bad = || FormProblem::BadSendTime(raw.chars().take(40).collect());
    let local = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(raw, format).ok())
        .ok_or_else(bad)?;
    let japan = FixedOffset::east_opt(JST_SECONDS).ok_or_else(bad)?;
    japan.from_local_datetime(&local).single().ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_reads_in_japanese_and_in_english_as_before() {
        use crate::values::ConsoleLang;
        let problems = [
            (FormProblem::NoScenario, "Choose a scenario."),
            (FormProblem::BadScenario("a b".into()), "\"a b\" is not a scenario id."),
            (
                FormProblem::BadFieldLine("age == 3".into()),
                "Field condition \"age == 3\" is not one of: name = value, name in a, b, name >= value, name <= value, name exists, name missing.",
            ),
            (
                FormProblem::TooManyFieldLines,
                "The field conditions have more than 40 lines.",
            ),
            (FormProblem::NoSendTime, "Choose a send time, or send now."),
            (
                FormProblem::BadSendTime("tomorrow".into()),
                "\"tomorrow\" is not a date and time (YYYY-MM-DD HH:MM).",
            ),
            (FormProblem::BadWhen, "Choose when to send: now or at a time."),
        ];
        for (problem, english) in problems {
            assert_eq!(problem.in_lang(ConsoleLang::En), english);
            let ja = problem.in_lang(ConsoleLang::Ja);
            assert!(ja.ends_with('。'), "{ja}");
            assert!(!ja.contains("Choose") && !ja.contains(" is not "), "{ja}");
        }
    }
    use serde_json::json;

    fn form(pairs: &[(&str, &str)]) -> CampaignForm {
        let encoded = serde_urlencoded::to_string(pairs).expect("encodes");
        serde_urlencoded::from_str(&encoded).expect("a form")
    }

    #[test]
    fn the_form_reads_into_the_audience_the_api_takes() {
        let cases: Vec<(Vec<(&str, &str)>, serde_json::Value)> = vec![
            (vec![("scenario", "lunch")], json!({})),
            (
                vec![("scenario", "lunch"), ("tags_any", "unsatisfied, 常連、 vip\n")],
                json!({"tags": {"anyOf": ["unsatisfied", "常連", "vip"]}}),
            ),
            (
                vec![("scenario", "lunch"), ("tags_all", "a"), ("tags_none", "b，c")],
                json!({"tags": {"allOf": ["a"], "noneOf": ["b", "c"]}}),
            ),
            (
                vec![
                    ("scenario", "lunch"),
                    ("answered", "news"),
                    ("not_answered", "lunch, news"),
                ],
                json!({"answered": ["news"], "notAnswered": ["lunch", "news"]}),
            ),
            (
                vec![
                    ("scenario", "lunch"),
                    ("first_seen_from", " 2026-09-22 "),
                    ("first_seen_to", ""),
                ],
                json!({"firstSeenFrom": "2026-09-22"}),
            ),
            (
                vec![("scenario", "lunch"), ("sources", "instagram_dec")],
                json!({"sources": {"anyOf": ["instagram_dec"]}}),
            ),
            (
                vec![
                    ("scenario", "lunch"),
                    (
                        "fields",
                        "age >= 20\r\nage<=29\nplan in gold, silver\ncode = \"007\"\nvip = yes\nbirthday exists\nnote missing\nscore = 4.5\nnew = いいえ",
                    ),
                ],
                json!({"fields": {
                    "age": {"min": 20, "max": 29},
                    "plan": {"in": ["gold", "silver"]},
                    "code": {"equals": "007"},
                    "vip": {"equals": true},
                    "birthday": {"exists": true},
                    "note": {"exists": false},
                    "score": {"equals": 4.5},
                    "new": {"equals": false},
                }}),
            ),
        ];
        for (pairs, audience) in cases {
            let request = form(&pairs).request().expect("a campaign");
            assert_eq!(serde_json::to_value(&request.audience).unwrap(), audience, "{pairs:?}");
            assert_eq!(request.scenario_id.as_str(), "lunch");
            assert!(request.send_at.is_none() && !request.skip_answered && !request.allow_over_quota);
        }
    }

    #[test]
    fn send_times_are_japan_time_and_boxes_are_read() {
        let request = form(&[
            ("scenario", "news"),
            ("when", "later"),
            ("send_at", "2026-12-07T10:00"),
            ("skip_answered", "true"),
            ("allow_over_quota", "true"),
        ])
        .request()
        .expect("a campaign");
        assert_eq!(
            request.send_at.expect("a time").to_rfc3339(),
            "2026-12-07T10:00:00+09:00"
        );
        assert!(request.skip_answered && request.allow_over_quota);
        // A time typed but "now" chosen: now.
        let now = form(&[("scenario", "news"), ("when", "now"), ("send_at", "2026-12-07T10:00")]);
        assert!(now.request().expect("a campaign").send_at.is_none());
    }

    #[test]
    fn a_form_that_is_wrong_says_what_is_wrong() {
        let cases: Vec<(Vec<(&str, &str)>, FormProblem)> = vec![
            (vec![], FormProblem::NoScenario),
            (vec![("scenario", "  ")], FormProblem::NoScenario),
            (vec![("scenario", "a\0b")], FormProblem::BadScenario("a\0b".into())),
            (
                vec![("scenario", "news"), ("fields", "age > 3")],
                FormProblem::BadFieldLine("age > 3".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "age")],
                FormProblem::BadFieldLine("age".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "= 3")],
                FormProblem::BadFieldLine("= 3".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "plan in , ")],
                FormProblem::BadFieldLine("plan in ,".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "age == 3")],
                FormProblem::BadFieldLine("age == 3".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "age => 3")],
                FormProblem::BadFieldLine("age => 3".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "age >=")],
                FormProblem::BadFieldLine("age >=".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "age >= 20\nage >= 30")],
                FormProblem::BadFieldLine("age >= 30".into()),
            ),
            (
                vec![("scenario", "news"), ("fields", "age exists\nage missing")],
                FormProblem::BadFieldLine("age missing".into()),
            ),
            (vec![("scenario", "news"), ("when", "later")], FormProblem::NoSendTime),
            (
                vec![("scenario", "news"), ("when", "later"), ("send_at", "tomorrow")],
                FormProblem::BadSendTime("tomorrow".into()),
            ),
            (vec![("scenario", "news"), ("when", "soon")], FormProblem::BadWhen),
        ];
        for (pairs, problem) in cases {
            assert_eq!(form(&pairs).request().err(), Some(problem), "{pairs:?}");
        }
        let many = "a exists\n".repeat(MAX_FIELD_LINES + 1);
        assert_eq!(
            form(&[("scenario", "news"), ("fields", &many)]).request().err(),
            Some(FormProblem::TooManyFieldLines)
        );
    }
}
