//! `POST /__clock`: moves the service's test clock forward, so tests of
//! windows (reminders, expiries, answer windows, leases) move time instead of
//! waiting for it. Mounted only with `CLOCK=test`, which start-up allows only
//! against the Firestore emulator; otherwise the path is an unknown route (404).
//!
//! Body `{"advanceMs": 3600000}`; answer `{"now": "<RFC 3339>"}`, the
//! clock's new time. The clock never moves back.

use super::{AppState, error_body};
use actix_web::{HttpResponse, web};
use serde::Deserialize;
use std::time::Duration;

/// The longest single move: ten years, the longest delay a scenario may name.
const MAX_ADVANCE_MS: u64 = 3650 * 24 * 60 * 60 * 1000;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Advance {
    /// Milliseconds to move forward; 0 reads the clock without moving it.
    advance_ms: i64,
}

/// Why a move was refused, said in the answer.
fn amount(body: &[u8]) -> Result<Duration, String> {
    let advance: Advance =
        serde_json::from_slice(body).map_err(|error| format!("expected {{\"advanceMs\": <milliseconds>}}: {error}"))?;
    let ms = u64::try_from(advance.advance_ms)
        .map_err(|_| "advanceMs must not be negative: the clock only moves forward".to_owned())?;
    if ms > MAX_ADVANCE_MS {
        return Err(format!("advanceMs must be at most {MAX_ADVANCE_MS} (ten years)"));
    }
    Ok(Duration::from_millis(ms))
}

pub(crate) async fn advance(state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    let by = match amount(&body) {
        Ok(by) => by,
        Err(problem) => return HttpResponse::BadRequest().json(error_body(problem)),
    };
    match state.clock.advance(by) {
        Ok(now) => {
            let now = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            tracing::info!(clock.advanced_ms = by.as_millis() as u64, clock.now = %now, "test clock moved");
            HttpResponse::Ok().json(serde_json::json!({ "now": now }))
        }
        // Mounted only with a test clock; the system clock says so if it ever is.
        Err(error) => HttpResponse::BadRequest().json(error_body(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_are_read_from_a_small_body_and_bounded() {
        assert_eq!(amount(br#"{"advanceMs": 3600000}"#), Ok(Duration::from_secs(3600)));
        assert_eq!(amount(br#"{"advanceMs": 0}"#), Ok(Duration::ZERO));
        let refused = [
            &br#"{"advanceMs": -1}"#[..],
            br#"{"advanceMs": 315360000001}"#,
            br#"{"advanceMs": "1h"}"#,
            br#"{"advance": 1}"#,
            br#"{}"#,
            b"not json",
            b"",
        ];
        for body in refused {
            assert!(amount(body).is_err(), "{}", String::from_utf8_lossy(body));
        }
    }
}
