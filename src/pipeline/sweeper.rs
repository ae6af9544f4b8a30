//! Recovers work whose lease ran out: events a crashed (or failed) run left
//! pending, and outbound actions waiting for another attempt. Every instance
//! sweeps; an update-time precondition lets exactly one take each record.

use super::{Job, PipelineSettings, Processor};
use crate::line::webhook::{Event, EventParse};
use crate::store::{InboxDoc, InboxKey, Leased, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Records looked at per sweep and kind; the rest wait for the next sweep.
const BATCH: u32 = 64;

pub async fn run(
    processor: Arc<Processor>,
    jobs: mpsc::Sender<Job>,
    settings: PipelineSettings,
    shutdown: CancellationToken,
) {
    let mut interval = tokio::time::interval(settings.sweep_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        // Only take what the queue can hold now: a taken lease we cannot work on
        // would only delay the record until the lease runs out again.
        let room = u32::try_from(jobs.capacity()).unwrap_or(u32::MAX).min(BATCH);
        if room == 0 {
            continue;
        }
        if let Err(error) = sweep_events(&processor, &jobs, &settings, room).await {
            tracing::warn!(error = %error, "sweep of expired events failed");
        }
        if let Err(error) = sweep_outbound(&processor, &jobs, room).await {
            tracing::warn!(error = %error, "sweep of pending outbound actions failed");
        }
    }
}

async fn sweep_events(
    processor: &Processor,
    jobs: &mpsc::Sender<Job>,
    settings: &PipelineSettings,
    limit: u32,
) -> Result<(), StoreError> {
    let store = processor.store();
    for record in store.expired_events(limit).await? {
        // Stopping: leave the rest to the other instances.
        if jobs.is_closed() {
            return Ok(());
        }
        let key = InboxKey::from_document_id(record.id.clone());
        if record.doc.attempts >= settings.max_event_attempts {
            let reason = record.doc.last_error.as_deref().unwrap_or("processing did not finish");
            let reason = format!("gave up after {} attempts: {reason}", record.doc.attempts);
            tracing::error!(inbox.id = key.as_str(), event.id = %record.doc.webhook_event_id, reason = %reason, outcome = "parked", "event parked as a dead letter");
            store.park_event(&key, &record.doc, &reason).await?;
            continue;
        }
        if !store.take_over_event(&record).await? {
            continue;
        }
        if record.doc.text_removed {
            // The user unsent the message before it was processed: drop it.
            tracing::info!(
                inbox.id = key.as_str(),
                outcome = "text_removed",
                "unsent message not processed"
            );
            store.mark_event_done(&key).await?;
            continue;
        }
        tracing::info!(inbox.id = key.as_str(), event.id = %record.doc.webhook_event_id, attempts = record.doc.attempts + 1, "taking over an expired event");
        match stored_event(&record) {
            Ok(event) => {
                if jobs
                    .try_send(Job::Event {
                        key: key.clone(),
                        event: Box::new(event),
                        claim_round_trips: None,
                        attempt: record.doc.attempts + 1,
                    })
                    .is_err()
                {
                    // The queue closed (shutdown) or filled up since the sweep began:
                    // give the lease straight back rather than sit on it.
                    store.release_event(&key, Duration::ZERO, None).await?;
                }
            }
            Err(reason) => store.park_event(&key, &record.doc, &reason).await?,
        }
    }
    Ok(())
}

async fn sweep_outbound(processor: &Processor, jobs: &mpsc::Sender<Job>, limit: u32) -> Result<(), StoreError> {
    let store = processor.store();
    for record in store.expired_outbound(limit).await? {
        if jobs.is_closed() {
            return Ok(());
        }
        if store.take_over_outbound(&record).await? {
            tracing::info!(ledger.id = %record.id, attempts = record.doc.attempts, "taking over a pending outbound action");
            if let Err(refused) = jobs.try_send(Job::Outbound {
                record: Box::new(record),
            }) {
                processor.hand_back(refused.into_inner()).await;
            }
        }
    }
    Ok(())
}

/// The event as stored with its inbox record.
pub fn stored_event(record: &Leased<InboxDoc>) -> Result<Event, String> {
    let payload = record.doc.payload.as_deref().ok_or("the stored event has no payload")?;
    let raw: serde_json::Value =
        serde_json::from_str(payload).map_err(|error| format!("stored payload unreadable: {error}"))?;
    match Event::parse(&raw) {
        EventParse::Parsed(event) => Ok(*event),
        EventParse::Malformed { reason, .. } => Err(format!("stored event unreadable: {reason}")),
    }
}
