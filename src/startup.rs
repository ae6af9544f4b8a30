//! Building the application from its configuration, so `main` and the tests run
//! the very same server (tests on port 0).

use crate::clock::Clock;
use crate::config::{ClockKind, Config, FaultPause};
use crate::engine::Engine;
use crate::http::AppState;
use crate::http::routes::{self, MainRoutes};
use crate::line::client::LineClient;
use crate::line::login::{LoginChannel, LoginClient};
use crate::log_ids::UserIdHasher;
use crate::metrics::Metrics;
use crate::outbound::{Courier, PauseAt, RetryPolicy};
use crate::pipeline::campaigns::{CampaignSettings, Campaigns};
use crate::pipeline::ingest::Ingest;
use crate::pipeline::manual_send::ManualSender;
use crate::pipeline::personal::Personaliser;
use crate::pipeline::replay::Replayer;
use crate::pipeline::sources::{LinkSettings, SourceLinks, SourceStarts};
use crate::pipeline::timer_cancel::TimerCancels;
use crate::pipeline::{
    EventSettings, EventWorker, EventWorkerParts, InHand, OutboundSender, Pipeline, PipelineParts, PipelineSettings,
    SweepSoon, TimerFirer, Versions,
};
use crate::reports::export::Exporter;
use crate::reports::results::Results;
use crate::reports::scrape::Scrape;
use crate::reports::sources::SourcesReport;
use crate::reports::timeline::Timelines;
use crate::scenario::load_dir;
use crate::scenario::sources::{Sources, load_sources};
use crate::store::VersionCheck;
use crate::store::{Store, StoreOptions};
use actix_web::dev::Server;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub struct Application {
    port: u16,
    server: Server,
    /// `GET /metrics` on `METRICS_PORT`, when set: its port and server.
    metrics_server: Option<(u16, Server)>,
    pipeline: Arc<Pipeline>,
    shutdown_grace: Duration,
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        config.validate()?;
        // Before anything logs a user: ids in the log are a keyed hash unless
        // LOG_USER_IDS=plain (the timeline shows the same hash).
        let user_ids = UserIdHasher::new(&config.channel_secret);
        crate::log_ids::install(config.log_user_ids, &user_ids);
        let scenarios = load_dir(&config.scenarios_dir).map_err(|error| anyhow::anyhow!("{error}"))?;
        // One clock for every service, so a move of the test clock is seen by all.
        let clock = match config.clock {
            ClockKind::System => Clock::system(),
            ClockKind::Test => {
                tracing::warn!("CLOCK=test: POST /__clock moves this service's clock forward");
                Clock::test()
            }
        };
        // Checked before anything starts: a broken sources or menu file stops start-up.
        let sources = Arc::new(load_sources_file(&config, &scenarios)?);
        let rich_menus = if config.rich_menus_deploy {
            Some(load_menu_files(&config, &scenarios)?)
        } else {
            None
        };
        let store = connect_store(&config, clock.clone()).await?;
        record_versions(&store, &scenarios).await?;
        if let Some(menus) = rich_menus {
            let deploy = rich_menu_deploy(&config, store.clone())?;
            // Off the start-up path: instances starting together make one
            // deploy (the lease), and the service serves meanwhile.
            tokio::spawn(async move {
                match deploy.run(&menus, false).await {
                    Ok(report) => {
                        for line in &report.lines {
                            tracing::info!(outcome = "deployed", "rich menus: {line}");
                        }
                    }
                    Err(error) => tracing::error!(error = %error, outcome = "failed", "rich menu deploy failed"),
                }
            });
        }
        let access_token = config.channel_access_token.as_deref().filter(|_| !config.line_dry_run);
        let client = LineClient::new(&config.line_api_base_url, access_token, config.line_timeout)?;
        if client.is_dry_run() {
            tracing::warn!("dry run: nothing is sent to LINE; messages are printed and recorded as logged");
        }
        if config.admin_token.is_none() {
            tracing::info!("ADMIN_TOKEN is not set: the admin routes are off");
        }
        if config.worker_count == 0 {
            tracing::warn!("WORKER_COUNT is 0: this instance stores events; other instances process them");
        }
        if config.source_links.is_none() {
            tracing::info!(
                "source links (/r/*) are off: LINE_LOGIN_CHANNEL_ID, LINE_LOGIN_CHANNEL_SECRET, PUBLIC_BASE_URL and FRIEND_URL are not set"
            );
        }

        let engine = Engine::new(Arc::new(scenarios));
        let shutdown = CancellationToken::new();
        let policy = RetryPolicy {
            max_attempts: config.max_send_attempts,
            // Twelve pushes (the default) spread over about 13 minutes: a LINE
            // outage of minutes does not park follow-ups.
            first_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(300),
            reply_token_max_age: config.reply_token_max_age,
        };
        let (retries, scheduled_retries) = tokio::sync::mpsc::unbounded_channel();
        // Campaign chunks call LINE outside the ledger: they get the client itself,
        // not a way into the courier's.
        let campaign_line = client.clone();
        let follower_sync = crate::pipeline::follower_sync::FollowerSync::new(
            store.clone(),
            client.clone(),
            clock.clone(),
            config.follower_sync_writes_per_second,
        );
        let personal = Personaliser::new(store.clone(), client.clone(), clock.clone());
        // Users' rich menus are linked with the same token, off the request path.
        let menu_api = access_token
            .map(|token| {
                crate::line::rich_menus::RichMenuApi::new(
                    &config.line_api_base_url,
                    &config.line_data_api_base_url,
                    token,
                    config.line_timeout,
                )
            })
            .transpose()?;
        let menus = menu_api
            .clone()
            .map(|api| crate::outbound::MenuSync::new(api, store.clone()));
        let courier = Courier::new(client, store.clone(), policy.clone(), retries, clock.clone())
            .with_menus(menus)
            .pausing_at(config.fault_pause.map(|pause| match pause {
                FaultPause::BeforeReplyCall => PauseAt::BeforeReplyCall,
                FaultPause::AfterReplyCall => PauseAt::AfterReplyCall,
            }));
        let metrics = Arc::new(Metrics::default());
        let versions = Arc::new(Versions::new(engine.clone(), store.clone()));
        // Records this instance holds (queued, running, being sent), and the
        // signal that brings the sweeper back soon: shared by the services that
        // hold or release work and the sweeper.
        let in_hand = Arc::new(InHand::default());
        let sweep_soon = SweepSoon::default();
        let sender = Arc::new(OutboundSender::new(courier.clone(), store.clone(), in_hand.clone()));
        let source_starts = SourceStarts::new(
            store.clone(),
            versions.clone(),
            sources.clone(),
            clock.clone(),
            config.source_wait,
        );
        let events = Arc::new(EventWorker::new(
            EventWorkerParts {
                sources: source_starts.clone(),
                versions: versions.clone(),
                store: store.clone(),
                sender: sender.clone(),
                personal: personal.clone(),
                metrics: metrics.clone(),
                sweep_soon: sweep_soon.clone(),
                clock: clock.clone(),
            },
            EventSettings {
                retry_backoff: Duration::from_millis(500),
                start_dedup: config.start_dedup,
            },
        ));
        let timers = Arc::new(TimerFirer::new(
            versions.clone(),
            store.clone(),
            sender.clone(),
            personal.clone(),
            metrics.clone(),
            clock.clone(),
            config.campaign_opt_out_tag.clone(),
        ));
        let replayer = Replayer::new(events.clone(), sender.clone(), store.clone(), clock.clone());
        let pipeline = Pipeline::start(
            PipelineParts {
                events,
                timers,
                sender,
                store: store.clone(),
                metrics: metrics.clone(),
                in_hand,
                sweep_soon,
            },
            PipelineSettings {
                workers: config.worker_count,
                queue_capacity: config.queue_capacity,
                sweep_interval: config.sweep_interval,
                max_event_attempts: config.max_event_attempts,
            },
            scheduled_retries,
            shutdown.clone(),
        );
        tracing::info!(
            scenarios = engine.scenarios().len(),
            firestore.project = %config.google_cloud_project,
            firestore.database = %config.firestore_database,
            firestore.emulator = config.firestore_emulator_host.as_deref().unwrap_or("-"),
            instance.id = %config.instance_id,
            workers = config.worker_count,
            legacy_answer_lookup = config.legacy_answer_lookup,
            "scenarios loaded"
        );
        if config.legacy_answer_lookup {
            tell_whether_the_legacy_lookup_can_go(&store).await;
        }

        let campaigns = Campaigns::new(
            versions.clone(),
            store.clone(),
            campaign_line,
            personal.clone(),
            CampaignSettings {
                policy,
                default_rate: config.campaign_calls_per_second,
                opt_out_tag: config.campaign_opt_out_tag.clone(),
            },
            clock.clone(),
        );
        if config.worker_count > 0 {
            tokio::spawn(campaigns.clone().run(config.sweep_interval, shutdown.clone()));
            tokio::spawn(follower_sync.clone().run(config.sweep_interval, shutdown.clone()));
        }
        let queued = pipeline.clone();
        let scrape = Scrape::new(
            crate::metrics::exporter::handle(),
            store.clone(),
            Box::new(move || queued.queued()),
            clock.clone(),
        );
        scrape.spawn_upkeep(shutdown.clone());
        let menu_links = crate::pipeline::rich_menu_links::MenuLinks::new(store.clone(), menu_api, versions.clone());
        let (source_links, sources_report) = match &config.source_links {
            Some(links) => {
                let login = LoginClient::new(
                    LoginChannel {
                        channel_id: links.login_channel_id.clone(),
                        channel_secret: links.login_channel_secret.clone(),
                        authorize_base_url: links.login_base_url.clone(),
                        api_base_url: links.login_api_base_url.clone(),
                    },
                    config.line_timeout,
                )?;
                let report = SourcesReport::new(store.clone(), sources.clone(), &links.public_base_url);
                let service = SourceLinks::new(
                    source_starts,
                    login,
                    LinkSettings {
                        public_base_url: links.public_base_url.clone(),
                        friend_url: links.friend_url.clone(),
                    },
                );
                (Some(service), Some(report))
            }
            None => (None, None),
        };
        let state = web::Data::new(AppState {
            ingest: Ingest::new(
                versions,
                store.clone(),
                pipeline.clone(),
                metrics.clone(),
                clock.clone(),
            ),
            results: Results::new(engine.clone(), store.clone(), &sources),
            scenario_graphs: crate::reports::scenario_graph::ScenarioGraphs::new(
                engine.clone(),
                config.scenarios_dir.clone(),
            ),
            campaign_results: crate::reports::campaign_results::CampaignResultsReport::new(
                engine.clone(),
                store.clone(),
            ),
            exporter: Exporter::new(engine.clone(), store.clone()),
            answer_runs: crate::reports::answer_runs::AnswerRuns::new(engine.clone(), store.clone()),
            timelines: Timelines::new(store.clone(), user_ids),
            user_profiles: crate::reports::users::UserProfiles::new(store.clone()),
            manual_sender: ManualSender::new(engine, store.clone(), courier, personal, clock.clone()),
            campaigns,
            menu_links,
            source_links,
            sources_report,
            follower_sync,
            replayer,
            access: crate::access::Access::new(
                store.clone(),
                clock.clone(),
                config.admin_token.as_deref(),
                config.console_idle,
                config.console_session,
            ),
            auditor: crate::access::audit::Auditor::new(store.clone(), clock.clone()),
            audit_report: crate::reports::audit::AuditReport::new(store.clone()),
            user_edits: crate::pipeline::hand_edits::UserEdits::new(store.clone()),
            user_data: crate::reports::user_data::UserDataReport::new(store.clone()),
            user_erasure: crate::pipeline::user_data::UserErasure::new(store.clone()),
            form_receipts: crate::pipeline::form_receipts::FormReceipts::new(store.clone()),
            timer_cancels: TimerCancels::new(store.clone()),
            store,
            metrics,
            scrape,
            channel_secret: config.channel_secret.clone(),
            admin_token: config.admin_token.clone(),
            guesses: crate::http::guesses::Guesses::new(clock.clone()),
            console_lang: config.console_lang,
            clock: clock.clone(),
        });
        state.access.warm_up().await;
        let listener = TcpListener::bind((config.host.as_str(), config.port))
            .with_context(|| format!("cannot listen on {}:{}", config.host, config.port))?;
        let port = listener.local_addr()?.port();
        let max_body_bytes = config.max_body_bytes;
        let admin_enabled = config.admin_token.is_some();
        let metrics_server = match config.metrics_port {
            Some(metrics_port) => Some(metrics_server(&config.metrics_host, metrics_port, state.clone())?),
            None => None,
        };
        // With a metrics port of its own, the main port does not serve /metrics.
        let metrics_on_main_port = admin_enabled && metrics_server.is_none();
        let main_routes = MainRoutes {
            admin: admin_enabled,
            metrics: metrics_on_main_port,
            clock: clock.is_test(),
        };
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .app_data(web::PayloadConfig::new(max_body_bytes))
                .configure(|config| routes::main(config, main_routes))
        })
        // Signals are handled in `run_until_stopped`, which also stops the pipeline.
        .workers(config.http_workers)
        .disable_signals()
        .shutdown_timeout(config.shutdown_grace.as_secs().max(1))
        .listen(listener)?
        .run();
        tracing::info!(port, "listening");
        Ok(Self {
            port,
            server,
            metrics_server,
            pipeline,
            shutdown_grace: config.shutdown_grace,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port `GET /metrics` is served on without a token, when `METRICS_PORT` is set.
    pub fn metrics_port(&self) -> Option<u16> {
        self.metrics_server.as_ref().map(|(port, _)| *port)
    }

    /// Serves until SIGTERM or SIGINT, then stops taking requests, lets requests
    /// in progress finish, hands queued work back and waits for running work,
    /// all within the grace period.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let handle = self.server.handle();
        let metrics_handle = self.metrics_server.map(|(_, server)| {
            let handle = server.handle();
            tokio::spawn(server);
            handle
        });
        let mut server = tokio::spawn(self.server);
        tokio::select! {
            result = &mut server => return result.unwrap_or_else(|error| Err(std::io::Error::other(error))),
            signal = termination() => tracing::info!(signal, "shutting down"),
        }
        let started = std::time::Instant::now();
        handle.stop(true).await;
        if let Some(metrics_handle) = metrics_handle {
            metrics_handle.stop(false).await;
        }
        let left = self.shutdown_grace.saturating_sub(started.elapsed());
        self.pipeline.shutdown(left).await;
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "stopped");
        Ok(())
    }
}

/// `GET /metrics` without a token, alone on `port` (its own listener and one
/// worker): a scraper on a private network reaches it, the webhook's port does not
/// serve it.
fn metrics_server(host: &str, port: u16, state: web::Data<AppState>) -> anyhow::Result<(u16, Server)> {
    let listener = TcpListener::bind((host, port))
        .with_context(|| format!("cannot listen on {host}:{port} (METRICS_HOST, METRICS_PORT)"))?;
    let port = listener.local_addr()?.port();
    let server = HttpServer::new(move || App::new().app_data(state.clone()).configure(routes::metrics_port))
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
    tracing::info!(port, "metrics listening");
    Ok((port, server))
}

/// Attempts at recording a scenario version before start-up gives up.
const VERSION_ATTEMPTS: u32 = 4;

/// Records one scenario version, trying again while Firestore does not answer
/// in time: the first calls of a fresh process (a new channel, a cold database)
/// can outlast `FIRESTORE_TIMEOUT_MS`, and a start-up that gave up at once
/// would be restarted only to meet the same. Recording is a create and a read,
/// so repeating it records nothing twice.
async fn record_version(
    store: &Store,
    loaded: &crate::scenario::LoadedScenario,
) -> Result<VersionCheck, crate::store::StoreError> {
    let mut attempt = 1;
    loop {
        let check = store
            .record_scenario_version(
                loaded.id().as_str(),
                loaded.scenario.version,
                &loaded.content_hash,
                &loaded.content,
                &loaded.source.display().to_string(),
            )
            .await;
        match check {
            Err(crate::store::StoreError::Unavailable(reason)) if attempt < VERSION_ATTEMPTS => {
                tracing::warn!(
                    scenario.id = %loaded.id(),
                    attempt,
                    error = %reason,
                    "Firestore did not answer at start-up; trying again"
                );
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Resolves at the first SIGTERM (Cloud Run's stop signal) or SIGINT (Ctrl-C).
/// Records every loaded scenario version with its content, so a run pinned to
/// it can read it later, and refuses to start when a file's content changed
/// but its `version` did not (runs in flight would silently change meaning).
async fn record_versions(store: &Store, scenarios: &crate::scenario::Scenarios) -> anyhow::Result<()> {
    let checks = scenarios.iter().map(|loaded| async move {
        let check = record_version(store, loaded).await;
        (loaded, check)
    });
    let mut changed = Vec::new();
    for (loaded, check) in futures::future::join_all(checks).await {
        match check.with_context(|| format!("cannot record scenario versions in Firestore ({})", loaded.source.display()))? {
            VersionCheck::Recorded => {
                tracing::info!(scenario.id = %loaded.id(), scenario.version = loaded.scenario.version, "scenario version recorded");
            }
            VersionCheck::Unchanged => {}
            VersionCheck::Changed { .. } => changed.push(format!(
                "{}: scenario {:?} version {} was loaded before with other content; bump `version` when a scenario changes",
                loaded.source.display(),
                loaded.id().as_str(),
                loaded.scenario.version
            )),
        }
    }
    if !changed.is_empty() {
        anyhow::bail!("{}", changed.join("\n"));
    }
    Ok(())
}

async fn termination() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

/// Said once at start-up with `LEGACY_ANSWER_LOOKUP=true`: once the
/// legacy-answers migration finished, the lookup's queries are not needed.
async fn tell_whether_the_legacy_lookup_can_go(store: &Store) {
    match store.migration_progress().await {
        Ok(Some(progress)) if progress.lookup_can_go() => tracing::info!(
            setting = "LEGACY_ANSWER_LOOKUP",
            "the legacy-answers migration has finished: LEGACY_ANSWER_LOOKUP=true can go (set it to false)"
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(error = %error, "cannot read whether the legacy-answers migration finished"),
    }
}

/// The Firestore handle every service of this process shares.
async fn connect_store(config: &Config, clock: Clock) -> anyhow::Result<Store> {
    Store::connect(StoreOptions {
        project_id: config.google_cloud_project.clone(),
        database_id: config.firestore_database.clone(),
        emulator_host: config.firestore_emulator_host.clone(),
        request_timeout: config.firestore_timeout,
        scan_timeout: config.firestore_scan_timeout,
        legacy_answer_lookup: config.legacy_answer_lookup,
        instance_id: config.instance_id.clone(),
        lease: config.lease,
        clock,
    })
    .await
    .context("cannot connect to Firestore")
}

/// The sources of `SOURCES_FILE`, checked with the scenarios, when source
/// links are on (otherwise none: nothing reads them); every problem, naming
/// the setting, otherwise.
fn load_sources_file(config: &Config, scenarios: &crate::scenario::Scenarios) -> anyhow::Result<Sources> {
    if config.source_links.is_none() {
        return Ok(Sources::default());
    }
    let path = &config.sources_file;
    if !path.exists() && !config.sources_file_required {
        anyhow::bail!(
            "SOURCES_FILE ({}) does not exist: source links are on (LINE_LOGIN_CHANNEL_ID is set) and need their sources",
            path.display()
        );
    }
    load_sources(path, scenarios).map_err(|problems| {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::anyhow!(
            "SOURCES_FILE ({}) has problems:\n{}",
            path.display(),
            problems.join("\n")
        )
    })
}

/// The menu files of `RICH_MENUS_DIR`, checked with the scenarios; every
/// problem, naming the setting, otherwise.
fn load_menu_files(
    config: &Config,
    scenarios: &crate::scenario::Scenarios,
) -> anyhow::Result<Vec<crate::scenario::rich_menus::RichMenu>> {
    crate::scenario::rich_menus::load_rich_menus(&config.rich_menus_dir, scenarios).map_err(|problems| {
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::anyhow!(
            "RICH_MENUS_DIR ({}) has problems:\n{}",
            config.rich_menus_dir.display(),
            problems.join("\n")
        )
    })
}

fn rich_menu_deploy(
    config: &Config,
    store: Store,
) -> anyhow::Result<crate::pipeline::rich_menu_deploy::RichMenuDeploy> {
    let token = config
        .channel_access_token
        .as_deref()
        .filter(|_| !config.line_dry_run)
        .ok_or_else(|| {
            anyhow::anyhow!("LINE_CHANNEL_ACCESS_TOKEN is required to deploy rich menus, with LINE_DRY_RUN off")
        })?;
    let api = crate::line::rich_menus::RichMenuApi::new(
        &config.line_api_base_url,
        &config.line_data_api_base_url,
        token,
        config.line_timeout,
    )?;
    Ok(crate::pipeline::rich_menu_deploy::RichMenuDeploy::new(store, api))
}

/// `line-survey richmenus deploy [--dry-run]`: the menu files of
/// `RICH_MENUS_DIR` deployed to LINE (or, in a dry run, what would be done),
/// one line per action.
/// `line-survey operators ...`: the command run against the settings'
/// Firestore. A password piped into stdin is read; at a terminal one is made up.
pub async fn operators(
    config: Config,
    command: crate::cli::operators::OperatorsCommand,
) -> anyhow::Result<crate::cli::operators::Outcome> {
    use std::io::IsTerminal;
    let store = connect_store(&config, Clock::system()).await?;
    let stdin = std::io::stdin();
    let mut piped = (!stdin.is_terminal()).then(|| stdin.lock());
    let stdin = piped.as_mut().map(|lock| lock as &mut dyn std::io::BufRead);
    Ok(crate::cli::operators::run(&store, command, stdin).await?)
}

/// `line-survey migrate ...`: the report's lines.
pub async fn migrate(config: Config, command: crate::cli::migrate::MigrateCommand) -> anyhow::Result<Vec<String>> {
    let store = connect_store(&config, Clock::system()).await?;
    Ok(crate::cli::migrate::run(store, command).await?.lines)
}

pub async fn deploy_rich_menus(config: Config, dry_run: bool) -> anyhow::Result<Vec<String>> {
    config.validate()?;
    let scenarios = load_dir(&config.scenarios_dir).map_err(|error| anyhow::anyhow!("SCENARIOS_DIR: {error}"))?;
    let menus = load_menu_files(&config, &scenarios)?;
    let store = connect_store(&config, Clock::system()).await?;
    let report = rich_menu_deploy(&config, store)?.run(&menus, dry_run).await?;
    Ok(report.lines)
}
