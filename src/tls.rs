//! The process's TLS crypto: rustls with ring, for every outgoing connection (LINE
//! through reqwest, Firestore through tonic, Google's token signing).
//!
//! The crates are built without a provider of their own (aws-lc-rs by default,
//! whose C build dominated a cold build), so one must be installed before the
//! first client is built. Each client constructor calls this; the first call wins
//! and later ones find it installed.

pub(crate) fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
