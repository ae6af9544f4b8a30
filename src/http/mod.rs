//! HTTP routes: the LINE webhook, the operators' admin API and the health check.

pub mod admin;
pub mod health;
pub mod webhook;

use crate::ingest::Ingest;
use crate::pipeline::Processor;
use std::sync::Arc;

/// Shared by every route.
pub struct AppState {
    pub ingest: Ingest,
    pub processor: Arc<Processor>,
    pub channel_secret: String,
    pub admin_token: Option<String>,
}

/// The JSON error body every route uses: `{"error": "..."}`.
pub fn error_body(message: impl std::fmt::Display) -> serde_json::Value {
    serde_json::json!({ "error": message.to_string() })
}
