//! LINE user ids as the log shows them: by default a keyed hash, so a log that
//! leaves the project (an export, a support ticket, a third-party sink) names no
//! user, while an operator can still find one user's lines: the timeline shows
//! the same hash beside the id.
//!
//! The hash is the first 12 hex digits of HMAC-SHA256 over the id, keyed with a
//! key derived from the channel secret (HMAC-SHA256 of a fixed label under the
//! secret), so it is stable across instances and restarts of one channel, differs
//! between channels, and cannot be reversed by hashing candidate ids without the
//! secret. `LOG_USER_IDS=plain` logs the ids as they are.
//!
//! The log is process-wide (one tracing subscriber), and so is this setting: the
//! first service built in a process installs it.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fmt;
use std::sync::OnceLock;

type HmacSha256 = Hmac<Sha256>;

/// Hex digits of the hash shown: 48 bits, enough to tell apart the users of one
/// account (a clash needs about 16 million users) and short enough to read.
const HASH_HEX_DIGITS: usize = 12;

/// Separates this key from every other use of the channel secret.
const KEY_LABEL: &[u8] = b"line-survey log user ids v1";

/// How user ids appear in the log (`LOG_USER_IDS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogUserIds {
    /// The keyed hash (the default).
    Hashed,
    /// The ids as they are (`LOG_USER_IDS=plain`), for a project whose logs stay
    /// with the people who may see its users.
    Plain,
}

/// Hashes user ids with the channel's key.
#[derive(Clone)]
pub struct UserIdHasher {
    key: [u8; 32],
}

impl fmt::Debug for UserIdHasher {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("UserIdHasher(..)")
    }
}

impl UserIdHasher {
    pub fn new(channel_secret: &str) -> Self {
        let mut mac = keyed(channel_secret.as_bytes());
        mac.update(KEY_LABEL);
        Self {
            key: mac.finalize().into_bytes().into(),
        }
    }

    /// The 12 hex digits the log shows for `user`.
    pub fn hash(&self, user: &str) -> String {
        let mut mac = keyed(&self.key);
        mac.update(user.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut shown = hex::encode(&digest[..HASH_HEX_DIGITS / 2]);
        shown.truncate(HASH_HEX_DIGITS);
        shown
    }
}

fn keyed(key: &[u8]) -> HmacSha256 {
    #[allow(clippy::expect_used, reason = "HMAC takes a key of any length: this never fails")]
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// What the process logs: `None` for plain ids.
static LOG_HASHER: OnceLock<Option<UserIdHasher>> = OnceLock::new();

/// Sets how this process logs user ids. The first call wins (tests build several
/// services of one channel in one process).
pub fn install(mode: LogUserIds, hasher: &UserIdHasher) {
    let _ = LOG_HASHER.set(match mode {
        LogUserIds::Hashed => Some(hasher.clone()),
        LogUserIds::Plain => None,
    });
}

/// A user id for a log field: `user.id = %logged(user)`.
pub fn logged(user: &str) -> Logged<'_> {
    Logged(user)
}

/// Displays a user id as the installed setting says. Before any service installed
/// one (a command-line tool), ids are hidden: nothing was chosen, so nothing is
/// shown.
pub struct Logged<'a>(&'a str);

impl fmt::Display for Logged<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match LOG_HASHER.get() {
            Some(Some(hasher)) => formatter.write_str(&hasher.hash(self.0)),
            Some(None) => formatter.write_str(self.0),
            None => formatter.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_twelve_hex_digits_stable_per_channel_and_differs_between_channels() {
        let user = "U0123456789abcdef0123456789abcdef";
        let one = UserIdHasher::new("secret-one");
        let other = UserIdHasher::new("secret-two");
        let shown = one.hash(user);
        assert_eq!(shown.len(), 12);
        assert!(shown.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(
            shown,
            UserIdHasher::new("secret-one").hash(user),
            "stable for one channel"
        );
        assert_ne!(shown, other.hash(user), "another channel's key gives another hash");
        assert_ne!(shown, one.hash("U0123456789abcdef0123456789abcdee"), "another user");
        assert!(!shown.contains("0123456789ab"), "no part of the id shows");
    }

    #[test]
    fn the_key_is_not_the_channel_secret_itself() {
        // A hash made with the bare secret as the key would let anyone holding
        // the secret for another purpose match log lines; the label separates them.
        let user = "U0123456789abcdef0123456789abcdef";
        let mut bare = keyed(b"secret-one");
        bare.update(user.as_bytes());
        let bare = hex::encode(&bare.finalize().into_bytes()[..6]);
        assert_ne!(UserIdHasher::new("secret-one").hash(user), bare);
    }
}
