//! Failed password logins per account (the typed email, known or not), in
//! memory per instance: each makes the next login for that email wait longer
//! ([`super::rules::login_delay`]), and a success clears them. Nothing locks:
//! the owner's right password still gets in, only later.

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

    /// How long a login for `email` waits now.
    pub(super) fn delay(&self, email: &str) -> Duration {
        let now = self.clock.now_ms();
        match self.accounts().get(email) {
            Some(failures) if now.saturating_sub(failures.last_ms) < WINDOW_MS => login_delay(failures.count),
            _ => Duration::ZERO,
        }
    }

    pub(super) fn failed(&self, email: &str) {
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
        entry.count = entry.count.saturating_add(1);
        entry.last_ms = now;
    }

    pub(super) fn succeeded(&self, email: &str) {
        self.accounts().remove(email);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_slow_one_account_until_a_success_or_the_window_passes() {
        let clock = Clock::test();
        let slowdown = Slowdown::new(clock.clone());
        assert_eq!(slowdown.delay("owner@shop.example"), Duration::ZERO);
        for _ in 0..3 {
            slowdown.failed("owner@shop.example");
        }
        assert_eq!(slowdown.delay("owner@shop.example"), Duration::from_secs(2));
        assert_eq!(slowdown.delay("staff@shop.example"), Duration::ZERO, "per account");
        slowdown.succeeded("owner@shop.example");
        assert_eq!(slowdown.delay("owner@shop.example"), Duration::ZERO);
        slowdown.failed("owner@shop.example");
        clock
            .advance(Duration::from_millis(u64::try_from(WINDOW_MS).unwrap()))
            .unwrap();
        assert_eq!(slowdown.delay("owner@shop.example"), Duration::ZERO, "forgotten");
        slowdown.failed("owner@shop.example");
        assert_eq!(
            slowdown.delay("owner@shop.example"),
            Duration::from_millis(500),
            "counted anew"
        );
    }
}
