//! The followers sync (see `pipeline::follower_sync`):
//!
//! - `POST /admin/followers/sync`: starts it, 202 with its progress; while one
//!   runs, that one is the sync (202 too, `"started": false`).
//! - `GET /admin/followers/sync`: its progress, 404 before the first.

use super::{AdminError, require};
use crate::http::AppState;
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};

pub(crate) async fn start(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Editor).await?;
    let (status, started) = state.follower_sync.start().await?;
    let mut body = serde_json::to_value(&status).map_err(|error| AdminError::Internal(error.to_string()))?;
    body["started"] = serde_json::Value::Bool(started);
    Ok(HttpResponse::Accepted()
        .insert_header(("Location", "/admin/followers/sync"))
        .json(body))
}

pub(crate) async fn show(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    match state.follower_sync.status().await? {
        Some(status) => Ok(HttpResponse::Ok().json(status)),
        None => Err(AdminError::NotFound("no followers sync has run yet".into())),
    }
}
