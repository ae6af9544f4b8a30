//! Integration tests: the real service, the real Firestore emulator (started by
//! `scripts/test.sh`) and a LINE stand-in. One test crate, so CI links once.
// Test and benchmark code may panic on what it set up itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod helpers;

mod actions;
mod admin;
mod audit;
mod bad_input;
mod branch;
mod campaign_quota;
mod campaign_runs;
mod campaign_schedule;
mod campaigns;
mod cli;
mod clock;
mod console;
mod console_campaigns;
mod console_send;
mod contract;
mod delivery;
mod duplicates;
mod errors;
mod export;
mod faults;
mod followers;
mod guards;
mod guesses;
mod hand_edits;
mod inbox;
mod indexes;
mod legacy_migration;
mod logs;
mod metrics;
mod notices;
mod operator_access;
mod operators;
mod outage;
mod outbound;
mod personal;
mod recovery;
mod results;
mod rich_menu_stand_in;
mod rich_menus;
mod round_trips;
mod rules;
mod scenario_graph;
mod scenarios;
mod source_results;
mod sources;
mod split;
mod steps;
mod timeline;
mod typed;
mod user_data;
mod user_search;
