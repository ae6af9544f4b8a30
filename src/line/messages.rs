//! Outbound message objects, shaped as LINE's Messaging API expects them.

use serde::{Deserialize, Serialize};

/// LINE accepts at most this many messages in one reply or push.
pub(crate) const MAX_MESSAGES_PER_REQUEST: usize = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum Message {
    Text {
        text: String,
        /// Quick reply buttons under the message (a quick reply question).
        #[serde(skip_serializing_if = "Option::is_none", default)]
        quick_reply: Option<QuickReply>,
    },
    Template {
        alt_text: String,
        template: Template,
    },
    Flex {
        alt_text: String,
        contents: FlexBubble,
    },
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
    /// LINE's datetime picker: its value comes back in the postback's `params`.
    #[serde(rename = "datetimepicker")]
    DatetimePicker {
        label: String,
        data: String,
        /// `date`, `time` or `datetime`.
        mode: String,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        min: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        max: Option<String>,
    },
}

impl Message {
    /// What the user sees of this message, in plain text: its text (with its
    /// buttons' labels), or a card's alternative text. For an operator's
    /// preview, never for sending.
    pub(crate) fn preview_text(&self) -> String {
        let labelled = |text: &str, actions: &mut dyn Iterator<Item = &Action>| {
            let labels: Vec<&str> = actions.map(Action::label).filter(|label| !label.is_empty()).collect();
            if labels.is_empty() {
                text.to_owned()
            } else {
                format!("{text} [{}]", labels.join(" / "))
            }
        };
        match self {
            Message::Text { text, quick_reply } => labelled(
                text,
                &mut quick_reply
                    .iter()
                    .flat_map(|reply| reply.items.iter().map(|item| &item.action)),
            ),
            Message::Template {
                template: Template::Buttons { title, text, actions },
                ..
            } => {
                let text = match title {
                    Some(title) => format!("{title}\n{text}"),
                    None => text.clone(),
                };
                labelled(&text, &mut actions.iter())
            }
            Message::Flex { alt_text, .. } => alt_text.clone(),
        }
    }
}

impl Action {
    fn label(&self) -> &str {
        match self {
            Action::Postback { label, .. } => label.as_deref().unwrap_or(""),
            Action::DatetimePicker { label, .. } => label,
        }
    }
}

/// Buttons shown under a message until the user taps one or sends anything.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct QuickReply {
    pub(crate) items: Vec<QuickReplyItem>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "action")]
pub(crate) struct QuickReplyItem {
    pub(crate) action: Action,
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
            Message::Text {
                text,
                quick_reply: None,
            } => format!("  | {text}"),
            Message::Text {
                text,
                quick_reply: Some(quick_reply),
            } => {
                let buttons: Vec<String> = quick_reply
                    .items
                    .iter()
                    .map(|item| format!("[{}]", item.action.label()))
                    .collect();
                format!("  | {text} {}", buttons.join(" "))
            }
            Message::Template {
                template: Template::Buttons { title, text, actions },
                ..
            } => {
                let buttons: Vec<String> = actions.iter().map(|action| format!("[{}]", action.label())).collect();
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

/// Body of `POST /v2/bot/message/multicast`: the same messages to up to 500 users.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MulticastRequest<'a> {
    pub(crate) to: &'a [String],
    pub(crate) messages: &'a [Message],
    /// At most one unit name (`[a-zA-Z0-9_]{1,30}`): LINE's statistics per campaign.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(crate) custom_aggregation_units: &'a [String],
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
            Message::Text {
                text: "Hello".into(),
                quick_reply: None,
            },
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
    fn quick_replies_and_date_pickers_serialise_as_line_expects() {
        let message = Message::Text {
            text: "Q?".into(),
            quick_reply: Some(QuickReply {
                items: vec![QuickReplyItem {
                    action: Action::Postback {
                        label: Some("5".into()),
                        data: "d".into(),
                        display_text: Some("とても満足".into()),
                    },
                }],
            }),
        };
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({"type": "text", "text": "Q?", "quickReply": {"items": [{"type": "action",
                "action": {"type": "postback", "label": "5", "data": "d", "displayText": "とても満足"}}]}})
        );
        let picker = Action::DatetimePicker {
            label: "Choose".into(),
            data: "d".into(),
            mode: "date".into(),
            min: Some("2026-01-01".into()),
            max: None,
        };
        assert_eq!(
            serde_json::to_value(&picker).unwrap(),
            json!({"type": "datetimepicker", "label": "Choose", "data": "d", "mode": "date", "min": "2026-01-01"})
        );
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
