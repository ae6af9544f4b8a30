//! `GET /admin/dead-letters` lists what kept failing; `POST
//! /admin/dead-letters/{id}/replay` runs one again (see `pipeline::replay`).

use super::{AdminError, ListQuery, require_admin};
use crate::http::AppState;
use crate::pipeline::replay::{ReplayError, Replayed};
use crate::store::{DeadLetterDoc, Settlement};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    id: String,
    #[serde(flatten)]
    letter: DeadLetterDoc,
}

pub(crate) async fn list(
    request: HttpRequest,
    query: web::Query<ListQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require_admin(&request, &state)?;
    let limit = query.limit();
    let letters: Vec<Listed> = state
        .store
        .dead_letters(limit)
        .await?
        .into_iter()
        .map(|letter| Listed {
            id: letter.id,
            letter: letter.doc,
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "deadLetters": letters })))
}

pub(crate) async fn replay(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require_admin(&request, &state)?;
    let id = path.into_inner();
    let replayed = state.replayer.replay(&id).await.map_err(|error| match error {
        ReplayError::UnknownLetter(id) => AdminError::UnknownDeadLetter(id),
        ReplayError::NotParked(state) => AdminError::Conflict {
            message: format!("the record is no longer parked: it is {state}"),
            state,
        },
        ReplayError::NotReplayable(message) => AdminError::Conflict {
            message: message.to_owned(),
            state: "failed",
        },
        ReplayError::FailedAgain(reason) => {
            AdminError::Upstream(format!("the replay failed again and was parked: {reason}"))
        }
        ReplayError::Store(error) => AdminError::Store(error),
    })?;
    let result = match &replayed {
        Replayed::Event(processed) => processed.as_str(),
        Replayed::Outbound(settlement) => settlement.as_str(),
    };
    tracing::info!(dead_letter.id = %id, outcome = result, "dead letter replayed");
    match replayed {
        Replayed::Outbound(Settlement::Failed(reason) | Settlement::Uncertain(reason)) => Err(AdminError::Upstream(
            format!("LINE did not take the message; it was parked again: {reason}"),
        )),
        _ => Ok(HttpResponse::Ok().json(serde_json::json!({ "id": id, "result": result }))),
    }
}
