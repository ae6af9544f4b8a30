//! Pure decisions of the console's access: whether a stored session still
//! holds, and how long a login for an account waits after failed ones.

use crate::values::OperatorRole;
use std::time::Duration;

/// A session's `lastSeenMs` is moved on at most this often (one write a
/// minute per open console, whatever it clicks), and more often only for an
/// idle limit under four minutes: a quarter of it, so a busy session never
/// ends idle.
pub(crate) const TOUCH_EVERY_MS: i64 = 60_000;

fn touch_every(idle_ms: i64) -> i64 {
    TOUCH_EVERY_MS.min(idle_ms / 4).max(1)
}

/// What a stored session says, with what is true now of whoever opened it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionFacts {
    pub(crate) created_ms: i64,
    pub(crate) expires_ms: i64,
    pub(crate) last_seen_ms: i64,
    pub(crate) opened_by: OpenedBy,
}

/// Who opened a session, as they stand now.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OpenedBy {
    /// The admin token; `false` once `ADMIN_TOKEN` changed.
    AdminToken { still_the_token: bool },
    /// An operator: its current record, `None` when it is gone.
    Operator(Option<OperatorNow>),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct OperatorNow {
    pub(crate) role: OperatorRole,
    pub(crate) disabled: bool,
    /// When the operator's password was last reset (ms): sessions opened
    /// before it end.
    pub(crate) password_changed_ms: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionCheck {
    /// Valid with this role; `touch`: refresh `lastSeenMs`.
    Valid {
        role: OperatorRole,
        touch: bool,
    },
    Ended(EndedBecause),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndedBecause {
    Expired,
    Idle,
    TokenChanged,
    OperatorGone,
    OperatorDisabled,
    PasswordChanged,
}

impl EndedBecause {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EndedBecause::Expired => "expired",
            EndedBecause::Idle => "idle",
            EndedBecause::TokenChanged => "token_changed",
            EndedBecause::OperatorGone => "operator_gone",
            EndedBecause::OperatorDisabled => "operator_disabled",
            EndedBecause::PasswordChanged => "password_changed",
        }
    }
}

/// Whether a session holds at `now_ms`, with `idle_ms` of inactivity and a
/// lifetime of `lifetime_ms` allowed (the lifetime as set now: a shorter
/// setting shortens sessions already open).
pub(crate) fn check_session(facts: SessionFacts, now_ms: i64, idle_ms: i64, lifetime_ms: i64) -> SessionCheck {
    if now_ms >= facts.expires_ms.min(facts.created_ms.saturating_add(lifetime_ms)) {
        return SessionCheck::Ended(EndedBecause::Expired);
    }
    if now_ms.saturating_sub(facts.last_seen_ms) >= idle_ms {
        return SessionCheck::Ended(EndedBecause::Idle);
    }
    let role = match facts.opened_by {
        OpenedBy::AdminToken { still_the_token: false } => return SessionCheck::Ended(EndedBecause::TokenChanged),
        OpenedBy::AdminToken { still_the_token: true } => OperatorRole::Owner,
        OpenedBy::Operator(None) => return SessionCheck::Ended(EndedBecause::OperatorGone),
        OpenedBy::Operator(Some(OperatorNow { disabled: true, .. })) => {
            return SessionCheck::Ended(EndedBecause::OperatorDisabled);
        }
        OpenedBy::Operator(Some(OperatorNow {
            password_changed_ms: Some(changed),
            ..
        })) if changed > facts.created_ms => return SessionCheck::Ended(EndedBecause::PasswordChanged),
        OpenedBy::Operator(Some(OperatorNow { role, .. })) => role,
    };
    SessionCheck::Valid {
        role,
        touch: now_ms.saturating_sub(facts.last_seen_ms) >= touch_every(idle_ms),
    }
}

/// The longest a login waits for its account's earlier failures.
pub(crate) const MAX_LOGIN_DELAY: Duration = Duration::from_secs(8);

/// How long a login for an account waits, after `failures` recent wrong
/// passwords for it: nothing at first, then half a second doubling up to
/// [`MAX_LOGIN_DELAY`]. It slows a guesser down and never locks the owner
/// out: the right password still gets in, only later.
pub(crate) fn login_delay(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        failures => {
            let doublings = (failures - 1).min(16);
            Duration::from_millis(500u64 << doublings).min(MAX_LOGIN_DELAY)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OperatorRole::{Editor, Owner, Viewer};

    const IDLE: i64 = 3_600_000;
    const LIFETIME: i64 = 100_000_000;

    fn operator(role: OperatorRole, disabled: bool) -> OpenedBy {
        OpenedBy::Operator(Some(OperatorNow {
            role,
            disabled,
            password_changed_ms: None,
        }))
    }

    #[test]
    fn a_session_holds_only_while_fresh_active_and_its_opener_still_may() {
        let token = OpenedBy::AdminToken { still_the_token: true };
        // (expires, last seen, opened by, now) -> check
        let cases = [
            (
                10_000_000,
                0,
                token,
                1_000,
                SessionCheck::Valid {
                    role: Owner,
                    touch: false,
                },
            ),
            (
                10_000_000,
                0,
                token,
                60_000,
                SessionCheck::Valid {
                    role: Owner,
                    touch: true,
                },
            ),
            (
                10_000_000,
                0,
                operator(Viewer, false),
                59_999,
                SessionCheck::Valid {
                    role: Viewer,
                    touch: false,
                },
            ),
            (
                10_000_000,
                0,
                operator(Editor, false),
                100,
                SessionCheck::Valid {
                    role: Editor,
                    touch: false,
                },
            ),
            (
                10_000_000,
                0,
                token,
                IDLE - 1,
                SessionCheck::Valid {
                    role: Owner,
                    touch: true,
                },
            ),
            (10_000_000, 0, token, IDLE, SessionCheck::Ended(EndedBecause::Idle)),
            (5_000, 4_000, token, 5_000, SessionCheck::Ended(EndedBecause::Expired)),
            (
                5_000,
                4_000,
                token,
                4_999,
                SessionCheck::Valid {
                    role: Owner,
                    touch: false,
                },
            ),
            (
                10_000_000,
                0,
                OpenedBy::AdminToken { still_the_token: false },
                1,
                SessionCheck::Ended(EndedBecause::TokenChanged),
            ),
            (
                10_000_000,
                0,
                OpenedBy::Operator(None),
                1,
                SessionCheck::Ended(EndedBecause::OperatorGone),
            ),
            (
                10_000_000,
                0,
                operator(Owner, true),
                1,
                SessionCheck::Ended(EndedBecause::OperatorDisabled),
            ),
            // Expiry wins over everything else, idleness over the opener.
            (
                5_000,
                0,
                operator(Owner, true),
                IDLE + 10,
                SessionCheck::Ended(EndedBecause::Expired),
            ),
            (
                10_000_000,
                0,
                operator(Owner, true),
                IDLE,
                SessionCheck::Ended(EndedBecause::Idle),
            ),
        ];
        for (expires_ms, last_seen_ms, opened_by, now, expected) in cases {
            let facts = SessionFacts {
                created_ms: 0,
                expires_ms,
                last_seen_ms,
                opened_by,
            };
            assert_eq!(
                check_session(facts, now, IDLE, LIFETIME),
                expected,
                "{facts:?} at {now}"
            );
        }
    }

    #[test]
    fn a_shorter_lifetime_setting_ends_sessions_opened_under_a_longer_one() {
        let facts = SessionFacts {
            created_ms: 1_000,
            expires_ms: 1_000 + LIFETIME,
            last_seen_ms: 50_000,
            opened_by: OpenedBy::AdminToken { still_the_token: true },
        };
        assert_eq!(
            check_session(facts, 61_000, IDLE, 60_000),
            SessionCheck::Ended(EndedBecause::Expired)
        );
        assert!(matches!(
            check_session(facts, 60_999, IDLE, 60_000),
            SessionCheck::Valid { .. }
        ));
    }

    #[test]
    fn a_busy_session_is_refreshed_before_a_short_idle_limit_ends_it() {
        // (idle limit, since last seen) -> touched
        let cases = [
            (IDLE, 59_999, false),
            (IDLE, 60_000, true),
            (60_000, 14_999, false),
            (60_000, 15_000, true),
            (120_000, 30_000, true),
        ];
        for (idle, since, touched) in cases {
            let facts = SessionFacts {
                created_ms: 0,
                expires_ms: LIFETIME,
                last_seen_ms: 0,
                opened_by: OpenedBy::AdminToken { still_the_token: true },
            };
            assert_eq!(
                check_session(facts, since, idle, LIFETIME),
                SessionCheck::Valid {
                    role: Owner,
                    touch: touched
                },
                "idle {idle}, {since} ms since"
            );
        }
    }

    #[test]
    fn a_login_waits_longer_after_each_failure_up_to_a_bound() {
        let cases = [
            (0, 0),
            (1, 500),
            (2, 1_000),
            (3, 2_000),
            (4, 4_000),
            (5, 8_000),
            (6, 8_000),
            (40, 8_000),
            (u32::MAX, 8_000),
        ];
        for (failures, millis) in cases {
            assert_eq!(login_delay(failures), Duration::from_millis(millis), "{failures}");
        }
    }
}
