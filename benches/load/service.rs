//! The service's release binary as a child process, and what /proc says of it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const CHANNEL_SECRET: &str = "bench-channel-secret";
pub const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef";

pub struct Service {
    child: Child,
    pub address: String,
    /// From spawning the process to the first 200 on `/healthz`.
    pub startup: Duration,
}

/// How `Service::launch` starts the binary; the defaults are `start`'s.
pub struct Launch {
    /// The port to listen on (a free one when `None`).
    pub port: Option<u16>,
    /// `SCENARIOS_DIR` (the test fixtures when `None`).
    pub scenarios: Option<String>,
    /// Where the service's log goes (the benchmark's stderr when `None`).
    pub log: Option<std::path::PathBuf>,
    /// How long it may take to answer `/healthz`.
    pub start_limit: Duration,
}

impl Default for Launch {
    fn default() -> Launch {
        Launch {
            port: None,
            scenarios: None,
            log: None,
            start_limit: Duration::from_secs(30),
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Service {
    pub async fn start(project: &str, firestore: &str, line_url: &str, settings: &[(String, String)]) -> Service {
        Service::launch(project, firestore, line_url, settings, &Launch::default()).await
    }

    /// `start` with a port, scenarios and log of the caller's choosing.
    pub async fn launch(
        project: &str,
        firestore: &str,
        line_url: &str,
        settings: &[(String, String)],
        launch: &Launch,
    ) -> Service {
        let port = launch.port.unwrap_or_else(free_port);
        let fixtures = crate::repo_path("tests/fixtures/scenarios").display().to_string();
        let scenarios = launch.scenarios.as_deref().unwrap_or(&fixtures);
        let started = Instant::now();
        let mut command = Command::new(env!("CARGO_BIN_EXE_line-survey"));
        command
            .env_clear()
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .env("LINE_CHANNEL_SECRET", CHANNEL_SECRET)
            .env("LINE_CHANNEL_ACCESS_TOKEN", "bench-access-token")
            .env("LINE_API_BASE_URL", line_url)
            .env("GOOGLE_CLOUD_PROJECT", project)
            .env("FIRESTORE_EMULATOR_HOST", firestore)
            .env("SCENARIOS_DIR", scenarios)
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            .env("LOG_FORMAT", "json")
            // Per-event info lines would measure the log pipe, not the service.
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if let Some(path) = &launch.log {
            // The service logs to stdout; its panics go to stderr.
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            command.stdout(file.try_clone().unwrap()).stderr(file);
        }
        command.envs(settings.iter().map(|(name, value)| (name, value)));
        let child = command.spawn().expect("the release binary starts");
        let address = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        loop {
            if let Ok(response) = client.get(format!("{address}/healthz")).send().await
                && response.status() == 200
            {
                break;
            }
            assert!(started.elapsed() < launch.start_limit, "the service did not start");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Service {
            child,
            address,
            startup: started.elapsed(),
        }
    }

    /// User plus system CPU time the process has used.
    pub fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the parenthesised command name; utime and stime are the
        // 14th and 15th fields of the whole line.
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        Duration::from_millis(ticks * 1000 / clock_ticks_per_second())
    }

    /// Peak resident set size (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// Resident set size now (VmRSS), in KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    fn status_kib(&self, field: &str) -> u64 {
        status_kib(self.child.id(), field)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn metrics(&self) -> serde_json::Value {
        reqwest::Client::new()
            .get(format!("{}/admin/metrics", self.address))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// A KiB figure of /proc/PID/status, by its field name (with the colon); 0 when
/// the process is gone.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

/// Resident set size of `pid` now (VmRSS), in KiB.
pub fn rss_kib_of(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn clock_ticks_per_second() -> u64 {
    let output = Command::new("getconf").arg("CLK_TCK").output().ok();
    output
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time of any process by pid (the emulator's, say).
pub fn process_cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 1000 / clock_ticks_per_second()))
}

/// Busy and total CPU time of the whole machine so far, from /proc/stat.
pub fn machine_cpu() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let values: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|value| value.parse().ok())
        .collect();
    let total: u64 = values.iter().sum();
    // idle and iowait are the 4th and 5th fields.
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total - idle, total)
}
