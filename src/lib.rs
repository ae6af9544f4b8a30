//! LINE survey scenario engine on Firestore.
//!
//! A request travels through the modules in this order:
//!
//! - [`http`]: actix routes. `POST /webhook` reads the raw body, checks the
//!   signature ([`line::signature`]) and parses the envelope ([`line::webhook`]).
//! - [`dispatch`]: per event, asks the [`engine`] for a decision (pure code over
//!   the loaded [`scenario`]s), claims the event in the [`store`]'s inbox, runs
//!   the guard, commits, then sends through [`outbound`] ([`line::client`]).
//! - [`config`], [`telemetry`] and [`startup`] build and run the whole.
//!
//! [`ids`] holds the id newtypes and the deterministic document ids the guards
//! rely on.

pub mod config;
pub mod dispatch;
pub mod engine;
pub mod http;
pub mod ids;
pub mod line;
pub mod outbound;
pub mod scenario;
pub mod startup;
pub mod store;
pub mod telemetry;
