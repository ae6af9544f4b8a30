//! HTTP routes only: the LINE webhook, the operators' admin API and the health
//! check. Each route hands its work to an explicit service: of the pipeline
//! when it changes something, of the reports (or a plain store read, for a
//! list) when it only reads.

pub(crate) mod admin;
pub(crate) mod clock;
pub(crate) mod console;
pub(crate) mod guesses;
pub(crate) mod health;
pub(crate) mod prometheus;
pub(crate) mod routes;
pub(crate) mod sources;
pub(crate) mod webhook;

use crate::metrics::Metrics;
use crate::pipeline::campaigns::Campaigns;
use crate::pipeline::ingest::Ingest;
use crate::pipeline::manual_send::ManualSender;
use crate::pipeline::replay::Replayer;
use crate::pipeline::timer_cancel::TimerCancels;
use crate::reports::export::Exporter;
use crate::reports::results::Results;
use crate::reports::scrape::Scrape;
use crate::reports::timeline::Timelines;
use crate::store::Store;
use std::sync::Arc;

/// The services the routes use.
pub(crate) struct AppState {
    pub(crate) ingest: Ingest,
    pub(crate) manual_sender: ManualSender,
    pub(crate) campaigns: Campaigns,
    /// Operators' links of a rich menu to an audience.
    pub(crate) menu_links: crate::pipeline::rich_menu_links::MenuLinks,
    /// Friend-add source links (`/r/*`): `None` when their settings are not set.
    pub(crate) source_links: Option<crate::pipeline::sources::SourceLinks>,
    pub(crate) sources_report: Option<crate::reports::sources::SourcesReport>,
    pub(crate) follower_sync: crate::pipeline::follower_sync::FollowerSync,
    pub(crate) replayer: Replayer,
    pub(crate) results: Results,
    /// Loaded scenarios drawn as graphs, with `check`'s problems.
    pub(crate) scenario_graphs: crate::reports::scenario_graph::ScenarioGraphs,
    pub(crate) campaign_results: crate::reports::campaign_results::CampaignResultsReport,
    pub(crate) exporter: Exporter,
    /// The answers page's rows: a user's run each, newest first.
    pub(crate) answer_runs: crate::reports::answer_runs::AnswerRuns,
    pub(crate) timelines: Timelines,
    pub(crate) user_profiles: crate::reports::users::UserProfiles,
    /// Operators' changes of a user's tags and fields by hand.
    pub(crate) user_edits: crate::pipeline::hand_edits::UserEdits,
    /// One user's data, exported and erased by owners.
    pub(crate) user_data: crate::reports::user_data::UserDataReport,
    pub(crate) user_erasure: crate::pipeline::user_data::UserErasure,
    /// Receipts of the console's confirmation forms (a resent form does nothing again).
    pub(crate) form_receipts: crate::pipeline::form_receipts::FormReceipts,
    /// Operators' cancels of users' timers.
    pub(crate) timer_cancels: TimerCancels,
    /// Read-only uses: dead-letter lists and batch counts.
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    /// The Prometheus exposition of `GET /metrics`.
    pub(crate) scrape: Scrape,
    pub(crate) channel_secret: String,
    /// The console's CSRF and message signatures are keyed by it.
    pub(crate) admin_token: Option<String>,
    /// Logins, console sessions and API tokens: who a request is, as what role.
    pub(crate) access: crate::access::Access,
    /// The audit log's entries of operators' actions.
    pub(crate) auditor: crate::access::audit::Auditor,
    /// The audit log, read by owners.
    pub(crate) audit_report: crate::reports::audit::AuditReport,
    /// The service's clock: console sessions expire by it, and with
    /// `CLOCK=test` `POST /__clock` moves it.
    pub(crate) clock: crate::clock::Clock,
    /// Wrong tokens per client address (admin, metrics, console login).
    pub(crate) guesses: guesses::Guesses,
    /// The language of the console's pages.
    pub(crate) console_lang: crate::values::ConsoleLang,
}

/// The JSON error body every route uses: `{"error": "..."}`.
pub(crate) fn error_body(message: impl std::fmt::Display) -> serde_json::Value {
    serde_json::json!({ "error": message.to_string() })
}
