//! Guards 2 and 3, the decision itself: given what the marker says about a user
//! and a scenario, does this event start the scenario? Pure; the pipeline reads
//! the marker and commits the start conditional on what it read, so the read and
//! the write are one decision.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StartVerdict {
    Start,
    /// The user answered the scenario: it is not started again.
    AlreadyAnswered,
    /// Started for this user within the dedup window (a double tap, a repeated
    /// keyword): it is started once.
    RecentlyStarted,
}

/// `last_started_ms` and `event_ms` are event times, so a double tap processed
/// late is still a double tap, and an event older than the last start (a late
/// redelivery) never starts it again. A start after the window and before
/// answering starts again: the user may have lost the message.
pub(crate) fn start_verdict(
    answered: bool,
    last_started_ms: Option<i64>,
    event_ms: i64,
    window: Duration,
) -> StartVerdict {
    if answered {
        return StartVerdict::AlreadyAnswered;
    }
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    match last_started_ms {
        Some(started) if event_ms < started || event_ms.saturating_sub(started) < window_ms => {
            StartVerdict::RecentlyStarted
        }
        _ => StartVerdict::Start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let window = Duration::from_secs(30);
        let cases = [
            // (answered, last started, event time, verdict)
            (false, None, 1_000_000, StartVerdict::Start),
            (true, None, 1_000_000, StartVerdict::AlreadyAnswered),
            (true, Some(999_000), 1_000_000, StartVerdict::AlreadyAnswered),
            (false, Some(999_000), 1_000_000, StartVerdict::RecentlyStarted),
            // Processed out of order: the later tap started first.
            (false, Some(1_001_000), 1_000_000, StartVerdict::RecentlyStarted),
            // A redelivery of a tap from long before the last start.
            (false, Some(1_000_000), 100_000, StartVerdict::RecentlyStarted),
            (false, Some(970_001), 1_000_000, StartVerdict::RecentlyStarted),
            (false, Some(970_000), 1_000_000, StartVerdict::Start),
            (false, Some(100_000), 1_000_000, StartVerdict::Start),
        ];
        for (answered, last, event, expected) in cases {
            assert_eq!(
                start_verdict(answered, last, event, window),
                expected,
                "answered {answered}, last {last:?}, event {event}"
            );
        }
        assert_eq!(
            start_verdict(false, Some(1_000_000), 1_000_000, Duration::ZERO),
            StartVerdict::Start,
            "a zero window never deduplicates"
        );
    }
}
