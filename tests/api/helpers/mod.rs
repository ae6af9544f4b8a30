//! One place that starts the real service against the real emulator and a LINE
//! stand-in, with a method per endpoint.

pub mod browser;
pub mod emulator;
pub mod events;
pub mod firestore_rest;
pub mod line_limits;
pub mod line_login;
pub mod line_rich_menus;
pub mod line_stand_in;
pub mod process;
pub mod storm;
pub mod tcp_proxy;

use firestore_rest::FirestoreRest;
use line_stand_in::{ACCESS_TOKEN, LineStandIn};
use line_survey::config::{ClockKind, Config, LogFormat};
use line_survey::line::signature;
use line_survey::startup::Application;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

pub const CHANNEL_SECRET: &str = "test-channel-secret";
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef";

/// The emulator the test command started (`scripts/test.sh`).
pub fn emulator_host() -> String {
    std::env::var("FIRESTORE_EMULATOR_HOST")
        .expect("FIRESTORE_EMULATOR_HOST is not set: run the tests with ./scripts/test.sh, which starts the emulator")
}

/// A project id of its own for every test: the emulator keeps projects apart.
pub fn new_project_id() -> String {
    format!("test-{}", &uuid::Uuid::new_v4().simple().to_string()[..20])
}

pub struct TestOptions {
    pub access_token: bool,
    pub legacy_answer_lookup: bool,
    /// Overrides the emulator address (to put a [`tcp_proxy::TcpProxy`] between).
    pub firestore_host: Option<String>,
    pub max_body_bytes: usize,
    /// Any other setting, changed on top of the test defaults.
    pub adjust: fn(&mut Config),
    /// Another app's project and LINE stand-in, to run a second instance beside it.
    pub beside: Option<(String, Arc<LineStandIn>)>,
    /// `CLOCK=test`: the service's clock moves forward on
    /// [`TestApp::advance_clock`] instead of the test waiting.
    pub test_clock: bool,
    /// Source links on, against a LINE Login stand-in, with these sources.
    pub sources: Option<SourcesSetup>,
}

/// Source links' settings for a test: the LINE Login stand-in and the
/// sources file's text.
#[derive(Clone)]
pub struct SourcesSetup {
    pub login_uri: String,
    pub sources_toml: String,
    /// `PUBLIC_BASE_URL` is the app's own address (a port picked before it
    /// starts), so a browser follows LINE Login's redirect back to it;
    /// otherwise `http://survey.test` (a test follows the redirects by hand
    /// and calls the app's own address).
    pub on_own_address: bool,
    pub friend_url: String,
}

impl SourcesSetup {
    pub fn new(login_uri: &str, sources_toml: &str) -> Self {
        Self {
            login_uri: login_uri.to_owned(),
            sources_toml: sources_toml.to_owned(),
            on_own_address: false,
            friend_url: FRIEND_URL.to_owned(),
        }
    }
}

/// `SOURCE_WAIT_SECS` of the tests (the default is 8: the tests wait less,
/// the same way).
pub const SOURCE_WAIT: Duration = Duration::from_secs(1);

/// `FRIEND_URL` of the tests' account.
pub const FRIEND_URL: &str = "https://line.me/R/ti/p/@line-survey-test";

impl Default for TestOptions {
    fn default() -> Self {
        Self {
            access_token: true,
            legacy_answer_lookup: false,
            firestore_host: None,
            max_body_bytes: 256 * 1024,
            adjust: |_| {},
            beside: None,
            test_clock: false,
            sources: None,
        }
    }
}

pub struct TestApp {
    pub address: String,
    pub http: reqwest::Client,
    pub line: Arc<LineStandIn>,
    pub firestore: FirestoreRest,
    pub project_id: String,
    /// `http://127.0.0.1:<METRICS_PORT>` when the app serves `/metrics` on a port of its own.
    pub metrics_address: Option<String>,
    /// How far [`TestApp::advance_clock`] moved the service's clock (ms).
    clock_offset_ms: AtomicI64,
}

/// A path inside the checkout. Read from the environment at run time (cargo and
/// nextest set `CARGO_MANIFEST_DIR` for the tests they run), not baked in at
/// compile time: CI's target directory outlives the clone, and a build made in
/// another checkout must not point the tests at that one's files.
pub fn repo_path(relative: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join(relative)
}

pub fn fixture_scenarios() -> PathBuf {
    crate::helpers::repo_path("tests/fixtures/scenarios")
}

pub fn test_config(project_id: &str, line_uri: &str, options: &TestOptions) -> Config {
    let emulator = options.firestore_host.clone().unwrap_or_else(emulator_host);
    let mut config = Config::from_lookup(|name| match name {
        "LINE_CHANNEL_SECRET" => Some(CHANNEL_SECRET.to_owned()),
        "LINE_CHANNEL_ACCESS_TOKEN" => Some(ACCESS_TOKEN.to_owned()),
        "GOOGLE_CLOUD_PROJECT" => Some(project_id.to_owned()),
        "FIRESTORE_EMULATOR_HOST" => Some(emulator.clone()),
        _ => None,
    })
    .expect("test configuration is valid");
    config.host = "127.0.0.1".to_owned();
    config.port = 0;
    config.channel_access_token = options.access_token.then(|| ACCESS_TOKEN.to_owned());
    config.line_dry_run = !options.access_token;
    config.line_api_base_url = line_uri.to_owned();
    // Rich menu images go to the data host: the same stand-in.
    config.line_data_api_base_url = line_uri.to_owned();
    config.firestore_emulator_host = Some(emulator);
    config.scenarios_dir = fixture_scenarios();
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    config.legacy_answer_lookup = options.legacy_answer_lookup;
    config.log_format = LogFormat::Pretty;
    config.max_body_bytes = options.max_body_bytes;
    config.firestore_timeout = Duration::from_millis(1500);
    config.line_timeout = Duration::from_secs(5);
    config.sweep_interval = Duration::from_millis(100);
    // The tests read the console in English (`CONSOLE_LANG=en`); the
    // Japanese default has its own test (console.rs).
    config.console_lang = line_survey::values::ConsoleLang::En;
    if options.test_clock {
        config.clock = ClockKind::Test;
    }
    if let Some(setup) = &options.sources {
        let file = std::env::temp_dir().join(format!("sources-{}.toml", uuid::Uuid::new_v4().simple()));
        std::fs::write(&file, &setup.sources_toml).expect("the sources file is written");
        config.sources_file = file;
        config.sources_file_required = true;
        config.source_wait = SOURCE_WAIT;
        let mut public_base_url = "http://survey.test".to_owned();
        if setup.on_own_address {
            // Free now; the app binds it a moment later (spawn_app_with
            // tries another if something took it in between).
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            config.port = port;
            public_base_url = format!("http://127.0.0.1:{port}");
        }
        config.source_links = Some(line_survey::config::SourceLinkConfig {
            login_channel_id: line_login::LOGIN_CHANNEL_ID.to_owned(),
            login_channel_secret: line_login::LOGIN_CHANNEL_SECRET.to_owned(),
            public_base_url,
            friend_url: setup.friend_url.clone(),
            login_base_url: setup.login_uri.clone(),
            login_api_base_url: setup.login_uri.clone(),
        });
    }
    (options.adjust)(&mut config);
    config
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(TestOptions::default()).await
}

pub async fn spawn_app_with(options: TestOptions) -> TestApp {
    line_survey::telemetry::init(LogFormat::Pretty);
    let (project_id, line) = match options.beside.clone() {
        Some(beside) => beside,
        None => (new_project_id(), Arc::new(LineStandIn::start().await)),
    };
    let own_address = options.sources.as_ref().is_some_and(|setup| setup.on_own_address);
    let mut attempts = 0;
    let application = loop {
        let config = test_config(&project_id, &line.uri(), &options);
        attempts += 1;
        match Application::build(config).await {
            Ok(application) => break application,
            // A port picked in advance was taken before the app bound it.
            Err(error) if own_address && attempts < 3 => eprintln!("retrying on another port: {error:#}"),
            Err(error) => panic!("the service starts: {error:#}"),
        }
    };
    let address = format!("http://127.0.0.1:{}", application.port());
    let metrics_address = application
        .metrics_port()
        .map(|port| format!("http://127.0.0.1:{port}"));
    tokio::spawn(application.run_until_stopped());
    TestApp {
        address,
        // Idle connections are dropped before the service's keep-alive (5 s)
        // closes them: a request sent on one just as the service closes it
        // fails with "IncompleteMessage".
        http: reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(3))
            .build()
            .expect("an HTTP client"),
        line,
        firestore: FirestoreRest::new(&emulator_host(), &project_id),
        project_id,
        metrics_address,
        clock_offset_ms: AtomicI64::new(0),
    }
}

/// Moves the clock of the service at `address` (started with `CLOCK=test`)
/// forward by `by`; the service's new time, in ms since the epoch.
pub async fn advance_clock_at(address: &str, by: Duration) -> i64 {
    let response = reqwest::Client::new()
        .post(format!("{address}/__clock"))
        .json(&serde_json::json!({ "advanceMs": by.as_millis() as u64 }))
        .send()
        .await
        .expect("service reachable");
    assert_eq!(response.status(), 200, "the clock did not move: is CLOCK=test set?");
    let answer: Value = response.json().await.expect("JSON");
    let now = answer["now"].as_str().expect("the new time");
    chrono::DateTime::parse_from_rfc3339(now)
        .expect("RFC 3339")
        .timestamp_millis()
}

impl TestApp {
    /// Moves the service's clock forward by `by` (the app runs with
    /// `test_clock`): windows, reminders and expiries come due without waiting.
    pub async fn advance_clock(&self, by: Duration) {
        let now = advance_clock_at(&self.address, by).await;
        self.clock_offset_ms.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
        assert!(now >= self.now_ms() - 1000, "the service's clock is behind the test's");
    }

    /// Now as the service's clock sees it (ms since the epoch): the timestamp
    /// of an event sent now, after the clock moved.
    pub fn now_ms(&self) -> i64 {
        events::now_ms() + self.clock_offset_ms.load(Ordering::SeqCst)
    }

    /// `event` as sent now by the service's clock (its reply token issued then).
    pub fn sent_now(&self, event: &Value) -> Value {
        events::with_timestamp(event, self.now_ms())
    }

    /// Posts `body` signed as LINE signs it.
    pub async fn post_webhook(&self, body: &Value) -> reqwest::Response {
        let bytes = serde_json::to_vec(body).unwrap();
        let signature = signature::sign(CHANNEL_SECRET.as_bytes(), &bytes);
        self.post_webhook_raw(bytes, Some(&signature)).await
    }

    /// Posts one event in its own request and expects 200.
    pub async fn deliver(&self, event: &Value) {
        let response = self.post_webhook(&events::envelope(vec![event.clone()])).await;
        assert_eq!(
            response.status(),
            200,
            "webhook answered {}",
            response.text().await.unwrap_or_default()
        );
        self.settled().await;
    }

    /// Waits until no stored event and no outbound action is pending any more.
    pub async fn settled(&self) {
        self.firestore.settled(Duration::from_secs(20)).await;
    }

    pub async fn post_webhook_raw(&self, body: Vec<u8>, signature: Option<&str>) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}/webhook", self.address))
            .header("content-type", "application/json")
            .body(body);
        if let Some(signature) = signature {
            request = request.header("x-line-signature", signature);
        }
        request.send().await.expect("service reachable")
    }

    pub async fn admin_send(
        &self,
        scenario: &str,
        users: &[&str],
        idempotency_key: Option<&str>,
        token: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self
            .http
            .post(format!("{}/admin/scenarios/{scenario}/send", self.address))
            .json(&serde_json::json!({ "userIds": users }));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("service reachable")
    }

    /// Options for a second instance beside this one (same project, same LINE).
    pub fn beside(&self) -> TestOptions {
        TestOptions {
            beside: Some((self.project_id.clone(), self.line.clone())),
            ..TestOptions::default()
        }
    }

    pub async fn get_admin(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("service reachable")
    }

    pub async fn post_admin(&self, path: &str) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("service reachable")
    }

    pub async fn user_tags(&self, user: &str) -> Vec<String> {
        match self.firestore.get("users", user).await {
            Some(document) => firestore_rest::string_array(&document, "tags"),
            None => Vec::new(),
        }
    }

    /// Answers `node` of the lunch survey with `choice` and expects 200.
    pub async fn answer(&self, user: &str, node: &str, choice: &str) {
        self.deliver(&events::postback(user, &events::answer_data("lunch", node, choice)))
            .await;
    }
}

/// Polls `condition` until it holds; panics after `limit`.
pub async fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "the condition did not hold within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sorted copy, for comparing tag sets.
pub fn sorted(mut values: Vec<String>) -> Vec<String> {
    values.sort();
    values
}

/// `GET {address}{path}` with the admin token, read as JSON.
pub async fn admin_json(address: &str, path: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("{address}{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("service reachable")
        .json()
        .await
        .expect("JSON")
}
