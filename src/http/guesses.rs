//! A limit on wrong tokens per client address: after [`LIMIT`] failed checks
//! (a missing or wrong bearer token on `/admin` or `/metrics`, a wrong console
//! login) from one address within [`WINDOW`], that address gets 429 with
//! `Retry-After` for [`BLOCK`], whatever it sends. Kept per instance, in memory:
//! with N instances a guesser gets at most N x [`LIMIT`] tries per window,
//! against a token of at least 32 characters (the README says so).
//!
//! The client address is the last `X-Forwarded-For` entry (the one Cloud Run's
//! front end appends, which the client cannot forge), else the peer address.

use crate::clock::Clock;
use actix_web::HttpRequest;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Failed checks allowed per address and window.
pub(crate) const LIMIT: u32 = 10;
pub(crate) const WINDOW: Duration = Duration::from_secs(10 * 60);
pub(crate) const BLOCK: Duration = Duration::from_secs(15 * 60);
/// Addresses remembered at most; the oldest go first beyond it.
const MAX_TRACKED: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Record {
    /// When the address's current window began (ms).
    since_ms: i64,
    failures: u32,
    blocked_until_ms: Option<i64>,
}

pub(crate) struct Guesses {
    clock: Clock,
    records: Mutex<HashMap<String, Record>>,
}

/// A client that may not try now, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocked {
    pub(crate) retry_after: Duration,
}

/// `Retry-After` in whole seconds, rounded up (never 0).
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    u64::try_from(wait.as_millis().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl Guesses {
    pub(crate) fn new(clock: Clock) -> Self {
        Self {
            clock,
            records: Mutex::default(),
        }
    }

    /// The address a check is counted against.
    pub(crate) fn client(request: &HttpRequest) -> String {
        let forwarded = request
            .headers()
            .get_all("x-forwarded-for")
            .last()
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.rsplit(',').next())
            .map(str::trim)
            .filter(|entry| !entry.is_empty());
        match forwarded {
            Some(entry) => entry.chars().take(64).collect(),
            None => request
                .peer_addr()
                .map_or_else(|| "unknown".to_owned(), |peer| peer.ip().to_string()),
        }
    }

    /// Whether `client` is blocked now.
    pub(crate) fn blocked(&self, client: &str) -> Option<Blocked> {
        let now = self.clock.now_ms();
        let records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let until = records.get(client)?.blocked_until_ms?;
        (until > now).then(|| Blocked {
            retry_after: Duration::from_millis(u64::try_from(until - now).unwrap_or(0)),
        })
    }

    /// Counts a failed check; `Some` when it blocks the client now.
    pub(crate) fn failed(&self, client: &str) -> Option<Blocked> {
        let now = self.clock.now_ms();
        let mut records = self.records.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if records.len() >= MAX_TRACKED && !records.contains_key(client) {
            let stale = now.saturating_sub(millis(WINDOW).max(millis(BLOCK)));
            records.retain(|_, record| {
                record.since_ms > stale || record.blocked_until_ms.is_some_and(|until| until > now)
            });
            if records.len() >= MAX_TRACKED
                && let Some(oldest) = records
                    .iter()
                    .min_by_key(|(_, record)| record.since_ms)
                    .map(|(key, _)| key.clone())
            {
                records.remove(&oldest);
            }
        }
        let record = records.entry(client.to_owned()).or_insert(Record {
            since_ms: now,
            failures: 0,
            blocked_until_ms: None,
        });
        if now.saturating_sub(record.since_ms) >= millis(WINDOW) {
            *record = Record {
                since_ms: now,
                failures: 0,
                blocked_until_ms: record.blocked_until_ms.filter(|until| *until > now),
            };
        }
        record.failures = record.failures.saturating_add(1);
        if record.failures >= LIMIT && record.blocked_until_ms.is_none_or(|until| until <= now) {
            record.blocked_until_ms = Some(now.saturating_add(millis(BLOCK)));
            return Some(Blocked { retry_after: BLOCK });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_failures_in_the_window_block_for_fifteen_minutes() {
        let clock = Clock::test();
        let guesses = Guesses::new(clock.clone());
        for _ in 0..LIMIT - 1 {
            assert_eq!(guesses.failed("1.2.3.4"), None);
        }
        assert_eq!(guesses.blocked("1.2.3.4"), None, "nine failures: still trying");
        assert_eq!(guesses.failed("1.2.3.4"), Some(Blocked { retry_after: BLOCK }));
        assert!(guesses.blocked("1.2.3.4").is_some());
        assert_eq!(guesses.blocked("5.6.7.8"), None, "per address");
        clock.advance(BLOCK - Duration::from_secs(1)).unwrap();
        assert_eq!(
            guesses.blocked("1.2.3.4").map(|blocked| blocked.retry_after),
            Some(Duration::from_secs(1))
        );
        clock.advance(Duration::from_secs(1)).unwrap();
        assert_eq!(guesses.blocked("1.2.3.4"), None, "the block ends");
    }

    #[test]
    fn failures_spread_wider_than_the_window_do_not_add_up() {
        let clock = Clock::test();
        let guesses = Guesses::new(clock.clone());
        for _ in 0..LIMIT - 1 {
            assert_eq!(guesses.failed("a"), None);
        }
        clock.advance(WINDOW).unwrap();
        for _ in 0..LIMIT - 1 {
            assert_eq!(guesses.failed("a"), None, "a new window");
        }
        assert!(guesses.failed("a").is_some());
    }
}
