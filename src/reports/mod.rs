//! Read models for operators: what the admin API, the console and `/metrics`
//! show. A floor beside `pipeline`: it reads through the store and never
//! writes, and it does not know the pipeline (the metrics scrape gets the queue
//! depth through a read-only handle built at start-up).
//!
//! - [`results`]: a scenario's funnel over a range of days, from the exact
//!   result counters.
//! - [`campaign_results`]: a campaign's recipients, answers, reminders,
//!   expiries and unfollows, counted by Firestore.
//! - [`export`]: a scenario's answers as CSV, streamed a page at a time.
//! - [`timeline`]: one user's events, answers, messages, dead letters and
//!   timers, newest first.
//! - [`users`]: one user's tags, fields, follow state and scenarios.
//! - [`scrape`]: the Prometheus text of `GET /metrics`.

pub(crate) mod answer_runs;
pub(crate) mod audit;
pub(crate) mod campaign_results;
pub(crate) mod export;
pub(crate) mod results;
pub(crate) mod scenario_graph;
pub(crate) mod scrape;
pub(crate) mod sources;
pub(crate) mod timeline;
pub(crate) mod user_data;
pub(crate) mod users;
