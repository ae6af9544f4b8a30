//! `GET /admin/scenarios/{id}/results?from=&to=`: a scenario's funnel from its
//! exact counters (dates in the scenario's time zone, inclusive).

use super::{AdminError, require_admin};
use crate::http::AppState;
use crate::reports::results::ResultsError;
use actix_web::{HttpRequest, HttpResponse, web};

#[derive(Debug, serde::Deserialize)]
pub(crate) struct RangeQuery {
    from: Option<String>,
    to: Option<String>,
}

pub(crate) async fn show(
    request: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<RangeQuery>,
) -> Result<HttpResponse, AdminError> {
    require_admin(&request, &state)?;
    let results = state
        .results
        .scenario(&path, query.from.as_deref(), query.to.as_deref())
        .await
        .map_err(|error| match error {
            ResultsError::UnknownScenario(id) => AdminError::UnknownScenario(id),
            ResultsError::BadRange(problem) => AdminError::BadRequest(problem.to_string()),
            ResultsError::Store(error) => AdminError::Store(error),
        })?;
    Ok(HttpResponse::Ok().json(results))
}
