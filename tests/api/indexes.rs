//! `firestore.indexes.json`, the index configuration deployed with the service:
//! no index on the monotonically increasing fields (each would cap writes at
//! about 500 per second), and none the sweeper would need.

use serde_json::Value;

fn indexes() -> Value {
    let path = crate::helpers::repo_path("firestore.indexes.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("firestore.indexes.json exists")).expect("it is JSON")
}

#[test]
fn the_sweeper_needs_no_composite_index_on_its_collections() {
    // It asks for `state == pending` in document-id order: the automatic
    // single-field index on `state`, ordered by random ids, serves it.
    let indexes = indexes();
    for index in indexes["indexes"].as_array().unwrap() {
        assert!(
            !["webhook_inbox", "outbound_ledger"].contains(&index["collectionGroup"].as_str().unwrap()),
            "{index}"
        );
    }
}

#[test]
fn due_timers_are_found_with_one_composite_index() {
    let indexes = indexes();
    let timers: Vec<Vec<(String, String)>> = indexes["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|index| index["collectionGroup"] == "timers")
        .map(|index| {
            index["fields"]
                .as_array()
                .unwrap()
                .iter()
                .map(|field| {
                    (
                        field["fieldPath"].as_str().unwrap().to_owned(),
                        field["order"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .collect();
    assert_eq!(
        timers,
        [vec![
            ("state".to_owned(), "ASCENDING".to_owned()),
            ("wakeAtMs".to_owned(), "ASCENDING".to_owned())
        ]]
    );
}

#[test]
fn monotonic_fields_no_query_uses_are_exempt_from_indexing() {
    let indexes = indexes();
    let exempt: Vec<(String, String)> = indexes["fieldOverrides"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|field| field["indexes"].as_array().is_some_and(Vec::is_empty))
        .map(|field| {
            (
                field["collectionGroup"].as_str().unwrap().to_owned(),
                field["fieldPath"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("webhook_inbox", "receivedAt"),
        ("instances", "expireAt"),
        ("webhook_inbox", "expireAt"),
        ("webhook_inbox", "leaseUntil"),
        ("webhook_inbox", "plan"),
        // ULIDs start with their time: sequential too.
        ("webhook_inbox", "webhookEventId"),
        ("outbound_ledger", "webhookEventId"),
        ("survey_responses", "webhookEventId"),
        // Written by earlier versions; never queried any more (unsend goes by id).
        ("webhook_inbox", "messageId"),
        ("outbound_ledger", "createdAt"),
        ("outbound_ledger", "expireAt"),
        ("outbound_ledger", "leaseUntil"),
        ("outbound_ledger", "messages"),
        ("outbound_ledger", "eventTimeMs"),
        ("survey_responses", "answeredAt"),
        ("users", "lastSeenMs"),
        ("users", "firstSeenMs"),
        ("scenario_answers", "lastAnsweredAt"),
        // Counter maps: raised by every answer and send, read by document name only.
        ("result_counters", "sent"),
        ("result_counters", "answered"),
        ("result_counters", "choices"),
        ("result_counters", "sentByVariant"),
        ("result_counters", "answeredByVariant"),
        ("result_counters", "choicesByVariant"),
        ("result_counters", "runs"),
        // Read by id only; written at most once per user, question and interval.
        ("notices", "lastEventAt"),
        ("notices", "expireAt"),
        ("scenario_answers", "lastStartedAt"),
        ("message_marks", "at"),
        ("message_marks", "expireAt"),
        ("admin_requests", "createdAt"),
        ("admin_requests", "expireAt"),
        ("open_questions", "openedAt"),
        // A kept text is only ever read by id; never index what users type.
        ("message_texts", "text"),
        // Console sessions: read by id only; lastSeenMs moves at most once a minute each.
        ("console_sessions", "lastSeenMs"),
        ("console_sessions", "expiresMs"),
        ("console_sessions", "createdMs"),
        ("console_sessions", "expireAt"),
        // Audit entries are filtered by operator, action and time only.
        ("audit_log", "summary"),
        ("audit_log", "touched"),
        ("audit_log", "route"),
        ("message_texts", "expireAt"),
        // Timers are found by `state` and `wakeAtMs` (a composite index) and
        // listed by `lineUserId`; their other times are never queried.
        ("timers", "dueAt"),
        ("timers", "scheduledAt"),
        ("timers", "endedAt"),
        ("users", "followedAt"),
        ("users", "unfollowedAt"),
        // Whole scenario files, read by id only.
        ("scenario_versions", "content"),
        ("scenario_versions", "recordedAt"),
        // A chunk's 500 user ids would be 500 index entries per write; chunks
        // are found by campaign, plan and state.
        ("campaign_chunks", "users"),
        ("campaign_chunks", "lastError"),
        // A push chunk's decisions (with personal values) until it settles.
        ("campaign_chunks", "pushes"),
        ("campaigns", "messages"),
        ("campaigns", "audience"),
    ];
    for (collection, field) in expected {
        assert!(
            exempt.contains(&(collection.to_owned(), field.to_owned())),
            "{collection}.{field} is not exempt"
        );
    }
}
