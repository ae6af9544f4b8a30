//! `GET /admin/users/{id}/timers` lists a user's scheduled steps, reminders and
//! expiries; `DELETE /admin/users/{id}/timers/{timerId}` cancels one that has
//! not fired.

use super::{AdminError, audited, require, route_of};
use crate::access::audit::{Action, Via};
use crate::http::AppState;
use crate::ids::{DocumentHexId, LineUserId};
use crate::pipeline::timer_cancel::TimerCancelError;
use crate::store::{Stored, TimerDoc};
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

/// Timers looked at per user, at most.
const MAX_LISTED: u32 = 500;

#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    /// Also list timers that fired, were skipped or cancelled.
    #[serde(default)]
    all: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    timer_id: String,
    kind: &'static str,
    scenario_id: String,
    scenario_version: u32,
    node_id: String,
    run: String,
    /// RFC 3339, UTC.
    due_at: String,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<String>,
    reminders: u32,
}

impl From<Stored<TimerDoc>> for Listed {
    fn from(timer: Stored<TimerDoc>) -> Self {
        let due_at = chrono::DateTime::from_timestamp_millis(timer.doc.due_at.as_millisecond())
            .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default();
        Self {
            timer_id: timer.id,
            kind: timer.doc.kind.as_str(),
            scenario_id: timer.doc.scenario_id,
            scenario_version: timer.doc.scenario_version,
            node_id: timer.doc.node_id,
            run: timer.doc.run,
            due_at,
            state: timer.doc.state.as_str(),
            outcome: timer.doc.outcome,
            reminders: timer.doc.reminders,
        }
    }
}

fn user_id(raw: String) -> Result<LineUserId, AdminError> {
    LineUserId::parse_line_shaped(raw).map_err(|shape| AdminError::BadRequest(shape.to_owned()))
}

pub(crate) async fn list(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    // Read only once the caller is known: a stranger learns nothing of it.
    let query: ListQuery = super::query_of(&request)?;
    let user = user_id(path.into_inner())?;
    let timers: Vec<Listed> = state
        .store
        .user_timers(user.as_str(), !query.all, MAX_LISTED)
        .await?
        .into_iter()
        .map(Listed::from)
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "userId": user.as_str(), "timers": timers })))
}

pub(crate) async fn cancel(
    request: HttpRequest,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Editor).await?;
    let (user, timer_id) = path.into_inner();
    let user = user_id(user)?;
    // Anything but a timer id's shape names no timer.
    let id = DocumentHexId::parse(&timer_id).ok_or_else(|| AdminError::UnknownTimer(timer_id.clone()))?;
    let action = Action {
        via: Via::Api,
        name: "timer_cancel",
        route: route_of(&request),
        summary: Vec::new(),
        touched: vec![user.as_str().to_owned(), id.as_str().to_owned()],
    };
    audited(&state, &actor, action, async {
        state.timer_cancels.cancel(&user, &id).await.map_err(cancel_error)?;
        Ok(HttpResponse::Ok().json(serde_json::json!({ "timerId": id.as_str(), "state": "cancelled" })))
    })
    .await
}

/// The statuses of today's route: 404, 409 with the timer's state, 503.
fn cancel_error(error: TimerCancelError) -> AdminError {
    let message = error.to_string();
    match error {
        TimerCancelError::NotFound(id) => AdminError::UnknownTimer(id),
        TimerCancelError::NotPending(state) => AdminError::Conflict { message, state },
        TimerCancelError::KeptChanging => AdminError::Conflict {
            message,
            state: "pending",
        },
        TimerCancelError::Pipeline(error) => error.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::ResponseError;
    use actix_web::http::StatusCode;

    #[test]
    fn each_cancel_failure_keeps_its_status() {
        let cases = [
            (TimerCancelError::NotFound("a".repeat(40)), StatusCode::NOT_FOUND, None),
            (TimerCancelError::NotPending("done"), StatusCode::CONFLICT, Some("done")),
            (TimerCancelError::KeptChanging, StatusCode::CONFLICT, Some("pending")),
            (
                TimerCancelError::from(crate::store::StoreError::Unavailable("timed out".into())),
                StatusCode::SERVICE_UNAVAILABLE,
                None,
            ),
        ];
        for (error, status, conflict_state) in cases {
            let name = format!("{error:?}");
            let mapped = cancel_error(error);
            assert_eq!(mapped.status_code(), status, "{name}");
            let state = match &mapped {
                AdminError::Conflict { state, .. } => Some(*state),
                _ => None,
            };
            assert_eq!(state, conflict_state, "{name}");
        }
    }
}
