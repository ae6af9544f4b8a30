//! Typed answers: the rules a text question's answer must follow, and the values
//! a date question's picker returns. Pure; compiled once when scenarios load, so
//! a pattern that does not compile stops `check` and start-up.

use super::{DateMode, Validation};
use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use regex::{Regex, RegexBuilder};
use unicode_normalization::UnicodeNormalization;
use unicode_segmentation::UnicodeSegmentation;

// The value type lives on a floor below scenarios, so the store can use it too;
// scenario code keeps its path.
pub use crate::values::AnswerValue;

/// LINE accepts at most this many characters in a user's text message; a longer
/// answer is refused rather than stored.
pub const MAX_ANSWER_CHARS: usize = 5000;

/// Compiled regular expressions stay small: a scenario cannot make the service
/// spend unbounded memory on one (the `regex` crate matches in linear time).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// A compiled [`Validation`], or free text when there is none.
#[derive(Debug, Clone)]
pub struct Rule {
    kind: RuleKind,
}

#[derive(Debug, Clone)]
enum RuleKind {
    FreeText,
    Number {
        min: Option<f64>,
        max: Option<f64>,
        integer: bool,
    },
    Email,
    PhoneJp,
    PostalCodeJp,
    Length {
        min: Option<usize>,
        max: Option<usize>,
    },
    Pattern(Regex),
}

/// Why a typed answer was refused. The text is for logs and transcripts; users
/// get the question's `invalid_text`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("the answer is empty")]
    Empty,
    #[error("the answer is longer than {MAX_ANSWER_CHARS} characters")]
    TooLong,
    #[error("not a number")]
    NotNumber,
    #[error("not a whole number")]
    NotInteger,
    #[error("below the minimum")]
    BelowMin,
    #[error("above the maximum")]
    AboveMax,
    #[error("not an email address")]
    NotEmail,
    #[error("not a Japanese phone number")]
    NotPhone,
    #[error("not a Japanese postal code")]
    NotPostalCode,
    #[error("too short")]
    TooShort,
    #[error("does not match the pattern")]
    NoMatch,
}

impl Rule {
    pub fn free_text() -> Self {
        Self {
            kind: RuleKind::FreeText,
        }
    }

    /// Compiles `validation`, refusing bounds that cannot be met and patterns that
    /// do not compile.
    pub fn new(validation: &Validation) -> Result<Self, String> {
        let kind = match validation {
            Validation::Number { min, max, integer } => {
                if min.is_some_and(|min| !min.is_finite()) || max.is_some_and(|max| !max.is_finite()) {
                    return Err("min and max must be finite numbers".to_owned());
                }
                if let (Some(min), Some(max)) = (min, max)
                    && min > max
                {
                    return Err(format!("min {min} is greater than max {max}"));
                }
                RuleKind::Number {
                    min: *min,
                    max: *max,
                    integer: *integer,
                }
            }
            Validation::Email => RuleKind::Email,
            Validation::PhoneJp => RuleKind::PhoneJp,
            Validation::PostalCodeJp => RuleKind::PostalCodeJp,
            Validation::Length { min, max } => {
                if let (Some(min), Some(max)) = (min, max)
                    && min > max
                {
                    return Err(format!("min {min} is greater than max {max}"));
                }
                if max.is_some_and(|max| max == 0 || max > MAX_ANSWER_CHARS) {
                    return Err(format!("max must be between 1 and {MAX_ANSWER_CHARS}"));
                }
                RuleKind::Length { min: *min, max: *max }
            }
            Validation::Pattern { pattern } => {
                // On its own first: an unbalanced pattern such as `a)|(.*` would
                // otherwise escape the anchors below.
                RegexBuilder::new(pattern)
                    .size_limit(PATTERN_SIZE_LIMIT)
                    .build()
                    .map_err(|error| format!("pattern {pattern:?} does not compile: {error}"))?;
                let anchored = format!("^(?:{pattern})$");
                let regex = RegexBuilder::new(&anchored)
                    .size_limit(PATTERN_SIZE_LIMIT)
                    .build()
                    .map_err(|error| format!("pattern {pattern:?} does not compile: {error}"))?;
                RuleKind::Pattern(regex)
            }
        };
        Ok(Self { kind })
    }

    /// The value a typed answer records, or why it is refused. Control
    /// characters other than line breaks and tabs are removed and the text is
    /// trimmed. Structured answers (numbers, email, phone, postal code, pattern)
    /// are read after NFKC normalisation, so full-width digits count; free text
    /// is kept as the user wrote it.
    pub fn check(&self, input: &str) -> Result<AnswerValue, Invalid> {
        let text = clean(input);
        if text.is_empty() {
            return Err(Invalid::Empty);
        }
        if text.chars().count() > MAX_ANSWER_CHARS {
            return Err(Invalid::TooLong);
        }
        let normalized = || text.nfkc().collect::<String>().trim().to_owned();
        match &self.kind {
            RuleKind::FreeText => Ok(AnswerValue::Text(text)),
            RuleKind::Number { min, max, integer } => number(&normalized(), *min, *max, *integer),
            RuleKind::Email => email(&normalized()).ok_or(Invalid::NotEmail),
            RuleKind::PhoneJp => phone_jp(&normalized()).ok_or(Invalid::NotPhone),
            RuleKind::PostalCodeJp => postal_code_jp(&normalized()).ok_or(Invalid::NotPostalCode),
            RuleKind::Length { min, max } => {
                let length = text.graphemes(true).count();
                if min.is_some_and(|min| length < min) {
                    Err(Invalid::TooShort)
                } else if max.is_some_and(|max| length > max) {
                    Err(Invalid::TooLong)
                } else {
                    Ok(AnswerValue::Text(text))
                }
            }
            RuleKind::Pattern(regex) => {
                let normalized = normalized();
                if regex.is_match(&normalized) {
                    Ok(AnswerValue::Text(normalized))
                } else {
                    Err(Invalid::NoMatch)
                }
            }
        }
    }
}

fn clean(input: &str) -> String {
    input
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect::<String>()
        .trim()
        .to_owned()
}

fn number(text: &str, min: Option<f64>, max: Option<f64>, integer: bool) -> Result<AnswerValue, Invalid> {
    // Digits, one optional sign and one optional decimal point: no exponents,
    // "inf" or "NaN", which Rust's float parser would accept.
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let mut parts = unsigned.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let fraction = parts.next();
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|fraction| !digits(fraction)) {
        return Err(Invalid::NotNumber);
    }
    let value: f64 = text.parse().map_err(|_| Invalid::NotNumber)?;
    if !value.is_finite() {
        return Err(Invalid::NotNumber);
    }
    if min.is_some_and(|min| value < min) {
        return Err(Invalid::BelowMin);
    }
    if max.is_some_and(|max| value > max) {
        return Err(Invalid::AboveMax);
    }
    if integer {
        if fraction.is_some_and(|fraction| fraction.bytes().any(|b| b != b'0')) {
            return Err(Invalid::NotInteger);
        }
        // Beyond i64 (with no bound that refused it first): out of range.
        let whole: i64 = text.split('.').next().unwrap_or("").parse().map_err(|_| {
            if text.starts_with('-') {
                Invalid::BelowMin
            } else {
                Invalid::AboveMax
            }
        })?;
        return Ok(AnswerValue::Integer(whole));
    }
    match (fraction, text.parse::<i64>()) {
        (None, Ok(whole)) => Ok(AnswerValue::Integer(whole)),
        _ => Ok(AnswerValue::Number(value)),
    }
}

fn email(text: &str) -> Option<AnswerValue> {
    let (local, domain) = text.split_once('@')?;
    let fine = |part: &str| !part.is_empty() && !part.chars().any(|c| c.is_whitespace() || c == '@');
    let domain_fine = fine(domain)
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains("..");
    (fine(local) && domain_fine && text.len() <= 254).then(|| AnswerValue::Text(text.to_owned()))
}

fn phone_jp(text: &str) -> Option<AnswerValue> {
    let compact: String = text.chars().filter(|c| !matches!(c, '-' | ' ' | '(' | ')')).collect();
    let national = match compact.strip_prefix("+81") {
        Some(rest) => format!("0{}", rest.strip_prefix('0').unwrap_or(rest)),
        None => compact,
    };
    let fine = national.starts_with('0')
        && (10..=11).contains(&national.len())
        && national.bytes().all(|b| b.is_ascii_digit());
    fine.then_some(AnswerValue::Text(national))
}

fn postal_code_jp(text: &str) -> Option<AnswerValue> {
    let text = text.strip_prefix('〒').unwrap_or(text).trim();
    let digits: String = text.chars().filter(|c| *c != '-').collect();
    let hyphens = text.chars().filter(|c| *c == '-').count();
    let hyphen_fine = hyphens == 0 || (hyphens == 1 && text.find('-') == Some(3));
    let fine = digits.len() == 7 && digits.bytes().all(|b| b.is_ascii_digit()) && hyphen_fine;
    fine.then(|| AnswerValue::Text(format!("{}-{}", &digits[..3], &digits[3..])))
}

/// A value from LINE's datetime picker, in the question's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Picked {
    Date(NaiveDate),
    Time(NaiveTime),
    DateTime(NaiveDateTime),
}

impl Picked {
    /// ISO 8601, as LINE sends it: `2026-12-01`, `10:30`, `2026-12-01T10:30`.
    pub fn iso(&self) -> String {
        match self {
            Picked::Date(date) => date.format("%Y-%m-%d").to_string(),
            Picked::Time(time) => time.format("%H:%M").to_string(),
            Picked::DateTime(at) => at.format("%Y-%m-%dT%H:%M").to_string(),
        }
    }
}

/// Whether a picker bound is within what LINE's datetime picker accepts
/// (1900-01-01T00:00 to 2100-12-31T23:59; any time of day).
pub fn within_line_range(value: Picked) -> bool {
    let date = match value {
        Picked::Time(_) => return true,
        Picked::Date(date) => date,
        Picked::DateTime(at) => at.date(),
    };
    let first = NaiveDate::from_ymd_opt(1900, 1, 1);
    let last = NaiveDate::from_ymd_opt(2100, 12, 31);
    first.is_some_and(|first| date >= first) && last.is_some_and(|last| date <= last)
}

/// Reads a value in `mode`'s format (also the format of `min` and `max`),
/// exactly: `2026-1-1` or `9:00` are refused (chrono would accept them, LINE
/// documents two-digit fields).
pub fn parse_picked(mode: DateMode, text: &str) -> Result<Picked, String> {
    let parsed = match mode {
        DateMode::Date => NaiveDate::parse_from_str(text, "%Y-%m-%d").map(Picked::Date),
        DateMode::Time => NaiveTime::parse_from_str(text, "%H:%M").map(Picked::Time),
        DateMode::Datetime => NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M").map(Picked::DateTime),
    };
    parsed.ok().filter(|picked| picked.iso() == text).ok_or_else(|| {
        let example = match mode {
            DateMode::Date => "2026-12-01",
            DateMode::Time => "10:30",
            DateMode::Datetime => "2026-12-01T10:30",
        };
        format!("{text:?} is not in the {mode:?} format, such as {example:?}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(validation: Validation) -> Rule {
        Rule::new(&validation).expect("compiles")
    }

    #[test]
    fn typed_answers() {
        let age = rule(Validation::Number {
            min: Some(0.0),
            max: Some(120.0),
            integer: true,
        });
        let score = rule(Validation::Number {
            min: None,
            max: None,
            integer: false,
        });
        let text = |value: &str| Ok(AnswerValue::Text(value.to_owned()));
        let cases: Vec<(&Rule, &str, Result<AnswerValue, Invalid>)> = vec![
            (&age, "42", Ok(AnswerValue::Integer(42))),
            // Full-width digits become ASCII after NFKC.
            (&age, "４２", Ok(AnswerValue::Integer(42))),
            (&age, " 42 ", Ok(AnswerValue::Integer(42))),
            (&age, "42.0", Ok(AnswerValue::Integer(42))),
            (&age, "42.5", Err(Invalid::NotInteger)),
            (&age, "121", Err(Invalid::AboveMax)),
            (&age, "-1", Err(Invalid::BelowMin)),
            (&age, "forty", Err(Invalid::NotNumber)),
            (&age, "1e2", Err(Invalid::NotNumber)),
            (&age, "inf", Err(Invalid::NotNumber)),
            (&age, "", Err(Invalid::Empty)),
            (&age, "\u{7}", Err(Invalid::Empty)),
            (&score, "3.5", Ok(AnswerValue::Number(3.5))),
            (&score, "7", Ok(AnswerValue::Integer(7))),
            (&score, "99999999999999999999", Ok(AnswerValue::Number(1e20))),
        ];
        for (rule, input, expected) in cases {
            assert_eq!(rule.check(input), expected, "{input:?}");
        }
        let email = rule(Validation::Email);
        assert_eq!(email.check("a@example.jp"), text("a@example.jp"));
        assert_eq!(email.check("ａ＠ｅｘａｍｐｌｅ．ｊｐ"), text("a@example.jp"));
        for bad in ["a@b", "@b.jp", "a b@c.jp", "a@@b.jp", "a@b..jp", "a@.jp"] {
            assert_eq!(email.check(bad), Err(Invalid::NotEmail), "{bad}");
        }
        let phone = rule(Validation::PhoneJp);
        assert_eq!(phone.check("090-1234-5678"), text("09012345678"));
        assert_eq!(phone.check("０３（１２３４）５６７８"), text("0312345678"));
        assert_eq!(phone.check("+81 90 1234 5678"), text("09012345678"));
        assert_eq!(phone.check("12345"), Err(Invalid::NotPhone));
        let postal = rule(Validation::PostalCodeJp);
        assert_eq!(postal.check("1000001"), text("100-0001"));
        assert_eq!(postal.check("〒100-0001"), text("100-0001"));
        assert_eq!(postal.check("１００－０００１"), text("100-0001"));
        assert_eq!(postal.check("10-00001"), Err(Invalid::NotPostalCode));
        assert_eq!(postal.check("100-000"), Err(Invalid::NotPostalCode));
        let short = rule(Validation::Length {
            min: Some(2),
            max: Some(3),
        });
        assert_eq!(short.check("👨‍👩‍👧‍👦👍"), text("👨‍👩‍👧‍👦👍"));
        assert_eq!(short.check("a"), Err(Invalid::TooShort));
        assert_eq!(short.check("abcd"), Err(Invalid::TooLong));
        let pattern = rule(Validation::Pattern {
            pattern: "[A-Z]{2}[0-9]{4}".into(),
        });
        assert_eq!(pattern.check("AB1234"), text("AB1234"));
        assert_eq!(pattern.check("xAB1234"), Err(Invalid::NoMatch), "anchored at both ends");
        let free = Rule::free_text();
        assert_eq!(free.check("line\nbreak\u{0}"), text("line\nbreak"));
        assert_eq!(
            free.check("㈱ＡＢＣ ①"),
            text("㈱ＡＢＣ ①"),
            "free text is kept as written"
        );
        assert_eq!(
            free.check(&"㍿".repeat(5000)),
            text(&"㍿".repeat(5000)),
            "NFKC does not make it too long"
        );
        assert_eq!(
            pattern.check("ＡＢ１２３４"),
            text("AB1234"),
            "a pattern reads the normalised text"
        );
        assert_eq!(age.check("99999999999999999999"), Err(Invalid::AboveMax));
        let unbounded = rule(Validation::Number {
            min: None,
            max: None,
            integer: true,
        });
        assert_eq!(unbounded.check("-99999999999999999999"), Err(Invalid::BelowMin));
        assert_eq!(free.check(&"あ".repeat(5000)), text(&"あ".repeat(5000)));
        assert_eq!(free.check(&"a".repeat(5001)), Err(Invalid::TooLong));
    }

    #[test]
    fn rules_that_cannot_hold_are_refused() {
        let refused = [
            Validation::Pattern { pattern: "(".into() },
            // Balanced only once wrapped: it must not escape the anchors.
            Validation::Pattern {
                pattern: "[0-9]+)|(.*".into(),
            },
            Validation::Pattern {
                pattern: "a{1000}{1000}".into(),
            },
            Validation::Number {
                min: Some(5.0),
                max: Some(1.0),
                integer: false,
            },
            Validation::Number {
                min: Some(f64::NAN),
                max: None,
                integer: false,
            },
            Validation::Length {
                min: Some(3),
                max: Some(2),
            },
            Validation::Length {
                min: None,
                max: Some(0),
            },
        ];
        for validation in refused {
            assert!(Rule::new(&validation).is_err(), "{validation:?}");
        }
    }

    #[test]
    fn picked_values() {
        let cases = [
            (DateMode::Date, "2026-12-01", Some("2026-12-01")),
            (DateMode::Time, "09:05", Some("09:05")),
            (DateMode::Datetime, "2026-12-01T09:05", Some("2026-12-01T09:05")),
            (DateMode::Date, "2026-02-30", None),
            (DateMode::Date, "2026-1-1", None),
            (DateMode::Time, "9:00", None),
            (DateMode::Date, "12/01/2026", None),
            (DateMode::Time, "25:00", None),
            (DateMode::Datetime, "2026-12-01", None),
        ];
        for (mode, text, expected) in cases {
            assert_eq!(
                parse_picked(mode, text).ok().map(|p| p.iso()).as_deref(),
                expected,
                "{text}"
            );
        }
    }
}
