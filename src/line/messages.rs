//! Outbound message objects, shaped as LINE's Messaging API expects them.

use serde::{Deserialize, Serialize};

/// LINE accepts at most this many messages in one reply or push.
pub(crate) const MAX_MESSAGES_PER_REQUEST: usize = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum Message {
    Text { text: String },
    Template { alt_text: String, template: Template },
    Flex { alt_text: String, contents: FlexBubble },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum Template {
    Buttons {
        #[serde(skip_serializing_if = "Option::is_none", default)]
        title: Option<String>,
        text: String,
        actions: Vec<Action>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum Action {
    Postback {
        /// Required on template buttons, optional on a Flex image.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        label: Option<String>,
        data: String,
        /// Shown in the chat as the user's own message, so the tap is visible.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        display_text: Option<String>,
    },
}

/// A bubble whose only content is a full-width tappable image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "bubble")]
pub(crate) struct FlexBubble {
    pub(crate) hero: FlexImage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "image", rename_all = "camelCase")]
pub(crate) struct FlexImage {
    pub(crate) url: String,
    pub(crate) size: String,
    pub(crate) aspect_ratio: String,
    pub(crate) aspect_mode: String,
    pub(crate) action: Action,
}

/// What the messages say, for a person reading a dry run: texts, button labels
/// and card titles, one message per line.
pub(crate) fn describe(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|message| match message {
            Message::Text { text } => format!("  | {text}"),
            Message::Template {
                template: Template::Buttons { title, text, actions },
                ..
            } => {
                let buttons: Vec<String> = actions
                    .iter()
                    .map(|Action::Postback { label, .. }| format!("[{}]", label.as_deref().unwrap_or("")))
                    .collect();
                let title = title.as_deref().map(|title| format!("{title}: ")).unwrap_or_default();
                format!("  | {title}{text} {}", buttons.join(" "))
            }
            Message::Flex { alt_text, contents } => {
                format!("  | (card) {alt_text} [image {}]", contents.hero.url)
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Body of `POST /v2/bot/message/reply`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplyRequest<'a> {
    pub(crate) reply_token: &'a str,
    pub(crate) messages: &'a [Message],
}

/// Body of `POST /v2/bot/message/push`.
#[derive(Debug, Serialize)]
pub(crate) struct PushRequest<'a> {
    pub(crate) to: &'a str,
    pub(crate) messages: &'a [Message],
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn buttons_template_serialises_as_line_expects() {
        let message = Message::Template {
            alt_text: "Q".into(),
            template: Template::Buttons {
                title: None,
                text: "Q?".into(),
                actions: vec![Action::Postback {
                    label: Some("A".into()),
                    data: "d".into(),
                    display_text: Some("A".into()),
                }],
            },
        };
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({"type": "template", "altText": "Q", "template": {"type": "buttons", "text": "Q?",
                "actions": [{"type": "postback", "label": "A", "data": "d", "displayText": "A"}]}})
        );
    }

    #[test]
    fn a_dry_run_shows_texts_buttons_and_card_titles() {
        let messages = [
            Message::Text { text: "Hello".into() },
            Message::Template {
                alt_text: "Q".into(),
                template: Template::Buttons {
                    title: Some("Lunch".into()),
                    text: "How was it?".into(),
                    actions: vec![Action::Postback {
                        label: Some("Good".into()),
                        data: "d".into(),
                        display_text: None,
                    }],
                },
            },
        ];
        assert_eq!(describe(&messages), "  | Hello\n  | Lunch: How was it? [Good]");
    }

    #[test]
    fn flex_image_card_serialises_as_a_bubble_with_a_hero_image() {
        let message = Message::Flex {
            alt_text: "card".into(),
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
        };
        let value = serde_json::to_value(&message).unwrap();
        assert_eq!(value["contents"]["type"], "bubble");
        assert_eq!(value["contents"]["hero"]["type"], "image");
        assert_eq!(value["contents"]["hero"]["aspectRatio"], "20:13");
        assert_eq!(value["contents"]["hero"]["action"]["type"], "postback");
    }
}
