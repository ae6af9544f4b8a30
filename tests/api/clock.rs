//! `POST /__clock`: the test clock's control, and that it exists only with
//! `CLOCK=test`.

use crate::helpers::{TestOptions, advance_clock_at, events, spawn_app, spawn_app_with};
use serde_json::{Value, json};
use std::time::Duration;

async fn post_clock(address: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{address}/__clock"))
        .json(body)
        .send()
        .await
        .expect("service reachable")
}

#[tokio::test]
async fn the_clock_cannot_be_moved_without_clock_test() {
    let app = spawn_app().await;
    let response = post_clock(&app.address, &json!({ "advanceMs": 1000 })).await;
    assert_eq!(response.status(), 404, "an unknown route, like any other");
}

#[tokio::test]
async fn the_test_clock_moves_forward_only_by_sensible_amounts() {
    let app = spawn_app_with(TestOptions {
        test_clock: true,
        ..TestOptions::default()
    })
    .await;
    let before = events::now_ms();
    let moved = advance_clock_at(&app.address, Duration::from_secs(3600)).await;
    assert!(moved >= before + 3_600_000, "moved an hour: {moved} from {before}");
    // It keeps the move: a second move adds to it.
    let again = advance_clock_at(&app.address, Duration::ZERO).await;
    assert!(again >= moved, "never back");

    for bad in [
        json!({ "advanceMs": -1 }),
        json!({ "advanceMs": 315_360_000_001_i64 }),
        json!({ "advanceMs": "1h" }),
        json!({}),
    ] {
        let response = post_clock(&app.address, &bad).await;
        assert_eq!(response.status(), 400, "{bad}");
        let answer: Value = response.json().await.expect("JSON");
        assert!(answer["error"].is_string(), "{answer}");
    }
    let after = advance_clock_at(&app.address, Duration::ZERO).await;
    assert!(after < moved + 60_000, "refused moves moved nothing");
}
