//! Every setting, read from the environment once at start. A missing or invalid
//! required setting stops start-up with a message that names the variable.

use crate::log_ids::LogUserIds;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone)]
pub struct Config {
    /// Address to bind; `0.0.0.0` so Cloud Run's front end can reach the container.
    pub host: String,
    pub port: u16,
    /// `GET /metrics` on this port of its own, without a token (and not on
    /// `port`); `None`: on `port`, behind the admin token.
    pub metrics_port: Option<u16>,
    /// The address `METRICS_PORT` binds: loopback unless `METRICS_HOST` says
    /// otherwise (`0.0.0.0` for a scraper on a private network).
    pub metrics_host: String,
    pub channel_secret: String,
    /// Required unless this is a dry run.
    pub channel_access_token: Option<String>,
    /// Nothing is sent to LINE: messages are printed and recorded as `logged`.
    /// Set by `LINE_DRY_RUN`, or implied with the emulator and no access token.
    pub line_dry_run: bool,
    pub line_api_base_url: String,
    /// LINE's data host, where rich menu images go (`LINE_DATA_API_BASE_URL`).
    pub line_data_api_base_url: String,
    /// The rich menu files (`RICH_MENUS_DIR`, default `richmenus`).
    pub rich_menus_dir: PathBuf,
    /// Deploy the rich menu files at start-up (`RICH_MENUS_DEPLOY=1`).
    pub rich_menus_deploy: bool,
    pub google_cloud_project: String,
    /// `(default)` or a named database. One database serves one LINE channel.
    pub firestore_database: String,
    pub firestore_emulator_host: Option<String>,
    pub scenarios_dir: PathBuf,
    /// `None`: the admin routes are not mounted at all.
    pub admin_token: Option<String>,
    pub legacy_answer_lookup: bool,
    pub log_format: LogFormat,
    /// How LINE user ids appear in the log (`LOG_USER_IDS`: `hashed`, the
    /// default, or `plain`).
    pub log_user_ids: LogUserIds,
    pub max_body_bytes: usize,
    pub firestore_timeout: Duration,
    /// Upper bound for one page of a background or admin scan (audiences,
    /// results, exports): the emulator and a cold Firestore may take seconds to
    /// fill a filtered page, and no LINE request waits on it.
    pub firestore_scan_timeout: Duration,
    pub line_timeout: Duration,
    pub reply_token_max_age: Duration,
    /// Events processed at once; 0 makes this instance store events only.
    pub worker_count: usize,
    pub queue_capacity: usize,
    /// How long a worker owns an event or send before another instance may take it.
    pub lease: Duration,
    pub sweep_interval: Duration,
    pub max_event_attempts: u32,
    pub max_send_attempts: u32,
    /// A guarded scenario started twice for one user within this window starts once.
    pub start_dedup: Duration,
    /// Time allowed at SIGTERM to finish work in progress (Cloud Run gives 10 s).
    pub shutdown_grace: Duration,
    /// Names this process in leases; unique per process by default.
    pub instance_id: String,
    /// Threads serving HTTP; the pipeline runs on the main runtime beside them.
    pub http_workers: usize,
    /// Multicast calls per second of a campaign, unless its request sets its own.
    pub campaign_calls_per_second: u32,
    /// Writes a second the followers sync starts at, before Firestore's ramp
    /// (half as many more every 5 minutes): `FOLLOWER_SYNC_WRITES_PER_SECOND`.
    pub follower_sync_writes_per_second: u32,
    /// Users with this tag are in no campaign's audience and get no reminder,
    /// step or closing message from one (`CAMPAIGN_OPT_OUT_TAG`).
    pub campaign_opt_out_tag: String,
    /// How long a console login lasts (`CONSOLE_SESSION_MINUTES`).
    pub console_session: Duration,
    /// How long a console session may sit unused before it ends
    /// (`CONSOLE_IDLE_MINUTES`).
    pub console_idle: Duration,
    /// The language of the console's pages (`CONSOLE_LANG`: `ja`, the
    /// default, or `en`).
    pub console_lang: crate::values::ConsoleLang,
    /// How long a follow waits for a source link's login naming the user,
    /// so the source's scenario goes by reply instead of the generic welcome
    /// (`SOURCE_WAIT_SECS`; 0: no wait).
    pub source_wait: Duration,
    /// Which clock the service reads the time from (`CLOCK`).
    pub clock: ClockKind,
    /// Where a send stops for good, for tests that kill the process at that
    /// point (`FAULT_PAUSE`): only with the Firestore emulator.
    pub fault_pause: Option<FaultPause>,
    /// The friend-add sources file (`SOURCES_FILE`, default `sources.toml`).
    pub sources_file: PathBuf,
    /// Whether `SOURCES_FILE` was set: then the file must exist.
    pub sources_file_required: bool,
    /// Source links through LINE Login: `None` when none of their settings
    /// is set (`/r/*` is off).
    pub source_links: Option<SourceLinkConfig>,
}

/// The settings source links need, all four or none.
#[derive(Clone)]
pub struct SourceLinkConfig {
    /// `LINE_LOGIN_CHANNEL_ID`.
    pub login_channel_id: String,
    /// `LINE_LOGIN_CHANNEL_SECRET`.
    pub login_channel_secret: String,
    /// `PUBLIC_BASE_URL`: the service's own address, as visitors reach it.
    pub public_base_url: String,
    /// `FRIEND_URL`: LINE's add-friend link of the account.
    pub friend_url: String,
    /// `LINE_LOGIN_BASE_URL` (the authorize page's host).
    pub login_base_url: String,
    /// `LINE_LOGIN_API_BASE_URL` (the token endpoint's host).
    pub login_api_base_url: String,
}

impl std::fmt::Debug for SourceLinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceLinkConfig")
            .field("login_channel_id", &self.login_channel_id)
            .field("login_channel_secret", &"<redacted>")
            .field("public_base_url", &self.public_base_url)
            .field("friend_url", &self.friend_url)
            .field("login_base_url", &self.login_base_url)
            .field("login_api_base_url", &self.login_api_base_url)
            .finish()
    }
}

/// The four settings of source links, in the order start-up names them.
const SOURCE_LINK_SETTINGS: [&str; 4] = [
    "LINE_LOGIN_CHANNEL_ID",
    "LINE_LOGIN_CHANNEL_SECRET",
    "PUBLIC_BASE_URL",
    "FRIEND_URL",
];

/// Source links' settings: all or none; a URL must be one.
fn source_links(get: &impl Fn(&str) -> Option<String>) -> Result<Option<SourceLinkConfig>, ConfigError> {
    let values: Vec<Option<String>> = SOURCE_LINK_SETTINGS.iter().map(|name| get(name)).collect();
    if values.iter().all(Option::is_none) {
        return Ok(None);
    }
    if let Some(missing) = SOURCE_LINK_SETTINGS
        .iter()
        .zip(&values)
        .find_map(|(name, value)| value.is_none().then_some(*name))
    {
        return Err(ConfigError::Invalid {
            name: missing,
            problem: format!(
                "is required for source links when any of {} is set",
                SOURCE_LINK_SETTINGS.join(", ")
            ),
        });
    }
    let url = |name: &'static str, value: String| {
        let scheme_ok = value.starts_with("https://") || value.starts_with("http://");
        let host = value.split_once("://").map_or("", |(_, rest)| rest);
        if !scheme_ok || host.is_empty() || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::Invalid {
                name,
                problem: "must be an https:// URL (http:// only for a local run)".to_owned(),
            });
        }
        Ok(value)
    };
    let [id, secret, base, friend] = <[Option<String>; 4]>::try_from(values)
        .map_err(|_| ConfigError::Missing("LINE_LOGIN_CHANNEL_ID"))?
        .map(Option::unwrap_or_default);
    if !id.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(ConfigError::Invalid {
            name: "LINE_LOGIN_CHANNEL_ID",
            problem: "must be the Login channel's numeric id".to_owned(),
        });
    }
    let public_base_url = url("PUBLIC_BASE_URL", base)?.trim_end_matches('/').to_owned();
    if public_base_url
        .split_once("://")
        .is_some_and(|(_, rest)| rest.contains(['/', '?', '#']))
    {
        return Err(ConfigError::Invalid {
            name: "PUBLIC_BASE_URL",
            problem: "must be the service's origin only, such as https://survey.example.jp".to_owned(),
        });
    }
    Ok(Some(SourceLinkConfig {
        login_channel_id: id,
        login_channel_secret: secret,
        public_base_url,
        friend_url: url("FRIEND_URL", friend)?,
        login_base_url: url(
            "LINE_LOGIN_BASE_URL",
            get("LINE_LOGIN_BASE_URL").unwrap_or_else(|| "https://access.line.me".to_owned()),
        )?,
        login_api_base_url: url(
            "LINE_LOGIN_API_BASE_URL",
            get("LINE_LOGIN_API_BASE_URL").unwrap_or_else(|| "https://api.line.me".to_owned()),
        )?,
    }))
}

/// The shortest `ADMIN_TOKEN` start-up accepts.
const MIN_ADMIN_TOKEN_CHARS: usize = 32;
/// The longest console session allowed: a week.
pub const MAX_CONSOLE_SESSION: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// The longest `SOURCE_WAIT_SECS`: a follow's greeting waits no longer.
pub const MAX_SOURCE_WAIT: Duration = Duration::from_secs(30);

/// LINE's published rate limit of the multicast endpoint, per channel.
/// The campaigns' opt-out tag unless `CAMPAIGN_OPT_OUT_TAG` names another
/// (「配信停止」: "stop sending").
pub const DEFAULT_OPT_OUT_TAG: &str = "配信停止";

pub const LINE_MULTICAST_CALLS_PER_SECOND: u32 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line, with the fields Cloud Logging reads (`severity`).
    Json,
    /// Human-readable, for local runs.
    Pretty,
}

/// The clock the service reads: the system's, or one tests can move forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// The real time (the default).
    System,
    /// Starts at the real time and moves forward on `POST /__clock`: only
    /// with the Firestore emulator, so a moved clock never writes leases or due
    /// times into real data.
    Test,
}

/// A point where every send stops for good (`FAULT_PAUSE`), so that a test can
/// SIGKILL the process exactly there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPause {
    /// `before_reply_call`: after the commit that recorded the action, before
    /// the reply call is recorded as about to be made (and made).
    BeforeReplyCall,
    /// `after_reply_call`: after LINE answered the reply call, before its
    /// outcome is recorded.
    AfterReplyCall,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{0} is required but not set")]
    Missing(&'static str),
    #[error("{name} is invalid: {problem}")]
    Invalid { name: &'static str, problem: String },
}

/// The project id used with the emulator when none is given: any id works there.
const EMULATOR_DEFAULT_PROJECT: &str = "demo-line-survey";

impl std::fmt::Debug for Config {
    // Hand-written so secrets can never reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("metrics_port", &self.metrics_port)
            .field("metrics_host", &self.metrics_host)
            .field("channel_secret", &"<redacted>")
            .field(
                "channel_access_token",
                &self.channel_access_token.as_ref().map(|_| "<redacted>"),
            )
            .field("line_dry_run", &self.line_dry_run)
            .field("line_api_base_url", &self.line_api_base_url)
            .field("line_data_api_base_url", &self.line_data_api_base_url)
            .field("rich_menus_dir", &self.rich_menus_dir)
            .field("rich_menus_deploy", &self.rich_menus_deploy)
            .field("google_cloud_project", &self.google_cloud_project)
            .field("firestore_database", &self.firestore_database)
            .field("firestore_emulator_host", &self.firestore_emulator_host)
            .field("scenarios_dir", &self.scenarios_dir)
            .field("admin_token", &self.admin_token.as_ref().map(|_| "<redacted>"))
            .field("legacy_answer_lookup", &self.legacy_answer_lookup)
            .field("worker_count", &self.worker_count)
            .field("lease", &self.lease)
            .field("instance_id", &self.instance_id)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| {
            lookup(name)
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        let firestore_emulator_host = get("FIRESTORE_EMULATOR_HOST");
        let google_cloud_project = match (get("GOOGLE_CLOUD_PROJECT"), &firestore_emulator_host) {
            (Some(project), _) => project,
            (None, Some(_)) => EMULATOR_DEFAULT_PROJECT.to_owned(),
            (None, None) => return Err(ConfigError::Missing("GOOGLE_CLOUD_PROJECT")),
        };
        let line_api_base_url = get("LINE_API_BASE_URL").unwrap_or_else(|| "https://api.line.me".to_owned());
        if !(line_api_base_url.starts_with("https://") || line_api_base_url.starts_with("http://")) {
            return Err(ConfigError::Invalid {
                name: "LINE_API_BASE_URL",
                problem: "must start with https:// (or http:// for a local stand-in)".to_owned(),
            });
        }
        let line_data_api_base_url =
            get("LINE_DATA_API_BASE_URL").unwrap_or_else(|| "https://api-data.line.me".to_owned());
        if !(line_data_api_base_url.starts_with("https://") || line_data_api_base_url.starts_with("http://")) {
            return Err(ConfigError::Invalid {
                name: "LINE_DATA_API_BASE_URL",
                problem: "must start with https:// (or http:// for a local stand-in)".to_owned(),
            });
        }
        let channel_access_token = get("LINE_CHANNEL_ACCESS_TOKEN");
        // A local run against the emulator without a token is a dry run; against
        // real Firestore a missing token is a mistake, unless asked for.
        let line_dry_run = parse_bool(&get, "LINE_DRY_RUN", false)?
            || (channel_access_token.is_none() && firestore_emulator_host.is_some());
        let config = Self {
            host: get("HOST").unwrap_or_else(|| "0.0.0.0".to_owned()),
            port: parse(&get, "PORT", 8080)?,
            metrics_port: get("METRICS_PORT")
                .map(|_| parse(&get, "METRICS_PORT", 0u16))
                .transpose()?,
            metrics_host: get("METRICS_HOST").unwrap_or_else(|| "127.0.0.1".to_owned()),
            channel_secret: get("LINE_CHANNEL_SECRET").ok_or(ConfigError::Missing("LINE_CHANNEL_SECRET"))?,
            channel_access_token,
            line_dry_run,
            line_api_base_url,
            line_data_api_base_url,
            rich_menus_dir: get("RICH_MENUS_DIR").unwrap_or_else(|| "richmenus".to_owned()).into(),
            rich_menus_deploy: parse_bool(&get, "RICH_MENUS_DEPLOY", false)?,
            google_cloud_project,
            firestore_database: get("FIRESTORE_DATABASE").unwrap_or_else(|| "(default)".to_owned()),
            firestore_emulator_host,
            scenarios_dir: get("SCENARIOS_DIR").unwrap_or_else(|| "scenarios".to_owned()).into(),
            admin_token: get("ADMIN_TOKEN"),
            legacy_answer_lookup: parse_bool(&get, "LEGACY_ANSWER_LOOKUP", false)?,
            log_format: match get("LOG_FORMAT").as_deref() {
                None | Some("json") => LogFormat::Json,
                Some("pretty") => LogFormat::Pretty,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "LOG_FORMAT",
                        problem: format!("{other:?} is not json or pretty"),
                    });
                }
            },
            log_user_ids: match get("LOG_USER_IDS").as_deref() {
                None | Some("hashed") => LogUserIds::Hashed,
                Some("plain") => LogUserIds::Plain,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "LOG_USER_IDS",
                        problem: format!("{other:?} is not hashed or plain"),
                    });
                }
            },
            max_body_bytes: parse(&get, "MAX_BODY_BYTES", 256 * 1024)?,
            firestore_timeout: Duration::from_millis(parse(&get, "FIRESTORE_TIMEOUT_MS", 1500)?),
            firestore_scan_timeout: Duration::from_millis(parse(&get, "FIRESTORE_SCAN_TIMEOUT_MS", 30_000)?),
            line_timeout: Duration::from_millis(parse(&get, "LINE_TIMEOUT_MS", 5_000)?),
            reply_token_max_age: Duration::from_secs(parse(&get, "REPLY_TOKEN_MAX_AGE_SECS", 50)?),
            worker_count: parse(&get, "WORKER_COUNT", 16)?,
            queue_capacity: parse(&get, "QUEUE_CAPACITY", 1024)?,
            lease: Duration::from_millis(parse(&get, "LEASE_MS", 30_000)?),
            sweep_interval: Duration::from_millis(parse(&get, "SWEEP_INTERVAL_MS", 2_000)?),
            max_event_attempts: parse(&get, "MAX_EVENT_ATTEMPTS", 5)?,
            max_send_attempts: parse(&get, "MAX_SEND_ATTEMPTS", 12)?,
            start_dedup: Duration::from_secs(parse(&get, "START_DEDUP_SECS", 30)?),
            shutdown_grace: Duration::from_millis(parse(&get, "SHUTDOWN_GRACE_MS", 8_000)?),
            instance_id: get("INSTANCE_ID").unwrap_or_else(default_instance_id),
            http_workers: parse(&get, "HTTP_WORKERS", default_http_workers())?,
            campaign_calls_per_second: parse(&get, "CAMPAIGN_CALLS_PER_SECOND", 20)?,
            follower_sync_writes_per_second: parse(&get, "FOLLOWER_SYNC_WRITES_PER_SECOND", 500)?,
            // Trimmed as the scenarios' tags are: " 配信停止" must be the tag they give.
            campaign_opt_out_tag: get("CAMPAIGN_OPT_OUT_TAG")
                .map_or_else(|| DEFAULT_OPT_OUT_TAG.to_owned(), |tag| tag.trim().to_owned()),
            console_session: Duration::from_secs(
                parse::<u64>(&get, "CONSOLE_SESSION_MINUTES", 480)?.saturating_mul(60),
            ),
            console_idle: Duration::from_secs(parse::<u64>(&get, "CONSOLE_IDLE_MINUTES", 60)?.saturating_mul(60)),
            console_lang: match get("CONSOLE_LANG") {
                None => crate::values::ConsoleLang::default(),
                Some(text) => text.parse().map_err(|problem| ConfigError::Invalid {
                    name: "CONSOLE_LANG",
                    problem,
                })?,
            },
            source_wait: Duration::from_secs(parse(&get, "SOURCE_WAIT_SECS", 8)?),
            clock: match get("CLOCK").as_deref() {
                None | Some("system") => ClockKind::System,
                Some("test") => ClockKind::Test,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "CLOCK",
                        problem: format!("{other:?} is not system or test"),
                    });
                }
            },
            sources_file: get("SOURCES_FILE").unwrap_or_else(|| "sources.toml".to_owned()).into(),
            sources_file_required: get("SOURCES_FILE").is_some(),
            source_links: source_links(&get)?,
            fault_pause: match get("FAULT_PAUSE").as_deref() {
                None => None,
                Some("before_reply_call") => Some(FaultPause::BeforeReplyCall),
                Some("after_reply_call") => Some(FaultPause::AfterReplyCall),
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "FAULT_PAUSE",
                        problem: format!("{other:?} is not before_reply_call or after_reply_call"),
                    });
                }
            },
        };
        config.validate()?;
        Ok(config)
    }

    /// Refuses combinations that would break at run time, naming the setting.
    /// Start-up runs it again, for configurations built in code (the tests).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |name: &'static str, problem: &str| {
            Err(ConfigError::Invalid {
                name,
                problem: problem.to_owned(),
            })
        };
        if self.channel_access_token.is_none() && !self.line_dry_run {
            return Err(ConfigError::Invalid {
                name: "LINE_CHANNEL_ACCESS_TOKEN",
                problem: "is required to send to LINE; set LINE_DRY_RUN=true to run without sending".to_owned(),
            });
        }
        let positive: [(&'static str, bool); 10] = [
            ("HTTP_WORKERS", self.http_workers == 0),
            ("QUEUE_CAPACITY", self.queue_capacity == 0),
            ("SWEEP_INTERVAL_MS", self.sweep_interval.is_zero()),
            ("LEASE_MS", self.lease.is_zero()),
            ("FIRESTORE_TIMEOUT_MS", self.firestore_timeout.is_zero()),
            ("FIRESTORE_SCAN_TIMEOUT_MS", self.firestore_scan_timeout.is_zero()),
            ("LINE_TIMEOUT_MS", self.line_timeout.is_zero()),
            ("MAX_EVENT_ATTEMPTS", self.max_event_attempts == 0),
            ("MAX_SEND_ATTEMPTS", self.max_send_attempts == 0),
            ("MAX_BODY_BYTES", self.max_body_bytes == 0),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, zero)| *zero) {
            return invalid(name, "must be greater than 0");
        }
        // A lease must outlast the longest thing its holder does without renewing
        // it: the commit that records a message, then the one LINE call that sends
        // it. Otherwise another instance takes the work over while it is running.
        let worst_inline_send = self.firestore_timeout + self.line_timeout;
        if self.lease <= worst_inline_send {
            return Err(ConfigError::Invalid {
                name: "LEASE_MS",
                problem: format!(
                    "{} ms is not longer than the worst inline send (FIRESTORE_TIMEOUT_MS + LINE_TIMEOUT_MS = {} ms)",
                    self.lease.as_millis(),
                    worst_inline_send.as_millis()
                ),
            });
        }
        // A reply may be attempted up to this age and take LINE_TIMEOUT_MS to
        // arrive; it must reach LINE while the token (about a minute) lives, or a
        // retry's "Invalid reply token" would be taken for delivered.
        if self.reply_token_max_age + self.line_timeout > Duration::from_secs(60) {
            return Err(ConfigError::Invalid {
                name: "REPLY_TOKEN_MAX_AGE_SECS",
                problem: format!(
                    "{} s plus LINE_TIMEOUT_MS ({} ms) must stay within the reply token's life of 60 s",
                    self.reply_token_max_age.as_secs(),
                    self.line_timeout.as_millis()
                ),
            });
        }
        if self.firestore_database.is_empty() || self.firestore_database.contains('/') {
            return invalid("FIRESTORE_DATABASE", "must be (default) or a database id");
        }
        if !(1..=10_000).contains(&self.follower_sync_writes_per_second) {
            return invalid(
                "FOLLOWER_SYNC_WRITES_PER_SECOND",
                "must be 1 to 10000 (Firestore asks new write traffic to start near 500 a second)",
            );
        }
        let tag = &self.campaign_opt_out_tag;
        if tag.trim().is_empty() || tag.chars().count() > 100 || tag.contains('\0') {
            return invalid("CAMPAIGN_OPT_OUT_TAG", "must be a tag: 1 to 100 characters, not blank");
        }
        if !(1..=LINE_MULTICAST_CALLS_PER_SECOND).contains(&self.campaign_calls_per_second) {
            return invalid(
                "CAMPAIGN_CALLS_PER_SECOND",
                &format!("must be 1 to {LINE_MULTICAST_CALLS_PER_SECOND} (LINE's multicast rate limit)"),
            );
        }
        if self
            .metrics_port
            .is_some_and(|metrics| metrics == self.port && metrics != 0)
        {
            return invalid(
                "METRICS_PORT",
                "must differ from PORT (unset it to serve /metrics on PORT)",
            );
        }
        // A short token falls to a scripted guesser; the admin routes and the
        // console open with it.
        if self
            .admin_token
            .as_ref()
            .is_some_and(|token| token.chars().count() < MIN_ADMIN_TOKEN_CHARS)
        {
            return invalid(
                "ADMIN_TOKEN",
                &format!("must be at least {MIN_ADMIN_TOKEN_CHARS} characters (a random one: openssl rand -hex 32)"),
            );
        }
        if self.metrics_host.parse::<std::net::IpAddr>().is_err() {
            return invalid("METRICS_HOST", "must be an IP address such as 127.0.0.1 or 0.0.0.0");
        }
        if self.console_session.is_zero() || self.console_session > MAX_CONSOLE_SESSION {
            return invalid("CONSOLE_SESSION_MINUTES", "must be 1 to 10080 (a week)");
        }
        if self.console_idle.is_zero() || self.console_idle > MAX_CONSOLE_SESSION {
            return invalid("CONSOLE_IDLE_MINUTES", "must be 1 to 10080 (a week)");
        }
        // The reply that ends the wait must still find its token fresh (only
        // source links wait).
        if self.source_links.is_some()
            && (self.source_wait > MAX_SOURCE_WAIT || self.source_wait >= self.reply_token_max_age)
        {
            return invalid(
                "SOURCE_WAIT_SECS",
                "must be 0 to 30, and below REPLY_TOKEN_MAX_AGE_SECS (the welcome goes by reply after the wait)",
            );
        }
        // It names the instance's heartbeat record (`instances/{id}`) and its
        // leases: a path character would break both.
        if !(1..=128).contains(&self.instance_id.len())
            || self.instance_id.starts_with("__")
            || !self
                .instance_id
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'))
        {
            return invalid(
                "INSTANCE_ID",
                "must be 1 to 128 ASCII letters, digits, '-', '_' or '.', not starting with __",
            );
        }
        // A moved clock writes leases and due times from the future: never
        // into real data.
        if self.clock == ClockKind::Test && self.firestore_emulator_host.is_none() {
            return invalid(
                "CLOCK",
                "test is allowed only with the Firestore emulator (FIRESTORE_EMULATOR_HOST)",
            );
        }
        // A paused send never finishes: a test's fault, never a deployment's.
        if self.fault_pause.is_some() && self.firestore_emulator_host.is_none() {
            return invalid(
                "FAULT_PAUSE",
                "is allowed only with the Firestore emulator (FIRESTORE_EMULATOR_HOST)",
            );
        }
        Ok(())
    }
}

/// One per CPU, as actix-web does by default.
fn default_http_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// `{pid}-{random}`: unique per process, short enough to read in a document.
fn default_instance_id() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

fn parse<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: T,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match get(name) {
        None => Ok(default),
        Some(raw) => raw.parse().map_err(|error: T::Err| ConfigError::Invalid {
            name,
            problem: format!("{raw:?}: {error}"),
        }),
    }
}

fn parse_bool(get: &impl Fn(&str) -> Option<String>, name: &'static str, default: bool) -> Result<bool, ConfigError> {
    match get(name).map(|raw| raw.to_ascii_lowercase()).as_deref() {
        None => Ok(default),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some("0" | "false" | "no" | "off") => Ok(false),
        Some(other) => Err(ConfigError::Invalid {
            name,
            problem: format!("{other:?} is not true or false"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    /// The settings of a real deployment, plus `extra`.
    fn deployed(extra: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut pairs = vec![
            ("LINE_CHANNEL_SECRET", "s"),
            ("GOOGLE_CLOUD_PROJECT", "p"),
            ("LINE_CHANNEL_ACCESS_TOKEN", "t"),
        ];
        pairs.extend_from_slice(extra);
        config(&pairs)
    }

    fn refused_setting(result: Result<Config, ConfigError>) -> &'static str {
        match result {
            Err(ConfigError::Invalid { name, .. } | ConfigError::Missing(name)) => name,
            Ok(_) => "(accepted)",
        }
    }

    #[test]
    fn source_links_take_all_four_settings_or_none() {
        let all = [
            ("LINE_LOGIN_CHANNEL_ID", "1650000000"),
            ("LINE_LOGIN_CHANNEL_SECRET", "login-secret"),
            ("PUBLIC_BASE_URL", "https://survey.example.jp/"),
            ("FRIEND_URL", "https://line.me/R/ti/p/@example"),
        ];
        let on = deployed(&all).unwrap();
        let links = on.source_links.expect("on with all four");
        assert_eq!(links.public_base_url, "https://survey.example.jp");
        assert_eq!(links.login_base_url, "https://access.line.me");
        assert_eq!(links.login_api_base_url, "https://api.line.me");
        assert!(!format!("{links:?}").contains("login-secret"), "the secret is redacted");
        assert!(deployed(&[]).unwrap().source_links.is_none(), "off with none");
        // Each one missing is named.
        for (missing, _) in all {
            let some: Vec<(&str, &str)> = all.iter().copied().filter(|(name, _)| *name != missing).collect();
            assert_eq!(refused_setting(deployed(&some)), missing);
        }
        let with = |name: &'static str, value: &'static str| {
            let mut pairs: Vec<(&str, &str)> = all.iter().copied().filter(|(other, _)| *other != name).collect();
            pairs.push((name, value));
            refused_setting(deployed(&pairs))
        };
        let cases = [
            ("LINE_LOGIN_CHANNEL_ID", "abc", "LINE_LOGIN_CHANNEL_ID"),
            ("PUBLIC_BASE_URL", "survey.example.jp", "PUBLIC_BASE_URL"),
            ("PUBLIC_BASE_URL", "https://survey.example.jp/app", "PUBLIC_BASE_URL"),
            ("PUBLIC_BASE_URL", "https://", "PUBLIC_BASE_URL"),
            ("FRIEND_URL", "javascript:alert(1)", "FRIEND_URL"),
            ("FRIEND_URL", "https://line.me/R/ti/p/@x y", "FRIEND_URL"),
            ("LINE_LOGIN_BASE_URL", "ftp://x", "LINE_LOGIN_BASE_URL"),
            ("LINE_LOGIN_API_BASE_URL", "x", "LINE_LOGIN_API_BASE_URL"),
            ("LINE_LOGIN_BASE_URL", "http://127.0.0.1:9", "(accepted)"),
            ("SOURCE_WAIT_SECS", "31", "SOURCE_WAIT_SECS"),
            // A reply after the wait must find the follow's token fresh.
            ("REPLY_TOKEN_MAX_AGE_SECS", "8", "SOURCE_WAIT_SECS"),
            ("SOURCE_WAIT_SECS", "30", "(accepted)"),
            ("SOURCE_WAIT_SECS", "0", "(accepted)"),
        ];
        for (name, value, refused) in cases {
            assert_eq!(with(name, value), refused, "{name}={value}");
        }
        let default_file = deployed(&[]).unwrap();
        assert_eq!(default_file.sources_file, PathBuf::from("sources.toml"));
        assert!(!default_file.sources_file_required);
        let named = deployed(&[("SOURCES_FILE", "conf/sources.toml")]).unwrap();
        assert!(named.sources_file_required);
    }

    #[test]
    fn the_channel_secret_is_required_and_named() {
        let error = config(&[("GOOGLE_CLOUD_PROJECT", "p")]).unwrap_err();
        assert_eq!(error.to_string(), "LINE_CHANNEL_SECRET is required but not set");
    }

    #[test]
    fn without_an_access_token_only_a_dry_run_or_the_emulator_starts() {
        let missing = config(&[("LINE_CHANNEL_SECRET", "s"), ("GOOGLE_CLOUD_PROJECT", "p")]);
        assert_eq!(refused_setting(missing), "LINE_CHANNEL_ACCESS_TOKEN");
        let dry = config(&[
            ("LINE_CHANNEL_SECRET", "s"),
            ("GOOGLE_CLOUD_PROJECT", "p"),
            ("LINE_DRY_RUN", "true"),
        ])
        .unwrap();
        assert!(dry.line_dry_run);
        let local = config(&[
            ("LINE_CHANNEL_SECRET", "s"),
            ("FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681"),
        ])
        .unwrap();
        assert!(local.line_dry_run, "the emulator without a token is a dry run");
        assert!(!deployed(&[]).unwrap().line_dry_run);
        assert!(deployed(&[("LINE_DRY_RUN", "1")]).unwrap().line_dry_run, "asked for");
    }

    #[test]
    fn settings_that_would_break_at_run_time_are_refused_by_name() {
        let cases: [(&str, &str, &str); 34] = [
            (
                "FOLLOWER_SYNC_WRITES_PER_SECOND",
                "0",
                "FOLLOWER_SYNC_WRITES_PER_SECOND",
            ),
            (
                "FOLLOWER_SYNC_WRITES_PER_SECOND",
                "10001",
                "FOLLOWER_SYNC_WRITES_PER_SECOND",
            ),
            // (Blank is unset, as for every setting: the default tag.)
            ("CAMPAIGN_OPT_OUT_TAG", &"x".repeat(101), "CAMPAIGN_OPT_OUT_TAG"),
            ("FIRESTORE_SCAN_TIMEOUT_MS", "0", "FIRESTORE_SCAN_TIMEOUT_MS"),
            ("CAMPAIGN_CALLS_PER_SECOND", "0", "CAMPAIGN_CALLS_PER_SECOND"),
            ("CAMPAIGN_CALLS_PER_SECOND", "201", "CAMPAIGN_CALLS_PER_SECOND"),
            ("SWEEP_INTERVAL_MS", "0", "SWEEP_INTERVAL_MS"),
            ("HTTP_WORKERS", "0", "HTTP_WORKERS"),
            ("QUEUE_CAPACITY", "0", "QUEUE_CAPACITY"),
            ("LEASE_MS", "0", "LEASE_MS"),
            ("FIRESTORE_TIMEOUT_MS", "0", "FIRESTORE_TIMEOUT_MS"),
            ("LINE_TIMEOUT_MS", "0", "LINE_TIMEOUT_MS"),
            ("MAX_EVENT_ATTEMPTS", "0", "MAX_EVENT_ATTEMPTS"),
            ("MAX_SEND_ATTEMPTS", "0", "MAX_SEND_ATTEMPTS"),
            ("MAX_BODY_BYTES", "0", "MAX_BODY_BYTES"),
            // Shorter than a commit (1.5 s) plus one LINE call (5 s).
            ("LEASE_MS", "6000", "LEASE_MS"),
            // 56 s plus a 5 s LINE call would outlive the token.
            ("REPLY_TOKEN_MAX_AGE_SECS", "56", "REPLY_TOKEN_MAX_AGE_SECS"),
            ("FIRESTORE_DATABASE", "a/b", "FIRESTORE_DATABASE"),
            ("START_DEDUP_SECS", "soon", "START_DEDUP_SECS"),
            ("METRICS_PORT", "metrics", "METRICS_PORT"),
            ("METRICS_PORT", "65536", "METRICS_PORT"),
            ("METRICS_PORT", "-1", "METRICS_PORT"),
            // The main port's default.
            ("METRICS_PORT", "8080", "METRICS_PORT"),
            ("CONSOLE_SESSION_MINUTES", "0", "CONSOLE_SESSION_MINUTES"),
            ("CONSOLE_IDLE_MINUTES", "0", "CONSOLE_IDLE_MINUTES"),
            ("CONSOLE_IDLE_MINUTES", "10081", "CONSOLE_IDLE_MINUTES"),
            ("CONSOLE_IDLE_MINUTES", "a while", "CONSOLE_IDLE_MINUTES"),
            ("CONSOLE_LANG", "jp", "CONSOLE_LANG"),
            ("CONSOLE_LANG", "EN", "CONSOLE_LANG"),
            ("SOURCE_WAIT_SECS", "-1", "SOURCE_WAIT_SECS"),
            ("SOURCE_WAIT_SECS", "eight", "SOURCE_WAIT_SECS"),
            ("CONSOLE_SESSION_MINUTES", "10081", "CONSOLE_SESSION_MINUTES"),
            ("CONSOLE_SESSION_MINUTES", "an hour", "CONSOLE_SESSION_MINUTES"),
            (
                "CONSOLE_SESSION_MINUTES",
                "18446744073709551615",
                "CONSOLE_SESSION_MINUTES",
            ),
        ];
        for (name, value, refused) in cases {
            assert_eq!(refused_setting(deployed(&[(name, value)])), refused, "{name}={value}");
        }
        let ok = deployed(&[("LEASE_MS", "6600"), ("WORKER_COUNT", "0")]).unwrap();
        assert_eq!(ok.worker_count, 0, "an ingest-only instance is fine");
        assert_eq!(ok.firestore_database, "(default)");
        assert_eq!(ok.start_dedup, Duration::from_secs(30));
        assert_eq!(ok.campaign_opt_out_tag, "配信停止");
        let own = deployed(&[("CAMPAIGN_OPT_OUT_TAG", "no_campaigns")]).unwrap();
        assert_eq!(own.campaign_opt_out_tag, "no_campaigns");
        let spaced = deployed(&[("CAMPAIGN_OPT_OUT_TAG", " 配信停止\n")]).unwrap();
        assert_eq!(
            spaced.campaign_opt_out_tag, "配信停止",
            "trimmed as the scenarios' tags are"
        );
    }

    #[test]
    fn metrics_get_a_port_of_their_own_only_when_asked() {
        type Settings = &'static [(&'static str, &'static str)];
        let cases: [(Settings, Option<u16>); 4] = [
            (&[], None),
            (&[("METRICS_PORT", "9090")], Some(9090)),
            (&[("METRICS_PORT", " ")], None),
            (&[("PORT", "9090"), ("METRICS_PORT", "8080")], Some(8080)),
        ];
        for (settings, metrics_port) in cases {
            assert_eq!(deployed(settings).unwrap().metrics_port, metrics_port, "{settings:?}");
        }
        let same = deployed(&[("PORT", "9090"), ("METRICS_PORT", "9090")]).unwrap_err();
        assert_eq!(
            same.to_string(),
            "METRICS_PORT is invalid: must differ from PORT (unset it to serve /metrics on PORT)"
        );
    }

    #[test]
    fn the_project_is_required_without_the_emulator() {
        assert_eq!(
            config(&[("LINE_CHANNEL_SECRET", "s"), ("LINE_CHANNEL_ACCESS_TOKEN", "t")]).unwrap_err(),
            ConfigError::Missing("GOOGLE_CLOUD_PROJECT")
        );
        let local = config(&[
            ("LINE_CHANNEL_SECRET", "s"),
            ("FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681"),
        ])
        .unwrap();
        assert_eq!(local.google_cloud_project, EMULATOR_DEFAULT_PROJECT);
    }

    #[test]
    fn defaults_apply_and_bad_values_name_their_variable() {
        let ok = deployed(&[]).unwrap();
        assert_eq!(ok.port, 8080);
        assert_eq!(ok.line_api_base_url, "https://api.line.me");
        assert_eq!(ok.scenarios_dir, PathBuf::from("scenarios"));
        assert!(ok.admin_token.is_none());
        assert_eq!(ok.source_wait, Duration::from_secs(8));
        assert_eq!(
            deployed(&[("SOURCE_WAIT_SECS", "0")]).unwrap().source_wait,
            Duration::ZERO
        );
        // The wait must end while the follow's reply token is fresh; without
        // source links nothing waits.
        let short_tokens = [("SOURCE_WAIT_SECS", "20"), ("REPLY_TOKEN_MAX_AGE_SECS", "20")];
        assert!(deployed(&short_tokens).is_ok());
        let bad = deployed(&[("PORT", "http")]).unwrap_err();
        assert!(bad.to_string().starts_with("PORT is invalid"), "{bad}");
    }

    #[test]
    fn the_test_clock_runs_only_against_the_emulator() {
        let refused = deployed(&[("CLOCK", "test")]).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "CLOCK is invalid: test is allowed only with the Firestore emulator (FIRESTORE_EMULATOR_HOST)"
        );
        let local = config(&[
            ("LINE_CHANNEL_SECRET", "s"),
            ("FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681"),
            ("CLOCK", "test"),
        ])
        .unwrap();
        assert_eq!(local.clock, ClockKind::Test);
        // Built in code (as the tests build it), start-up's check refuses it too.
        let mut built = local.clone();
        built.firestore_emulator_host = None;
        assert_eq!(refused_setting(built.validate().map(|()| built.clone())), "CLOCK");
        assert_eq!(deployed(&[]).unwrap().clock, ClockKind::System, "the default");
        assert_eq!(deployed(&[("CLOCK", "system")]).unwrap().clock, ClockKind::System);
    }

    #[test]
    fn a_fault_pause_runs_only_against_the_emulator_and_names_its_point() {
        let emulator = |pause: &str| {
            config(&[
                ("LINE_CHANNEL_SECRET", "s"),
                ("FIRESTORE_EMULATOR_HOST", "127.0.0.1:8681"),
                ("FAULT_PAUSE", pause),
            ])
        };
        let cases = [
            ("before_reply_call", Ok(Some(FaultPause::BeforeReplyCall))),
            ("after_reply_call", Ok(Some(FaultPause::AfterReplyCall))),
            (
                "anywhere",
                Err("FAULT_PAUSE is invalid: \"anywhere\" is not before_reply_call or after_reply_call".to_owned()),
            ),
        ];
        for (pause, expected) in cases {
            let got = emulator(pause)
                .map(|config| config.fault_pause)
                .map_err(|error| error.to_string());
            assert_eq!(got, expected, "{pause}");
        }
        assert_eq!(
            deployed(&[("FAULT_PAUSE", "before_reply_call")])
                .unwrap_err()
                .to_string(),
            "FAULT_PAUSE is invalid: is allowed only with the Firestore emulator (FIRESTORE_EMULATOR_HOST)"
        );
        assert_eq!(deployed(&[]).unwrap().fault_pause, None, "the default");
    }

    #[test]
    fn an_instance_id_that_cannot_name_a_document_is_refused() {
        // (An empty value counts as unset: the default.)
        for bad in ["a/b", "__x", "with space", "a\0b", &"x".repeat(129)] {
            let refused = deployed(&[("INSTANCE_ID", bad)]).unwrap_err();
            assert!(
                refused.to_string().starts_with("INSTANCE_ID is invalid"),
                "{bad:?}: {refused}"
            );
        }
        for good in ["web-1", "12345-0a1b2c3d", "run.revision_7"] {
            assert!(deployed(&[("INSTANCE_ID", good)]).is_ok(), "{good:?}");
        }
        assert!(deployed(&[]).is_ok(), "the default is a valid id");
    }

    #[test]
    fn user_ids_are_hashed_in_the_log_unless_plain_is_asked_for() {
        let cases = [
            (None, Ok(LogUserIds::Hashed)),
            (Some("hashed"), Ok(LogUserIds::Hashed)),
            (Some("plain"), Ok(LogUserIds::Plain)),
            (
                Some("Plain"),
                Err("LOG_USER_IDS is invalid: \"Plain\" is not hashed or plain"),
            ),
            (
                Some("clear"),
                Err("LOG_USER_IDS is invalid: \"clear\" is not hashed or plain"),
            ),
        ];
        for (value, expected) in cases {
            let settings: Vec<(&str, &str)> = value.map(|value| ("LOG_USER_IDS", value)).into_iter().collect();
            let got = deployed(&settings)
                .map(|config| config.log_user_ids)
                .map_err(|error| error.to_string());
            assert_eq!(got, expected.map_err(str::to_owned), "LOG_USER_IDS={value:?}");
        }
    }

    #[test]
    fn the_console_is_japanese_unless_told_english() {
        use crate::values::ConsoleLang;
        let cases = [
            (None, Ok(ConsoleLang::Ja)),
            (Some("ja"), Ok(ConsoleLang::Ja)),
            (Some("en"), Ok(ConsoleLang::En)),
            (Some("jp"), Err("CONSOLE_LANG is invalid: \"jp\" is not ja or en")),
            // Empty, like every setting, is unset.
            (Some(""), Ok(ConsoleLang::Ja)),
        ];
        for (value, expected) in cases {
            let settings: Vec<(&str, &str)> = value.map(|value| ("CONSOLE_LANG", value)).into_iter().collect();
            let got = deployed(&settings)
                .map(|config| config.console_lang)
                .map_err(|error| error.to_string());
            assert_eq!(got, expected.map_err(str::to_owned), "CONSOLE_LANG={value:?}");
        }
    }

    #[test]
    fn an_unknown_clock_is_refused_by_name() {
        for value in ["fake", "TEST", "real"] {
            let refused = deployed(&[("CLOCK", value)]).unwrap_err();
            assert_eq!(
                refused.to_string(),
                format!("CLOCK is invalid: {value:?} is not system or test"),
                "CLOCK={value}"
            );
        }
    }

    #[test]
    fn debug_output_hides_secrets() {
        let ok = config(&[
            ("LINE_CHANNEL_SECRET", "topsecret"),
            ("GOOGLE_CLOUD_PROJECT", "p"),
            ("ADMIN_TOKEN", "admintoken-admintoken-admintoken-0"),
            ("LINE_CHANNEL_ACCESS_TOKEN", "accesstoken"),
        ])
        .unwrap();
        let shown = format!("{ok:?}");
        assert!(!shown.contains("topsecret") && !shown.contains("admintoken") && !shown.contains("accesstoken"));
        let short = deployed(&[("ADMIN_TOKEN", "dev-token")]).unwrap_err();
        assert_eq!(
            short.to_string(),
            "ADMIN_TOKEN is invalid: must be at least 32 characters (a random one: openssl rand -hex 32)"
        );
        assert!(deployed(&[("ADMIN_TOKEN", &"x".repeat(32))]).is_ok());
        assert_eq!(deployed(&[]).unwrap().metrics_host, "127.0.0.1", "loopback by default");
        assert_eq!(
            deployed(&[("METRICS_HOST", "0.0.0.0")]).unwrap().metrics_host,
            "0.0.0.0"
        );
        assert!(deployed(&[("METRICS_HOST", "scraper.local")]).is_err());
    }
}
