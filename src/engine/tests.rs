//! `Engine::decide`, table-driven over the sample scenarios in `scenarios/`: one
//! case per reason to ignore an event, and one per kind of plan.

use super::*;
use crate::line::webhook::EventParse;
use crate::scenario::load_dir;
use serde_json::{Value, json};
use std::path::Path;

const USER: &str = "U0123456789abcdef0123456789abcdef";

fn engine() -> Engine {
    let scenarios = load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")).expect("the samples load");
    Engine::new(Arc::new(scenarios))
}

fn event(kind: Value) -> Value {
    let mut event = json!({
        "webhookEventId": "01HZZZZZZZZZZZZZZZZZZZZZZZ",
        "timestamp": 1_700_000_000_000i64,
        "mode": "active",
        "deliveryContext": {"isRedelivery": false},
        "source": {"type": "user", "userId": USER},
        "replyToken": "token",
    });
    if let (Some(event), Some(kind)) = (event.as_object_mut(), kind.as_object()) {
        event.extend(kind.clone());
    }
    event
}

fn text(text: &str) -> Value {
    event(json!({"type": "message", "message": {"type": "text", "id": "1", "text": text}}))
}

fn postback(data: &str) -> Value {
    event(json!({"type": "postback", "postback": {"data": data}}))
}

fn answer(scenario: &str, node: &str, choice: &str) -> String {
    format!("v=1&k=a&s={scenario}&n={node}&c={choice}")
}

fn decide(raw: &Value) -> Decision {
    match Event::parse(raw) {
        EventParse::Parsed(event) => engine().decide(&event),
        EventParse::Malformed { reason, .. } => panic!("test event does not parse: {reason}"),
    }
}

fn with(mut raw: Value, field: &str, value: Value) -> Value {
    raw[field] = value;
    raw
}

#[test]
fn each_reason_to_ignore_an_event() {
    let cases: Vec<(&str, Value, Ignored)> = vec![
        (
            "standby mode",
            with(text("survey"), "mode", json!("standby")),
            Ignored::Standby,
        ),
        (
            "no source",
            {
                let mut raw = text("survey");
                raw.as_object_mut().map(|event| event.remove("source"));
                raw
            },
            Ignored::NoUser,
        ),
        (
            "group without a user",
            with(text("survey"), "source", json!({"type": "group", "groupId": "C1"})),
            Ignored::NoUser,
        ),
        (
            "group with a user",
            with(
                text("survey"),
                "source",
                json!({"type": "group", "groupId": "C1", "userId": USER}),
            ),
            Ignored::NotOneToOne,
        ),
        (
            "room with a user",
            with(
                text("survey"),
                "source",
                json!({"type": "room", "roomId": "R1", "userId": USER}),
            ),
            Ignored::NotOneToOne,
        ),
        (
            "user id with NUL",
            with(text("survey"), "source", json!({"type": "user", "userId": "U\u{0}1"})),
            Ignored::InvalidUser,
        ),
        ("unfollow", event(json!({"type": "unfollow"})), Ignored::UnhandledType),
        (
            "beacon",
            event(json!({"type": "beacon", "beacon": {"hwid": "x", "type": "enter"}})),
            Ignored::UnhandledType,
        ),
        (
            "sticker",
            event(json!({"type": "message", "message": {"type": "sticker", "id": "1"}})),
            Ignored::NotText,
        ),
        ("text without trigger", text("hello there"), Ignored::NoTrigger),
        (
            "rich menu postback",
            postback("action=buy&itemid=111"),
            Ignored::ForeignPostback(PostbackError::Foreign(String::new())),
        ),
        (
            "unknown scenario",
            postback(&answer("nope", "rating", "5")),
            Ignored::UnknownScenario,
        ),
        (
            "unknown node",
            postback(&answer("satisfaction", "nope", "5")),
            Ignored::UnknownNode,
        ),
        (
            "answer to a message node",
            postback(&answer("satisfaction", "intro", "5")),
            Ignored::WrongNodeKind,
        ),
        (
            "card tap on a survey node",
            postback("v=1&k=t&s=satisfaction&n=rating"),
            Ignored::WrongNodeKind,
        ),
        (
            "unknown choice",
            postback(&answer("satisfaction", "rating", "9")),
            Ignored::UnknownChoice,
        ),
    ];
    for (name, raw, expected) in cases {
        let decided = decide(&raw);
        let same = match (&decided, &expected) {
            // The crate's message inside is not ours to pin.
            (Decision::Ignore(Ignored::ForeignPostback(_)), Ignored::ForeignPostback(_)) => true,
            (Decision::Ignore(ignored), expected) => ignored == expected,
            _ => false,
        };
        assert!(same, "{name}: expected {expected:?}, got {decided:?}");
    }
}

#[test]
fn each_kind_of_plan() {
    let Decision::Start(start) = decide(&text(" Survey ")) else {
        panic!("a keyword starts its scenario")
    };
    assert_eq!(start.scenario.as_str(), "satisfaction");
    assert!(start.guard.is_some(), "a scenario with a survey is guarded");
    assert_eq!(start.messages.len(), 2, "intro and the first question");

    let Decision::Start(hours) = decide(&text("hours")) else {
        panic!("a keyword starts its scenario")
    };
    assert_eq!(hours.guard, None, "no survey, no guard read");

    let Decision::Start(welcome) = decide(&event(json!({"type": "follow"}))) else {
        panic!("follow starts the welcome")
    };
    assert_eq!(welcome.scenario.as_str(), "welcome");

    let Decision::Answer(answer) = decide(&postback(&answer("satisfaction", "rating", "5"))) else {
        panic!("a survey button is an answer")
    };
    assert_eq!(answer.node.as_str(), "rating");
    assert_eq!(answer.tags, ["satisfied", "promoter"]);
    assert_eq!(answer.follow_up.len(), 1, "the next question");
    assert_eq!(answer.answer_id.len(), 40);

    let Decision::CardTap(tap) = decide(&postback("v=1&k=t&s=welcome&n=survey_card")) else {
        panic!("a card tap")
    };
    assert_eq!(tap.guard.scenario.as_str(), "satisfaction");
    assert_eq!(tap.messages.len(), 2);

    let unsend = event(json!({"type": "unsend", "unsend": {"messageId": "325708"}}));
    assert_eq!(
        decide(&with(unsend, "mode", json!("standby"))),
        Decision::Unsend {
            message_id: "325708".into()
        },
        "an unsend counts even in standby mode"
    );
}

#[test]
fn plans_survive_being_stored() {
    let Decision::Answer(answer) = decide(&postback(&answer("satisfaction", "rating", "5"))) else {
        panic!("an answer")
    };
    let stored = serde_json::to_string(&answer).expect("plans serialise");
    let read: AnswerPlan = serde_json::from_str(&stored).expect("plans deserialise");
    assert_eq!(read, answer);
}

#[test]
fn manual_start_renders_from_the_start_node() {
    let engine = engine();
    let messages = engine
        .manual_start(&ScenarioId::parse("satisfaction").expect("valid id"))
        .expect("renders");
    assert_eq!(messages.len(), 2);
    assert_eq!(
        engine.manual_start(&ScenarioId::parse("nope").expect("valid id")),
        Err(ManualStartError::UnknownScenario)
    );
}
