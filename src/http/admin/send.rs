//! `POST /admin/scenarios/{scenarioId}/send` starts a scenario for listed users,
//! deliberately without the answer guards of taps and triggers: a re-send is what
//! the operator asked for. Answers to a re-sent survey are still guarded by the
//! answer commit.
//!
//! Each push is an action in the outbound ledger keyed by the request's
//! `Idempotency-Key` (generated when absent and echoed back), the scenario and the
//! user: a retried call with the same key finds it sent and sends nothing new,
//! and a push that is repeated carries the same retry key, so LINE drops it.

use super::{AdminError, require_admin};
use crate::http::AppState;
use crate::ids::{LineUserId, ScenarioId};
use crate::line::messages::Message;
use crate::outbound::{Origin, OutboundAction};
use crate::store::{LedgerState, Recorded, Settlement};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// Bounds one call's fan-out; larger audiences belong in several calls.
pub const MAX_USERS_PER_SEND: usize = 500;
const MAX_IDEMPOTENCY_KEY_CHARS: usize = 200;
/// Pushes in flight per call: well under LINE's push rate limit.
const SEND_CONCURRENCY: usize = 8;

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
    /// (no access token configured) or `failed`.
    result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn idempotency_key(request: &HttpRequest) -> Result<String, AdminError> {
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

/// LINE user ids are `U` followed by 32 lowercase hex digits.
fn is_line_user_id(raw: &str) -> bool {
    raw.len() == 33 && raw.starts_with('U') && raw[1..].bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

fn parse_users(body: &[u8]) -> Result<Vec<LineUserId>, AdminError> {
    let request: SendRequest = serde_json::from_slice(body)
        .map_err(|error| AdminError::BadRequest(format!("body must be {{\"userIds\": [...]}}: {error}")))?;
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
    require_admin(&request, &state)?;
    let scenario_raw = path.into_inner();
    let unknown = || AdminError::UnknownScenario(scenario_raw.clone());
    let scenario = ScenarioId::parse(scenario_raw.clone()).map_err(|_| unknown())?;
    let idempotency_key = idempotency_key(&request)?;
    let users = parse_users(&body)?;
    let messages = state.processor.engine().manual_start(&scenario).ok_or_else(unknown)?;

    let (scenario, key, messages, state) = (&scenario, &idempotency_key, &messages, &state);
    let results: Vec<UserResult> = futures::stream::iter(users)
        .map(|user| async move {
            let (result, error) = match send_one(state, key, scenario, &user, messages).await {
                Ok(result) => (result, None),
                Err(error) => ("failed", Some(error)),
            };
            tracing::info!(scenario.id = %scenario, user.id = %user, send.result = result, "manual send");
            UserResult {
                user_id: user.to_string(),
                result,
                error,
            }
        })
        .buffered(SEND_CONCURRENCY)
        .collect()
        .await;
    // Settles are batched; the caller may retry right after this answer and must
    // then find every push recorded as sent.
    state.processor.store().flush_settles().await;

    let failed = results.iter().filter(|result| result.result == "failed").count();
    let response = SendResponse {
        scenario_id: scenario.to_string(),
        idempotency_key: key.clone(),
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
        .insert_header(("Idempotency-Key", key.as_str()))
        .json(response))
}

/// Records the push in the ledger, then sends it unless an earlier call with the
/// same key already did.
async fn send_one(
    state: &AppState,
    idempotency_key: &str,
    scenario: &ScenarioId,
    user: &LineUserId,
    messages: &[Message],
) -> Result<&'static str, String> {
    let store = state.processor.store();
    let staged = store.stage(&OutboundAction::manual(
        idempotency_key,
        scenario,
        user,
        messages.to_vec(),
    ));
    let doc = match store
        .record_outbound(&staged)
        .await
        .map_err(|error| error.to_string())?
    {
        Recorded::New => staged.doc,
        Recorded::Existing(existing) if existing.doc.state == LedgerState::Sent => {
            return Ok("already_sent");
        }
        // Pending (an earlier call stopped half-way) or failed: push again; the
        // retry key makes LINE drop it if the earlier push did arrive.
        Recorded::Existing(existing) => existing.doc,
    };
    let courier = state.processor.courier();
    match courier.deliver(&staged.ledger_id, &doc, Origin::Fresh).await {
        Settlement::Sent if !courier.client().sends_for_real() => Ok("logged"),
        Settlement::Sent => Ok("sent"),
        Settlement::RetryAt { error, .. } => Err(format!("{error} (will be retried)")),
        Settlement::Uncertain(reason) | Settlement::Failed(reason) => Err(reason),
    }
}
