//! `GET /admin/scenarios/{id}/results?from=&to=[&by=]`: a scenario's funnel
//! from its exact counters (dates in the scenario's time zone, inclusive);
//! with `by` (`source`, `variant`, `tag:{tag}`, `field:{name}`), its answers
//! cross-tabulated by that dimension as well (`crossTab`).

use super::{AdminError, require};
use crate::http::AppState;
use crate::reports::results::ResultsError;
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};

#[derive(Debug, serde::Deserialize)]
pub(crate) struct RangeQuery {
    from: Option<String>,
    to: Option<String>,
    by: Option<String>,
}

pub(crate) async fn show(
    request: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    // Read only once the caller is known: a stranger learns nothing of it.
    let query: RangeQuery = super::query_of(&request)?;
    // A bad dimension is refused before anything is read.
    if let Some(by) = &query.by {
        crate::engine::crosstab::CrossBy::parse(by).map_err(|problem| AdminError::BadRequest(problem.to_string()))?;
    }
    let (from, to) = (query.from.as_deref(), query.to.as_deref());
    let mut results = state.results.scenario(&path, from, to).await.map_err(admin_error)?;
    if let Some(by) = &query.by {
        results.cross_tab = Some(
            state
                .results
                .cross_tab(&path, by, from, to)
                .await
                .map_err(admin_error)?,
        );
    }
    Ok(HttpResponse::Ok().json(results))
}

fn admin_error(error: ResultsError) -> AdminError {
    match error {
        ResultsError::UnknownScenario(id) => AdminError::UnknownScenario(id),
        ResultsError::BadRange(problem) => AdminError::BadRequest(problem.to_string()),
        ResultsError::BadBy(problem) => AdminError::BadRequest(problem.to_string()),
        ResultsError::Store(error) => AdminError::Store(error),
    }
}
