//! The service as a separate process (the real binary), for tests that kill,
//! stop or multiply it. Its log goes to a file named in panics.

use super::line_stand_in::ACCESS_TOKEN;
use super::{ADMIN_TOKEN, CHANNEL_SECRET, emulator_host, fixture_scenarios};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct ServiceProcess {
    child: Child,
    pub address: String,
    pub log: PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl ServiceProcess {
    /// Starts the binary for `project`, talking to `line_uri`, with `extra`
    /// settings on top of the test defaults, and waits for `/healthz`.
    pub async fn start(project: &str, line_uri: &str, extra: &[(&str, &str)]) -> Self {
        Self::start_with_firestore(project, line_uri, &emulator_host(), extra).await
    }

    pub async fn start_with_firestore(project: &str, line_uri: &str, firestore: &str, extra: &[(&str, &str)]) -> Self {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("line-survey-{project}-{port}.log"));
        let log_file = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_line-survey"));
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .env("LINE_CHANNEL_SECRET", CHANNEL_SECRET)
            .env("LINE_CHANNEL_ACCESS_TOKEN", ACCESS_TOKEN)
            .env("LINE_API_BASE_URL", line_uri)
            .env("GOOGLE_CLOUD_PROJECT", project)
            .env("FIRESTORE_EMULATOR_HOST", firestore)
            .env("SCENARIOS_DIR", fixture_scenarios())
            .env("ADMIN_TOKEN", ADMIN_TOKEN)
            .env("LOG_FORMAT", "json")
            // Short leases so recovery shows within a test; LEASE_MS must exceed
            // FIRESTORE_TIMEOUT_MS + LINE_TIMEOUT_MS.
            .env("LEASE_MS", "3000")
            .env("LINE_TIMEOUT_MS", "1000")
            .env("SWEEP_INTERVAL_MS", "200")
            .env("RUST_LOG", "info,line_survey=info")
            .stdout(Stdio::from(log_file.try_clone().unwrap()))
            .stderr(Stdio::from(log_file));
        for (name, value) in extra {
            command.env(name, value);
        }
        let child = command.spawn().expect("the service binary starts");
        let mut process = Self {
            child,
            address: format!("http://127.0.0.1:{port}"),
            log,
        };
        process.wait_healthy(Duration::from_secs(20)).await;
        process
    }

    async fn wait_healthy(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let client = reqwest::Client::new();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the service exited with {status} during start-up; log: {}",
                    self.log_text()
                );
            }
            if let Ok(response) = client.get(format!("{}/healthz", self.address)).send().await
                && response.status() == 200
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the service did not become healthy; log: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: the process dies at once, mid-work.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, as Cloud Run sends before stopping an instance.
    pub fn terminate(&mut self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
