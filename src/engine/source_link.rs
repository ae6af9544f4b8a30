//! Friend-add source links (`/r/{source}`), decided without I/O: the signed
//! `state` that carries the source and the nonce through LINE Login, and what
//! a verified login records.
//!
//! The state is self-contained (source, nonce, issue and expiry times, an
//! HMAC over them) so the flow survives a switch of browser: LINE's in-app
//! browser often hands the login over to the LINE app, which has none of the
//! first browser's cookies. It is used once: the commit that records the
//! visit creates a document named by its nonce.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub(crate) use crate::values::SourceStanding;

/// How long a link's login may take, from the tap on the link to LINE's
/// redirect back (LINE's own authorization code lives 10 minutes).
pub(crate) const STATE_LIFETIME_MS: i64 = 15 * 60 * 1000;
/// A follow this long before the link was opened still counts as one the
/// link brought (clocks of LINE and the service differ by this much at most).
pub(crate) const FOLLOW_SKEW_MS: i64 = 60 * 1000;
/// A state longer than this is not one the service issued.
const MAX_STATE_CHARS: usize = 512;

/// What the state says, once its signature and expiry are checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LinkState {
    #[serde(rename = "s")]
    pub(crate) source: String,
    #[serde(rename = "n")]
    pub(crate) nonce: String,
    /// When the link was opened (ms).
    #[serde(rename = "i")]
    pub(crate) issued_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StateError {
    #[error("the state is not one this service issued")]
    Forged,
    #[error("the link was opened too long ago")]
    Expired,
}

/// The key states are signed with, derived from the Login channel's secret
/// (never the secret itself, which also signs LINE's ID tokens).
pub(crate) fn state_key(login_channel_secret: &str) -> [u8; 32] {
    let mut mac = keyed(login_channel_secret.as_bytes());
    mac.update(b"line-survey source link state v1");
    mac.finalize().into_bytes().into()
}

fn keyed(key: &[u8]) -> Hmac<Sha256> {
    #[allow(clippy::expect_used, reason = "HMAC takes a key of any length: this never fails")]
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length")
}

fn signature(key: &[u8; 32], payload: &str) -> Vec<u8> {
    let mut mac = keyed(key);
    mac.update(payload.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// `payload.signature`, both base64url: safe in a query string.
pub(crate) fn issue_state(key: &[u8; 32], state: &LinkState) -> String {
    let json = serde_json::to_vec(state).unwrap_or_default();
    let payload = URL_SAFE_NO_PAD.encode(json);
    let signed = URL_SAFE_NO_PAD.encode(signature(key, &payload));
    format!("{payload}.{signed}")
}

/// The state's content, when it is one this service signed and it has not
/// expired at `now_ms`.
pub(crate) fn verify_state(key: &[u8; 32], token: &str, now_ms: i64) -> Result<LinkState, StateError> {
    if token.len() > MAX_STATE_CHARS {
        return Err(StateError::Forged);
    }
    let (payload, signed) = token.split_once('.').ok_or(StateError::Forged)?;
    let given = URL_SAFE_NO_PAD.decode(signed).map_err(|_| StateError::Forged)?;
    let mut mac = keyed(key);
    mac.update(payload.as_bytes());
    // Constant time: a guesser learns nothing from how long a refusal takes.
    mac.verify_slice(&given).map_err(|_| StateError::Forged)?;
    let json = URL_SAFE_NO_PAD.decode(payload).map_err(|_| StateError::Forged)?;
    let state: LinkState = serde_json::from_slice(&json).map_err(|_| StateError::Forged)?;
    if now_ms < state.issued_ms.saturating_sub(FOLLOW_SKEW_MS)
        || now_ms > state.issued_ms.saturating_add(STATE_LIFETIME_MS)
    {
        return Err(StateError::Expired);
    }
    Ok(state)
}

/// What a verified login records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VisitPlan {
    /// The first visit of this user through this source: the record, the
    /// source's tags, and `firstSource` if the user has none.
    pub(crate) first: bool,
    /// The standing recorded (a first visit only).
    pub(crate) standing: Option<SourceStanding>,
    /// The source's scenario is queued now (the user follows already).
    pub(crate) start_now: bool,
    /// Counted as a new friend of the source now.
    pub(crate) new_friend: bool,
}

/// Decides a verified login: `recorded` is what the store holds for this user
/// and source (`None`: nothing yet), `following` the user's record
/// (`Some(followed_ms)` while following), `friendship_changed` what LINE's
/// redirect said (`Some(false)`: this login added no friend).
pub(crate) fn plan_visit(
    recorded: Option<SourceStanding>,
    following: Option<i64>,
    friendship_changed: Option<bool>,
    issued_ms: i64,
    has_scenario: bool,
) -> VisitPlan {
    if recorded.is_some() {
        // A second visit is a login, nothing more: the first one recorded the
        // source and its standing, and the follow starts what waits.
        return VisitPlan {
            first: false,
            standing: None,
            start_now: false,
            new_friend: false,
        };
    }
    let standing = match following {
        None => SourceStanding::Waiting,
        // LINE says this login made no friend: the follow came before it.
        Some(_) if friendship_changed == Some(false) => SourceStanding::WasFriend,
        Some(followed_ms) if followed_ms >= issued_ms.saturating_sub(FOLLOW_SKEW_MS) => SourceStanding::Friend,
        Some(_) => SourceStanding::WasFriend,
    };
    VisitPlan {
        first: true,
        standing: Some(standing),
        start_now: has_scenario && standing != SourceStanding::Waiting,
        new_friend: standing == SourceStanding::Friend,
    }
}

/// How long after its event a follow may still be picked up and end its
/// wait (a queue, a retry): a login later than this queues its start itself.
pub(crate) const FOLLOW_PICKUP_MS: i64 = 60_000;

/// Where the user's follows stand on waiting for logins, as their record says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FollowWait {
    /// The newest follow (its event time, ms) that began waiting.
    pub(crate) opened: Option<i64>,
    /// The newest follow that stopped waiting.
    pub(crate) closed: Option<i64>,
}

/// Whether a login planned as `plan` leaves its scenario's start to the
/// follow (at `following`, ms) so it goes by that follow's reply instead of
/// its generic welcome: only for the friend the login made, and only while
/// that very follow waits (it opened its wait on the user's record and has
/// not closed it) and can still be picked up (`wait_ms` after it, and a
/// margin). A follow that never opened a wait (an instance with links off,
/// `SOURCE_WAIT_SECS=0`, a follow that took an earlier login) is left
/// nothing: the login queues its start itself.
pub(crate) fn follow_takes_start(
    plan: &VisitPlan,
    following: Option<i64>,
    wait: FollowWait,
    wait_ms: i64,
    now_ms: i64,
) -> Option<i64> {
    let followed_ms = following.filter(|followed| *followed > 0)?;
    let open = plan.start_now
        && plan.standing == Some(SourceStanding::Friend)
        && wait.opened == Some(followed_ms)
        && wait.closed.is_none_or(|closed| closed < followed_ms)
        && now_ms < followed_ms.saturating_add(wait_ms).saturating_add(FOLLOW_PICKUP_MS);
    open.then_some(followed_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> [u8; 32] {
        state_key("login-secret")
    }

    fn state() -> LinkState {
        LinkState {
            source: "instagram_dec".into(),
            nonce: "0123456789abcdef0123456789abcdef".into(),
            issued_ms: 1_000_000_000,
        }
    }

    #[test]
    fn a_state_verifies_until_it_expires() {
        let token = issue_state(&key(), &state());
        let issued = state().issued_ms;
        let cases = [
            (issued, Ok(state())),
            (issued + STATE_LIFETIME_MS, Ok(state())),
            (issued + STATE_LIFETIME_MS + 1, Err(StateError::Expired)),
            (issued - FOLLOW_SKEW_MS, Ok(state())),
            (issued - FOLLOW_SKEW_MS - 1, Err(StateError::Expired)),
        ];
        for (now, expected) in cases {
            assert_eq!(verify_state(&key(), &token, now), expected, "at {now}");
        }
    }

    #[test]
    fn a_changed_or_foreign_state_is_refused() {
        let token = issue_state(&key(), &state());
        let (payload, signed) = token.split_once('.').expect("two parts");
        let other_source = issue_state(
            &key(),
            &LinkState {
                source: "poster".into(),
                ..state()
            },
        );
        let (other_payload, _) = other_source.split_once('.').expect("two parts");
        let now = state().issued_ms;
        let cases = [
            ("another key".to_owned(), issue_state(&state_key("other"), &state())),
            ("payload swapped".to_owned(), format!("{other_payload}.{signed}")),
            ("no signature".to_owned(), payload.to_owned()),
            ("empty".to_owned(), String::new()),
            ("garbage".to_owned(), "!!!.???".to_owned()),
            ("truncated signature".to_owned(), format!("{payload}.{}", &signed[..10])),
            ("too long".to_owned(), format!("{token}{}", "A".repeat(600))),
        ];
        for (name, token) in cases {
            assert_eq!(verify_state(&key(), &token, now), Err(StateError::Forged), "{name}");
        }
    }

    #[test]
    fn a_visit_records_once_and_starts_only_for_a_friend() {
        let issued = 10_000_000;
        let cases = [
            // (recorded, following since, has scenario) -> (first, standing, start now, new friend)
            (None, None, true, (true, Some(SourceStanding::Waiting), false, false)),
            (
                None,
                Some(issued + 5),
                true,
                (true, Some(SourceStanding::Friend), true, true),
            ),
            (
                None,
                Some(issued - FOLLOW_SKEW_MS),
                true,
                (true, Some(SourceStanding::Friend), true, true),
            ),
            (
                None,
                Some(issued - FOLLOW_SKEW_MS - 1),
                true,
                (true, Some(SourceStanding::WasFriend), true, false),
            ),
            (
                None,
                Some(issued + 5),
                false,
                (true, Some(SourceStanding::Friend), false, true),
            ),
            (
                Some(SourceStanding::Waiting),
                Some(issued),
                true,
                (false, None, false, false),
            ),
            (
                Some(SourceStanding::Friend),
                Some(issued),
                true,
                (false, None, false, false),
            ),
            (Some(SourceStanding::WasFriend), None, true, (false, None, false, false)),
        ];
        for (recorded, following, has_scenario, (first, standing, start_now, new_friend)) in cases {
            let plan = plan_visit(recorded, following, None, issued, has_scenario);
            assert_eq!(
                plan,
                VisitPlan {
                    first,
                    standing,
                    start_now,
                    new_friend
                },
                "{recorded:?} {following:?} {has_scenario}"
            );
        }
        // What LINE's redirect says decides when it says the login made no friend.
        let changed = [
            (Some(true), Some(SourceStanding::Friend), true),
            (None, Some(SourceStanding::Friend), true),
            (Some(false), Some(SourceStanding::WasFriend), false),
        ];
        for (friendship_changed, standing, new_friend) in changed {
            let plan = plan_visit(None, Some(issued + 5), friendship_changed, issued, true);
            assert_eq!(
                (plan.standing, plan.new_friend, plan.start_now),
                (standing, new_friend, true)
            );
        }
        let waiting = plan_visit(None, None, Some(true), issued, true);
        assert_eq!(
            waiting.standing,
            Some(SourceStanding::Waiting),
            "the follow is not recorded yet"
        );
    }

    #[test]
    fn a_new_friends_start_is_left_to_the_waiting_follow_only_while_it_waits() {
        let issued = 10_000_000;
        let followed = issued + 5;
        let wait_ms = 8_000;
        let friend = plan_visit(None, Some(followed), Some(true), issued, true);
        let was_friend = plan_visit(None, Some(followed), Some(false), issued, true);
        let no_scenario = plan_visit(None, Some(followed), Some(true), issued, false);
        let waiting = plan_visit(None, None, Some(true), issued, true);
        let late = followed + wait_ms + FOLLOW_PICKUP_MS;
        let wait = |opened: Option<i64>, closed: Option<i64>| FollowWait { opened, closed };
        let open = wait(Some(followed), None);
        // (plan, following, wait, wait_ms, now) -> deferred to
        let cases = [
            (friend, Some(followed), open, wait_ms, followed + 1, Some(followed)),
            (
                friend,
                Some(followed),
                wait(Some(followed), Some(followed - 1)),
                wait_ms,
                followed + 1,
                Some(followed),
            ),
            (friend, Some(followed), open, wait_ms, late - 1, Some(followed)),
            // A follow that is not picked up again by now: the login queues.
            (friend, Some(followed), open, wait_ms, late, None),
            // Closed by this follow, or by a newer one.
            (
                friend,
                Some(followed),
                wait(Some(followed), Some(followed)),
                wait_ms,
                followed + 1,
                None,
            ),
            (
                friend,
                Some(followed),
                wait(Some(followed + 9), Some(followed + 9)),
                wait_ms,
                followed + 1,
                None,
            ),
            // This follow never opened a wait (links off on its instance, no
            // wait there, an older binary), or only an older follow did.
            (friend, Some(followed), wait(None, None), wait_ms, followed + 1, None),
            (
                friend,
                Some(followed),
                wait(Some(followed - 1), None),
                wait_ms,
                followed + 1,
                None,
            ),
            // The login's own instance waits 0: the follow's wait still counts.
            (friend, Some(followed), open, 0, followed + 1, Some(followed)),
            // The followers sync records no follow time.
            (friend, Some(0), wait(Some(0), None), wait_ms, followed + 1, None),
            (was_friend, Some(followed), open, wait_ms, followed + 1, None),
            (no_scenario, Some(followed), open, wait_ms, followed + 1, None),
            (waiting, None, open, wait_ms, followed + 1, None),
        ];
        for (plan, following, wait, wait_ms, now, expected) in cases {
            assert_eq!(
                follow_takes_start(&plan, following, wait, wait_ms, now),
                expected,
                "{plan:?} {following:?} {wait:?} {wait_ms} {now}"
            );
        }
    }
}
