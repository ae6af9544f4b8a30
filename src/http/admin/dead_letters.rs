//! `GET /admin/dead-letters` lists what kept failing; `POST
//! /admin/dead-letters/{id}/replay` runs one again (see `pipeline::replay`).

use super::{AdminError, ListQuery, audited, require, route_of};
use crate::access::audit::{Action, Via};
use crate::http::AppState;
use crate::pipeline::replay::{ReplayError, Replayed};
use crate::store::{DeadLetterDoc, Settlement};
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    id: String,
    #[serde(flatten)]
    letter: DeadLetterDoc,
}

pub(crate) async fn list(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    // Read only once the caller is known: a stranger learns nothing of it.
    let query: ListQuery = super::query_of(&request)?;
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

/// The replay's optional body: `{"force": true}` sends a message whose replay may
/// deliver it twice (the 409 said why).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    #[serde(default)]
    force: bool,
}

/// No body (or an empty one) is `{"force": false}`.
fn replay_request(body: &[u8]) -> Result<ReplayRequest, AdminError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(ReplayRequest::default());
    }
    let refused =
        |problem: String| AdminError::BadRequest(format!("the body must be {{\"force\": true}} or empty: {problem}"));
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|error| refused(error.to_string()))?;
    if !value.is_object() {
        return Err(refused("not a JSON object".to_owned()));
    }
    serde_json::from_value(value).map_err(|error| refused(error.to_string()))
}

pub(crate) async fn replay(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Editor).await?;
    let id = path.into_inner();
    let asked = replay_request(&body)?;
    let action = Action {
        via: Via::Api,
        name: "replay",
        route: route_of(&request),
        summary: vec![("force", asked.force.to_string())],
        touched: vec![id.clone()],
    };
    audited(&state, &actor, action, async {
        let replayed = state
            .replayer
            .replay(&id, asked.force)
            .await
            .map_err(|error| match error {
                ReplayError::UnknownLetter(id) => AdminError::UnknownDeadLetter(id),
                ReplayError::NotParked(state) => AdminError::Conflict {
                    message: format!("the record is no longer parked: it is {state}"),
                    state,
                },
                ReplayError::NeedsForce(risk) => AdminError::NeedsConfirmation {
                    reason: risk.as_str(),
                    message: risk.explain().to_owned(),
                },
                ReplayError::NotReplayable(message) => AdminError::Conflict {
                    message: message.to_owned(),
                    state: "failed",
                },
                ReplayError::FailedAgain(reason) => {
                    AdminError::Upstream(format!("the replay failed again and was parked: {reason}"))
                }
                ReplayError::Pipeline(error) => error.into(),
            })?;
        let result = match &replayed {
            Replayed::Event(processed) => processed.as_str(),
            Replayed::Outbound(settlement) => settlement.as_str(),
        };
        tracing::info!(dead_letter.id = %id, outcome = result, "dead letter replayed");
        match replayed {
            Replayed::Outbound(Settlement::Failed(reason) | Settlement::Uncertain(reason)) => Err(
                AdminError::Upstream(format!("LINE did not take the message; it was parked again: {reason}")),
            ),
            _ => Ok(HttpResponse::Ok().json(serde_json::json!({ "id": id, "result": result }))),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_body_is_empty_or_names_force() {
        let cases: [(&[u8], Option<bool>); 10] = [
            (b"", Some(false)),
            (b"  \n", Some(false)),
            (b"{}", Some(false)),
            (br#"{"force": true}"#, Some(true)),
            (br#"{"force": false}"#, Some(false)),
            (br#"{"force": "yes"}"#, None),
            (br#"{"forse": true}"#, None),
            (b"[true]", None),
            (b"[]", None),
            (b"true", None),
        ];
        for (body, expected) in cases {
            assert_eq!(
                replay_request(body).ok().map(|asked| asked.force),
                expected,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
