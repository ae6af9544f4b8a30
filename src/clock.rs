//! The wall clock, read through one handle so that tests can move it.
//!
//! Every window the service keeps (answer windows, start dedup, reminders,
//! expiries, quiet hours, campaign send times, reply-token freshness, leases
//! written to Firestore) is measured in wall-clock time. Reading it through a
//! [`Clock`] instead of `Utc::now()` lets a test move time forward instead of
//! waiting for it.
//!
//! - [`Clock::system`] is the real clock (production).
//! - [`Clock::test`] starts at the real time and keeps running with it, plus an
//!   offset that only grows ([`Clock::advance`]). It never runs backwards, so
//!   "newest wins" comparisons keep holding. The service enables it only with
//!   `CLOCK=test`, which start-up refuses unless `FIRESTORE_EMULATOR_HOST` is set.
//!
//! Monotonic deadlines inside one process (`std::time::Instant`, tokio's
//! timers: how long a call may take, when an in-memory lease copy runs out)
//! stay on the monotonic clock: they measure how long this process waited, not
//! what day it is, and a moved test clock must not make work in flight look as
//! if it had waited for hours.

use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// `None`: the system clock. `Some`: a test clock, ahead of the system
    /// clock by this many milliseconds.
    offset_ms: Option<Arc<AtomicI64>>,
}

/// A move a clock cannot make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    #[error("the system clock cannot be moved; start the service with CLOCK=test")]
    NotATestClock,
    #[error("a move of {0} ms is out of range")]
    OutOfRange(u128),
}

impl Clock {
    /// The real clock.
    pub fn system() -> Self {
        Self { offset_ms: None }
    }

    /// A clock that starts at the real time and can be moved forward.
    pub fn test() -> Self {
        Self {
            offset_ms: Some(Arc::new(AtomicI64::new(0))),
        }
    }

    pub fn is_test(&self) -> bool {
        self.offset_ms.is_some()
    }

    /// Now, as this clock sees it.
    pub fn now(&self) -> DateTime<Utc> {
        let now = Utc::now();
        match &self.offset_ms {
            None => now,
            Some(offset) => now
                .checked_add_signed(chrono::TimeDelta::milliseconds(offset.load(Ordering::SeqCst)))
                .unwrap_or(now),
        }
    }

    /// Now in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// Moves a test clock forward by `by`; the new time. The system clock
    /// refuses.
    pub fn advance(&self, by: Duration) -> Result<DateTime<Utc>, ClockError> {
        let offset = self.offset_ms.as_ref().ok_or(ClockError::NotATestClock)?;
        let by_ms = i64::try_from(by.as_millis()).map_err(|_| ClockError::OutOfRange(by.as_millis()))?;
        let mut current = offset.load(Ordering::SeqCst);
        loop {
            let next = current
                .checked_add(by_ms)
                .ok_or(ClockError::OutOfRange(by.as_millis()))?;
            match offset.compare_exchange(current, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok(self.now()),
                Err(seen) => current = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_clock_moves_forward_and_keeps_running() {
        let clock = Clock::test();
        let before = clock.now_ms();
        let moved = clock.advance(Duration::from_secs(3600)).map(|at| at.timestamp_millis());
        assert!(moved.is_ok_and(|at| at >= before + 3_600_000));
        assert!(clock.now_ms() >= before + 3_600_000);
        // Copies share the offset: every service sees the same time.
        let copy = clock.clone();
        assert!(copy.now_ms() >= before + 3_600_000);
    }

    #[test]
    fn the_system_clock_cannot_be_moved() {
        let clock = Clock::system();
        assert_eq!(clock.advance(Duration::from_secs(1)), Err(ClockError::NotATestClock));
        assert!(!clock.is_test());
    }

    #[test]
    fn moves_out_of_range_are_refused() {
        let clock = Clock::test();
        assert!(matches!(
            clock.advance(Duration::from_secs(u64::MAX)),
            Err(ClockError::OutOfRange(_))
        ));
    }
}
