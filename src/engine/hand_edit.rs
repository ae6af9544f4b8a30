//! An operator's change of one user's tags or fields by hand (the console's
//! user page): checked here, as pure code, before anything is written.

use crate::scenario::{MAX_FIELD_NAMES, MAX_FIELD_TEXT_CHARS, is_field_name};
use crate::values::{FieldValue, UserChanges};

/// The longest tag an operator may give by hand.
pub(crate) const MAX_TAG_CHARS: usize = 100;

/// One change by hand.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum HandEdit {
    AddTag(String),
    RemoveTag(String),
    SetField(String, FieldValue),
    RemoveField(String),
}

/// What the form asked for, as typed.
#[derive(Debug, Default, Clone)]
pub(crate) struct HandEditForm<'a> {
    /// `add_tag`, `remove_tag`, `set_field` or `remove_field`.
    pub(crate) op: &'a str,
    pub(crate) tag: &'a str,
    pub(crate) field: &'a str,
    pub(crate) value: &'a str,
    /// `text`, `number` or `yes_no`, for `set_field`.
    pub(crate) kind: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HandEditError {
    #[error("a tag must be 1 to {MAX_TAG_CHARS} characters, without control characters")]
    BadTag,
    #[error("a field name must look like [a-z][a-z0-9_]{{0,39}}")]
    BadFieldName,
    #[error("a text field holds at most {MAX_FIELD_TEXT_CHARS} characters, without control characters")]
    BadText,
    #[error("{0:?} is not a number")]
    BadNumber(String),
    #[error("a yes/no field is yes or no")]
    BadYesNo,
    #[error("the user has {MAX_FIELD_NAMES} fields already: remove one first")]
    TooManyFields,
    #[error("unknown change {0:?}")]
    UnknownOp(String),
}

impl HandEdit {
    /// The change a form asks for, checked.
    pub(crate) fn parse(form: &HandEditForm<'_>) -> Result<Self, HandEditError> {
        let tag = || {
            let tag = form.tag.trim();
            let fits = !tag.is_empty() && tag.chars().count() <= MAX_TAG_CHARS && !tag.chars().any(char::is_control);
            fits.then(|| tag.to_owned()).ok_or(HandEditError::BadTag)
        };
        let field = || {
            let name = form.field.trim();
            is_field_name(name)
                .then(|| name.to_owned())
                .ok_or(HandEditError::BadFieldName)
        };
        match form.op {
            "add_tag" => Ok(HandEdit::AddTag(tag()?)),
            "remove_tag" => Ok(HandEdit::RemoveTag(tag()?)),
            "remove_field" => Ok(HandEdit::RemoveField(field()?)),
            "set_field" => {
                let name = field()?;
                let value = match form.kind {
                    "number" => {
                        let typed = form.value.trim();
                        match typed.parse::<i64>() {
                            Ok(integer) => FieldValue::Integer(integer),
                            Err(_) => typed
                                .parse::<f64>()
                                .ok()
                                .filter(|number| number.is_finite())
                                .map(FieldValue::Number)
                                .ok_or_else(|| HandEditError::BadNumber(typed.chars().take(40).collect()))?,
                        }
                    }
                    "yes_no" => match form.value.trim() {
                        "yes" | "true" => FieldValue::Bool(true),
                        "no" | "false" => FieldValue::Bool(false),
                        _ => return Err(HandEditError::BadYesNo),
                    },
                    _ => {
                        let text = form.value.trim();
                        if text.chars().count() > MAX_FIELD_TEXT_CHARS
                            || text.chars().any(|c| c.is_control() && c != '\n')
                        {
                            return Err(HandEditError::BadText);
                        }
                        FieldValue::Text(text.to_owned())
                    }
                };
                Ok(HandEdit::SetField(name, value))
            }
            other => Err(HandEditError::UnknownOp(other.chars().take(40).collect())),
        }
    }

    /// Whether a user holding `fields` may take this change (a new field
    /// beyond the limit is refused).
    pub(crate) fn fits(&self, fields: &[String]) -> Result<(), HandEditError> {
        match self {
            HandEdit::SetField(name, _) if !fields.contains(name) && fields.len() >= MAX_FIELD_NAMES => {
                Err(HandEditError::TooManyFields)
            }
            _ => Ok(()),
        }
    }

    /// The audit log's name of the change.
    pub(crate) fn action(&self) -> &'static str {
        match self {
            HandEdit::AddTag(_) => "tag_add",
            HandEdit::RemoveTag(_) => "tag_remove",
            HandEdit::SetField(..) => "field_set",
            HandEdit::RemoveField(_) => "field_remove",
        }
    }

    /// The tag or field it touches (never the field's value).
    pub(crate) fn subject(&self) -> (&'static str, &str) {
        match self {
            HandEdit::AddTag(tag) | HandEdit::RemoveTag(tag) => ("tag", tag),
            HandEdit::SetField(name, _) | HandEdit::RemoveField(name) => ("field", name),
        }
    }

    /// As the store writes it: the tags and fields set, and the fields removed.
    pub(crate) fn changes(&self) -> (UserChanges, Vec<String>) {
        let mut changes = UserChanges::default();
        let mut removed = Vec::new();
        match self {
            HandEdit::AddTag(tag) => changes.tag.push(tag.clone()),
            HandEdit::RemoveTag(tag) => changes.untag.push(tag.clone()),
            HandEdit::SetField(name, value) => {
                changes.set.insert(name.clone(), value.clone());
            }
            HandEdit::RemoveField(name) => removed.push(name.clone()),
        }
        (changes, removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form<'a>(op: &'a str, tag: &'a str, field: &'a str, value: &'a str, kind: &'a str) -> HandEditForm<'a> {
        HandEditForm {
            op,
            tag,
            field,
            value,
            kind,
        }
    }

    #[test]
    fn forms_become_checked_changes_or_say_what_is_wrong() {
        let long_tag = "タ".repeat(MAX_TAG_CHARS + 1);
        let long_text = "あ".repeat(MAX_FIELD_TEXT_CHARS + 1);
        let cases: Vec<(HandEditForm<'_>, Result<HandEdit, HandEditError>)> = vec![
            (form("add_tag", " vip ", "", "", ""), Ok(HandEdit::AddTag("vip".into()))),
            (
                form("add_tag", "常連さん", "", "", ""),
                Ok(HandEdit::AddTag("常連さん".into())),
            ),
            (form("add_tag", "  ", "", "", ""), Err(HandEditError::BadTag)),
            (form("add_tag", "a\u{0}b", "", "", ""), Err(HandEditError::BadTag)),
            (form("add_tag", &long_tag, "", "", ""), Err(HandEditError::BadTag)),
            (
                form("remove_tag", "vip", "", "", ""),
                Ok(HandEdit::RemoveTag("vip".into())),
            ),
            (
                form("set_field", "", "plan", "gold", "text"),
                Ok(HandEdit::SetField("plan".into(), FieldValue::Text("gold".into()))),
            ),
            (
                form("set_field", "", "age", " 30 ", "number"),
                Ok(HandEdit::SetField("age".into(), FieldValue::Integer(30))),
            ),
            (
                form("set_field", "", "score", "4.5", "number"),
                Ok(HandEdit::SetField("score".into(), FieldValue::Number(4.5))),
            ),
            (
                form("set_field", "", "age", "thirty", "number"),
                Err(HandEditError::BadNumber("thirty".into())),
            ),
            (
                form("set_field", "", "age", "NaN", "number"),
                Err(HandEditError::BadNumber("NaN".into())),
            ),
            (
                form("set_field", "", "age", "inf", "number"),
                Err(HandEditError::BadNumber("inf".into())),
            ),
            (
                form("set_field", "", "vip", "yes", "yes_no"),
                Ok(HandEdit::SetField("vip".into(), FieldValue::Bool(true))),
            ),
            (
                form("set_field", "", "vip", "maybe", "yes_no"),
                Err(HandEditError::BadYesNo),
            ),
            (
                form("set_field", "", "note", &long_text, "text"),
                Err(HandEditError::BadText),
            ),
            (
                form("set_field", "", "Plan", "x", "text"),
                Err(HandEditError::BadFieldName),
            ),
            (
                form("set_field", "", "a.b", "x", "text"),
                Err(HandEditError::BadFieldName),
            ),
            (
                form("remove_field", "", "plan", "", ""),
                Ok(HandEdit::RemoveField("plan".into())),
            ),
            (form("remove_field", "", "", "", ""), Err(HandEditError::BadFieldName)),
            (
                form("drop_table", "", "", "", ""),
                Err(HandEditError::UnknownOp("drop_table".into())),
            ),
        ];
        for (asked, expected) in cases {
            assert_eq!(HandEdit::parse(&asked), expected, "{asked:?}");
        }
    }

    #[test]
    fn a_new_field_beyond_the_limit_is_refused_but_a_known_one_changes() {
        let full: Vec<String> = (0..MAX_FIELD_NAMES).map(|i| format!("f{i}")).collect();
        let new = HandEdit::SetField("other".into(), FieldValue::Bool(true));
        let known = HandEdit::SetField("f3".into(), FieldValue::Bool(true));
        assert_eq!(new.fits(&full), Err(HandEditError::TooManyFields));
        assert_eq!(known.fits(&full), Ok(()));
        assert_eq!(new.fits(&full[1..]), Ok(()));
        assert_eq!(HandEdit::RemoveField("x".into()).fits(&full), Ok(()));
    }
}
