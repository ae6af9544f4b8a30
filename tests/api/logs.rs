//! What the log may hold: ids and outcomes, never a LINE user id (a keyed hash
//! stands in for it), a reply token, the access token, the channel secret or what
//! a user typed. Checked over the whole log of the real binary after a storm with
//! double taps, redeliveries, typed answers, LINE failures and operator reads.

use crate::helpers::firestore_rest::FirestoreRest;
use crate::helpers::line_stand_in::{ACCESS_TOKEN, LineStandIn};
use crate::helpers::process::ServiceProcess;
use crate::helpers::storm::send_all;
use crate::helpers::{ADMIN_TOKEN, CHANNEL_SECRET, emulator_host, events, new_project_id, repo_path};
use line_survey::log_ids::UserIdHasher;
use serde_json::Value;
use std::time::Duration;

const USERS: usize = 40;

/// Each user's events: a follow, the keyword, a double tap and a redelivery of
/// the scale's "5", then a typed comment, sent twice.
fn conversation(user: &str, comment: &str) -> Vec<Vec<Value>> {
    let tap = events::postback(user, &events::answer_data("feedback", "scale", "5"));
    vec![
        vec![events::follow(user)],
        vec![events::text(user, "feedback")],
        vec![
            tap.clone(),
            events::redelivered(&tap),
            events::postback(user, &events::answer_data("feedback", "scale", "5")),
        ],
        vec![events::text(user, comment)],
        vec![events::text(user, comment)],
    ]
}

#[tokio::test]
async fn a_storms_whole_log_names_no_user_token_secret_or_typed_text() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    // Failures make the retry, takeover and dead-letter paths log too.
    line.fail_randomly(0.2);
    let scenarios = repo_path("tests/fixtures/typed");
    let service = ServiceProcess::start(
        &project,
        &line.uri(),
        &[
            ("SCENARIOS_DIR", scenarios.to_str().unwrap()),
            (
                "RUST_LOG",
                "info,line_survey=debug,firestore=warn,gcloud_sdk=warn,h2=warn,hyper=warn",
            ),
        ],
    )
    .await;
    let firestore = FirestoreRest::new(&emulator_host(), &project);

    let users: Vec<String> = (0..USERS).map(|_| events::new_user()).collect();
    let comments: Vec<String> = (0..USERS)
        .map(|index| format!("私の電話番号は090-1234-{index:04} です secret-comment-{index}"))
        .collect();
    let conversations: Vec<Vec<Vec<Value>>> = users
        .iter()
        .zip(&comments)
        .map(|(user, comment)| conversation(user, comment))
        .collect();
    let mut sent = Vec::new();
    for round in 0..5 {
        let wave: Vec<Value> = conversations.iter().flat_map(|steps| steps[round].clone()).collect();
        let refused = send_all(&wave, |_| service.address.clone()).await;
        assert!(refused.is_empty(), "every event is acknowledged: {refused:?}");
        sent.extend(wave);
        // Each step waits for the one before it, as a user does.
        firestore.settled(Duration::from_secs(60)).await;
    }

    // Operators read and act: timelines, user records, a manual send (with LINE
    // answering again: a manual send whose pushes fail answers 502).
    line.fail_randomly(0.0);
    let client = reqwest::Client::new();
    let hasher = UserIdHasher::new(CHANNEL_SECRET);
    for user in users.iter().take(3) {
        let timeline: Value = client
            .get(format!("{}/admin/users/{user}/timeline", service.address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            timeline["userIdHash"],
            hasher.hash(user),
            "the timeline shows the log's hash"
        );
        let record = client
            .get(format!("{}/admin/users/{user}", service.address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(record.status(), 200);
    }
    let manual = client
        .post(format!("{}/admin/scenarios/hello/send", service.address))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({ "userIds": [users[0], users[1]] }))
        .send()
        .await
        .unwrap();
    assert_eq!(manual.status(), 200);
    firestore.settled(Duration::from_secs(60)).await;

    let log = service.log_text();
    // The log speaks of these users, by hash: the check below is not vacuous.
    for user in &users {
        assert!(
            log.contains(&hasher.hash(user)),
            "the log names {user} by its hash {}",
            hasher.hash(user)
        );
    }
    let mut forbidden: Vec<(&str, String)> = vec![
        ("the access token", ACCESS_TOKEN.to_owned()),
        ("the channel secret", CHANNEL_SECRET.to_owned()),
        ("the admin token", ADMIN_TOKEN.to_owned()),
    ];
    forbidden.extend(users.iter().map(|user| ("a user id", user.clone())));
    forbidden.extend(comments.iter().map(|comment| ("a typed answer", comment.clone())));
    forbidden.extend(comments.iter().map(|comment| {
        (
            "part of a typed answer",
            comment.split(' ').nth(1).unwrap_or_default().to_owned(),
        )
    }));
    forbidden.extend(
        sent.iter()
            .filter_map(|event| event["replyToken"].as_str())
            .map(|token| ("a reply token", token.to_owned())),
    );
    assert!(
        forbidden.len() > USERS * 5,
        "every user's id, comment and tokens are looked for"
    );
    for (what, value) in &forbidden {
        assert!(!value.is_empty());
        if let Some(line) = log.lines().find(|line| line.contains(value.as_str())) {
            panic!("the log shows {what}: {line}");
        }
    }
}

#[tokio::test]
async fn log_user_ids_plain_keeps_the_ids() {
    let project = new_project_id();
    let line = LineStandIn::start().await;
    let service = ServiceProcess::start(&project, &line.uri(), &[("LOG_USER_IDS", "plain")]).await;
    let user = events::new_user();
    assert!(
        send_all(&[events::text(&user, "lunch")], |_| service.address.clone())
            .await
            .is_empty()
    );
    FirestoreRest::new(&emulator_host(), &project)
        .settled(Duration::from_secs(30))
        .await;
    let log = service.log_text();
    assert!(log.contains(&user), "LOG_USER_IDS=plain logs the id itself");
    assert!(!log.contains(&UserIdHasher::new(CHANNEL_SECRET).hash(&user)));
}
