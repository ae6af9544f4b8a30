//! Firestore stopped in mid-run: the webhook answers 5xx meanwhile; once it is
//! back, redelivered events are processed exactly once.

use crate::helpers::emulator::DedicatedEmulator;
use crate::helpers::firestore_rest::FirestoreRest;
use crate::helpers::line_stand_in::LineStandIn;
use crate::helpers::process::ServiceProcess;
use crate::helpers::storm::{Storm, effects, exactly_once, post_event};
use crate::helpers::{events, new_project_id, wait_until};
use std::time::Duration;

#[tokio::test]
async fn a_stopped_firestore_gets_5xx_and_redeliveries_are_processed_once_when_it_is_back() {
    let emulator = DedicatedEmulator::start().await;
    let project = new_project_id();
    let line = LineStandIn::start().await;
    let firestore = FirestoreRest::new(&emulator.host, &project);
    let storm = Storm::new(20);
    let settings = [
        ("REPLY_TOKEN_MAX_AGE_SECS", "0"),
        ("FIRESTORE_TIMEOUT_MS", "500"),
        ("LEASE_MS", "2000"),
    ];
    let service = ServiceProcess::start_with_firestore(&project, &line.uri(), &emulator.host, &settings).await;
    let client = reqwest::Client::new();
    for event in &storm.starts {
        assert_eq!(post_event(&client, &service.address, event).await.unwrap(), 200);
    }
    firestore.settled(Duration::from_secs(30)).await;

    // Half the taps with Firestore up, the rest while it is stopped.
    let (before, during) = storm.taps.split_at(storm.taps.len() / 2);
    let mut redeliver = Vec::new();
    for event in before {
        if post_event(&client, &service.address, event).await.unwrap() != 200 {
            redeliver.push(event.clone());
        }
    }
    emulator.pause();
    let mut refused = 0;
    for event in during {
        let status = post_event(&client, &service.address, event).await.unwrap();
        if status != 503 {
            let log = service.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "while Firestore is stopped the webhook answers 503, not {status}; the service's last log lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        refused += 1;
        redeliver.push(event.clone());
    }
    // Keep it stopped until the background work met the outage too (a sweep failed).
    wait_until(Duration::from_secs(20), || {
        service.log_text().contains("sweep of expired events failed")
    })
    .await;
    emulator.resume();

    // Like LINE, redeliver until accepted: right after the resume the emulator
    // is still working through what queued up while it was stopped, so a
    // first redelivery may still time out (503, nothing recorded). What
    // matters is that every event is accepted in the end and counted once.
    let mut refused_after_resume = 0;
    for event in &redeliver {
        let mut status = 0;
        for _ in 0..20 {
            status = post_event(&client, &service.address, &events::redelivered(event))
                .await
                .unwrap();
            if status != 503 {
                break;
            }
            refused_after_resume += 1;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(status, 200, "a redelivery once Firestore is back is accepted");
    }
    eprintln!("redeliveries refused right after the resume: {refused_after_resume}");
    firestore.settled(Duration::from_secs(60)).await;

    assert!(refused > 0);
    for (user, got) in effects(&storm, &firestore, &line).await {
        assert_eq!(got, exactly_once(), "{user}");
    }
}
