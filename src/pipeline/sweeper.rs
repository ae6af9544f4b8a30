//! Recovers work whose lease ran out: events a crashed (or failed) run left
//! pending, events stored while a queue was full, and outbound actions waiting
//! for another attempt. Every instance sweeps; an update-time precondition lets
//! exactly one take each record.
//!
//! The sweeper takes over no more records than this instance has idle workers,
//! and reserves their queue room first, so a record it takes starts at once (its
//! attempt counts only then) and never waits out its lease in a queue. Records
//! this instance already holds are never taken again. A record that cannot be
//! read is parked on its own; the sweep goes on for the others.

use super::work::Work;
use super::{EventJob, Job, OutboundJob, Pipeline, PipelineSettings};
use crate::store::{DeadLetterKind, InboxDoc, InboxKey, Store, StoreError, Stored, Swept};
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Records looked at per sweep and kind, at most.
const BATCH: usize = 64;

pub(super) async fn run(pipeline: Arc<Pipeline>, settings: PipelineSettings, shutdown: CancellationToken) {
    let mut interval = tokio::time::interval(settings.sweep_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        let mut budget = pipeline.idle_workers().min(BATCH);
        if budget == 0 {
            continue;
        }
        match sweep_events(&pipeline, &settings, budget).await {
            Ok(taken) => budget = budget.saturating_sub(taken),
            Err(error) => tracing::warn!(error = %error, "sweep of expired events failed"),
        }
        if budget == 0 {
            continue;
        }
        if let Err(error) = sweep_outbound(&pipeline, budget).await {
            tracing::warn!(error = %error, "sweep of pending outbound actions failed");
        }
    }
}

/// What to ask for: the records this instance holds show up too, and are skipped.
fn query_limit(pipeline: &Pipeline, budget: usize) -> u32 {
    u32::try_from((budget + pipeline.in_hand.len()).min(4 * BATCH)).unwrap_or(u32::MAX)
}

/// A swept record this instance may take over: readable (an unreadable one is
/// parked on its own) and not already held here.
async fn candidate<T>(
    pipeline: &Pipeline,
    kind: DeadLetterKind,
    swept: Swept<T>,
) -> Result<Option<Stored<T>>, StoreError> {
    match swept {
        Swept::Readable(record) if pipeline.in_hand.contains(&record.id) => Ok(None),
        Swept::Readable(record) => Ok(Some(record)),
        Swept::Unreadable { id, version, error } => {
            tracing::error!(record.id = %id, error = %error, outcome = "parked", "an unreadable record was parked");
            pipeline
                .processor
                .store()
                .park_unreadable(kind, &id, version, &error)
                .await?;
            Ok(None)
        }
    }
}

/// Takes over up to `budget` expired events; returns how many it took.
async fn sweep_events(pipeline: &Pipeline, settings: &PipelineSettings, budget: usize) -> Result<usize, StoreError> {
    let store = pipeline.processor.store();
    let mut taken = 0;
    for swept in store.expired_events(query_limit(pipeline, budget)).await? {
        let Some(record) = candidate(pipeline, DeadLetterKind::Event, swept).await? else {
            continue;
        };
        if taken >= budget {
            break;
        }
        let key = InboxKey::from_document_id(record.id.clone());
        if record.doc.attempts >= settings.max_event_attempts {
            let reason = record.doc.last_error.as_deref().unwrap_or("processing did not finish");
            let reason = format!("gave up after {} attempts: {reason}", record.doc.attempts);
            tracing::error!(inbox.id = key.as_str(), event.id = %record.doc.webhook_event_id, reason = %reason, outcome = "parked", "event parked as a dead letter");
            store.park_event(&key, record.version, &record.doc, &reason).await?;
            continue;
        }
        let work = match record.doc.plan.as_deref().map(Work::decode) {
            Some(Ok(work)) => work,
            Some(Err(reason)) => {
                park_plan(store, &key, &record, &reason).await?;
                continue;
            }
            None => {
                park_plan(store, &key, &record, "the stored event has no plan").await?;
                continue;
            }
        };
        // Stopping, or the queue filled up meanwhile: leave the rest.
        let Some(slot) = pipeline.try_reserve() else {
            break;
        };
        let lease_until = Instant::now() + store.lease();
        let Some(version) = store.take_over_event(&record).await? else {
            continue;
        };
        let attempt = record.doc.attempts + 1;
        tracing::info!(inbox.id = key.as_str(), event.id = %record.doc.webhook_event_id, attempt, "taking over an expired event");
        slot.send(Job::Event(EventJob {
            key,
            version,
            work,
            lease_until,
            attempt,
            claim_round_trips: None,
        }));
        taken += 1;
    }
    Ok(taken)
}

async fn park_plan(store: &Store, key: &InboxKey, record: &Stored<InboxDoc>, reason: &str) -> Result<(), StoreError> {
    tracing::error!(
        inbox.id = key.as_str(),
        reason,
        outcome = "parked",
        "an event without a readable plan was parked"
    );
    store.park_event(key, record.version, &record.doc, reason).await?;
    Ok(())
}

async fn sweep_outbound(pipeline: &Pipeline, budget: usize) -> Result<(), StoreError> {
    let store = pipeline.processor.store();
    let mut taken = 0;
    for swept in store.expired_outbound(query_limit(pipeline, budget)).await? {
        let Some(record) = candidate(pipeline, DeadLetterKind::Outbound, swept).await? else {
            continue;
        };
        if taken >= budget {
            break;
        }
        let Some(slot) = pipeline.try_reserve() else {
            break;
        };
        let Some(version) = store.take_over_outbound(&record).await? else {
            continue;
        };
        tracing::info!(ledger.id = %record.id, attempts = record.doc.attempts, "taking over a pending outbound action");
        slot.send(Job::Outbound(OutboundJob {
            id: record.id,
            doc: record.doc,
            version,
        }));
        taken += 1;
    }
    Ok(())
}
