//! Operator API. `POST /admin/scenarios/{scenarioId}/send` starts a scenario for
//! listed users, deliberately without the answer guards of taps and triggers: a
//! re-send is what the operator asked for. Answers to a re-sent survey are still
//! guarded by the answer commit.
//!
//! Each push carries a retry key derived from the request's `Idempotency-Key`
//! (generated when absent and echoed back), the scenario and the user, so a
//! retried call with the same key sends nothing new.

use super::{AppState, error_body};
use crate::ids::{LineUserId, ScenarioId};
use crate::line::client::Delivered;
use actix_web::http::StatusCode;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Bounds one call's fan-out; larger audiences belong in several calls.
pub const MAX_USERS_PER_SEND: usize = 500;
const MAX_IDEMPOTENCY_KEY_CHARS: usize = 200;
/// Pushes in flight per call: well under LINE's push rate limit.
const SEND_CONCURRENCY: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("missing or wrong bearer token")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
}

impl ResponseError for AdminError {
    fn status_code(&self) -> StatusCode {
        match self {
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::UnknownScenario(_) => StatusCode::NOT_FOUND,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if matches!(self, AdminError::Unauthorized) {
            response.insert_header(("WWW-Authenticate", "Bearer"));
        }
        response.json(error_body(self))
    }
}

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
    /// `sent`, `already_sent` (LINE had this retry key), `logged` (no access
    /// token configured) or `failed`.
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Compares digests, so neither the token's content nor its length shows in timing.
fn authorized(request: &HttpRequest, expected: &str) -> bool {
    let Some(presented) = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
    else {
        return false;
    };
    let presented = Sha256::digest(presented.trim().as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    presented.ct_eq(&expected).into()
}

fn idempotency_key(request: &HttpRequest) -> Result<String, AdminError> {
    match request.headers().get("idempotency-key") {
        None => Ok(uuid::Uuid::new_v4().to_string()),
        Some(value) => {
            let key = value
                .to_str()
                .map_err(|_| {
                    AdminError::BadRequest("Idempotency-Key must be visible ASCII".into())
                })?
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

/// LINE user ids are `U` followed by 32 lowercase hex digits.
fn is_line_user_id(raw: &str) -> bool {
    raw.len() == 33
        && raw.starts_with('U')
        && raw[1..]
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

fn parse_users(body: &[u8]) -> Result<Vec<LineUserId>, AdminError> {
    let request: SendRequest = serde_json::from_slice(body).map_err(|error| {
        AdminError::BadRequest(format!("body must be {{\"userIds\": [...]}}: {error}"))
    })?;
    if request.user_ids.is_empty() || request.user_ids.len() > MAX_USERS_PER_SEND {
        return Err(AdminError::BadRequest(format!(
            "userIds must hold 1 to {MAX_USERS_PER_SEND} ids"
        )));
    }
    let mut users = Vec::with_capacity(request.user_ids.len());
    for raw in request.user_ids {
        if !is_line_user_id(&raw) {
            return Err(AdminError::BadRequest(format!(
                "{raw:?} is not a LINE user id (U + 32 hex digits)"
            )));
        }
        let user = LineUserId::parse(raw).expect("a checked LINE user id is a valid id");
        if !users.contains(&user) {
            users.push(user);
        }
    }
    Ok(users)
}

pub async fn send_scenario(
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let expected = state
        .admin_token
        .as_deref()
        .ok_or(AdminError::Unauthorized)?;
    if !authorized(&request, expected) {
        tracing::warn!(
            outcome = "rejected",
            "admin call with a missing or wrong token"
        );
        return Err(AdminError::Unauthorized);
    }
    let scenario_raw = path.into_inner();
    let scenario = ScenarioId::parse(scenario_raw.clone())
        .map_err(|_| AdminError::UnknownScenario(scenario_raw.clone()))?;
    let idempotency_key = idempotency_key(&request)?;
    let users = parse_users(&body)?;
    let dispatcher = &state.dispatcher;
    let scenario = &scenario;
    let idempotency_key = &idempotency_key;
    let messages = dispatcher
        .engine()
        .manual_start(scenario)
        .ok_or_else(|| AdminError::UnknownScenario(scenario_raw.clone()))?;

    let results: Vec<UserResult> = futures::stream::iter(users)
        .map(|user| {
            let action = format!("manual:{idempotency_key}:{scenario}:{user}");
            let messages = &messages;
            async move {
                let outcome = dispatcher.outbound().send(&user, None, messages, &action).await;
                let (result, error) = match outcome {
                    Ok((_, Delivered::Sent)) => ("sent", None),
                    Ok((_, Delivered::AlreadyAccepted)) => ("already_sent", None),
                    Ok((_, Delivered::LoggedOnly)) => ("logged", None),
                    Err(failure) => ("failed", Some(failure.error.to_string())),
                };
                tracing::info!(scenario.id = %scenario, user.id = %user, send.result = result, "manual send");
                UserResult { user_id: user.to_string(), result, error }
            }
        })
        .buffered(SEND_CONCURRENCY)
        .collect()
        .await;

    let failed = results
        .iter()
        .filter(|result| result.result == "failed")
        .count();
    let response = SendResponse {
        scenario_id: scenario.to_string(),
        idempotency_key: idempotency_key.to_string(),
        sent: results.len() - failed,
        failed,
        results,
    };
    // 502 when any push failed: the caller should retry with the same
    // Idempotency-Key, which cannot double the pushes that did go out.
    let status = if failed == 0 {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    Ok(HttpResponse::build(status)
        .insert_header(("Idempotency-Key", idempotency_key.as_str()))
        .json(response))
}
