//! `GET /metrics`: the Prometheus text exposition. On the main port it needs the
//! admin token (and is off without `ADMIN_TOKEN`); with `METRICS_PORT` it is
//! served on that port only, without a token, for a scraper on a private network.

use super::AppState;
use super::admin::{AdminError, require};
use actix_web::{HttpRequest, HttpResponse, web};

/// The main port's route: the admin token first.
pub(crate) async fn with_token(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, crate::values::OperatorRole::Viewer).await?;
    Ok(exposition(&state).await)
}

/// The metrics port's route: whoever reaches the port may read it.
pub(crate) async fn open(state: web::Data<AppState>) -> HttpResponse {
    exposition(&state).await
}

async fn exposition(state: &AppState) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.scrape.render().await)
}
