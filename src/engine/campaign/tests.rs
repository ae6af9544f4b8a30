use super::*;

use crate::scenario::load_dir;
use serde_json::json;
use std::sync::Arc;

fn engine() -> Engine {
    let scenarios = load_dir(&crate::repo_path("scenarios")).expect("the samples load");
    Engine::new(Arc::new(scenarios))
}

fn satisfaction() -> ScenarioId {
    ScenarioId::parse("satisfaction").expect("valid")
}

fn audience(raw: serde_json::Value) -> Result<Audience, AudienceError> {
    let request: AudienceRequest = serde_json::from_value(raw).expect("the request parses");
    engine().audience(&request, &satisfaction())
}

fn tags(list: &[&str]) -> Vec<String> {
    list.iter().map(|tag| (*tag).to_owned()).collect()
}

/// 2026-11-01T00:00 in Tokyo.
const NOV_1_TOKYO_MS: i64 = 1_793_458_800_000;
const DAY_MS: i64 = 86_400_000;

#[test]
fn bad_audiences_are_refused_with_the_field_named() {
    let too_many: Vec<String> = (0..31).map(|n| format!("t{n}")).collect();
    let cases = [
        (
            serde_json::json!({"tags": {"anyOf": []}}),
            "tags.anyOf is an empty list",
        ),
        (
            serde_json::json!({"tags": {"noneOf": []}}),
            "tags.noneOf is an empty list",
        ),
        (serde_json::json!({"answered": []}), "answered is an empty list"),
        (serde_json::json!({"tags": {"anyOf": too_many}}), "31 tags"),
        (
            serde_json::json!({"tags": {"anyOf": tags(&["a"; 1]), "allOf": (0..15).map(|n| format!("b{n}")).collect::<Vec<_>>(), "noneOf": (0..15).map(|n| format!("c{n}")).collect::<Vec<_>>()}}),
            "31 tags",
        ),
        (serde_json::json!({"tags": {"allOf": [""]}}), "is not a tag"),
        (
            serde_json::json!({"answered": ["nope"]}),
            "no scenario with id \"nope\"",
        ),
        (
            serde_json::json!({"firstSeenFrom": "2026-13-01"}),
            "firstSeenFrom \"2026-13-01\" is not a date",
        ),
        (
            serde_json::json!({"firstSeenFrom": "2026-11-02", "firstSeenTo": "2026-11-01"}),
            "firstSeenFrom 2026-11-02 is after firstSeenTo 2026-11-01",
        ),
        (
            serde_json::json!({"sources": {"anyOf": []}}),
            "sources.anyOf is an empty list",
        ),
        (
            serde_json::json!({"sources": {"anyOf": ["Instagram"]}}),
            "source \"Instagram\" is not a source id",
        ),
        (
            serde_json::json!({"sources": {"anyOf": ["callback"]}}),
            "source \"callback\" is not a source id",
        ),
        (
            serde_json::json!({"sources": {"anyOf": (0..31).map(|n| format!("s{n}")).collect::<Vec<_>>()}}),
            "names 31 sources",
        ),
    ];
    for (raw, expected) in cases {
        let error = audience(raw.clone()).expect_err(&format!("{raw} is refused"));
        assert!(error.to_string().contains(expected), "{raw}: {error}");
    }
    assert!(
        serde_json::from_value::<AudienceRequest>(serde_json::json!({"tag": {}})).is_err(),
        "unknown fields are refused"
    );
}

#[test]
fn the_filter_keeps_exactly_the_audience() {
    let user_tags = tags(&["unsatisfied", "follow_up"]);
    let none: [String; 0] = [];
    let no_fields: &'static BTreeMap<String, FieldValue> = Box::leak(Box::default());
    let user = |following, tags: &'static [String], seen| Candidate {
        following,
        tags,
        first_seen_ms: seen,
        fields: no_fields,
        sources: &[],
    };
    let leaked: &'static [String] = Box::leak(user_tags.into_boxed_slice());
    let bare: &'static [String] = Box::leak(Box::new(none));
    let mut answered_by = AnsweredBy::new();
    answered_by.insert(satisfaction(), ["Ua".to_owned()].into());
    let nov_1 = Some(NOV_1_TOKYO_MS);
    let cases = [
        (serde_json::json!({}), user(Some(true), bare, None), true),
        (serde_json::json!({}), user(None, bare, None), true),
        (serde_json::json!({}), user(Some(false), leaked, nov_1), false),
        (
            serde_json::json!({"tags": {"anyOf": ["unsatisfied", "x"]}}),
            user(Some(true), leaked, None),
            true,
        ),
        (
            serde_json::json!({"tags": {"anyOf": ["x"]}}),
            user(Some(true), leaked, None),
            false,
        ),
        (
            serde_json::json!({"tags": {"allOf": ["unsatisfied", "follow_up"]}}),
            user(Some(true), leaked, None),
            true,
        ),
        (
            serde_json::json!({"tags": {"allOf": ["unsatisfied", "x"]}}),
            user(Some(true), leaked, None),
            false,
        ),
        (
            serde_json::json!({"tags": {"noneOf": ["follow_up"]}}),
            user(Some(true), leaked, None),
            false,
        ),
        (
            serde_json::json!({"tags": {"noneOf": ["x"]}}),
            user(Some(true), leaked, None),
            true,
        ),
        (
            serde_json::json!({"answered": ["satisfaction"]}),
            user(Some(true), bare, None),
            true,
        ),
        (
            serde_json::json!({"notAnswered": ["satisfaction"]}),
            user(Some(true), bare, None),
            false,
        ),
        (
            serde_json::json!({"notAnswered": ["welcome"]}),
            user(Some(true), bare, None),
            true,
        ),
        (
            serde_json::json!({"firstSeenFrom": "2026-11-01"}),
            user(Some(true), bare, nov_1),
            true,
        ),
        (
            serde_json::json!({"firstSeenFrom": "2026-11-02"}),
            user(Some(true), bare, nov_1),
            false,
        ),
        (
            serde_json::json!({"firstSeenTo": "2026-10-31"}),
            user(Some(true), bare, nov_1),
            false,
        ),
        (
            serde_json::json!({"firstSeenFrom": "2026-11-01", "firstSeenTo": "2026-11-01"}),
            user(Some(true), bare, Some(NOV_1_TOKYO_MS + DAY_MS - 1)),
            true,
        ),
        (
            serde_json::json!({"firstSeenTo": "2026-11-01"}),
            user(Some(true), bare, Some(NOV_1_TOKYO_MS + DAY_MS)),
            false,
        ),
        (
            serde_json::json!({"firstSeenFrom": "2026-11-01"}),
            user(Some(true), bare, None),
            false,
        ),
    ];
    for (raw, candidate, expected) in cases {
        let audience = audience(raw.clone()).expect("a good audience");
        assert_eq!(
            audience.includes("Ua", &candidate, &answered_by),
            expected,
            "{raw} / {candidate:?}"
        );
    }
}

#[test]
fn a_source_audience_keeps_users_who_came_through_any_of_its_sources() {
    let no_fields: &'static BTreeMap<String, FieldValue> = Box::leak(Box::default());
    let user = |sources: &'static [String], tags: &'static [String]| Candidate {
        following: Some(true),
        tags,
        first_seen_ms: None,
        fields: no_fields,
        sources,
    };
    let leak = |list: &[&str]| -> &'static [String] { Box::leak(tags(list).into_boxed_slice()) };
    let (poster_then_ig, ig, none) = (leak(&["poster", "ig"]), leak(&["ig"]), leak(&[]));
    let vip = leak(&["vip"]);
    let answered_by = AnsweredBy::new();
    // (audience, the user's sources, their tags, included)
    let cases = [
        (json!({"sources": {"anyOf": ["ig"]}}), poster_then_ig, none, true),
        (json!({"sources": {"anyOf": ["ig"]}}), ig, none, true),
        (json!({"sources": {"anyOf": ["poster"]}}), ig, none, false),
        (
            json!({"sources": {"anyOf": ["poster", "x"]}}),
            poster_then_ig,
            none,
            true,
        ),
        (json!({"sources": {"anyOf": ["ig"]}}), none, none, false),
        (json!({}), none, none, true),
        (
            json!({"sources": {"anyOf": ["ig"]}, "tags": {"anyOf": ["vip"]}}),
            ig,
            vip,
            true,
        ),
        (
            json!({"sources": {"anyOf": ["ig"]}, "tags": {"anyOf": ["vip"]}}),
            ig,
            none,
            false,
        ),
        (
            json!({"sources": {"anyOf": ["poster"]}, "tags": {"anyOf": ["vip"]}}),
            ig,
            vip,
            false,
        ),
    ];
    for (raw, sources, tags, included) in cases {
        let audience = audience(raw.clone()).expect("a good audience");
        assert_eq!(
            audience.includes("Ua", &user(sources, tags), &answered_by),
            included,
            "{raw} {sources:?} {tags:?}"
        );
    }
}

#[test]
fn the_scan_is_the_narrowest_indexed_query() {
    let cases = [
        (serde_json::json!({}), Scan::All),
        (serde_json::json!({"tags": {"noneOf": ["a"]}}), Scan::All),
        (
            serde_json::json!({"tags": {"allOf": ["a", "b"]}}),
            Scan::Tag("a".into()),
        ),
        (
            serde_json::json!({"tags": {"anyOf": ["a", "b"], "allOf": ["c"]}}),
            Scan::AnyTag(tags(&["a", "b"])),
        ),
        (
            serde_json::json!({"sources": {"anyOf": ["poster", "poster", "ig"]}, "tags": {"allOf": ["c"]}}),
            Scan::AnySource(tags(&["poster", "ig"])),
        ),
        (
            serde_json::json!({"sources": {"anyOf": ["poster"]}, "tags": {"anyOf": ["c"]}}),
            Scan::AnyTag(tags(&["c"])),
        ),
    ];
    for (raw, expected) in cases {
        assert_eq!(audience(raw.clone()).expect("good").scan(), expected, "{raw}");
    }
}

#[test]
fn a_campaign_sends_the_same_messages_in_one_run_and_says_what_each_recipient_records() {
    let engine = engine();
    let start = engine
        .campaign_start(&satisfaction(), "c1")
        .expect("satisfaction renders");
    assert_eq!(start, engine.campaign_start(&satisfaction(), "c1").expect("again"));
    assert_ne!(start.run, engine.campaign_start(&satisfaction(), "c2").expect("c2").run);
    assert!(start.run.is_campaign_run());
    // A survey alone: the marker naming the run, nothing else.
    assert_eq!(start.recipient, RecipientStart::default());
    assert_eq!((start.recipient.writes(), start.recipient.chunk_size()), (2, 249));
    assert_eq!(start.messages_per_recipient, 1);

    // A wait first: its step is the recipient's timer.
    let followup = engine
        .campaign_start(&ScenarioId::parse("ja_followup").expect("valid"), "c1")
        .expect("waits are fine");
    let kinds: Vec<TimerKind> = followup.recipient.timers.iter().map(|plan| plan.kind).collect();
    assert_eq!(kinds, vec![TimerKind::Step]);
    assert_eq!(followup.messages_per_recipient, 2, "the first send and the step");
    assert!(followup.recipient.timers.iter().all(|plan| plan.run == followup.run));
    assert_eq!(followup.asks, None);

    // A typed question first: it opens for each recipient.
    let profile = engine
        .campaign_start(&ScenarioId::parse("ja_profile").expect("valid"), "c1")
        .expect("a typed question first is fine");
    let opens = profile.recipient.opens.as_ref().expect("opens a question");
    assert_eq!(opens.run.as_ref(), Some(&profile.run));

    // Tags and fields of the first nodes are the recipient's too.
    let member = engine
        .campaign_start(&ScenarioId::parse("ja_member").expect("valid"), "c1")
        .expect("tags and fields are fine");
    assert_eq!(member.recipient.changes.tag, vec!["未回答".to_owned()]);
    assert!(member.recipient.changes.set.contains_key("member_source"));

    assert!(matches!(
        engine.campaign_start(&ScenarioId::parse("nope").expect("valid"), "c1"),
        Err(CampaignStartError::UnknownScenario(_))
    ));
    // A branch first (or a split, or placeholders: see the split and personal
    // tests) cannot be decided for every recipient at once: each recipient's
    // start is decided and pushed on its own.
    assert_eq!(start.delivery, Delivery::Multicast);
    let branch = engine
        .campaign_start(&ScenarioId::parse("ja_vip").expect("valid"), "c1")
        .expect("a branch goes by push");
    assert_eq!(branch.delivery, Delivery::Push);
    assert!(branch.messages.is_empty(), "nothing is the same for everyone");
    assert_eq!(branch.recipient, RecipientStart::default());
    assert_eq!(branch.run, RunId::of_campaign("c1"));
    assert_eq!(
        branch.messages_per_recipient, 1,
        "the first push; ja_vip's arms set no timer"
    );
}

#[test]
fn chunks_shrink_so_a_settle_with_every_recipients_part_is_one_commit() {
    let plan = |kind| TimerPlan {
        kind,
        scenario: satisfaction(),
        version: 1,
        run: RunId::of_campaign("0123456789abcdef0123456789abcdef01234567"),
        node: crate::ids::NodeId::parse("rating").expect("valid"),
    };
    let question = QuestionRef {
        scenario: satisfaction(),
        version: 1,
        node: crate::ids::NodeId::parse("comment").expect("valid"),
        run: None,
    };
    let changes = |tag: bool, untag: bool| {
        let mut changes = UserChanges::default();
        if tag {
            changes.add_tags([&"a".to_owned()]);
        }
        if untag {
            changes.remove_tags([&"b".to_owned()]);
        }
        changes
    };
    // (opens, timers, tags added, tags removed, writes per recipient, chunk)
    let cases = [
        (false, vec![], false, false, 2, 249),
        (true, vec![], false, false, 3, 166),
        (false, vec![TimerKind::Step], false, false, 3, 166),
        (true, vec![TimerKind::Remind, TimerKind::Expire], false, false, 5, 99),
        (false, vec![TimerKind::Remind], true, false, 3, 166),
        (false, vec![], true, true, 3, 166),
        (false, vec![], false, true, 3, 166),
    ];
    for (opens, timers, tag, untag, writes, chunk) in cases {
        let start = RecipientStart {
            opens: opens.then(|| question.clone()),
            timers: timers.into_iter().map(plan).collect(),
            changes: changes(tag, untag),
        };
        assert_eq!((start.writes(), start.chunk_size()), (writes, chunk), "{start:?}");
        assert!(chunk * writes + SETTLE_OWN_WRITES <= MAX_COMMIT_WRITES);
    }
}

#[test]
fn ids_and_aggregation_units_fit_line() {
    let id = campaign_id("spring-2026").expect("no NUL");
    assert_eq!(Some(id.clone()), campaign_id("spring-2026"));
    assert_ne!(Some(id.clone()), campaign_id("spring-2027"));
    assert_eq!(campaign_id("a\0b"), None);
    let unit = aggregation_unit(&id);
    assert_eq!(unit.len(), 30);
    assert!(unit.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
}

#[test]
fn a_day_starts_at_midnight_or_when_a_dst_gap_over_midnight_ends() {
    use chrono::TimeZone;
    // (zone, day, the day's first instant in UTC)
    let cases = [
        (chrono_tz::Asia::Tokyo, (2026, 12, 2), (2026, 12, 1, 15, 0)),
        // Chile moved 00:00 to 01:00 on 2022-09-11: the day began at 01:00 -03.
        (chrono_tz::America::Santiago, (2022, 9, 11), (2022, 9, 11, 4, 0)),
        // Cuba moved 00:00 to 01:00 on 2023-03-12: the day began at 01:00 -04.
        (chrono_tz::America::Havana, (2023, 3, 12), (2023, 3, 12, 5, 0)),
    ];
    for (zone, (y, m, d), (uy, um, ud, uh, umin)) in cases {
        let day = NaiveDate::from_ymd_opt(y, m, d).unwrap();
        let expected = chrono::Utc.with_ymd_and_hms(uy, um, ud, uh, umin, 0).unwrap();
        assert_eq!(start_of_day_ms(zone, day), expected.timestamp_millis(), "{zone} {day}");
        // The export and the timers use the same day.
        assert_eq!(
            crate::scenario::schedule::zone_day_start(zone, day),
            expected,
            "{zone} {day}"
        );
    }
}

#[test]
fn field_conditions_hold_as_written() {
    let text = |value: &str| FieldValue::Text(value.to_owned());
    let condition = |json: serde_json::Value| -> FieldCondition { serde_json::from_value(json).expect("a condition") };
    let cases: Vec<(serde_json::Value, Option<FieldValue>, bool)> = vec![
        (json!({"equals": "gold"}), Some(text("gold")), true),
        (json!({"equals": "gold"}), Some(text("silver")), false),
        (json!({"equals": "gold"}), None, false),
        (json!({"equals": 20}), Some(FieldValue::Number(20.0)), true),
        (json!({"in": ["gold", "silver"]}), Some(text("silver")), true),
        (json!({"in": ["gold", "silver"]}), Some(text("bronze")), false),
        (json!({"exists": true}), Some(FieldValue::Bool(false)), true),
        (json!({"exists": true}), None, false),
        (json!({"exists": false}), None, true),
        (json!({"exists": false}), Some(text("x")), false),
        (json!({"min": 20, "max": 29}), Some(FieldValue::Integer(20)), true),
        (json!({"min": 20, "max": 29}), Some(FieldValue::Integer(29)), true),
        (json!({"min": 20, "max": 29}), Some(FieldValue::Integer(30)), false),
        (json!({"min": 20, "max": 29}), Some(FieldValue::Number(19.5)), false),
        (json!({"min": 20}), Some(text("25")), false),
        (json!({"min": "2026-01-01"}), Some(text("2026-03-14")), true),
        (json!({"equals": true}), Some(FieldValue::Bool(true)), true),
        (json!({"equals": true}), Some(text("true")), false),
    ];
    for (written, value, holds) in cases {
        assert_eq!(
            condition(written.clone()).holds(value.as_ref()),
            holds,
            "{written} on {value:?}"
        );
    }
}

#[test]
fn bad_field_conditions_are_refused_by_name() {
    let engine = engine();
    let audience = |fields: serde_json::Value| -> Result<Audience, AudienceError> {
        let request: AudienceRequest = serde_json::from_value(json!({ "fields": fields })).expect("a request");
        engine.audience(&request, &satisfaction())
    };
    assert!(audience(json!({"plan": {"equals": "gold"}, "age": {"min": 20, "max": 29}})).is_ok());
    let cases = [
        (json!({"Plan": {"equals": "gold"}}), "fields.Plan is not a field name"),
        (json!({"plan": {}}), "fields.plan has no condition"),
        (json!({"plan": {"in": []}}), "fields.plan has an empty `in` list"),
        (json!({"age": {"min": 30, "max": 20}}), "fields.age has min above max"),
        (json!({"age": {"min": 1, "max": "x"}}), "fields.age has min above max"),
    ];
    for (fields, message) in cases {
        let error = audience(fields.clone()).expect_err("refused");
        assert!(error.to_string().starts_with(message), "{fields}: {error}");
    }
    let many: serde_json::Map<String, serde_json::Value> =
        (0..21).map(|n| (format!("f{n}"), json!({"exists": true}))).collect();
    assert!(matches!(
        audience(serde_json::Value::Object(many)),
        Err(AudienceError::TooManyFields(21))
    ));
}

#[test]
fn a_send_time_is_to_come_within_90_days_and_moves_out_of_quiet_hours() {
    let engine = engine();
    let at = |raw: &str| chrono::DateTime::parse_from_rfc3339(raw).expect("RFC 3339").to_utc();
    let now = at("2026-12-04T12:00:00+09:00");
    // satisfaction has no quiet hours; ja_followup is quiet 21:00-09:00 Tokyo.
    let followup = ScenarioId::parse("ja_followup").expect("valid");
    // (scenario, asked for, starts at or the error)
    let cases: [(ScenarioId, &str, Result<&str, &str>); 8] = [
        (
            satisfaction(),
            "2026-12-07T10:00:00+09:00",
            Ok("2026-12-07T10:00:00+09:00"),
        ),
        (
            satisfaction(),
            "2026-12-07T23:30:00+09:00",
            Ok("2026-12-07T23:30:00+09:00"),
        ),
        (
            followup.clone(),
            "2026-12-07T10:00:00+09:00",
            Ok("2026-12-07T10:00:00+09:00"),
        ),
        (
            followup.clone(),
            "2026-12-07T23:30:00+09:00",
            Ok("2026-12-08T09:00:00+09:00"),
        ),
        (
            followup.clone(),
            "2026-12-07T06:00:00+09:00",
            Ok("2026-12-07T09:00:00+09:00"),
        ),
        (satisfaction(), "2026-12-04T11:59:59+09:00", Err("has passed")),
        (satisfaction(), "2026-12-04T12:00:00+09:00", Err("has passed")),
        (
            satisfaction(),
            "2027-03-05T12:00:01+09:00",
            Err("more than 90 days ahead"),
        ),
    ];
    for (scenario, asked, expected) in cases {
        let got = engine.campaign_starts_at(&scenario, at(asked), now);
        match expected {
            Ok(starts) => assert_eq!(got, Ok(at(starts)), "{scenario} {asked}"),
            Err(problem) => assert!(
                got.as_ref().is_err_and(|error| error.to_string().contains(problem)),
                "{scenario} {asked}: {got:?}"
            ),
        }
    }
    // 90 days exactly is fine.
    assert!(
        engine
            .campaign_starts_at(&satisfaction(), at("2027-03-04T12:00:00+09:00"), now)
            .is_ok()
    );
}

#[test]
fn users_with_the_opt_out_tag_are_in_no_audience_whatever_it_asks() {
    let no_fields: &'static BTreeMap<String, FieldValue> = Box::leak(Box::default());
    let opted: &'static [String] = Box::leak(tags(&["配信停止", "vip"]).into_boxed_slice());
    let vip: &'static [String] = Box::leak(tags(&["vip"]).into_boxed_slice());
    let user = |tags: &'static [String]| Candidate {
        following: Some(true),
        tags,
        first_seen_ms: None,
        fields: no_fields,
        sources: &[],
    };
    let answered_by = AnsweredBy::new();
    // (audience asked for, the user's tags, included)
    let cases = [
        (serde_json::json!({}), vip, true),
        (serde_json::json!({}), opted, false),
        (serde_json::json!({"tags": {"anyOf": ["vip"]}}), opted, false),
        (serde_json::json!({"tags": {"anyOf": ["配信停止"]}}), opted, false),
        // Asking for the tag itself makes the audience empty, not wider.
        (serde_json::json!({"tags": {"anyOf": ["配信停止"]}}), vip, false),
        (
            serde_json::json!({"tags": {"allOf": ["配信停止", "vip"]}}),
            opted,
            false,
        ),
        (serde_json::json!({"tags": {"allOf": ["vip"]}}), vip, true),
    ];
    for (raw, tags, included) in cases {
        let audience = audience(raw.clone()).expect("good").without_tag("配信停止");
        assert_eq!(
            audience.includes("Ua", &user(tags), &answered_by),
            included,
            "{raw} {tags:?}"
        );
    }
}
