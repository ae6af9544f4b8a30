//! The followers sync (see `pipeline::follower_sync`):
//!
//! - `POST /admin/followers/sync`: starts it, 202 with its progress; while one
//!   runs, that one is the sync (202 too, `"started": false`).
//! - `GET /admin/followers/sync`: its progress, 404 before the first.

use super::{AdminError, audited, require, route_of};
use crate::access::audit::{Action, Via};
use crate::http::AppState;
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};

pub(crate) async fn start(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Owner).await?;
    let action = Action {
        via: Via::Api,
        name: "followers_sync",
        route: route_of(&request),
        summary: Vec::new(),
        touched: Vec::new(),
    };
    audited(&state, &actor, action, async {
        let (status, started) = state.follower_sync.start().await?;
        let mut body = serde_json::to_value(&status).map_err(|error| AdminError::Internal(error.to_string()))?;
        body["started"] = serde_json::Value::Bool(started);
        Ok(HttpResponse::Accepted()
            .insert_header(("Location", "/admin/followers/sync"))
            .json(body))
    })
    .await
}

pub(crate) async fn show(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    match state.follower_sync.status().await? {
        Some(status) => Ok(HttpResponse::Ok().json(status)),
        None => Err(AdminError::NotFound("no followers sync has run yet".into())),
    }
}
