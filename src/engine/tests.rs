//! `Engine::decide`, table-driven over the sample scenarios in `scenarios/`: one
//! case per reason to ignore an event, and one per kind of plan.

use super::*;
use crate::line::webhook::EventParse;
use crate::scenario::load_dir;
use crate::scenario::typed::AnswerValue;
use serde_json::{Value, json};

const USER: &str = "U0123456789abcdef0123456789abcdef";

fn engine() -> Engine {
    let scenarios = load_dir(&crate::repo_path("scenarios")).expect("the samples load");
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

/// What a text decides once no question is open: the samples ask typed
/// questions, so every text is a text plan whose keyword may start a scenario.
fn keyword(raw: &Value) -> Option<StartPlan> {
    match decide(raw) {
        Decision::Text(plan) => plan.keyword,
        other => panic!("a text is a text plan, got {other:?}"),
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
        (
            "user id with a path character",
            with(
                text("survey"),
                "source",
                json!({"type": "user", "userId": "U0123456789abcdef0123456789abcd/f"}),
            ),
            Ignored::InvalidUser,
        ),
        (
            "user id that is not LINE's shape",
            with(text("survey"), "source", json!({"type": "user", "userId": "__users__"})),
            Ignored::InvalidUser,
        ),
        (
            "user id in upper case",
            with(
                text("survey"),
                "source",
                json!({"type": "user", "userId": "U0123456789ABCDEF0123456789ABCDEF"}),
            ),
            Ignored::InvalidUser,
        ),
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
        (
            "a valid answer on a test send's button",
            postback(&format!(
                "{}&r=t0123456789abcde&sv=1",
                answer("satisfaction", "rating", "5")
            )),
            Ignored::TestSendTap,
        ),
        (
            "a date picked on a test send's button",
            postback("v=1&k=d&s=satisfaction&n=rating&r=t0123456789abcde"),
            Ignored::TestSendTap,
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
    let Some(start) = keyword(&text(" Survey ")) else {
        panic!("a keyword starts its scenario")
    };
    assert_eq!(start.scenario.as_str(), "satisfaction");
    assert!(start.guard.is_some(), "a scenario with a survey is guarded");
    assert_eq!(start.run_start.messages.len(), 2, "intro and the first question");

    let Some(hours) = keyword(&text("hours")) else {
        panic!("a keyword starts its scenario")
    };
    assert_eq!(keyword(&text("hello there")), None, "no trigger matches");
    assert_eq!(hours.guard, None, "no survey, no guard read");

    let Decision::Follow(FollowPlan {
        following: true,
        start: Some(welcome),
        ..
    }) = decide(&event(json!({"type": "follow"})))
    else {
        panic!("follow is recorded and starts the welcome")
    };
    assert_eq!(welcome.scenario.as_str(), "welcome");
    let Decision::Follow(FollowPlan {
        following: false,
        start: None,
        ..
    }) = decide(&event(json!({"type": "unfollow"})))
    else {
        panic!("an unfollow is recorded, and starts nothing")
    };
    let Some(started) = keyword(&text(" Survey ")) else {
        panic!("a keyword starts its scenario")
    };
    let run = started.run_start.run.clone().expect("a start begins a run");
    assert_eq!(
        keyword(&text(" Survey ")),
        Some(started),
        "the same event (a redelivery) begins the same run"
    );
    assert!(run.as_str().len() == 16);

    let Decision::Answer(answer) = decide(&postback(&answer("satisfaction", "rating", "5"))) else {
        panic!("a survey button is an answer")
    };
    assert_eq!(answer.node.as_str(), "rating");
    assert_eq!(
        answer.tags,
        ["satisfied", "promoter", "answered:satisfaction"],
        "the choice's tags and the scenario's answer tag"
    );
    assert_eq!(answer.value, AnswerValue::Text("5".into()));
    assert_eq!(answer.closes, None, "a button answer needs no open question");
    assert_eq!(answer.follow_up.len(), 1, "the next question");
    assert_eq!(answer.answer_id.len(), 40);

    let Decision::CardTap(tap) = decide(&postback("v=1&k=t&s=welcome&n=survey_card")) else {
        panic!("a card tap")
    };
    assert_eq!(tap.guard.scenario.as_str(), "satisfaction");
    assert_eq!(tap.run_start.messages.len(), 2);

    let Decision::MenuTap(menu_tap) = decide(&postback("v=1&k=m&s=satisfaction&m=member")) else {
        panic!("a rich menu tap")
    };
    assert_eq!(menu_tap.menu.as_str(), "member");
    assert_eq!(menu_tap.start.scenario.as_str(), "satisfaction");
    assert!(menu_tap.start.guard.is_some(), "a survey's start is guarded");
    assert_eq!(menu_tap.start.run_start.messages.len(), 2, "from the scenario's start");
    assert_eq!(
        decide(&postback("v=1&k=s&m=survey_tab")),
        Decision::Ignore(Ignored::MenuSwitch),
        "LINE switched the menu itself"
    );
    assert_eq!(
        decide(&postback("v=1&k=m&s=nothing_here&m=member")),
        Decision::Ignore(Ignored::UnknownScenario)
    );

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
        .manual_start(
            &ScenarioId::parse("satisfaction").expect("valid id"),
            &LineUserId::parse(USER).expect("valid"),
        )
        .expect("renders");
    assert_eq!(messages.messages.len(), 2);
    assert_eq!(
        engine.manual_start(
            &ScenarioId::parse("nope").expect("valid id"),
            &LineUserId::parse(USER).expect("valid")
        ),
        Err(ManualStartError::UnknownScenario)
    );
}

#[test]
fn keywords_match_after_nfkc() {
    let cases = [
        ("ＳＵＲＶＥＹ", Some("satisfaction")),
        ("ｱﾝｹｰﾄ", Some("satisfaction")),
        ("アンケート\u{3000}", Some("satisfaction")),
        ("  survey\n", Some("satisfaction")),
        ("ＮＰＳ", Some("ja_satisfaction")),
        ("surveys", None),
    ];
    for (typed, expected) in cases {
        assert_eq!(
            keyword(&text(typed)).map(|plan| plan.scenario.to_string()).as_deref(),
            expected,
            "{typed:?}"
        );
    }
}

fn date_postback(node: &str, params: Value) -> Value {
    event(json!({"type": "postback", "postback": {"data": format!("v=1&k=d&s=ja_profile&n={node}"), "params": params}}))
}

#[test]
fn date_answers() {
    let Decision::Answer(plan) = decide(&date_postback("next_visit", json!({"date": "2027-03-14"}))) else {
        panic!("a picked date is an answer")
    };
    assert_eq!(plan.value, AnswerValue::Text("2027-03-14".into()));
    assert_eq!(plan.value_type, "date");
    assert_eq!(plan.closes.as_ref().map(|q| q.node.as_str()), Some("next_visit"));
    assert_eq!(plan.tags, ["来店予定あり", "プロフィール回答"]);
    let refused = [
        (date_postback("next_visit", json!({})), Ignored::NoPickedValue),
        (
            date_postback("next_visit", json!({"time": "10:00"})),
            Ignored::NoPickedValue,
        ),
        (
            date_postback("next_visit", json!({"date": "2025-12-31"})),
            Ignored::PickedOutOfRange,
        ),
        (
            date_postback("next_visit", json!({"date": "2031-01-01"})),
            Ignored::PickedOutOfRange,
        ),
        (
            date_postback("next_visit", json!({"date": "14/03/2027"})),
            Ignored::PickedOutOfRange,
        ),
        (
            date_postback("age", json!({"date": "2027-03-14"})),
            Ignored::WrongNodeKind,
        ),
    ];
    for (raw, expected) in refused {
        assert_eq!(decide(&raw), Decision::Ignore(expected.clone()), "{raw}");
    }
}

fn open(node: &str, attempts: u32) -> OpenQuestion {
    OpenQuestion {
        question: QuestionRef {
            scenario: ScenarioId::parse("ja_profile").expect("valid"),
            version: 1,
            node: NodeId::parse(node).expect("valid"),
            run: None,
        },
        attempts,
        opened_at_ms: 1_000_000,
        reminded_at_ms: None,
    }
}

#[test]
fn typed_answer_decisions() {
    let engine = engine();
    let user = LineUserId::parse(USER).expect("valid");
    let at = 1_000_000 + 60_000;
    let decide =
        |question: &OpenQuestion, text: &str, at: i64| engine.typed_answer(&user, question, text, at).expect("plans");
    let TypedDecision::Answer(age) = decide(&open("age", 0), "３５", at) else {
        panic!("full-width digits are a valid age")
    };
    assert_eq!(age.value, AnswerValue::Integer(35));
    assert_eq!(age.value_type, "number");
    assert_eq!(age.opens.as_ref().map(|q| q.node.as_str()), Some("postal_code"));
    assert_eq!(age.closes.as_ref().map(|q| q.node.as_str()), Some("age"));
    assert_eq!(age.follow_up.len(), 1, "the postal code question");

    let TypedDecision::Invalid { attempts, messages, .. } = decide(&open("age", 0), "abc", at) else {
        panic!("not a number")
    };
    assert_eq!(attempts, 1);
    assert!(matches!(&messages[0], Message::Text { text, .. } if text.contains("0〜120")));

    let TypedDecision::GiveUp { then, .. } = decide(&open("age", 2), "200", at) else {
        panic!("the third invalid answer gives up")
    };
    assert_eq!(then.messages.len(), 1, "on_give_up's end text");
    assert_eq!(then.opens, None);

    let TypedDecision::GiveUp { then, .. } = decide(&open("postal_code", 2), "123", at) else {
        panic!("gives up after the default three attempts")
    };
    assert!(then.messages.is_empty(), "no on_give_up: the scenario ends quietly");

    assert_eq!(
        decide(&open("age", 0), "35", 1_000_000 + 24 * 3_600_000),
        TypedDecision::NotOpen,
        "the answer window lapsed"
    );
    assert_eq!(
        decide(&open("age", 0), "35", 1_000_000 - 1),
        TypedDecision::NotOpen,
        "a text sent before the question was asked answers nothing"
    );
    assert_eq!(decide(&open("next_visit", 0), "tomorrow", at), TypedDecision::NotTyped);
    assert_eq!(decide(&open("gone", 0), "35", at), TypedDecision::NotOpen);
}

/// A reminder renews the answer window but not the asking: a text typed after
/// the question was first asked still answers it, and the window counts from
/// the reminder.
#[test]
fn a_reminder_renews_the_answer_window_not_the_asking() {
    let engine = engine();
    let day = 24 * 60 * 60 * 1000;
    let asked = open("age", 0);
    let reminded = OpenQuestion {
        reminded_at_ms: Some(asked.opened_at_ms + day - 1000),
        ..asked.clone()
    };
    let cases = [
        // (question, event time, open?)
        (&asked, asked.opened_at_ms - 1, false),
        (&asked, asked.opened_at_ms + 10, true),
        (&asked, asked.opened_at_ms + day, false),
        (&reminded, asked.opened_at_ms + 10, true),
        (&reminded, asked.opened_at_ms + day, true),
        (&reminded, asked.opened_at_ms + 2 * day - 2000, true),
        (&reminded, asked.opened_at_ms + 2 * day, false),
        (&reminded, asked.opened_at_ms - 1, false),
    ];
    for (question, at, expected) in cases {
        assert_eq!(engine.is_open_at(question, at), expected, "at {at}");
    }
}

#[test]
fn an_answer_plans_its_question_choice_field_and_follow_up_actions_in_order() {
    let dir = crate::repo_path("tests/fixtures/actions");
    let engine = Engine::new(Arc::new(load_dir(&dir).expect("the actions fixture loads")));
    let parsed = |raw: &Value| match Event::parse(raw) {
        EventParse::Parsed(event) => engine.decide(&event),
        EventParse::Malformed { reason, .. } => panic!("test event does not parse: {reason}"),
    };
    let strings = |items: &[&str]| items.iter().map(|item| (*item).to_owned()).collect::<Vec<_>>();

    let Decision::Text(TextPlan {
        keyword: Some(start), ..
    }) = parsed(&text("プロフィール"))
    else {
        panic!("the keyword starts the scenario");
    };
    assert_eq!(start.run_start.changes.tag, strings(&["unanswered", "profile_started"]));
    assert_eq!(
        start.run_start.changes.set.get("last_survey"),
        Some(&FieldValue::Text("profile".into()))
    );

    let Decision::Answer(plan) = parsed(&postback(&answer("profile", "ask_plan", "gold"))) else {
        panic!("a tap on a choice is an answer");
    };
    assert_eq!(
        plan.tags,
        strings(&["vip", "answered:profile"]),
        "recorded on the answer"
    );
    assert!(
        plan.changes.tag.is_empty(),
        "the follow-up asks a question: no node after it acts"
    );
    assert_eq!(plan.changes.untag, strings(&["unanswered", "reminder_sent"]));
    assert_eq!(plan.changes.set.get("plan"), Some(&FieldValue::Text("gold".into())));
    assert_eq!(plan.changes.set.get("discount"), Some(&FieldValue::Integer(10)));
    let all = plan.user_changes();
    assert_eq!(all.tag, strings(&["vip", "answered:profile"]));
    assert_eq!(all.untag, strings(&["unanswered", "reminder_sent"]));

    // The silver choice has no actions of its own: the question's still apply.
    let Decision::Answer(plan) = parsed(&postback(&answer("profile", "ask_plan", "silver"))) else {
        panic!("a tap on a choice is an answer");
    };
    assert_eq!(plan.tags, strings(&["answered:profile"]));
    assert_eq!(plan.changes.untag, strings(&["unanswered"]));
    assert_eq!(plan.changes.set.get("plan"), Some(&FieldValue::Text("silver".into())));
}

#[test]
fn a_branch_arms_rich_menu_joins_the_steps_changes_before_the_nodes_after_it() {
    let dir = std::env::temp_dir().join(format!("engine-branch-menu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("menus.toml"),
        r#"
id = "menus"
version = 1
[[nodes]]
id = "go"
kind = "trigger"
on = "text"
keywords = ["menu"]
next = "route"
[[nodes]]
id = "route"
kind = "branch"
arms = [
  { when = { tags = { anyOf = ["vip"] } }, next = "vip", rich_menu = "member" },
  { when = { tags = { anyOf = ["tab"] } }, next = "tab", rich_menu = "member" },
]
else = "plain"
[[nodes]]
id = "vip"
kind = "end"
text = "VIP"
[[nodes]]
id = "tab"
kind = "end"
text = "Tab"
rich_menu = "survey_tab"
[[nodes]]
id = "plain"
kind = "end"
text = "Plain"
"#,
    )
    .unwrap();
    let engine = Engine::new(Arc::new(load_dir(&dir).expect("loads")));
    std::fs::remove_dir_all(&dir).ok();
    let EventParse::Parsed(event) = Event::parse(&text("menu")) else {
        panic!("the event parses")
    };
    let Decision::Start(start) = engine.decide(&event) else {
        panic!("a start")
    };
    let scenario = ScenarioId::parse("menus").unwrap();
    let loaded = engine.scenarios().get(&scenario).unwrap();
    let user = LineUserId::parse(USER).unwrap();
    let cases = [("vip", Some("member")), ("tab", Some("survey_tab")), ("other", None)];
    for (tag, expected) in cases {
        let state = crate::scenario::branch::UserState {
            tags: [tag.to_owned()].into_iter().collect(),
            ..Default::default()
        };
        let (chain, _) = engine
            .resolve_branches(
                loaded,
                start.run_start.chain(),
                None,
                engine.who(&scenario, &user),
                &state,
                &UserChanges::default(),
            )
            .expect("resolves");
        assert_eq!(chain.changes.rich_menu.as_deref(), expected, "{tag}");
    }
}
