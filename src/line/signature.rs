//! `X-Line-Signature`: base64(HMAC-SHA256(channel secret, raw request body)).
//!
//! Checked over the raw bytes before anything is parsed: re-serialising parsed JSON
//! would not reproduce LINE's bytes, and parsing unauthenticated input is needless risk.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the X-Line-Signature header is missing")]
    Missing,
    #[error("the X-Line-Signature header is empty")]
    Empty,
    #[error("the X-Line-Signature header is not valid base64 of a 32-byte digest")]
    Malformed,
    #[error("the X-Line-Signature header does not match the body")]
    Mismatch,
}

/// Verifies `header` against `body`. The final comparison runs in constant time
/// (`Mac::verify_slice`), so response timing reveals nothing about the expected digest.
pub fn verify(channel_secret: &[u8], body: &[u8], header: Option<&[u8]>) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let header = header.trim_ascii();
    if header.is_empty() {
        return Err(SignatureError::Empty);
    }
    let claimed = STANDARD.decode(header).map_err(|_| SignatureError::Malformed)?;
    if claimed.len() != 32 {
        return Err(SignatureError::Malformed);
    }
    #[allow(clippy::expect_used, reason = "HMAC takes a key of any length: this never fails")]
    let mut mac = HmacSha256::new_from_slice(channel_secret).expect("HMAC accepts keys of any length");
    mac.update(body);
    mac.verify_slice(&claimed).map_err(|_| SignatureError::Mismatch)
}

/// The header value LINE would send for `body`. Used by tests and local tools.
pub fn sign(channel_secret: &[u8], body: &[u8]) -> String {
    #[allow(clippy::expect_used, reason = "HMAC takes a key of any length: this never fails")]
    let mut mac = HmacSha256::new_from_slice(channel_secret).expect("HMAC accepts keys of any length");
    mac.update(body);
    STANDARD.encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"channel-secret";

    #[test]
    fn a_signature_made_with_the_secret_verifies() {
        let body = br#"{"destination":"U0","events":[]}"#;
        let header = sign(SECRET, body);
        assert_eq!(verify(SECRET, body, Some(header.as_bytes())), Ok(()));
    }

    #[test]
    fn a_changed_body_or_secret_is_a_mismatch() {
        let header = sign(SECRET, b"{}");
        assert_eq!(
            verify(SECRET, b"{ }", Some(header.as_bytes())),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"other", b"{}", Some(header.as_bytes())),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn missing_empty_and_malformed_headers_are_told_apart() {
        assert_eq!(verify(SECRET, b"{}", None), Err(SignatureError::Missing));
        assert_eq!(verify(SECRET, b"{}", Some(b"  ")), Err(SignatureError::Empty));
        assert_eq!(
            verify(SECRET, b"{}", Some(b"not base64!")),
            Err(SignatureError::Malformed)
        );
        assert_eq!(verify(SECRET, b"{}", Some(b"c2hvcnQ=")), Err(SignatureError::Malformed));
    }
}
