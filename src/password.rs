//! Operators' passwords: hashed with Argon2id (the `argon2` crate's
//! defaults, OWASP's minimum: 19 MiB, 2 passes, 1 lane) in the PHC string
//! format, which names its own parameters and salt, so a later change of
//! parameters still verifies older hashes.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};

/// The shortest password an operator may choose.
pub(crate) const MIN_LENGTH: usize = 12;
/// The longest: hashing is deliberately slow, so an endless password is refused.
pub(crate) const MAX_LENGTH: usize = 256;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum PasswordError {
    #[error("the password is shorter than {MIN_LENGTH} characters")]
    TooShort,
    #[error("the password is longer than {MAX_LENGTH} characters")]
    TooLong,
    #[error("the password could not be hashed: {0}")]
    Hashing(String),
}

/// A PHC string (`$argon2id$v=19$...`) of `password` with a fresh salt.
pub(crate) fn hash(password: &str) -> Result<String, PasswordError> {
    let length = password.chars().count();
    if length < MIN_LENGTH {
        return Err(PasswordError::TooShort);
    }
    if length > MAX_LENGTH {
        return Err(PasswordError::TooLong);
    }
    // 16 random bytes from the system's generator (through uuid's v4).
    let salt = SaltString::encode_b64(uuid::Uuid::new_v4().as_bytes())
        .map_err(|error| PasswordError::Hashing(error.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|hashed| hashed.to_string())
        .map_err(|error| PasswordError::Hashing(error.to_string()))
}

/// Whether `password` is the one `stored` was made from. A stored value that
/// is not a PHC string matches nothing.
pub(crate) fn verify(password: &str, stored: &str) -> bool {
    if password.chars().count() > MAX_LENGTH {
        return false;
    }
    PasswordHash::new(stored)
        .is_ok_and(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
}

/// A password to hand over once (printed by `operators add` and
/// `reset-password`): 24 characters from 120 random bits, in groups of four
/// so it can be read out.
pub(crate) fn one_time() -> String {
    let random = uuid::Uuid::new_v4().simple().to_string();
    // A v4 UUID holds 122 random bits; its 13th hex digit is the version.
    let digits: String = random
        .char_indices()
        .filter(|(index, _)| *index != 12)
        .map(|(_, digit)| digit)
        .take(24)
        .collect();
    digits
        .as_bytes()
        .chunks(4)
        .map(|chunk| String::from_utf8_lossy(chunk).into_owned())
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_own_password_only() {
        let stored = hash("correct horse battery").expect("hashed");
        assert!(stored.starts_with("$argon2id$v=19$"), "{stored}");
        assert!(!stored.contains("correct horse"));
        let cases = [
            ("correct horse battery", true),
            ("correct horse batter", false),
            ("Correct horse battery", false),
            ("", false),
        ];
        for (presented, matches) in cases {
            assert_eq!(verify(presented, &stored), matches, "{presented:?}");
        }
        // The same password twice: two salts, two hashes, both verify.
        let again = hash("correct horse battery").expect("hashed");
        assert_ne!(stored, again);
        assert!(verify("correct horse battery", &again));
    }

    #[test]
    fn lengths_are_bounded_and_garbage_matches_nothing() {
        assert_eq!(hash("short"), Err(PasswordError::TooShort));
        assert_eq!(hash(&"x".repeat(MAX_LENGTH + 1)), Err(PasswordError::TooLong));
        assert!(hash("パスワード十二文字以上です").is_ok(), "counted in characters");
        for stored in ["", "plain", "$argon2id$broken", "$2b$12$bcrypt"] {
            assert!(!verify("whatever password", stored), "{stored}");
        }
    }

    #[test]
    fn a_one_time_password_is_long_readable_and_fresh() {
        let first = one_time();
        assert_eq!(first.len(), 29, "{first}");
        assert_eq!(first.split('-').count(), 6);
        assert!(first.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert_ne!(first, one_time());
        assert!(hash(&first).is_ok());
    }
}
