//! Placeholders in the texts operators write: `{name}` (the user's LINE display
//! name), `{field.plan}` (a user field), `{answer.rating}` (the user's answer to
//! a question of the same scenario), each with an optional fallback after `|`
//! (`{name|お客さま}`). `{{` and `}}` write literal braces.
//!
//! Scenario texts are stored and recorded as written (templates); they are
//! rendered with the values decided for the step just before they are sent.

/// What a placeholder names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Name,
    Field(String),
    Answer(String),
}

/// One `{...}` of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder<'a> {
    pub key: Key,
    /// What renders when the value is missing or empty.
    pub fallback: Option<&'a str>,
}

/// What is wrong with a template, for `check`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("a `{{` is never closed (write `{{{{` for a literal brace)")]
    Unclosed,
    #[error("a `}}` closes nothing (write `}}}}` for a literal brace)")]
    LoneClosing,
    #[error("unknown placeholder {{{0}}}: use {{name}}, {{field.NAME}} or {{answer.NODE}}")]
    Unknown(String),
}

/// A piece of a template: literal text, or a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece<'a> {
    Literal(&'a str),
    Placeholder(Placeholder<'a>),
}

/// Reads the inside of `{...}`: a key and an optional fallback.
fn placeholder(inside: &str) -> Result<Placeholder<'_>, TemplateError> {
    let (key, fallback) = match inside.split_once('|') {
        Some((key, fallback)) => (key, Some(fallback)),
        None => (inside, None),
    };
    let unknown = || TemplateError::Unknown(key.to_owned());
    let named = |name: &str| -> Result<String, TemplateError> {
        let fits = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'));
        if fits { Ok(name.to_owned()) } else { Err(unknown()) }
    };
    let key = if key == "name" {
        Key::Name
    } else if let Some(field) = key.strip_prefix("field.") {
        Key::Field(named(field)?)
    } else if let Some(node) = key.strip_prefix("answer.") {
        Key::Answer(named(node)?)
    } else {
        return Err(unknown());
    };
    Ok(Placeholder { key, fallback })
}

/// Splits `text` into its pieces, or says what is wrong with it.
fn pieces(text: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(['{', '}']) {
        if at > 0 {
            pieces.push(Piece::Literal(&rest[..at]));
        }
        let after = &rest[at..];
        if let Some(doubled) = after.strip_prefix("{{").or_else(|| after.strip_prefix("}}")) {
            pieces.push(Piece::Literal(&after[..1]));
            rest = doubled;
            continue;
        }
        if after.starts_with('}') {
            return Err(TemplateError::LoneClosing);
        }
        let inside = &after[1..];
        let Some(end) = inside.find(['{', '}']).filter(|&end| inside[end..].starts_with('}')) else {
            return Err(TemplateError::Unclosed);
        };
        pieces.push(Piece::Placeholder(placeholder(&inside[..end])?));
        rest = &inside[end + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Literal(rest));
    }
    Ok(pieces)
}

/// The placeholders of `text`, or what is wrong with it.
pub fn placeholders(text: &str) -> Result<Vec<Placeholder<'_>>, TemplateError> {
    Ok(pieces(text)?
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Placeholder(placeholder) => Some(placeholder),
            Piece::Literal(_) => None,
        })
        .collect())
}

/// Whether `text` holds anything to render (a placeholder or an escaped brace):
/// a text without braces is sent as it is.
pub fn has_braces(text: &str) -> bool {
    text.contains(['{', '}'])
}

/// `text` with each placeholder replaced by `value(key)`, or its fallback when
/// that is missing or empty. A text `check` would refuse (left by an older
/// version) is returned as it is: rendering never fails.
pub fn render(text: &str, value: impl Fn(&Key) -> Option<String>) -> String {
    let Ok(pieces) = pieces(text) else {
        return text.to_owned();
    };
    let mut rendered = String::with_capacity(text.len());
    for piece in pieces {
        match piece {
            Piece::Literal(literal) => rendered.push_str(literal),
            Piece::Placeholder(placeholder) => match value(&placeholder.key).filter(|value| !value.is_empty()) {
                Some(value) => rendered.push_str(&value),
                None => rendered.push_str(placeholder.fallback.unwrap_or("")),
            },
        }
    }
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(key: &Key) -> Option<String> {
        match key {
            Key::Name => Some("太郎".into()),
            Key::Field(name) if name == "plan" => Some("gold".into()),
            Key::Field(name) if name == "empty" => Some(String::new()),
            Key::Answer(node) if node == "rating" => Some("満足".into()),
            _ => None,
        }
    }

    #[test]
    fn renders_values_fallbacks_and_escapes() {
        let cases = [
            ("こんにちは", "こんにちは"),
            ("{name}さん", "太郎さん"),
            ("{name|お客さま}さん", "太郎さん"),
            ("{field.plan}プラン", "goldプラン"),
            ("{field.unknown|未設定}", "未設定"),
            ("{field.unknown}!", "!"),
            ("{field.empty|なし}", "なし"),
            ("評価: {answer.rating}", "評価: 満足"),
            ("{{name}}", "{name}"),
            ("{{{name}}}", "{太郎}"),
            ("a|b {name|x|y}", "a|b 太郎"),
            ("{field.unknown|x|y}", "x|y"),
            ("{}", "{}"),
            ("{name", "{name"),
            ("}", "}"),
            ("{nickname}", "{nickname}"),
        ];
        for (template, rendered) in cases {
            assert_eq!(render(template, values), rendered, "{template}");
        }
    }

    #[test]
    fn check_names_what_is_wrong() {
        let cases: [(&str, Result<Vec<Key>, TemplateError>); 9] = [
            ("plain", Ok(vec![])),
            (
                "{name}{field.plan|-}{answer.q1}",
                Ok(vec![Key::Name, Key::Field("plan".into()), Key::Answer("q1".into())]),
            ),
            ("{{literal}}", Ok(vec![])),
            ("{name", Err(TemplateError::Unclosed)),
            ("{na{me}", Err(TemplateError::Unclosed)),
            ("oops}", Err(TemplateError::LoneClosing)),
            ("{nickname}", Err(TemplateError::Unknown("nickname".into()))),
            ("{field.}", Err(TemplateError::Unknown("field.".into()))),
            ("{field.a b}", Err(TemplateError::Unknown("field.a b".into()))),
        ];
        for (template, expected) in cases {
            let found = placeholders(template).map(|found| found.into_iter().map(|p| p.key).collect::<Vec<_>>());
            assert_eq!(found, expected, "{template}");
        }
    }
}
