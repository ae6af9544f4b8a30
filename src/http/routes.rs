//! The route table: which handler answers which path, on the main port and on
//! the metrics port. Start-up builds the servers; this says what they serve.

use super::{admin, console, error_body, health, prometheus, sources, webhook};
use actix_web::{HttpResponse, web};

/// What the main port serves besides the webhook and the health check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MainRoutes {
    /// `ADMIN_TOKEN` is set: the admin API and the console.
    pub(crate) admin: bool,
    /// `GET /metrics` (with the admin token), when no metrics port serves it.
    pub(crate) metrics: bool,
    /// `CLOCK=test` (start-up refuses it without the emulator): `POST /__clock`
    /// moves the clock; otherwise the path is an unknown route.
    pub(crate) clock: bool,
}

/// The main port's routes, and a JSON 404 for anything else.
pub(crate) fn main(config: &mut web::ServiceConfig, routes: MainRoutes) {
    config
        .route("/healthz", web::get().to(health::healthz))
        .route("/webhook", web::post().to(webhook::webhook))
        // Source links answer 404 themselves while their settings are unset.
        .route("/r/callback", web::get().to(sources::callback))
        .route("/r/{source}", web::get().to(sources::link));
    if routes.admin {
        config
            .route(
                "/admin/scenarios/{scenario_id}/send",
                web::post().to(admin::send::send_scenario),
            )
            .route("/admin/dead-letters", web::get().to(admin::dead_letters::list))
            .route("/admin/audit", web::get().to(admin::audit::list))
            .route("/admin/metrics", web::get().to(admin::metrics))
            .route("/admin/scenarios/{id}/results", web::get().to(admin::results::show))
            .route("/admin/campaigns", web::post().to(admin::campaigns::create))
            .route("/admin/campaigns", web::get().to(admin::campaigns::list))
            .route("/admin/campaigns/{id}", web::get().to(admin::campaigns::show))
            .route("/admin/campaigns/{id}/cancel", web::post().to(admin::campaigns::cancel))
            .route("/admin/rich-menus/{id}/link", web::post().to(admin::rich_menus::link))
            .route("/admin/sources", web::get().to(admin::sources::list))
            .route("/admin/sources/{id}/qr.png", web::get().to(admin::sources::qr))
            .route("/admin/followers/sync", web::post().to(admin::followers::start))
            .route("/admin/followers/sync", web::get().to(admin::followers::show))
            .route(
                "/admin/dead-letters/{id}/replay",
                web::post().to(admin::dead_letters::replay),
            )
            .route(
                "/admin/scenarios/{scenario_id}/answers.csv",
                web::get().to(admin::export::answers_csv),
            )
            .route("/admin/users/{user_id}", web::get().to(admin::users::show))
            .route("/admin/users/{user_id}/timeline", web::get().to(admin::timeline::show))
            .route("/admin/users/{user_id}/timers", web::get().to(admin::timers::list))
            .route(
                "/admin/users/{user_id}/timers/{timer_id}",
                web::delete().to(admin::timers::cancel),
            )
            .configure(console::routes);
    }
    if routes.metrics {
        config.route("/metrics", web::get().to(prometheus::with_token));
    }
    if routes.clock {
        config.route("/__clock", web::post().to(super::clock::advance));
    }
    config.default_service(web::to(not_found));
}

/// The metrics port: `GET /metrics` without a token, and a JSON 404.
pub(crate) fn metrics_port(config: &mut web::ServiceConfig) {
    config
        .route("/metrics", web::get().to(prometheus::open))
        .default_service(web::to(not_found));
}

async fn not_found() -> HttpResponse {
    HttpResponse::NotFound().json(error_body("no such route"))
}
