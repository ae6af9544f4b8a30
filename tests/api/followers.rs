//! The followers sync: every friend LINE lists recorded as following, through a
//! SIGKILL of the instance driving it, without losing what the service knew
//! (tags, an unfollow seen after the sync began); one sync at a time; LINE's
//! 429s waited out; a 403 ends it with its reason and changes nothing.

use crate::helpers::firestore_rest::{FirestoreRest, string_field};
use crate::helpers::line_stand_in::{Fault, LineStandIn};
use crate::helpers::process::ServiceProcess;
use crate::helpers::{ADMIN_TOKEN, TestApp, emulator_host, events, new_project_id, spawn_app, wait_until};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

async fn start_sync(address: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{address}/admin/followers/sync"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("service reachable")
}

async fn sync_status(address: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{address}/admin/followers/sync"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("service reachable")
}

/// Polls the sync until it is `state`; returns its progress.
async fn wait_for_sync(address: &str, state: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let response = sync_status(address).await;
        if response.status() == 200 {
            let status: Value = response.json().await.expect("JSON");
            if status["state"] == state {
                return status;
            }
            assert!(Instant::now() < deadline, "the sync is not {state}: {status}");
        } else {
            assert!(Instant::now() < deadline, "no sync: {}", response.status());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn bool_field(document: &Value, field: &str) -> Option<bool> {
    document["fields"][field]["booleanValue"].as_bool()
}

fn tags(document: &Value) -> Vec<String> {
    document["fields"]["tags"]["arrayValue"]["values"]
        .as_array()
        .map(|values| {
            values
                .iter()
                .filter_map(|value| value["stringValue"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_sync_of_25000_friends_through_a_sigkill_records_each_once_and_keeps_what_was_known() {
    const FRIENDS: usize = 25_000;
    const KNOWN: usize = 2_000;
    const LEAVING: usize = 50;
    let project = new_project_id();
    let line = LineStandIn::start().await;
    // Slow pages: the instance dies with a page on its way.
    line.set_latency(Duration::from_millis(150));
    let friends: Vec<String> = (0..FRIENDS).map(|_| events::new_user()).collect();
    line.set_followers(friends.clone());
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    // Known already: tagged; half of them following, a tenth of them with an
    // unfollow recorded before the sync (they came back: LINE lists them).
    let known: Vec<(String, String, Value)> = friends[..KNOWN]
        .iter()
        .enumerate()
        .map(|(i, user)| {
            let mut fields = json!({
                "lineUserId": {"stringValue": user},
                "tags": {"arrayValue": {"values": [{"stringValue": "vip"}, {"stringValue": format!("t{i}")}]}},
                "fields": {"mapValue": {"fields": {"plan": {"stringValue": "gold"}}}},
            });
            if i % 2 == 0 {
                fields["following"] = json!({"booleanValue": true});
            } else if i % 10 == 1 {
                fields["following"] = json!({"booleanValue": false});
                fields["unfollowedAt"] = json!({"timestampValue": "2026-01-01T00:00:00Z"});
            }
            ("users".to_owned(), user.clone(), fields)
        })
        .collect();
    firestore.write_all(&known).await;

    // 2,000 writes a second: about half a second a page, 13 s in all.
    let settings = [("FOLLOWER_SYNC_WRITES_PER_SECOND", "2000")];
    let mut first = ServiceProcess::start(&project, &line.uri(), &settings).await;
    let started = start_sync(&first.address).await;
    assert_eq!(started.status(), 202);
    let started: Value = started.json().await.unwrap();
    assert_eq!(started["started"], json!(true));
    // The first instance alone is up: it holds the sync when it is killed.
    wait_until(Duration::from_secs(60), || line.follower_calls().len() >= 2).await;
    let second = ServiceProcess::start(&project, &line.uri(), &settings).await;
    // A second start while it runs is the same sync.
    let again: Value = start_sync(&second.address).await.json().await.unwrap();
    assert_eq!(again["started"], json!(false));
    assert_eq!(again["startedAt"], started["startedAt"]);

    // Friends near the end of LINE's list unfollow while the sync runs: they stay unfollowed.
    let leaving: Vec<String> = friends[FRIENDS - LEAVING..].to_vec();
    let client = reqwest::Client::new();
    let unfollows = leaving.iter().map(|user| {
        let (client, address) = (&client, &second.address);
        async move { crate::helpers::storm::post_event(client, address, &events::unfollow(user)).await }
    });
    for status in futures::future::join_all(unfollows).await {
        assert_eq!(status.expect("acknowledged"), 200);
    }
    wait_until(Duration::from_secs(60), || line.follower_calls().len() >= 4).await;
    first.kill();
    let before = line.follower_calls().len();
    let done = wait_for_sync(&second.address, "done", Duration::from_secs(180)).await;
    assert!(before < FRIENDS.div_ceil(1000), "killed mid-way: {before} pages asked");

    // Every friend listed and counted once.
    assert_eq!(done["listed"], json!(FRIENDS), "{done}");
    let counted = done["recorded"].as_u64().unwrap()
        + done["alreadyFollowing"].as_u64().unwrap()
        + done["keptUnfollowed"].as_u64().unwrap();
    assert_eq!(counted, FRIENDS as u64, "{done}");
    assert_eq!(done["keptUnfollowed"], json!(LEAVING), "{done}");
    // A page asked again after the kill starts from the stored token.
    let calls = line.follower_calls();
    let asked: HashSet<&Option<String>> = calls.iter().collect();
    assert_eq!(asked.len(), FRIENDS.div_ceil(1000), "every page asked, none skipped");

    firestore.settled(Duration::from_secs(30)).await;
    let users: HashMap<String, Value> = firestore
        .list("users")
        .await
        .into_iter()
        .filter_map(|user| string_field(&user, "lineUserId").map(|id| (id, user)))
        .collect();
    assert_eq!(users.len(), FRIENDS, "one record a friend");
    let leaving: HashSet<&String> = leaving.iter().collect();
    for (i, friend) in friends.iter().enumerate() {
        let user = &users[friend];
        let following = bool_field(user, "following");
        if leaving.contains(friend) {
            assert_eq!(following, Some(false), "{friend} unfollowed during the sync");
        } else {
            assert_eq!(following, Some(true), "{friend}: {user}");
        }
        if i < KNOWN {
            assert_eq!(tags(user), vec!["vip".to_owned(), format!("t{i}")], "{friend}'s tags");
            assert_eq!(
                user["fields"]["fields"]["mapValue"]["fields"]["plan"]["stringValue"],
                "gold"
            );
        }
        if i >= KNOWN && !leaving.contains(friend) {
            assert_eq!(string_field(user, "followSource").as_deref(), Some("sync"), "{friend}");
        }
    }
}

#[tokio::test]
async fn two_starts_are_one_sync_and_line_s_429s_are_waited_out() {
    let app = spawn_app().await;
    let friends: Vec<String> = (0..2_500).map(|_| events::new_user()).collect();
    app.line.set_followers(friends.clone());
    app.line
        .fail_next_follower_pages([Fault::RateLimit { retry_after_secs: 1 }, Fault::Refuse(500)]);
    assert_eq!(sync_status(&app.address).await.status(), 404, "no sync yet");
    let (one, two) = tokio::join!(start_sync(&app.address), start_sync(&app.address));
    let (one, two): (Value, Value) = (one.json().await.unwrap(), two.json().await.unwrap());
    assert_eq!(one["startedAt"], two["startedAt"], "one sync");
    assert_eq!(
        [&one["started"], &two["started"]]
            .iter()
            .filter(|started| ***started == json!(true))
            .count(),
        1
    );
    let done = wait_for_sync(&app.address, "done", Duration::from_secs(60)).await;
    assert_eq!(done["listed"], json!(2_500));
    assert_eq!(done["recorded"], json!(2_500));
    assert_eq!(done["pages"], json!(3));
    assert_eq!(app.firestore.count("users").await, 2_500);
    // A sync started again finds them following: nothing more to write.
    let again: Value = start_sync(&app.address).await.json().await.unwrap();
    assert_eq!(again["started"], json!(true));
    let done = wait_for_sync(&app.address, "done", Duration::from_secs(60)).await;
    assert_eq!(
        (done["recorded"].clone(), done["alreadyFollowing"].clone()),
        (json!(0), json!(2_500))
    );
}

#[tokio::test]
async fn a_retry_after_longer_than_the_lease_is_waited_out_by_the_holder_alone() {
    // Two instances with 3 s leases; LINE asks for 6 s: the holder renews its
    // lease while it waits, so nobody else asks LINE meanwhile.
    const WAIT: Duration = Duration::from_secs(6);
    let project = new_project_id();
    let line = LineStandIn::start().await;
    line.set_followers((0..1_500).map(|_| events::new_user()).collect());
    line.fail_next_follower_pages([Fault::RateLimit {
        retry_after_secs: WAIT.as_secs(),
    }]);
    let first = ServiceProcess::start(&project, &line.uri(), &[]).await;
    let second = ServiceProcess::start(&project, &line.uri(), &[]).await;
    assert_eq!(start_sync(&first.address).await.status(), 202);
    let done = wait_for_sync(&second.address, "done", Duration::from_secs(60)).await;
    assert_eq!(done["listed"], json!(1_500), "{done}");
    assert_eq!(done["pages"], json!(2), "{done}");
    let times = line.follower_call_times();
    assert_eq!(
        times.len(),
        3,
        "the refused page, then two pages: {:?}",
        line.follower_calls()
    );
    assert!(
        times[1].duration_since(times[0]) >= WAIT - Duration::from_millis(100),
        "LINE's Retry-After was waited out: {:?}",
        times[1].duration_since(times[0])
    );
    assert_eq!(
        line.follower_calls()[0],
        line.follower_calls()[1],
        "the same page asked again"
    );
}

#[tokio::test]
async fn a_403_ends_the_sync_with_its_reason_and_changes_nothing() {
    let app: TestApp = spawn_app().await;
    app.line.set_followers((0..10).map(|_| events::new_user()).collect());
    app.line.refuse_followers();
    assert_eq!(start_sync(&app.address).await.status(), 202);
    let failed = wait_for_sync(&app.address, "failed", Duration::from_secs(30)).await;
    let reason = failed["reason"].as_str().expect("a reason");
    assert!(
        reason.contains("403") && reason.contains("verified or premium"),
        "{reason}"
    );
    assert_eq!(app.firestore.count("users").await, 0, "nothing else changes");
}
