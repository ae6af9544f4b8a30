//! LINE survey scenario engine on Firestore.
//!
//! A request travels through the modules in this order:
//!
//! - [`http`]: actix routes. `POST /webhook` reads the raw body, checks the
//!   signature ([`line::signature`]) and parses the envelope ([`line::webhook`]).
//! - [`ingest`]: per event, asks the [`engine`] for a decision (pure code over
//!   the loaded [`scenario`]s) and stores each event that can have an effect in
//!   the [`store`]'s inbox; LINE gets its 200 once all are stored.
//! - [`pipeline`]: workers off the request path run the guard, commit the effect
//!   with its [`outbound`] ledger entry in one atomic commit, then send through
//!   the courier ([`line::client`]); a sweeper recovers work whose lease ran out.
//! - [`config`], [`telemetry`] and [`startup`] build and run the whole.
//!
//! [`ids`] holds the id newtypes and the deterministic document ids the guards
//! rely on.

pub mod config;
pub mod engine;
pub mod http;
pub mod ids;
pub mod ingest;
pub mod line;
pub mod metrics;
pub mod outbound;
pub mod pipeline;
pub mod scenario;
pub mod startup;
pub mod store;
pub mod telemetry;
