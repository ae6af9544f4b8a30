//! Operator API: manual sends, campaigns, dead letters, users' timelines and
//! timers, and metrics. Off unless `ADMIN_TOKEN` is set; every route checks the
//! bearer token first, in constant time.

pub(crate) mod audit;
pub(crate) mod campaigns;
pub(crate) mod dead_letters;
pub(crate) mod export;
pub(crate) mod followers;
pub(crate) mod results;
pub(crate) mod rich_menus;
pub(crate) mod send;
pub(crate) mod sources;
pub(crate) mod timeline;
pub(crate) mod timers;
pub(crate) mod users;

use super::{AppState, error_body};
use crate::access::Actor;
use crate::access::audit::Action;
use crate::pipeline::PipelineError;
use crate::store::StoreError;
use crate::values::OperatorRole;
use actix_web::http::StatusCode;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, HttpResponse, ResponseError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum AdminError {
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// The token is known, but its role is below what the route needs.
    #[error("this needs the {} role", .0.as_str())]
    Forbidden(OperatorRole),
    #[error("{0}")]
    BadRequest(String),
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error("no dead letter with id {0:?}")]
    UnknownDeadLetter(String),
    #[error("the user has no timer with id {0:?}")]
    UnknownTimer(String),
    #[error("no record of user {0:?}: the service never saw them")]
    UnknownUser(String),
    #[error("no campaign with id {0:?}")]
    UnknownCampaign(String),
    /// 404 for what has no id: nothing of the kind exists yet.
    #[error("{0}")]
    NotFound(String),
    /// The record is not in a state the call can act on.
    #[error("{message}")]
    Conflict { message: String, state: &'static str },
    /// 409: the call would risk what the operator must confirm first; `reason`
    /// names it (`retry_key_expired`).
    #[error("{message}")]
    NeedsConfirmation { reason: &'static str, message: String },
    /// 409: a campaign would go beyond the month's message quota; the body
    /// carries the figures (`reason`: `over_quota`).
    #[error("{message}")]
    OverQuota {
        message: String,
        figures: crate::pipeline::campaigns::QuotaFigures,
    },
    #[error("this Idempotency-Key was used for a different request; use a new key")]
    KeyReused,
    /// Other writers kept changing the record the call reads: trying again may
    /// succeed.
    #[error("{0}")]
    Contention(String),
    #[error("{0}")]
    Upstream(String),
    #[error("{0}")]
    Internal(String),
    #[error("Firestore is unavailable; try again: {0}")]
    Store(#[from] StoreError),
    /// Too many wrong tokens from this address (see `http::guesses`).
    #[error("too many wrong tokens from this address; try again later")]
    TooManyAttempts(std::time::Duration),
}

impl ResponseError for AdminError {
    fn status_code(&self) -> StatusCode {
        match self {
            AdminError::Unauthorized => StatusCode::UNAUTHORIZED,
            AdminError::Forbidden(_) => StatusCode::FORBIDDEN,
            AdminError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AdminError::UnknownScenario(_)
            | AdminError::UnknownDeadLetter(_)
            | AdminError::UnknownTimer(_)
            | AdminError::UnknownUser(_)
            | AdminError::UnknownCampaign(_)
            | AdminError::NotFound(_) => StatusCode::NOT_FOUND,
            AdminError::Conflict { .. }
            | AdminError::NeedsConfirmation { .. }
            | AdminError::OverQuota { .. }
            | AdminError::Contention(_) => StatusCode::CONFLICT,
            AdminError::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            AdminError::Upstream(_) => StatusCode::BAD_GATEWAY,
            AdminError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            AdminError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            AdminError::TooManyAttempts(_) => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if matches!(self, AdminError::Unauthorized) {
            response.insert_header(("WWW-Authenticate", "Bearer"));
        }
        if let AdminError::TooManyAttempts(wait) = self {
            response.insert_header(("Retry-After", crate::http::guesses::retry_after_secs(*wait).to_string()));
        }
        let mut body = error_body(self);
        if let AdminError::Conflict { state, .. } = self {
            body["state"] = serde_json::Value::from(*state);
        }
        if let AdminError::NeedsConfirmation { reason, .. } = self {
            body["reason"] = serde_json::Value::from(*reason);
        }
        if let AdminError::OverQuota { figures, .. } = self {
            body["reason"] = serde_json::Value::from("over_quota");
            body["messages"] = serde_json::Value::from(figures.messages);
            body["quota"] = serde_json::json!({
                "limit": figures.limit,
                "used": figures.used,
                "remaining": figures.remaining,
            });
        }
        response.json(body)
    }
}

/// The one place a pipeline failure becomes a status: a Firestore failure is
/// 503 (try again), contention 409, bad input 400, and a value the service
/// cannot encode 500 (a defect of ours, not the caller's).
impl From<PipelineError> for AdminError {
    fn from(error: PipelineError) -> Self {
        match error {
            PipelineError::Store(error) => AdminError::Store(error),
            PipelineError::Contention(message) => AdminError::Contention(message),
            PipelineError::InvalidInput(message) => AdminError::BadRequest(message),
            PipelineError::Encoding(message) => {
                tracing::error!(error = %message, outcome = "defect", "a value could not be encoded");
                AdminError::Internal(message)
            }
            PipelineError::Defect(message) => {
                tracing::error!(error = %message, outcome = "defect", "the pipeline met a defect");
                AdminError::Internal(message)
            }
        }
    }
}

/// A route's query, read after its `require`: before the token check a
/// malformed query would be answered (400) to anyone, uncounted.
pub(crate) fn query_of<T: serde::de::DeserializeOwned>(request: &HttpRequest) -> Result<T, AdminError> {
    actix_web::web::Query::<T>::from_query(request.query_string())
        .map(actix_web::web::Query::into_inner)
        .map_err(|error| AdminError::BadRequest(format!("the query could not be read: {error}")))
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

/// The bearer token of a request, if it has one.
fn presented_token(request: &HttpRequest) -> Option<&str> {
    request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)
}

/// The method and the route's pattern (`POST /admin/campaigns/{id}/cancel`),
/// as the audit log names a route: its ids are in the entry's `touched`, so a
/// long made-up path is never stored.
pub(crate) fn route_of(request: &HttpRequest) -> String {
    let pattern = request
        .match_pattern()
        .unwrap_or_else(|| request.path().chars().take(100).collect());
    format!("{} {pattern}", request.method())
}

/// Runs `action` with its audit entry: written before it runs (an action
/// whose entry cannot be written does not run: 503), completed after with the
/// status answered.
pub(crate) async fn audited(
    state: &AppState,
    actor: &Actor,
    action: Action<'_>,
    run: impl std::future::Future<Output = Result<HttpResponse, AdminError>>,
) -> Result<HttpResponse, AdminError> {
    let entry = state.auditor.entry(Some(actor), action);
    state.auditor.begin(&entry).await?;
    let result = run.await;
    state.auditor.finish(&entry, answered(&result), None).await;
    result
}

/// The status a handler's result answers with.
pub(crate) fn answered(result: &Result<HttpResponse, AdminError>) -> u16 {
    match result {
        Ok(response) => response.status().as_u16(),
        Err(error) => error.status_code().as_u16(),
    }
}

/// `GET /admin/metrics`: events handled and the Firestore round trips they cost,
/// per kind of event, since the process started.
pub(crate) async fn metrics(
    request: HttpRequest,
    state: actix_web::web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    let (batches, writes) = state.store.settle_counts();
    let (claim_batches, claims) = state.store.claim_counts();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "kinds": state.metrics.snapshot(),
        "batchedSettles": { "batches": batches, "writes": writes },
        "batchedClaims": { "batches": claim_batches, "writes": claims },
    })))
}

/// Lets the request through only with a bearer token whose role allows
/// `needed`: the `ADMIN_TOKEN` (an owner) or an operator's personal token
/// (`lsv_...`, bounded by the operator's current role). A missing or unknown
/// token is 401 and counts against the client's address; a known one with
/// too small a role is 403.
pub(crate) async fn require(
    request: &HttpRequest,
    state: &AppState,
    needed: OperatorRole,
) -> Result<Actor, AdminError> {
    let client = crate::http::guesses::Guesses::client(request);
    if let Some(blocked) = state.guesses.blocked(&client) {
        return Err(AdminError::TooManyAttempts(blocked.retry_after));
    }
    let actor = match presented_token(request) {
        Some(token) => state.access.bearer(token).await?,
        None => None,
    };
    let Some(actor) = actor else {
        tracing::warn!(outcome = "rejected", "admin call with a missing or wrong token");
        if let Some(blocked) = state.guesses.failed(&client) {
            tracing::warn!(
                client.address = %client,
                blocked_secs = blocked.retry_after.as_secs(),
                outcome = "blocked",
                "too many wrong tokens from one address: it gets 429 for a while"
            );
        }
        return Err(AdminError::Unauthorized);
    };
    if !actor.role().allows(needed) {
        tracing::warn!(
            outcome = "forbidden",
            role = actor.role().as_str(),
            needed = needed.as_str(),
            "admin call beyond the token's role"
        );
        return Err(AdminError::Forbidden(needed));
    }
    Ok(actor)
}

#[cfg(test)]
mod tests {
    use super::{AdminError, bearer_token};
    use crate::pipeline::PipelineError;
    use crate::store::StoreError;
    use actix_web::ResponseError;
    use actix_web::http::StatusCode;

    #[test]
    fn each_kind_of_pipeline_failure_has_its_own_status() {
        let cases = [
            (
                PipelineError::Store(StoreError::Unavailable("deadline exceeded".into())),
                StatusCode::SERVICE_UNAVAILABLE,
                "Firestore is unavailable; try again: Firestore is unavailable: deadline exceeded",
            ),
            (
                PipelineError::Contention("the campaign kept changing; try again".into()),
                StatusCode::CONFLICT,
                "the campaign kept changing; try again",
            ),
            (
                PipelineError::InvalidInput("\"x\" is not a LINE user id".into()),
                StatusCode::BAD_REQUEST,
                "\"x\" is not a LINE user id",
            ),
            (
                PipelineError::Encoding("the plan cannot be encoded".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
                "the plan cannot be encoded",
            ),
            (
                PipelineError::Defect("scenario \"x\" is not loaded".into()),
                StatusCode::INTERNAL_SERVER_ERROR,
                "scenario \"x\" is not loaded",
            ),
        ];
        for (error, status, message) in cases {
            let kind = format!("{error:?}");
            let admin = AdminError::from(error);
            assert_eq!(admin.status_code(), status, "{kind}");
            assert_eq!(admin.to_string(), message, "{kind}");
        }
    }

    #[actix_web::test]
    async fn a_pipeline_failure_answers_its_status_with_a_json_error() {
        let response = AdminError::from(PipelineError::Contention("kept changing".into())).error_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body = actix_web::body::to_bytes(response.into_body()).await.expect("a body");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body, serde_json::json!({ "error": "kept changing" }));
    }

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
