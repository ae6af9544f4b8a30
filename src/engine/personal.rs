//! Personal text: what a step's messages need to know about the user (their
//! display name, fields, answers) and the messages rendered with what was
//! decided. Only the texts operators write are rendered: message and question
//! texts and alt texts, never labels, display texts or titles (their limits are
//! tiny, and `check` refuses placeholders there).

use crate::line::messages::{Message, Template};
use crate::scenario::LoadedScenario;
use crate::scenario::limits::{
    Counting, MAX_ALT_TEXT_CHARS, MAX_BUTTONS_TEXT_CHARS, MAX_BUTTONS_TEXT_WITH_TITLE_CHARS, MAX_TEXT_MESSAGE_CHARS,
};
use crate::scenario::placeholders::{self, Key};
use crate::values::{AnswerValue, PersonalValues};
use std::collections::BTreeSet;
use unicode_segmentation::UnicodeSegmentation;

/// What the placeholders of some messages name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Needs {
    pub(crate) name: bool,
    pub(crate) fields: BTreeSet<String>,
    /// Nodes of the action's scenario.
    pub(crate) answers: BTreeSet<String>,
}

impl Needs {
    pub(crate) fn is_empty(&self) -> bool {
        !self.name && self.fields.is_empty() && self.answers.is_empty()
    }
}

/// Each rendered text of `message` with its limit and how LINE counts it.
fn texts_mut(message: &mut Message) -> Vec<(&mut String, usize, Counting)> {
    match message {
        Message::Text { text, .. } => vec![(text, MAX_TEXT_MESSAGE_CHARS, Counting::Utf16)],
        Message::Template {
            alt_text,
            template: Template::Buttons { title, text, .. },
        } => {
            let max = if title.is_some() {
                MAX_BUTTONS_TEXT_WITH_TITLE_CHARS
            } else {
                MAX_BUTTONS_TEXT_CHARS
            };
            vec![
                (alt_text, MAX_ALT_TEXT_CHARS, Counting::Utf16),
                (text, max, Counting::Graphemes),
            ]
        }
        Message::Flex { alt_text, .. } => vec![(alt_text, MAX_ALT_TEXT_CHARS, Counting::Utf16)],
    }
}

fn texts(message: &Message) -> Vec<&str> {
    match message {
        Message::Text { text, .. } => vec![text],
        Message::Template {
            alt_text,
            template: Template::Buttons { text, .. },
        } => vec![alt_text, text],
        Message::Flex { alt_text, .. } => vec![alt_text],
    }
}

/// What the placeholders of `messages` name (a text `check` would refuse names
/// nothing: it is sent as written).
pub(crate) fn needs(messages: &[Message]) -> Needs {
    let mut needs = Needs::default();
    for text in messages.iter().flat_map(texts) {
        let Ok(found) = placeholders::placeholders(text) else {
            continue;
        };
        for placeholder in found {
            match placeholder.key {
                Key::Name => needs.name = true,
                Key::Field(name) => {
                    needs.fields.insert(name);
                }
                Key::Answer(node) => {
                    needs.answers.insert(node);
                }
            }
        }
    }
    needs
}

/// `text` cut to `max` as `counting` counts, on a grapheme boundary (on a
/// character boundary when its first grapheme alone is over the limit, as a
/// letter with hundreds of combining marks can be).
fn cut(text: &str, max: usize, counting: Counting) -> String {
    if counting.count(text) <= max {
        return text.to_owned();
    }
    let mut kept = String::new();
    let mut length = 0;
    for grapheme in text.graphemes(true) {
        let more = counting.count(grapheme);
        if length + more > max {
            break;
        }
        length += more;
        kept.push_str(grapheme);
    }
    if kept.is_empty() {
        for character in text.chars() {
            let more = character.len_utf16();
            if length + more > max {
                break;
            }
            length += more;
            kept.push(character);
        }
    }
    kept
}

/// Renders `messages` in place with `values` (none: every placeholder takes
/// its fallback), each text cut at LINE's limit for it so a long name or field
/// never makes LINE refuse the message. Pure: the same messages and values give
/// the same bytes, which is what makes a retry send what was decided.
pub(crate) fn render(messages: &mut [Message], values: Option<&PersonalValues>) {
    let value = |key: &Key| -> Option<String> {
        let values = values?;
        match key {
            Key::Name => values.name.clone(),
            Key::Field(name) => values.fields.get(name).cloned(),
            Key::Answer(node) => values.answers.get(node).cloned(),
        }
    };
    for message in messages {
        for (text, max, counting) in texts_mut(message) {
            if placeholders::has_braces(text) {
                let mut rendered = placeholders::render(text, value);
                // LINE refuses an empty text (and with it every message of the
                // call): the fallbacks, else the text as written.
                if rendered.trim().is_empty() {
                    rendered = placeholders::render(text, |_| None);
                }
                if rendered.trim().is_empty() {
                    rendered.clone_from(text);
                }
                *text = cut(&rendered, max, counting);
            }
        }
    }
}

/// How `{answer.node}` shows a recorded answer: a choice's label (its value
/// when the scenario no longer has that choice), a typed answer as typed.
pub(crate) fn answer_text(scenario: Option<&LoadedScenario>, node: &str, value: &AnswerValue) -> String {
    let label = scenario
        .and_then(|scenario| {
            scenario
                .scenario
                .nodes
                .iter()
                .find(|candidate| candidate.id().as_str() == node)
        })
        .and_then(|node| match (node, value) {
            (crate::scenario::Node::Survey(survey), AnswerValue::Text(value)) => {
                survey.choice(value).map(|choice| choice.label.clone())
            }
            _ => None,
        });
    label.unwrap_or_else(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::line::messages::{Action, FlexBubble, FlexImage};

    fn text(text: &str) -> Message {
        Message::Text {
            text: text.into(),
            quick_reply: None,
        }
    }

    fn buttons(title: Option<&str>, text: &str) -> Message {
        Message::Template {
            alt_text: text.into(),
            template: Template::Buttons {
                title: title.map(Into::into),
                text: text.into(),
                actions: vec![Action::Postback {
                    label: Some("{name}".into()),
                    data: "d".into(),
                    display_text: None,
                }],
            },
        }
    }

    fn values() -> PersonalValues {
        PersonalValues {
            name: Some("太郎".into()),
            fields: [("plan".to_owned(), "gold".to_owned())].into(),
            answers: [("rating".to_owned(), "満足".to_owned())].into(),
        }
    }

    #[test]
    fn needs_lists_what_the_texts_name() {
        let messages = [
            text("{name|お客さま}さん"),
            buttons(None, "{field.plan}の{answer.rating}"),
            text("{{name}} is literal"),
        ];
        let found = needs(&messages);
        assert!(found.name);
        assert_eq!(found.fields, BTreeSet::from(["plan".to_owned()]));
        assert_eq!(found.answers, BTreeSet::from(["rating".to_owned()]));
        assert!(needs(&[text("plain"), text("{{x}}")]).is_empty());
    }

    #[test]
    fn renders_texts_and_alt_texts_but_never_labels() {
        let mut messages = vec![
            text("{name|お客さま}さん"),
            buttons(Some("t"), "{field.plan}: {answer.rating}"),
        ];
        render(&mut messages, Some(&values()));
        assert_eq!(messages[0], text("太郎さん"));
        let Message::Template {
            alt_text,
            template: Template::Buttons {
                text: body, actions, ..
            },
        } = &messages[1]
        else {
            panic!("a template stays a template");
        };
        assert_eq!((alt_text.as_str(), body.as_str()), ("gold: 満足", "gold: 満足"));
        let Action::Postback { label, .. } = &actions[0] else {
            panic!("postback");
        };
        assert_eq!(label.as_deref(), Some("{name}"), "labels are never rendered");
        let mut without = vec![text("{name|お客さま}さん{{x}}")];
        render(&mut without, None);
        assert_eq!(without[0], text("お客さまさん{x}"));
        // Never an empty text: LINE would refuse the call.
        let mut empty = vec![text("{name}"), text(" {field.plan} ")];
        render(&mut empty, Some(&PersonalValues::default()));
        assert_eq!(empty, [text("{name}"), text(" {field.plan} ")]);
        let mut blank = vec![text("{name}")];
        render(
            &mut blank,
            Some(&PersonalValues {
                name: Some("  ".into()),
                ..PersonalValues::default()
            }),
        );
        assert_eq!(blank, [text("{name}")]);
    }

    #[test]
    fn rendered_texts_are_cut_at_the_limit_on_a_grapheme_boundary() {
        let long = PersonalValues {
            name: Some("👨‍👩‍👧‍👦".repeat(1000)),
            ..PersonalValues::default()
        };
        let mut messages = vec![
            text("{name}"),
            buttons(None, "{name}"),
            buttons(Some("t"), "{name}"),
            Message::Flex {
                alt_text: "{name}".into(),
                contents: FlexBubble {
                    hero: FlexImage {
                        url: "https://example.com/a.png".into(),
                        size: "full".into(),
                        aspect_ratio: "20:13".into(),
                        aspect_mode: "cover".into(),
                        action: Action::Postback {
                            label: None,
                            data: "d".into(),
                            display_text: None,
                        },
                    },
                },
            },
        ];
        render(&mut messages, Some(&long));
        let family = "👨‍👩‍👧‍👦";
        // 11 UTF-16 units per family: 454 fit in 5,000, 36 in 400.
        let cases: [(&Message, Vec<(usize, usize)>); 4] = [
            (&messages[0], vec![(454 * 11, 454)]),
            (&messages[1], vec![(36 * 11, 36), (160 * 11, 160)]),
            (&messages[2], vec![(36 * 11, 36), (60 * 11, 60)]),
            (&messages[3], vec![(36 * 11, 36)]),
        ];
        for (message, expected) in cases {
            let found: Vec<(usize, usize)> = texts(message)
                .iter()
                .map(|text| (text.encode_utf16().count(), text.graphemes(true).count()))
                .collect();
            assert_eq!(found, expected, "{message:?}");
            assert!(texts(message).iter().all(|text| text.split(family).all(str::is_empty)));
        }
        // One grapheme over the limit on its own: cut on a character boundary.
        let zalgo = format!("a{}", "\u{301}".repeat(500));
        let mut card = vec![buttons(None, "{name}")];
        render(
            &mut card,
            Some(&PersonalValues {
                name: Some(zalgo),
                ..PersonalValues::default()
            }),
        );
        let Message::Template { alt_text, .. } = &card[0] else {
            panic!("a template");
        };
        assert_eq!(alt_text.encode_utf16().count(), 400);
    }
}
