//! Firestore round trips per kind of event, as the service counts them
//! (`GET /admin/metrics`), against the targets: a first answer costs the inbox
//! claim plus one atomic commit; a repeated tap or a redelivery at most two; each
//! scenario-level guard one get by id. Settles ("done", "sent") are batched and
//! counted apart.

use crate::helpers::events::{self, card_tap_data, postback, redelivered, text};
use crate::helpers::spawn_app;
use serde_json::Value;

fn per_event(metrics: &Value, kind: &str) -> f64 {
    let counters = &metrics["kinds"][kind];
    let events = counters["events"]
        .as_f64()
        .unwrap_or_else(|| panic!("no {kind} events in {metrics}"));
    counters["firestoreRoundTrips"].as_f64().unwrap() / events
}

#[tokio::test]
async fn each_kind_of_event_costs_the_round_trips_of_its_target() {
    let app = spawn_app().await;
    let answered = events::new_user();
    let fresh = events::new_user();
    let tap = postback(&answered, &events::answer_data("lunch", "ask_food", "good"));

    app.deliver(&tap).await;
    app.deliver(&redelivered(&tap)).await;
    app.answer(&answered, "ask_food", "good").await;
    app.deliver(&text(&answered, "lunch")).await;
    app.deliver(&text(&answered, "news")).await;
    app.deliver(&postback(&answered, &card_tap_data("welcome", "card")))
        .await;
    app.deliver(&postback(&fresh, &card_tap_data("welcome", "card"))).await;
    app.deliver(&text(&events::new_user(), "lunch")).await;

    let metrics: Value = app.get_admin("/admin/metrics").await.json().await.unwrap();
    // Inbox claim + the one atomic commit.
    assert_eq!(per_event(&metrics, "first_answer"), 2.0, "{metrics}");
    // Claim + the commit that fails with ALREADY_EXISTS.
    assert_eq!(per_event(&metrics, "repeated_tap"), 2.0, "{metrics}");
    // The claim alone.
    assert_eq!(per_event(&metrics, "redelivery"), 1.0, "{metrics}");
    // Claim + one get of the marker.
    assert_eq!(per_event(&metrics, "text_trigger_answered_survey"), 2.0, "{metrics}");
    // Claim + the commit of its ledger entry: no guard read at all.
    assert_eq!(per_event(&metrics, "text_trigger_without_survey"), 2.0, "{metrics}");
    // Claim + one get + the commit of tag, done and ledger entry.
    assert_eq!(per_event(&metrics, "flex_tap_after_answer"), 3.0, "{metrics}");
    assert_eq!(per_event(&metrics, "flex_tap_starting_survey"), 3.0, "{metrics}");
    assert_eq!(per_event(&metrics, "text_trigger_unanswered_survey"), 3.0, "{metrics}");
    // Batched settles: one "sent" per message that went out (first answer, news,
    // the fresh card tap, the new user's start) and one "done" per event that
    // ended without a commit (the repeated answer, the answered keyword).
    assert_eq!(app.line.accepted().len(), 4);
    assert_eq!(metrics["batchedSettles"]["writes"], 6, "{metrics}");
}

/// A split, a branch and `{name}` in the same messages cost one read more than
/// the plain survey per decision: the branch's read of the user also takes what
/// the placeholders need, and the display name comes from the cache. A repeated
/// tap costs what it costs without them: the follow-up's read finds the answer.
/// Scenarios: benches/load/scenarios (the benchmark's `plain` and `decide`).
#[tokio::test]
async fn a_branch_split_and_name_cost_one_extra_read_per_decision() {
    let app = crate::helpers::spawn_app_with(crate::helpers::TestOptions {
        adjust: |config| {
            config.scenarios_dir = crate::helpers::repo_path("benches/load/scenarios");
        },
        ..crate::helpers::TestOptions::default()
    })
    .await;
    for scenario in ["plain", "decide"] {
        let user = events::new_user();
        app.firestore
            .patch(
                "users",
                &user,
                &[
                    ("lineUserId", serde_json::json!({ "stringValue": user })),
                    ("displayName", serde_json::json!({ "stringValue": "太郎" })),
                    (
                        "profileFetchedMs",
                        serde_json::json!({ "integerValue": events::now_ms().to_string() }),
                    ),
                ],
            )
            .await;
        let before: Value = app.get_admin("/admin/metrics").await.json().await.unwrap();
        app.deliver(&text(&user, scenario)).await;
        app.deliver(&postback(&user, &events::answer_data(scenario, "ask_food", "good")))
            .await;
        // A repeated tap: the personal read finds the answer, so no commit.
        app.deliver(&postback(&user, &events::answer_data(scenario, "ask_food", "good")))
            .await;
        let after: Value = app.get_admin("/admin/metrics").await.json().await.unwrap();
        let cost = |kind: &str| {
            let trips = |metrics: &Value| metrics["kinds"][kind]["firestoreRoundTrips"].as_f64().unwrap_or(0.0);
            trips(&after) - trips(&before)
        };
        let (start, answer, repeated) = (
            cost("text_trigger_unanswered_survey"),
            cost("first_answer"),
            cost("repeated_tap"),
        );
        match scenario {
            "plain" => assert_eq!((start, answer, repeated), (3.0, 2.0, 2.0), "{after}"),
            _ => assert_eq!((start, answer, repeated), (4.0, 3.0, 2.0), "{after}"),
        }
    }
    let questions: Vec<String> = app
        .line
        .accepted()
        .iter()
        .flat_map(crate::helpers::line_stand_in::Call::messages)
        .filter_map(|message| message["template"]["text"].as_str().map(str::to_owned))
        .collect();
    assert!(
        questions.contains(&"太郎さん、Coffee or tea?".to_owned()),
        "{questions:?}"
    );
    assert!(app.line.profile_calls().is_empty(), "the name came from the cache");
}
