//! Every Prometheus series the service exports at `GET /metrics`, in one place:
//! names, labels and label values, and the functions that record them (through
//! the `metrics` facade, so any layer may call them). The README lists them.
//!
//! Label values come from closed sets (`&'static str`) or from numbers (HTTP
//! statuses): nothing a user sends can grow the number of series.

use std::time::Duration;

/// Webhook events at the request path: `kind` (LINE's event type), `outcome`
/// (`stored`, `duplicate`, `ignored`, `unsent_before_effect`,
/// `unsent_after_effect`, `not_stored`, `malformed`).
pub(crate) const WEBHOOK_EVENTS: &str = "line_survey_webhook_events_total";
/// Events stored while this instance's queue had no room (full, stopping or
/// ingest-only): acknowledged, and left for a sweep instead of a worker. `kind`.
pub(crate) const EVENTS_UNQUEUED: &str = "line_survey_events_unqueued_total";
/// Processing attempts of stored events by this instance's workers: `kind`,
/// `outcome` (the worker's log outcome: `answered`, `already_answered`,
/// `started`, `not_restarted`, `recently_started`, `card_tapped`, ... or
/// `failed`, `superseded`, `waiting`).
pub(crate) const EVENTS_PROCESSED: &str = "line_survey_events_processed_total";
/// Duplicates stopped: `guard` (`inbox`, `answer`, `card_tap`, `trigger`),
/// `reason` (`redelivered`, `already_answered`, `recently_started`).
pub(crate) const DUPLICATES_STOPPED: &str = "line_survey_duplicates_stopped_total";
/// Firestore round trips, a histogram of seconds: `operation` (`commit`,
/// `batch_write`, `batch_get`, `query`, `count`), `outcome` (`ok`, `conflict`:
/// a precondition or `ALREADY_EXISTS` refused a commit, `error`).
pub(crate) const FIRESTORE_ROUND_TRIPS: &str = "line_survey_firestore_round_trip_seconds";
/// LINE API calls, a histogram of seconds: `endpoint` (`reply`, `push`,
/// `multicast`), `status` (the HTTP status, `timeout` or `error`).
pub(crate) const LINE_CALLS: &str = "line_survey_line_api_call_seconds";
/// Ledger entries not yet settled (the whole database).
pub(crate) const LEDGER_PENDING: &str = "line_survey_ledger_pending";
/// Age of the oldest pending ledger entry, 0 when none is pending.
pub(crate) const LEDGER_OLDEST_PENDING_AGE: &str = "line_survey_ledger_oldest_pending_age_seconds";
/// Dead letters waiting for an operator.
pub(crate) const DEAD_LETTERS: &str = "line_survey_dead_letters";
/// Inbox records waiting to be processed (the whole database).
pub(crate) const INBOX_PENDING: &str = "line_survey_inbox_pending";
/// Jobs waiting in this instance's memory: `queue` (`events`, `sends`, `timers`).
pub(crate) const QUEUE_DEPTH: &str = "line_survey_queue_depth";
/// Reads of the four gauges above that failed (the gauges keep their values).
pub(crate) const BACKLOG_READ_FAILURES: &str = "line_survey_backlog_read_failures_total";
/// Campaign chunks settled by this instance: `outcome` (`sent`, `failed`,
/// `skipped`, `retry_later`).
pub(crate) const CAMPAIGN_CHUNKS: &str = "line_survey_campaign_chunks_total";
/// Users of the campaign chunks settled by this instance: `outcome` as above.
pub(crate) const CAMPAIGN_RECIPIENTS: &str = "line_survey_campaign_recipients_total";

/// Visits of source links (`GET /r/{source}`) sent on to LINE Login: `source`
/// (an id of `SOURCES_FILE`: a closed set). Not written to Firestore, so
/// crawlers and link previews cost nothing.
pub(crate) const SOURCE_LINK_VISITS: &str = "line_survey_source_link_visits_total";
/// Source links' callbacks: `outcome` (`recorded`, `cancelled`, `bad_state`,
/// `replayed`, `login_refused`, `failed`).
pub(crate) const SOURCE_LOGINS: &str = "line_survey_source_logins_total";

/// Histogram buckets of both latency histograms, in seconds: from a get on the
/// emulator (about 1 ms) to LINE's default timeout (5 s).
pub(crate) const LATENCY_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Firestore outcomes.
pub(crate) const OK: &str = "ok";
pub(crate) const CONFLICT: &str = "conflict";
pub(crate) const ERROR: &str = "error";

/// LINE's webhook event types, as the `kind` label; anything else is `other`.
const EVENT_KINDS: [&str; 20] = [
    "message",
    "postback",
    "follow",
    "unfollow",
    "unsend",
    "join",
    "leave",
    "memberJoined",
    "memberLeft",
    "beacon",
    "accountLink",
    "things",
    "videoPlayComplete",
    "membership",
    "module",
    "activated",
    "deactivated",
    "botSuspended",
    "botResumed",
    "delivery",
];

/// The `kind` label of an event type: one of LINE's types, else `other`.
pub(crate) fn event_kind(type_name: &str) -> &'static str {
    EVENT_KINDS
        .iter()
        .find(|kind| **kind == type_name)
        .copied()
        .unwrap_or("other")
}

/// Which guard stopped a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// A redelivered `webhookEventId`: the inbox `create` found its record.
    Inbox,
    /// Guard 1: the answer's `create` met `ALREADY_EXISTS`.
    Answer,
    /// Guard 2: a Flex card tap of a scenario answered or started just now.
    CardTap,
    /// Guard 3: a text or follow trigger of a scenario answered or started just now.
    Trigger,
}

impl Guard {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Guard::Inbox => "inbox",
            Guard::Answer => "answer",
            Guard::CardTap => "card_tap",
            Guard::Trigger => "trigger",
        }
    }
}

pub(crate) fn webhook_event(type_name: &str, outcome: &'static str) {
    ::metrics::counter!(WEBHOOK_EVENTS, "kind" => event_kind(type_name), "outcome" => outcome).increment(1);
}

pub(crate) fn event_unqueued(type_name: &str) {
    ::metrics::counter!(EVENTS_UNQUEUED, "kind" => event_kind(type_name)).increment(1);
}

pub(crate) fn event_processed(type_name: &str, outcome: &'static str) {
    ::metrics::counter!(EVENTS_PROCESSED, "kind" => event_kind(type_name), "outcome" => outcome).increment(1);
}

pub(crate) fn duplicate_stopped(guard: Guard, reason: &'static str) {
    ::metrics::counter!(DUPLICATES_STOPPED, "guard" => guard.as_str(), "reason" => reason).increment(1);
}

pub(crate) fn firestore_round_trip(operation: &'static str, outcome: &'static str, took: Duration) {
    ::metrics::histogram!(FIRESTORE_ROUND_TRIPS, "operation" => operation, "outcome" => outcome).record(took);
}

/// The `endpoint` label of a LINE API path.
pub(crate) fn line_endpoint(path: &str) -> &'static str {
    match path.rsplit('/').next() {
        Some("reply") => "reply",
        Some("push") => "push",
        Some("multicast") => "multicast",
        _ => "other",
    }
}

/// The `status` label of a LINE call: its HTTP status, or how it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineStatus {
    Http(u16),
    Timeout,
    Error,
}

impl LineStatus {
    fn label(self) -> std::borrow::Cow<'static, str> {
        match self {
            LineStatus::Http(status) => status.to_string().into(),
            LineStatus::Timeout => "timeout".into(),
            LineStatus::Error => "error".into(),
        }
    }
}

pub(crate) fn line_call(path: &str, status: LineStatus, took: Duration) {
    ::metrics::histogram!(LINE_CALLS, "endpoint" => line_endpoint(path), "status" => status.label()).record(took);
}

/// What the backlog read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BacklogGauges {
    pub(crate) ledger_pending: u64,
    pub(crate) ledger_oldest_pending_age: Duration,
    pub(crate) dead_letters: u64,
    pub(crate) inbox_pending: u64,
}

pub(crate) fn backlog(gauges: BacklogGauges) {
    ::metrics::gauge!(LEDGER_PENDING).set(gauges.ledger_pending as f64);
    ::metrics::gauge!(LEDGER_OLDEST_PENDING_AGE).set(gauges.ledger_oldest_pending_age.as_secs_f64());
    ::metrics::gauge!(DEAD_LETTERS).set(gauges.dead_letters as f64);
    ::metrics::gauge!(INBOX_PENDING).set(gauges.inbox_pending as f64);
}

pub(crate) fn backlog_read_failed() {
    ::metrics::counter!(BACKLOG_READ_FAILURES).increment(1);
}

/// Jobs waiting in this instance's memory, per queue (the `queue` label of
/// `line_survey_queue_depth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueDepths {
    pub(crate) events: usize,
    pub(crate) sends: usize,
    pub(crate) timers: usize,
}

pub(crate) fn queue_depth(depths: QueueDepths) {
    let QueueDepths { events, sends, timers } = depths;
    ::metrics::gauge!(QUEUE_DEPTH, "queue" => "events").set(events as f64);
    ::metrics::gauge!(QUEUE_DEPTH, "queue" => "sends").set(sends as f64);
    ::metrics::gauge!(QUEUE_DEPTH, "queue" => "timers").set(timers as f64);
}

pub(crate) fn campaign_chunk(outcome: &'static str, users: u32) {
    ::metrics::counter!(CAMPAIGN_CHUNKS, "outcome" => outcome).increment(1);
    ::metrics::counter!(CAMPAIGN_RECIPIENTS, "outcome" => outcome).increment(u64::from(users));
}

pub(crate) fn source_link_visit(source: &str) {
    ::metrics::counter!(SOURCE_LINK_VISITS, "source" => source.to_owned()).increment(1);
}

pub(crate) fn source_login(outcome: &'static str) {
    ::metrics::counter!(SOURCE_LOGINS, "outcome" => outcome).increment(1);
}

/// Help texts shown with each series.
pub(crate) fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        WEBHOOK_EVENTS,
        "Webhook events at the request path, by LINE event type and outcome"
    );
    describe_counter!(
        EVENTS_PROCESSED,
        "Processing attempts of stored events by this instance, by LINE event type and outcome"
    );
    describe_counter!(
        EVENTS_UNQUEUED,
        "Events stored without room in this instance's queue, left for a sweep"
    );
    describe_counter!(DUPLICATES_STOPPED, "Duplicate events stopped, by guard and reason");
    describe_histogram!(
        FIRESTORE_ROUND_TRIPS,
        Unit::Seconds,
        "Firestore round trips, by operation and outcome"
    );
    describe_histogram!(LINE_CALLS, Unit::Seconds, "LINE API calls, by endpoint and status");
    describe_gauge!(LEDGER_PENDING, "Outbound ledger entries not yet settled");
    describe_gauge!(
        LEDGER_OLDEST_PENDING_AGE,
        Unit::Seconds,
        "Age of the oldest pending outbound ledger entry"
    );
    describe_gauge!(DEAD_LETTERS, "Dead letters waiting for an operator");
    describe_gauge!(INBOX_PENDING, "Inbox records waiting to be processed");
    describe_gauge!(QUEUE_DEPTH, "Jobs waiting in this instance's queues");
    describe_counter!(BACKLOG_READ_FAILURES, "Failed reads of the backlog gauges");
    describe_counter!(CAMPAIGN_CHUNKS, "Campaign chunks settled by this instance, by outcome");
    describe_counter!(
        SOURCE_LINK_VISITS,
        "Source link visits sent on to LINE Login, by source"
    );
    describe_counter!(SOURCE_LOGINS, "Source link callbacks, by outcome");
    describe_counter!(
        CAMPAIGN_RECIPIENTS,
        "Users of the campaign chunks settled by this instance, by outcome"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_are_lines_types_or_other() {
        let cases = [
            ("message", "message"),
            ("postback", "postback"),
            ("memberJoined", "memberJoined"),
            ("unsend", "unsend"),
            ("Message", "other"),
            ("", "other"),
            ("a-new-type-from-line", "other"),
        ];
        for (type_name, kind) in cases {
            assert_eq!(event_kind(type_name), kind, "{type_name:?}");
        }
    }

    #[test]
    fn line_endpoints_are_named_by_the_paths_last_segment() {
        let cases = [
            ("/v2/bot/message/reply", "reply"),
            ("/v2/bot/message/push", "push"),
            ("/v2/bot/message/multicast", "multicast"),
            ("/v2/bot/message/broadcast", "other"),
            ("", "other"),
        ];
        for (path, endpoint) in cases {
            assert_eq!(line_endpoint(path), endpoint, "{path:?}");
        }
    }

    #[test]
    fn line_statuses_label_as_the_status_or_the_failure() {
        let cases = [
            (LineStatus::Http(200), "200"),
            (LineStatus::Http(409), "409"),
            (LineStatus::Timeout, "timeout"),
            (LineStatus::Error, "error"),
        ];
        for (status, label) in cases {
            assert_eq!(status.label(), label, "{status:?}");
        }
    }
}
