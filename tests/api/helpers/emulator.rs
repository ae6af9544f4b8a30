//! A Firestore emulator of the test's own, which the test may stop (SIGSTOP) and
//! resume (SIGCONT) without disturbing the shared one.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct DedicatedEmulator {
    child: Child,
    pub host: String,
}

/// The emulator's jar: `FIRESTORE_EMULATOR_JAR` (set by scripts/test.sh) or the
/// usual install location.
fn jar() -> String {
    std::env::var("FIRESTORE_EMULATOR_JAR").unwrap_or_else(|_| {
        "/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar".to_owned()
    })
}

impl DedicatedEmulator {
    /// Starts one and waits for it. A JVM starting beside the storm tests on two
    /// cores can take well over a minute; one that exits at once (its port taken
    /// between our probe and its bind) is started again on another port.
    pub async fn start() -> Self {
        let deadline = Instant::now() + Duration::from_secs(240);
        let client = reqwest::Client::new();
        let mut emulator = Self::spawn();
        loop {
            if let Ok(response) = client.get(format!("http://{}/", emulator.host)).send().await
                && response.text().await.unwrap_or_default().trim() == "Ok"
            {
                // The port is ours only if stopping our process silences it:
                // another test's listener (a fault proxy in front of the
                // shared emulator, say) may have taken the port between our
                // probe and the JVM's bind, and then the JVM exited.
                if emulator.answers_while_paused(&client).await {
                    eprintln!("the dedicated emulator's port answers for another process; starting another");
                    emulator = Self::spawn();
                    continue;
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the dedicated emulator did not start in 240 s"
            );
            if emulator.child.try_wait().ok().flatten().is_some() {
                eprintln!("the dedicated emulator exited while starting; starting another");
                emulator = Self::spawn();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A cold emulator is slow for its first operations: warm it up.
        let warm = crate::helpers::repo_path("scripts/warm_emulator.py");
        let status = Command::new("python3")
            .arg(warm)
            .args([&emulator.host, "400"])
            .status()
            .unwrap();
        assert!(status.success());
        emulator
    }

    fn spawn() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("java")
            .args([
                "-Duser.language=en",
                "-cp",
                &jar(),
                "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
            ])
            .args(["start", "--host=127.0.0.1", &format!("--port={port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("java runs the emulator");
        Self {
            child,
            host: format!("127.0.0.1:{port}"),
        }
    }

    /// Whether our port answers for another process: ours exited (it could
    /// not bind), or something still answers while ours is stopped.
    async fn answers_while_paused(&mut self, client: &reqwest::Client) -> bool {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return true;
        }
        self.pause();
        let answered = client
            .get(format!("http://{}/", self.host))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .is_ok();
        self.resume();
        answered
    }

    /// Sends `signal` to our process; whether it was delivered.
    fn signal(&self, signal: &str) -> bool {
        Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Freezes the emulator: connections stay open, nothing answers.
    pub fn pause(&self) {
        assert!(self.signal("-STOP"), "the dedicated emulator could not be stopped");
    }

    pub fn resume(&self) {
        assert!(self.signal("-CONT"), "the dedicated emulator could not be resumed");
    }
}

impl Drop for DedicatedEmulator {
    fn drop(&mut self) {
        // Never a panic here: the process may be gone already.
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
