//! Operator API: manual sends, campaigns, dead letters, users' timelines and
//! timers, and metrics. Off unless `ADMIN_TOKEN` is set; every route checks the
//! bearer token first, in constant time.

pub(crate) mod campaigns;
pub(crate) mod dead_letters;
pub(crate) mod export;
pub(crate) mod results;
pub(crate) mod send;
pub(crate) mod timeline;
pub(crate) mod timers;

use super::{AppState, error_body};
use crate::store::StoreError;
use actix_web::http::StatusCode;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

#[derive(Debug, thiserror::Error)]
pub(crate) enum AdminError {
    #[error("missing or wrong bearer token")]
    Unauthorized,
    #[error("{0}")]
    BadRequest(String),
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error("no dead letter with id {0:?}")]
    UnknownDeadLetter(String),
    #[error("the user has no timer with id {0:?}")]
    UnknownTimer(String),
    #[error("no campaign with id {0:?}")]
    UnknownCampaign(String),
    /// The record is not in a state the call can act on.
    #[error("{message}")]
    Conflict { message: String, state: &'static str },
    #[error("this Idempotency-Key was used for a different request; use a new key")]
    KeyReused,
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    Internal(String),
    #[error("Firestore is unavailable; try again: {0}")]
    Store(#[from] StoreError),
}

impl ResponseError for AdminError {
    fn status_code(&self) -> StatusCode {
        match self {
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::UnknownScenario(_)
            | AdminError::UnknownDeadLetter(_)
            | AdminError::UnknownTimer(_)
            | AdminError::UnknownCampaign(_) => StatusCode::NOT_FOUND,
            AdminError::Conflict { .. } => StatusCode::CONFLICT,
            AdminError::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            AdminError::Upstream(_) => StatusCode::BAD_GATEWAY,
            AdminError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            AdminError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if matches!(self, AdminError::Unauthorized) {
            response.insert_header(("WWW-Authenticate", "Bearer"));
        }
        let mut body = error_body(self);
        if let AdminError::Conflict { state, .. } = self {
            body["state"] = serde_json::Value::from(*state);
        }
        response.json(body)
    }
}

/// `?limit=N` of the admin lists: 1 to 100, 100 when absent.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ListQuery {
    limit: Option<u32>,
}

impl ListQuery {
    const MAX: u32 = 100;

    fn limit(&self) -> u32 {
        self.limit.unwrap_or(Self::MAX).clamp(1, Self::MAX)
    }
}

/// The token of an `Authorization: Bearer <token>` header; the scheme is
/// case-insensitive (RFC 7235).
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares digests, so neither the token's content nor its length shows in timing.
fn authorized(request: &HttpRequest, expected: &str) -> bool {
    let Some(presented) = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)
    else {
        return false;
    };
    let presented = Sha256::digest(presented.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    presented.ct_eq(&expected).into()
}

/// `GET /admin/metrics`: events handled and the Firestore round trips they cost,
/// per kind of event, since the process started.
pub(crate) async fn metrics(
    request: HttpRequest,
    state: actix_web::web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require_admin(&request, &state)?;
    let (batches, writes) = state.store.settle_counts();
    let (claim_batches, claims) = state.store.claim_counts();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "kinds": state.metrics.snapshot(),
        "batchedSettles": { "batches": batches, "writes": writes },
        "batchedClaims": { "batches": claim_batches, "writes": claims },
    })))
}

/// Lets the request through only with the right bearer token.
pub(crate) fn require_admin(request: &HttpRequest, state: &AppState) -> Result<(), AdminError> {
    let expected = state.admin_token.as_deref().ok_or(AdminError::Unauthorized)?;
    if authorized(request, expected) {
        Ok(())
    } else {
        tracing::warn!(outcome = "rejected", "admin call with a missing or wrong token");
        Err(AdminError::Unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let cases = [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER  abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearerabc", None),
            ("", None),
        ];
        for (header, expected) in cases {
            assert_eq!(bearer_token(header), expected, "{header:?}");
        }
    }
}
