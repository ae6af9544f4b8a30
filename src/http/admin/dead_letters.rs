//! `GET /admin/dead-letters` lists what kept failing; `POST
//! /admin/dead-letters/{id}/replay` runs one again. A replayed event goes
//! through the guards like any other (an answer recorded meanwhile stops it); a
//! replayed outbound action is pushed with its original retry key.

use super::{AdminError, require_admin};
use crate::http::AppState;
use crate::outbound::Origin;
use crate::pipeline::stored_event;
use crate::store::{DeadLetterDoc, DeadLetterKind, InboxKey, Settlement};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use tracing::Instrument;

const MAX_LISTED: u32 = 100;

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    limit: Option<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    id: String,
    #[serde(flatten)]
    letter: DeadLetterDoc,
}

pub async fn list(
    request: HttpRequest,
    query: web::Query<ListQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require_admin(&request, &state)?;
    let limit = query.limit.unwrap_or(MAX_LISTED).clamp(1, MAX_LISTED);
    let letters = state.processor.store().dead_letters(limit).await?;
    let letters: Vec<Listed> = letters.into_iter().map(|(id, letter)| Listed { id, letter }).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "deadLetters": letters })))
}

pub async fn replay(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require_admin(&request, &state)?;
    let id = path.into_inner();
    let processor = &state.processor;
    let store = processor.store();
    let letter = store
        .dead_letter(&id)
        .await?
        .ok_or_else(|| AdminError::UnknownDeadLetter(id.clone()))?;
    let result = match letter.kind {
        DeadLetterKind::Event => {
            let key = InboxKey::from_document_id(letter.target_id.clone());
            store.revive_event(&key).await?;
            let record = store
                .event(&key)
                .await?
                .ok_or_else(|| AdminError::UnknownDeadLetter(id.clone()))?;
            let event = stored_event(&record).map_err(AdminError::BadRequest)?;
            let span = crate::pipeline::event_span(&event, &key);
            processor
                .process_event(&key, &event, 1)
                .instrument(span)
                .await?
                .as_str()
        }
        DeadLetterKind::Outbound | DeadLetterKind::UncertainReply => {
            store.revive_outbound(&letter.target_id).await?;
            let record = store
                .outbound(&letter.target_id)
                .await?
                .ok_or_else(|| AdminError::UnknownDeadLetter(id.clone()))?;
            match processor
                .courier()
                .deliver(&record.id, &record.doc, Origin::Fresh)
                .await
            {
                Settlement::Sent => "sent",
                Settlement::RetryAt { .. } => "retry_later",
                Settlement::Uncertain(_) => "uncertain",
                Settlement::Failed(_) => "failed",
            }
        }
    };
    store.remove_dead_letter(&id).await?;
    tracing::info!(dead_letter.id = %id, outcome = result, "dead letter replayed");
    Ok(HttpResponse::Ok().json(serde_json::json!({ "id": id, "result": result })))
}
