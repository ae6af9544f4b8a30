//! Building the application from its configuration, so `main` and the tests run
//! the very same server (tests on port 0).

use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::engine::Engine;
use crate::http::{AppState, admin, health, webhook};
use crate::line::client::LineClient;
use crate::outbound::Outbound;
use crate::scenario::load_dir;
use crate::store::{Store, StoreOptions};
use actix_web::dev::Server;
use actix_web::{App, HttpResponse, HttpServer, web};
use anyhow::Context;
use std::net::TcpListener;
use std::sync::Arc;

pub struct Application {
    port: u16,
    server: Server,
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let scenarios =
            load_dir(&config.scenarios_dir).map_err(|error| anyhow::anyhow!("{error}"))?;
        let store = Store::connect(StoreOptions {
            project_id: config.google_cloud_project.clone(),
            emulator_host: config.firestore_emulator_host.clone(),
            request_timeout: config.firestore_timeout,
            legacy_answer_lookup: config.legacy_answer_lookup,
        })
        .await
        .context("cannot connect to Firestore")?;
        let client = LineClient::new(
            &config.line_api_base_url,
            config.channel_access_token.as_deref(),
            config.line_timeout,
        )?;
        if !client.sends_for_real() {
            tracing::warn!(
                "LINE_CHANNEL_ACCESS_TOKEN is not set: outbound messages are logged, not sent"
            );
        }
        if config.admin_token.is_none() {
            tracing::info!("ADMIN_TOKEN is not set: the admin routes are off");
        }
        tracing::info!(
            scenarios = scenarios.len(),
            firestore.project = %config.google_cloud_project,
            firestore.emulator = config.firestore_emulator_host.as_deref().unwrap_or("-"),
            legacy_answer_lookup = config.legacy_answer_lookup,
            "scenarios loaded"
        );

        let dispatcher = Dispatcher::new(
            Engine::new(Arc::new(scenarios)),
            store,
            Outbound::new(client, config.reply_token_max_age),
        );
        let state = web::Data::new(AppState {
            dispatcher,
            channel_secret: config.channel_secret.clone(),
            admin_token: config.admin_token.clone(),
        });
        let listener = TcpListener::bind((config.host.as_str(), config.port))
            .with_context(|| format!("cannot listen on {}:{}", config.host, config.port))?;
        let port = listener.local_addr()?.port();
        let max_body_bytes = config.max_body_bytes;
        let admin_enabled = config.admin_token.is_some();
        let server = HttpServer::new(move || {
            let mut app = App::new()
                .app_data(state.clone())
                .app_data(web::PayloadConfig::new(max_body_bytes))
                .route("/healthz", web::get().to(health::healthz))
                .route("/webhook", web::post().to(webhook::webhook));
            if admin_enabled {
                app = app.route(
                    "/admin/scenarios/{scenario_id}/send",
                    web::post().to(admin::send_scenario),
                );
            }
            app.default_service(web::to(|| async {
                HttpResponse::NotFound().json(crate::http::error_body("no such route"))
            }))
        })
        .listen(listener)?
        .run();
        tracing::info!(port, "listening");
        Ok(Self { port, server })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        self.server.await
    }
}
