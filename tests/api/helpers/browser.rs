//! A headless Chromium driven over WebDriver (chromium-driver), for the console
//! tests. Each browser has its own chromedriver on a free port, stopped on drop.
//!
//! Without Chromium the browser tests print a notice and pass; with
//! `REQUIRE_BROWSER=1` (set by `.ci/run`) a missing browser fails them instead.

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a page may take to appear after a click.
const WAIT: Duration = Duration::from_secs(10);

/// A phone's viewport: the console must fit it without sideways scrolling.
pub const PHONE: (u32, u32) = (390, 844);

pub struct Browser {
    pub client: Client,
    driver: Child,
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

impl Browser {
    /// A browser, or `None` (after a notice) when Chromium is not installed.
    pub async fn start() -> Option<Self> {
        let (Some(driver), Some(chromium)) = (on_path("chromedriver"), on_path("chromium")) else {
            assert!(
                std::env::var("REQUIRE_BROWSER").as_deref() != Ok("1"),
                "REQUIRE_BROWSER=1 but chromium or chromedriver is not installed"
            );
            eprintln!(
                "NOTICE: chromium or chromedriver is not installed; the browser test is skipped \
                 (apt-get install chromium chromium-driver, or run ./scripts/test.sh which installs them)"
            );
            return None;
        };
        let port = free_port();
        // In a process group of its own, so the Chromium it starts goes with it.
        let driver = Command::new(driver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--lang=ja-JP",
                    format!("--window-size={},{}", PHONE.0, PHONE.1),
                ],
            }
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object literal")
        };
        // Plain HTTP to the local chromedriver.
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session starts");
        Some(Self { client, driver })
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("the page loads");
    }

    /// The path of the page the browser shows.
    pub async fn path(&self) -> String {
        self.client.current_url().await.expect("a URL").path().to_owned()
    }

    /// The path the browser reaches within 10 s of a click that navigates
    /// (a click returns before the next page has loaded).
    pub async fn wait_for_path(&self, expected: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let path = self.path().await;
            if path == expected || Instant::now() > deadline {
                return path;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to 10 s) until an element matching `css` is on the page.
    pub async fn wait_for(&self, css: &str) {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("{css} did not appear: {error}"));
    }

    /// The text of the element matching `css`, once it is on the page.
    pub async fn text_of(&self, css: &str) -> String {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("{css} is on the page: {error}"))
            .text()
            .await
            .expect("its text")
    }

    pub async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.expect("a query").len()
    }

    pub async fn fill(&self, css: &str, value: &str) {
        let field = self.client.find(Locator::Css(css)).await.expect("the field");
        field.clear().await.expect("cleared");
        field.send_keys(value).await.expect("typed");
    }

    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("{css} is on the page: {error}"))
            .click()
            .await
            .expect("clicked");
    }

    /// Runs `script` in the page (a returned promise is awaited).
    pub async fn run(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.expect("the script runs")
    }

    /// Whether the page fits the window's width (no sideways scrolling).
    pub async fn fits_width(&self) -> bool {
        self.run("return document.documentElement.scrollWidth <= window.innerWidth")
            .await
            .as_bool()
            .unwrap_or(false)
    }

    /// Saves a PNG of the page as `target/console-screenshots/{name}.png`.
    pub async fn screenshot(&self, name: &str) {
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| crate::helpers::repo_path("target"), PathBuf::from);
        let dir = target.join("console-screenshots");
        std::fs::create_dir_all(&dir).expect("the screenshot folder");
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot is saved");
    }
}

impl Drop for Browser {
    /// Kills chromedriver's whole process group: Chromium too, even when a
    /// failed test never closed the session.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
