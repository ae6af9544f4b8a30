//! The tracing subscriber: JSON lines for Cloud Logging, or a readable format locally.
//!
//! Logging rules of this codebase: ids and outcomes only. Message text, reply
//! tokens, access tokens and secrets never go into a field or a message.

use crate::config::LogFormat;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Quiet defaults for the chatty transport crates; `RUST_LOG` overrides them.
const DEFAULT_FILTER: &str = "info,h2=warn,hyper=warn,tower=warn,firestore=warn,gcloud_sdk=warn";

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let registry = tracing_subscriber::registry().with(filter);
    // `try_init`: tests build several apps in one process; the first subscriber wins.
    let _ = match format {
        LogFormat::Json => registry.with(tracing_stackdriver::layer()).try_init(),
        LogFormat::Pretty => registry.with(tracing_subscriber::fmt::layer()).try_init(),
    };
}
