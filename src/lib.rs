//! LINE survey scenario engine on Firestore.
//!
//! The floors of the house, each importing only those below it:
//!
//! - [`line`], [`ids`], [`values`] and [`clock`]: the LINE protocol
//!   (signature, webhook and message types, client), the id newtypes with the
//!   deterministic ids the guards rely on, [`log_ids`] (how the log shows a
//!   user id), the recorded answer's value type
//!   (shared by scenarios and the store), and the clock every window reads.
//! - [`scenario`]: scenario files, loaded and checked at start.
//! - `engine`: pure decisions, no I/O: what an event means, and whether a
//!   guarded start goes ahead.
//! - `store`: Firestore only. Versions and preconditions, never engine plans.
//! - `outbound`: actions, their ledger entries and retry keys, and the courier
//!   that sends them.
//! - `pipeline`: the one place that orchestrates decide -> commit -> send: the
//!   request path (ingest), the workers, the sweeper, manual sends and replays.
//! - `reports`: beside `pipeline`, never importing it: read models for
//!   operators (results, CSV export, a user's timeline, the `/metrics` scrape).
//!   They read through the store and never write.
//! - `http`: routes only.
//!
//! [`config`], [`telemetry`] and [`startup`] build and run the whole.

mod access;
pub mod cli;
pub mod clock;
pub mod config;
mod engine;
mod http;
pub mod ids;
pub mod line;
pub mod log_ids;
mod metrics;
mod outbound;
mod password;
mod pipeline;
mod reports;
pub mod scenario;
pub mod startup;
mod store;
pub mod telemetry;
mod tls;
pub mod values;

/// A path inside the checkout, for tests. Read from the environment at run time
/// (cargo and nextest set `CARGO_MANIFEST_DIR` for the tests they run), not baked
/// in at compile time: CI's target directory outlives the clone, and a build made
/// in another checkout must not point the tests at that one's files.
#[cfg(test)]
pub(crate) fn repo_path(relative: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        )
        .join(relative)
}
