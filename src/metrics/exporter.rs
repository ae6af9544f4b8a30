//! The Prometheus recorder behind the `metrics` facade.
//!
//! The facade records into one process-wide recorder. [`handle`] installs it the
//! first time it is called and returns the same handle ever after, so several
//! applications built in one process (the in-process tests) share it and never
//! fight over it: they all count into it. If some other recorder was installed
//! first, the service still starts; its `/metrics` then shows no series, and a
//! warning says why.

use super::series;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The handle of the process's Prometheus recorder, installed on first use.
pub(crate) fn handle() -> PrometheusHandle {
    HANDLE.get_or_init(install).clone()
}

fn install() -> PrometheusHandle {
    let builder = match PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &series::LATENCY_BUCKETS)
    {
        Ok(builder) => builder,
        // Only an empty bucket list is refused; ours is not.
        Err(error) => {
            tracing::warn!(error = %error, "latency buckets refused; latencies are summaries");
            PrometheusBuilder::new()
        }
    };
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    match ::metrics::set_global_recorder(recorder) {
        Ok(()) => series::describe(),
        Err(error) => {
            tracing::warn!(error = %error, "another metrics recorder is installed: /metrics shows no series");
        }
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorder_is_installed_once_and_shared() {
        let first = handle();
        let second = handle();
        series::duplicate_stopped(series::Guard::Inbox, "redelivered");
        let series = "line_survey_duplicates_stopped_total{guard=\"inbox\",reason=\"redelivered\"}";
        for text in [first.render(), second.render()] {
            assert!(text.contains(series), "{text}");
        }
    }
}
