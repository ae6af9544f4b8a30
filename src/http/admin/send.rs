//! `POST /admin/scenarios/{scenarioId}/send`: starts a scenario for listed users
//! (see `pipeline::manual_send`). The `Idempotency-Key` is generated when absent
//! and echoed back; reusing one with a different body gets 422.

use super::{AdminError, answered, require, route_of};
use crate::access::audit::{Action, Via};
use crate::http::AppState;
use crate::ids::{LineUserId, ScenarioId, is_line_user_id};
use crate::pipeline::manual_send::ManualSendError;
use crate::values::OperatorRole;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};

/// Bounds one call's fan-out; larger audiences belong in several calls.
const MAX_USERS_PER_SEND: usize = 500;
const MAX_IDEMPOTENCY_KEY_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SendRequest {
    user_ids: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SendResponse {
    scenario_id: String,
    idempotency_key: String,
    sent: usize,
    failed: usize,
    results: Vec<UserResult>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct UserResult {
    user_id: String,
    /// `sent`, `already_sent` (an earlier call with this key sent it), `logged`
    /// (dry run), `retry_later` (retried by the service) or `failed`.
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(super) fn idempotency_key(request: &HttpRequest) -> Result<String, AdminError> {
    match request.headers().get("idempotency-key") {
        None => Ok(uuid::Uuid::new_v4().to_string()),
        Some(value) => {
            let key = value
                .to_str()
                .map_err(|_| AdminError::BadRequest("Idempotency-Key must be visible ASCII".into()))?
                .trim();
            if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_CHARS {
                return Err(AdminError::BadRequest(format!(
                    "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters"
                )));
            }
            Ok(key.to_owned())
        }
    }
}

fn parse_users(body: &[u8]) -> Result<Vec<LineUserId>, AdminError> {
    let request: SendRequest = serde_json::from_slice(body).map_err(|error| {
        AdminError::BadRequest(format!(
            "body must be {{\"userIds\": [...]}}: {}",
            crate::line::webhook::describe_error(&error)
        ))
    })?;
    user_ids(request.user_ids, "userIds", MAX_USERS_PER_SEND)
}

/// `raw` as 1 to `max` LINE user ids (the list `field` of a request), each
/// once, in order.
pub(super) fn user_ids(raw: Vec<String>, field: &str, max: usize) -> Result<Vec<LineUserId>, AdminError> {
    if raw.is_empty() || raw.len() > max {
        return Err(AdminError::BadRequest(format!("{field} must hold 1 to {max} ids")));
    }
    let mut users = Vec::with_capacity(raw.len());
    for raw in raw {
        let bad = || AdminError::BadRequest(format!("{raw:?} is not a LINE user id (U + 32 hex digits)"));
        if !is_line_user_id(&raw) {
            return Err(bad());
        }
        let user = LineUserId::parse(raw.clone()).map_err(|_| bad())?;
        if !users.contains(&user) {
            users.push(user);
        }
    }
    Ok(users)
}

pub(crate) async fn send_scenario(
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Editor).await?;
    let scenario_raw = path.into_inner();
    let scenario =
        ScenarioId::parse(scenario_raw.clone()).map_err(|_| AdminError::UnknownScenario(scenario_raw.clone()))?;
    let key = idempotency_key(&request)?;
    let users = parse_users(&body)?;
    let entry = state.auditor.entry(
        Some(&actor),
        Action {
            via: Via::Api,
            name: "manual_send",
            route: route_of(&request),
            summary: vec![
                ("scenarioId", scenario.to_string()),
                ("users", users.len().to_string()),
                ("idempotencyKey", key.clone()),
            ],
            touched: users.iter().map(ToString::to_string).collect(),
        },
    );
    let result = send_now(&state, &key, &scenario, &users, &entry).await;
    state.auditor.finish(&entry, answered(&result), None).await;
    result
}

/// The send itself, its audit entry in the request's commit.
async fn send_now(
    state: &AppState,
    key: &str,
    scenario: &ScenarioId,
    users: &[LineUserId],
    entry: &crate::store::AuditEntry,
) -> Result<HttpResponse, AdminError> {
    let outcomes = state
        .manual_sender
        .send(key, scenario, users, Some(entry))
        .await
        .map_err(|error| match error {
            ManualSendError::UnknownScenario(id) => AdminError::UnknownScenario(id),
            ManualSendError::BrokenScenario(..) => AdminError::Internal(error.to_string()),
            ManualSendError::KeyReused => AdminError::KeyReused,
            ManualSendError::BadKey => AdminError::BadRequest(error.to_string()),
            ManualSendError::Pipeline(error) => error.into(),
        })?;
    let results: Vec<UserResult> = outcomes
        .iter()
        .map(|(user, outcome)| UserResult {
            user_id: user.to_string(),
            result: outcome.as_str(),
            error: outcome.error().map(str::to_owned),
        })
        .collect();
    let failed = outcomes.iter().filter(|(_, outcome)| !outcome.went_out()).count();
    let response = SendResponse {
        scenario_id: scenario.to_string(),
        idempotency_key: key.to_owned(),
        sent: results.len() - failed,
        failed,
        results,
    };
    // 502 when any push did not go out yet: the caller may retry with the same
    // Idempotency-Key, which cannot double the pushes that did go out.
    let status = if failed == 0 {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    Ok(HttpResponse::build(status)
        .insert_header(("Idempotency-Key", key))
        .json(response))
}
