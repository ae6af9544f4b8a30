//! Console sessions and CSRF tokens, signed with a key derived from
//! `ADMIN_TOKEN`: no session store, so every instance accepts a login made on
//! another, and changing the token ends every session.
//!
//! - A session cookie is `{expires}.{nonce}.{mac}`: its expiry (Unix seconds)
//!   is signed, so it cannot be extended.
//! - A form's CSRF token is a MAC of the session's nonce: a page of this
//!   session can post, another site cannot read it (and the cookie is
//!   `SameSite=Strict` besides).
//! - The login form, before any session, pairs a random cookie with a MAC of it
//!   in the form (a signed double submit).

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

pub(crate) const SESSION_COOKIE: &str = "console_session";
pub(crate) const LOGIN_COOKIE: &str = "console_login";

/// The signing key of one `ADMIN_TOKEN`.
#[derive(Clone)]
pub(crate) struct Keys {
    key: Vec<u8>,
}

/// A session that checked out: its nonce names its CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    nonce: String,
}

impl Keys {
    pub(crate) fn new(admin_token: &str) -> Self {
        let mut digest = Sha256::new();
        digest.update(b"line-survey console\0");
        digest.update(admin_token.as_bytes());
        Self {
            key: digest.finalize().to_vec(),
        }
    }

    fn mac(&self, parts: &[&str]) -> String {
        // A key of any length is accepted by HMAC; this one is 32 bytes.
        let Ok(mut mac) = HmacSha256::new_from_slice(&self.key) else {
            return String::new();
        };
        for part in parts {
            mac.update(part.as_bytes());
            mac.update(b"\0");
        }
        hex::encode(mac.finalize().into_bytes())
    }

    /// A new session cookie value, valid until `expires` (Unix seconds).
    pub(crate) fn new_session(&self, expires: i64) -> String {
        let nonce = random_nonce();
        let expires = expires.to_string();
        let mac = self.mac(&["session", &expires, &nonce]);
        format!("{expires}.{nonce}.{mac}")
    }

    /// The session of a cookie value, if it is signed by this key and has not
    /// expired at `now` (Unix seconds).
    pub(crate) fn session(&self, cookie: &str, now: i64) -> Option<Session> {
        let mut parts = cookie.split('.');
        let (expires, nonce, mac) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || !equal(&self.mac(&["session", expires, nonce]), mac) {
            return None;
        }
        (expires.parse::<i64>().ok()? > now).then(|| Session {
            nonce: nonce.to_owned(),
        })
    }

    /// The CSRF token of a session's forms.
    pub(crate) fn csrf(&self, session: &Session) -> String {
        self.mac(&["csrf", &session.nonce])
    }

    pub(crate) fn csrf_matches(&self, session: &Session, presented: &str) -> bool {
        equal(&self.csrf(session), presented)
    }

    /// A login form's pair, valid until `expires` (Unix seconds): the cookie
    /// value and the form's token.
    pub(crate) fn new_login(&self, expires: i64) -> (String, String) {
        let cookie = format!("{expires}.{}", random_nonce());
        let token = self.mac(&["login", &cookie]);
        (cookie, token)
    }

    /// Whether a login form's token belongs to its cookie, which has not
    /// expired at `now`.
    pub(crate) fn login_matches(&self, cookie: &str, presented: &str, now: i64) -> bool {
        let fresh = cookie
            .split_once('.')
            .and_then(|(expires, _)| expires.parse::<i64>().ok())
            .is_some_and(|expires| expires > now);
        fresh && equal(&self.mac(&["login", cookie]), presented)
    }

    /// A signature for a message shown after a redirect, so a crafted link
    /// cannot show its own text as the console's.
    pub(crate) fn sign_message(&self, ok: bool, message: &str) -> String {
        self.mac(&["message", if ok { "ok" } else { "bad" }, message])
    }

    pub(crate) fn message_matches(&self, ok: bool, message: &str, presented: &str) -> bool {
        equal(&self.sign_message(ok, message), presented)
    }

    /// Whether `presented` is the admin token this key was made from, compared
    /// in constant time (as digests, so the length does not show either).
    pub(crate) fn is_admin_token(&self, presented: &str) -> bool {
        equal(&Keys::new(presented).mac(&["token"]), &self.mac(&["token"]))
    }
}

fn equal(expected: &str, presented: &str) -> bool {
    let (expected, presented) = (Sha256::digest(expected), Sha256::digest(presented));
    expected.ct_eq(&presented).into()
}

fn random_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_holds_until_it_expires_and_only_with_its_own_signature() {
        let keys = Keys::new("secret");
        let cookie = keys.new_session(1_000);
        let (expires, rest) = cookie.split_once('.').unwrap();
        let cases: [(String, i64, bool); 8] = [
            (cookie.clone(), 999, true),
            (cookie.clone(), 1_000, false),
            (cookie.clone(), 5_000, false),
            // Extended by hand: the signature no longer matches.
            (format!("9{expires}.{rest}"), 999, false),
            (format!("{cookie}x"), 999, false),
            (format!("{cookie}.extra"), 999, false),
            ("".to_owned(), 0, false),
            ("1.2".to_owned(), 0, false),
        ];
        for (value, now, valid) in cases {
            assert_eq!(keys.session(&value, now).is_some(), valid, "{value} at {now}");
        }
        assert!(
            Keys::new("other").session(&cookie, 999).is_none(),
            "another token's key"
        );
    }

    #[test]
    fn csrf_tokens_belong_to_one_session() {
        let keys = Keys::new("secret");
        let one = keys.session(&keys.new_session(10), 0).unwrap();
        let two = keys.session(&keys.new_session(10), 0).unwrap();
        let token = keys.csrf(&one);
        assert!(keys.csrf_matches(&one, &token));
        assert!(!keys.csrf_matches(&two, &token));
        assert!(!keys.csrf_matches(&one, ""));
        assert!(!Keys::new("other").csrf_matches(&one, &token));
    }

    #[test]
    fn a_login_form_token_matches_only_its_cookie_until_it_expires() {
        let keys = Keys::new("secret");
        let (cookie, token) = keys.new_login(100);
        assert!(keys.login_matches(&cookie, &token, 99));
        assert!(!keys.login_matches(&cookie, &token, 100), "expired");
        let (other_cookie, _) = keys.new_login(100);
        assert!(!keys.login_matches(&other_cookie, &token, 0));
        assert!(!keys.login_matches("", &keys.mac(&["login", ""]), 0));
        let (_, rest) = cookie.split_once('.').unwrap();
        let extended = format!("999.{rest}");
        assert!(!keys.login_matches(&extended, &token, 99), "the expiry is signed");
    }

    #[test]
    fn messages_shown_after_a_redirect_are_signed() {
        let keys = Keys::new("secret");
        let signature = keys.sign_message(true, "Replayed x: sent.");
        assert!(keys.message_matches(true, "Replayed x: sent.", &signature));
        assert!(!keys.message_matches(false, "Replayed x: sent.", &signature));
        assert!(!keys.message_matches(true, "Replayed y: sent.", &signature));
        assert!(!Keys::new("other").message_matches(true, "Replayed x: sent.", &signature));
    }

    #[test]
    fn only_the_admin_token_logs_in() {
        let keys = Keys::new("secret");
        for (presented, accepted) in [("secret", true), ("Secret", false), ("secret ", false), ("", false)] {
            assert_eq!(keys.is_admin_token(presented), accepted, "{presented:?}");
        }
    }
}
