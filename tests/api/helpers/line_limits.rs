//! LINE's message limits, counted as LINE counts them (developers.line.biz,
//! "Character counting in a text"): texts and alt texts in UTF-16 code units;
//! action labels, display texts and a buttons template's text and title in
//! grapheme clusters. The stand-in refuses a message over a limit with 400, as
//! LINE does, so a test proves that what the service's validation lets through
//! LINE accepts.

use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation;

fn utf16(text: &str) -> usize {
    text.encode_utf16().count()
}

fn graphemes(text: &str) -> usize {
    text.graphemes(true).count()
}

/// The first limit the request's `messages` break, if any.
pub fn problem(messages: &Value) -> Option<String> {
    let messages = messages.as_array()?;
    if messages.is_empty() || messages.len() > 5 {
        return Some(format!("{} messages; 1 to 5 allowed", messages.len()));
    }
    messages.iter().find_map(message_problem)
}

fn over(what: &str, length: usize, max: usize) -> Option<String> {
    (length > max).then(|| format!("{what} is {length} long; at most {max}"))
}

fn message_problem(message: &Value) -> Option<String> {
    let text = |field: &str| message[field].as_str().unwrap_or("");
    let own = match message["type"].as_str() {
        Some("text") => over("text", utf16(text("text")), 5000),
        Some("template" | "flex") => over("altText", utf16(text("altText")), 1500),
        _ => None,
    };
    if own.is_some() {
        return own;
    }
    if let Some(items) = message["quickReply"]["items"].as_array() {
        if items.len() > 13 {
            return Some(format!("{} quick reply items; at most 13", items.len()));
        }
        if let Some(problem) = items.iter().find_map(|item| action_problem(&item["action"])) {
            return Some(problem);
        }
    }
    let template = &message["template"];
    if template["type"] == "buttons" {
        let title = template["title"].as_str();
        let max_text = if title.is_some() { 60 } else { 160 };
        let actions = template["actions"].as_array().map_or(0, Vec::len);
        return over(
            "template text",
            graphemes(template["text"].as_str().unwrap_or("")),
            max_text,
        )
        .or_else(|| title.and_then(|title| over("template title", graphemes(title), 40)))
        .or_else(|| (!(1..=4).contains(&actions)).then(|| format!("{actions} buttons; 1 to 4 allowed")))
        .or_else(|| template["actions"].as_array()?.iter().find_map(action_problem));
    }
    None
}

fn action_problem(action: &Value) -> Option<String> {
    let label = action["label"].as_str().map_or(0, graphemes);
    picker_problem(action)
        .or_else(|| over("action label", label, 20))
        .or_else(|| over("displayText", action["displayText"].as_str().map_or(0, graphemes), 300))
        .or_else(|| over("postback data", utf16(action["data"].as_str().unwrap_or("")), 300))
}

/// A datetime picker's bounds: within 1900-01-01 and 2100-12-31 (any time of
/// day), and `max` strictly after `min`. The formats order as text.
fn picker_problem(action: &Value) -> Option<String> {
    if action["type"] != "datetimepicker" {
        return None;
    }
    let bound = |field: &str| action[field].as_str();
    for value in [bound("min"), bound("max")].into_iter().flatten() {
        let date = value.get(..10).unwrap_or(value);
        if value.contains('-') && !("1900-01-01"..="2100-12-31").contains(&date) {
            return Some(format!("picker bound {value} is out of range"));
        }
    }
    match (bound("min"), bound("max")) {
        (Some(min), Some(max)) if max <= min => Some(format!("picker max {max} is not after min {min}")),
        _ => None,
    }
}
