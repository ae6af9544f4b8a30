//! Password logins per account (the typed email, known or not), in memory
//! per instance: each attempt is counted as it starts and makes the next one
//! for that email wait longer ([`super::rules::login_delay`]); a success
//! clears the count. Counting at the start means logins sent in parallel
//! queue up behind each other instead of all waiting the same short time.
//! Nothing locks: the owner's right password still gets in, only later.

use super::rules::login_delay;
use crate::clock::Clock;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Failures older than this are forgotten.
const WINDOW_MS: i64 = 15 * 60 * 1000;
/// Accounts remembered at most; the stalest go first beyond it.
const MAX_TRACKED: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last_ms: i64,
}

pub(super) struct Slowdown {
    clock: Clock,
    accounts: Mutex<HashMap<String, Failures>>,
}

impl Slowdown {
    pub(super) fn new(clock: Clock) -> Self {
        Self {
            clock,
            accounts: Mutex::default(),
        }
    }

    fn accounts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failures>> {
        self.accounts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts an attempt for `email` as it starts: how long it waits first.
    pub(super) fn attempt(&self, email: &str) -> Duration {
        let now = self.clock.now_ms();
        let mut accounts = self.accounts();
        if accounts.len() >= MAX_TRACKED && !accounts.contains_key(email) {
            accounts.retain(|_, failures| now.saturating_sub(failures.last_ms) < WINDOW_MS);
            if accounts.len() >= MAX_TRACKED
                && let Some(stalest) = accounts
                    .iter()
                    .min_by_key(|(_, failures)| failures.last_ms)
                    .map(|(email, _)| email.clone())
            {
                accounts.remove(&stalest);
            }
        }
        let entry = accounts
            .entry(email.to_owned())
            .or_insert(Failures { count: 0, last_ms: now });
        if now.saturating_sub(entry.last_ms) >= WINDOW_MS {
            entry.count = 0;
        }
        let wait = login_delay(entry.count);
        entry.count = entry.count.saturating_add(1);
        entry.last_ms = now;
        wait
    }

    pub(super) fn succeeded(&self, email: &str) {
        self.accounts().remove(email);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_slow_one_account_until_a_success_or_the_window_passes() {
        let clock = Clock::test();
        let slowdown = Slowdown::new(clock.clone());
        let owner = "owner@shop.example";
        // Attempts sent at once wait longer and longer: they queue up.
        let waits: Vec<u128> = (0..4).map(|_| slowdown.attempt(owner).as_millis()).collect();
        assert_eq!(waits, [0, 500, 1_000, 2_000]);
        assert_eq!(slowdown.attempt("staff@shop.example"), Duration::ZERO, "per account");
        slowdown.succeeded(owner);
        assert_eq!(slowdown.attempt(owner), Duration::ZERO, "a success clears the count");
        clock
            .advance(Duration::from_millis(u64::try_from(WINDOW_MS).unwrap()))
            .unwrap();
        assert_eq!(slowdown.attempt(owner), Duration::ZERO, "forgotten after the window");
        assert_eq!(slowdown.attempt(owner), Duration::from_millis(500), "counted anew");
    }
}
