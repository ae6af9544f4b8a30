//! One event of every other kind LINE sends to a webhook, written by hand from
//! the event schemas of `../shared/line-openapi/webhook.yml` (`MessageEvent` with
//! each `MessageContent`, `UnfollowEvent`, `JoinEvent`, ... `PnpDeliveryCompletionEvent`).
//! The service acknowledges all of them; a text from a new user starts the lunch
//! survey (its catch-all trigger), the others have no effect.
//!
//! Each event carries what the service parses (`webhookEventId`, `timestamp`,
//! `mode`, `deliveryContext`, a user `source`) and a `replyToken` only where its
//! schema has one.

use crate::events::{base, message_id, now_ms};
use serde_json::{Value, json};

/// A kind of event: its name in reports and how to build one for a user.
pub type Kind = (&'static str, fn(&str) -> Value);

pub const KINDS: &[Kind] = &[
    ("message/text", text),
    ("message/image", image),
    ("message/video", video),
    ("message/audio", audio),
    ("message/file", file),
    ("message/location", location),
    ("message/sticker", sticker),
    ("unfollow", unfollow),
    ("join", join),
    ("leave", leave),
    ("memberJoined", member_joined),
    ("memberLeft", member_left),
    ("postback/foreign", foreign_postback),
    ("videoPlayComplete", video_play_complete),
    ("beacon", beacon),
    ("accountLink", account_link),
    ("things", things),
    ("membership", membership),
    ("module", module),
    ("activated", activated),
    ("deactivated", deactivated),
    ("botSuspended", bot_suspended),
    ("botResumed", bot_resumed),
    ("delivery", delivery),
];

/// An event of `kind` with the given extra fields; `reply` keeps the reply token.
fn event(user: &str, kind: &str, reply: bool, fields: Value) -> Value {
    let mut event = base(user);
    event["type"] = kind.into();
    if !reply {
        event.as_object_mut().unwrap().remove("replyToken");
    }
    if let (Some(event), Value::Object(fields)) = (event.as_object_mut(), fields) {
        event.extend(fields);
    }
    event
}

fn message(user: &str, content: Value) -> Value {
    let mut content = content;
    content["id"] = message_id().into();
    event(user, "message", true, json!({ "message": content }))
}

fn members(user: &str) -> Value {
    json!({"members": [{"type": "user", "userId": user}]})
}

/// A text with a LINE emoji and a mention (`TextMessageContent`).
pub fn text(user: &str) -> Value {
    message(
        user,
        json!({
            "type": "text", "text": "hello $ @all", "quoteToken": "q-text",
            "emojis": [{"index": 6, "length": 1, "productId": "5ac1bfd5040ab15980c9b435", "emojiId": "001"}],
            "mention": {"mentionees": [{"type": "all", "index": 8, "length": 4}]},
            "markAsReadToken": "read-token",
        }),
    )
}

fn image(user: &str) -> Value {
    message(
        user,
        json!({
            "type": "image", "quoteToken": "q-image", "contentProvider": {"type": "line"},
            "imageSet": {"id": "E005D41A7288F41B65593ED38FF6E9834B046AB36A37921A56BC236F13A91855", "index": 1, "total": 2},
        }),
    )
}

fn video(user: &str) -> Value {
    message(
        user,
        json!({
            "type": "video", "quoteToken": "q-video", "duration": 60000,
            "contentProvider": {
                "type": "external",
                "originalContentUrl": "https://example.com/original.mp4",
                "previewImageUrl": "https://example.com/preview.jpg",
            },
        }),
    )
}

fn audio(user: &str) -> Value {
    message(
        user,
        json!({"type": "audio", "duration": 60000, "contentProvider": {"type": "line"}}),
    )
}

fn file(user: &str) -> Value {
    message(user, json!({"type": "file", "fileName": "menu.pdf", "fileSize": 2138}))
}

fn location(user: &str) -> Value {
    message(
        user,
        json!({
            "type": "location", "title": "my location", "address": "1-3 Kioicho, Chiyoda-ku, Tokyo",
            "latitude": 35.67966, "longitude": 139.73669,
        }),
    )
}

fn sticker(user: &str) -> Value {
    message(
        user,
        json!({
            "type": "sticker", "packageId": "446", "stickerId": "1988", "stickerResourceType": "STATIC",
            "keywords": ["happy", "smile"], "quoteToken": "q-sticker",
        }),
    )
}

fn unfollow(user: &str) -> Value {
    event(user, "unfollow", false, json!({}))
}

fn join(user: &str) -> Value {
    event(user, "join", true, json!({}))
}

fn leave(user: &str) -> Value {
    event(user, "leave", false, json!({}))
}

fn member_joined(user: &str) -> Value {
    event(user, "memberJoined", true, json!({ "joined": members(user) }))
}

fn member_left(user: &str) -> Value {
    event(user, "memberLeft", false, json!({ "left": members(user) }))
}

/// A rich menu's postback with a date picker's parameters: no scenario of ours.
fn foreign_postback(user: &str) -> Value {
    event(
        user,
        "postback",
        true,
        json!({"postback": {"data": "action=buy&itemid=111", "params": {"datetime": "2026-12-01T12:00"}}}),
    )
}

fn video_play_complete(user: &str) -> Value {
    event(
        user,
        "videoPlayComplete",
        true,
        json!({"videoPlayComplete": {"trackingId": "track-1"}}),
    )
}

fn beacon(user: &str) -> Value {
    event(
        user,
        "beacon",
        true,
        json!({"beacon": {"hwid": "d41d8cd98f", "type": "enter", "dm": "1234567890abcdef"}}),
    )
}

fn account_link(user: &str) -> Value {
    event(
        user,
        "accountLink",
        true,
        json!({"link": {"result": "ok", "nonce": "xxxxxxxxxxxxxxx"}}),
    )
}

/// Not in webhook.yml (LINE Things is discontinued); shaped after LINE's former
/// reference: a device link event with a reply token.
fn things(user: &str) -> Value {
    event(
        user,
        "things",
        true,
        json!({"things": {"deviceId": "t2c449c9d1", "type": "link"}}),
    )
}

fn membership(user: &str) -> Value {
    event(
        user,
        "membership",
        true,
        json!({"membership": {"type": "joined", "membershipId": 3189}}),
    )
}

fn module(user: &str) -> Value {
    event(
        user,
        "module",
        false,
        json!({"module": {"type": "attached", "botId": "Ud000000000000000000000000000000d", "scopes": ["message:send"]}}),
    )
}

fn activated(user: &str) -> Value {
    event(
        user,
        "activated",
        false,
        json!({"chatControl": {"expireAt": now_ms() + 3_600_000}}),
    )
}

fn deactivated(user: &str) -> Value {
    event(user, "deactivated", false, json!({}))
}

fn bot_suspended(user: &str) -> Value {
    event(user, "botSuspended", false, json!({}))
}

fn bot_resumed(user: &str) -> Value {
    event(user, "botResumed", false, json!({}))
}

fn delivery(user: &str) -> Value {
    event(
        user,
        "delivery",
        false,
        json!({"delivery": {"data": "d41d8cd98f00b204e9800998ecf8427e"}}),
    )
}
