//! Integration tests: the real service, the real Firestore emulator (started by
//! `scripts/test.sh`) and a LINE stand-in. One test crate, so CI links once.

mod helpers;

mod admin;
mod bad_input;
mod contract;
mod duplicates;
mod guards;
mod outbound;
mod rules;
mod scenarios;
