//! `GET /admin/audit[?operator=&action=&from=YYYY-MM-DD&to=YYYY-MM-DD&limit=N]`:
//! the audit log, newest first, for owners.

use super::{AdminError, require};
use crate::http::AppState;
use crate::reports::audit::{AuditError, AuditQuery};
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};

pub(crate) async fn list(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Owner).await?;
    // Read only once the caller is known to be an owner.
    let query: AuditQuery = super::query_of(&request)?;
    let entries = state.audit_report.list(&query).await.map_err(|error| match error {
        AuditError::Store(error) => AdminError::Store(error),
        error => AdminError::BadRequest(error.to_string()),
    })?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "entries": entries })))
}
