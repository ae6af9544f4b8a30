//! `GET /admin/users/{id}`: one user's tags, fields, first and last seen,
//! follow state and the scenarios they answered (see `reports::users`).

use super::{AdminError, require};
use crate::http::AppState;
use crate::ids::LineUserId;
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};

pub(crate) async fn show(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    let raw = path.into_inner();
    let user = LineUserId::parse_line_shaped(raw.clone()).map_err(|shape| AdminError::BadRequest(shape.to_owned()))?;
    let Some(profile) = state.user_profiles.user(&user).await? else {
        tracing::info!(outcome = "unknown", "user record read");
        return Err(AdminError::UnknownUser(raw));
    };
    tracing::info!(
        tags = profile.tags.len(),
        fields = profile.fields.len(),
        answered = profile.answered.len(),
        outcome = "shown",
        "user record read"
    );
    Ok(HttpResponse::Ok().json(profile))
}
