//! The console's CSRF tokens and signed messages, with a key derived from
//! `ADMIN_TOKEN`. Sessions themselves are records on the server (see
//! `crate::access`); the cookie holds only their random id.
//!
//! - A form's CSRF token is a MAC of the session cookie's value: a page of
//!   this session can post, another site cannot read it (and the cookie is
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

/// A session's cookie value, which names its CSRF token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    nonce: String,
}

impl Session {
    pub(crate) fn of_cookie(value: &str) -> Self {
        Self {
            nonce: value.to_owned(),
        }
    }
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

    /// The CSRF token of a session's forms.
    pub(crate) fn csrf(&self, session: &Session) -> String {
        self.mac(&["csrf", &session.nonce])
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
}

/// Whether a presented token is the expected one, in constant time.
pub(crate) fn same_token(expected: &str, presented: &str) -> bool {
    equal(expected, presented)
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
    fn csrf_tokens_belong_to_one_session() {
        let keys = Keys::new("secret");
        let one = Session::of_cookie("one");
        let two = Session::of_cookie("two");
        let token = keys.csrf(&one);
        assert!(same_token(&keys.csrf(&one), &token));
        assert!(!same_token(&keys.csrf(&two), &token));
        assert!(!same_token(&keys.csrf(&one), ""));
        assert!(!same_token(&Keys::new("other").csrf(&one), &token));
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
}
