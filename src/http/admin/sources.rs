//! `GET /admin/sources[?from=&to=]`: every friend-add source with its logins,
//! new friends and unfollows over the days (Tokyo, inclusive); and
//! `GET /admin/sources/{id}/qr.png`: its link as a QR code, for posters.

use super::{AdminError, require};
use crate::http::AppState;
use crate::reports::sources::SourcesError;
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};

#[derive(Debug, serde::Deserialize)]
pub(crate) struct RangeQuery {
    from: Option<String>,
    to: Option<String>,
}

fn admin_error(error: SourcesError) -> AdminError {
    match error {
        SourcesError::BadRange(problem) => AdminError::BadRequest(problem.to_string()),
        SourcesError::UnknownSource(id) => AdminError::NotFound(format!("no source with id {id:?}")),
        SourcesError::Store(error) => AdminError::Store(error),
        SourcesError::Qr(problem) => AdminError::Internal(problem),
    }
}

fn report(state: &AppState) -> Result<&crate::reports::sources::SourcesReport, AdminError> {
    state.sources_report.as_ref().ok_or_else(|| {
        AdminError::NotFound("source links are off (LINE_LOGIN_CHANNEL_ID and the other settings are not set)".into())
    })
}

pub(crate) async fn list(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    // Read only once the caller is known: a stranger learns nothing of it.
    let query: RangeQuery = super::query_of(&request)?;
    let rows = report(&state)?
        .list(query.from.as_deref(), query.to.as_deref())
        .await
        .map_err(admin_error)?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "sources": rows })))
}

pub(crate) async fn qr(
    request: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    let png = report(&state)?.qr_png(&path).map_err(admin_error)?;
    Ok(HttpResponse::Ok()
        .content_type("image/png")
        .insert_header(("Cache-Control", "no-store"))
        .body(png))
}
