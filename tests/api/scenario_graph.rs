//! The console's scenario page (issue 27 §3): a loaded scenario drawn as
//! boxes and arrows in SVG with no script, its version, and the problems
//! `line-survey check` finds in the files now; a file edited after start-up
//! is flagged, and what runs stays the loaded version.

use crate::helpers::{TestOptions, spawn_app_with};
use crate::operator_access::{VIEWER, add_staff, get, session};
use std::path::PathBuf;
use std::sync::OnceLock;

/// A copy of the fixture scenarios this test process may edit.
static SCENARIOS: OnceLock<PathBuf> = OnceLock::new();

fn copied_scenarios() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graph-scenarios-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("a folder");
    for entry in std::fs::read_dir(crate::helpers::fixture_scenarios()).expect("the fixtures") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            std::fs::copy(&path, dir.join(path.file_name().expect("a name"))).expect("copied");
        }
    }
    dir
}

#[tokio::test]
async fn a_scenario_is_drawn_with_its_version_and_what_check_says_of_its_file_now() {
    let dir = SCENARIOS.get_or_init(copied_scenarios).clone();
    let app = spawn_app_with(TestOptions {
        adjust: |config| config.scenarios_dir = SCENARIOS.get().expect("set before start").clone(),
        ..TestOptions::default()
    })
    .await;
    add_staff(&app);
    let viewer = session(&app.address, VIEWER).await;

    let home = get(&app.address, "/console", &viewer).await.text().await.unwrap();
    assert!(
        home.contains("/console/scenarios/lunch/graph"),
        "the scenarios page links it"
    );
    let page = get(&app.address, "/console/scenarios/lunch/graph", &viewer).await;
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(page.contains("<svg id=\"scenario-graph\"") && !page.contains("<script"));
    for node in ["by_keyword", "any_text", "intro", "ask_food", "ask_drink", "thanks"] {
        assert!(page.contains(&format!("data-node=\"{node}\"")), "{node} is drawn");
    }
    // Arrows: one per link (two triggers, intro, two choices of each question).
    assert_eq!(page.matches("class=\"edge\"").count(), 7, "{page}");
    assert!(page.contains(">Coffee</text>"), "a choice labels its arrow");
    assert!(page.contains("<span id=\"scenario-version\">2</span>"));
    assert!(page.contains("id=\"check-ok\"") && !page.contains("id=\"file-changed\""));

    // As a viewer sees it in a browser at a phone's width: the graph
    // scrolls inside its box, the page does not.
    if let Some(browser) = crate::helpers::browser::Browser::start().await {
        browser.goto(&format!("{}/console/login", app.address)).await;
        browser.fill("#email", VIEWER).await;
        browser.fill("#password", crate::operator_access::PASSWORD).await;
        browser.click("#sign-in").await;
        assert_eq!(browser.wait_for_path("/console").await, "/console");
        browser
            .goto(&format!("{}/console/scenarios/lunch/graph", app.address))
            .await;
        browser.wait_for("#scenario-graph").await;
        browser.screenshot("scenario-graph").await;
        assert!(browser.fits_width().await, "the page fits a phone");
        browser.client.clone().close().await.expect("the browser closes");
    }

    // The file edited on disk to something `check` refuses: the page says so,
    // and still draws the version that runs.
    let file = dir.join("lunch.toml");
    let text = std::fs::read_to_string(&file).expect("the file");
    std::fs::write(&file, text.replacen("next = \"thanks\"", "next = \"no_such_node\"", 1)).expect("edited");
    let page = get(&app.address, "/console/scenarios/lunch/graph", &viewer)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("id=\"file-changed\""));
    let problems = page.split("id=\"check-problems\"").nth(1).unwrap_or_default();
    assert!(
        problems.contains("no_such_node") && problems.contains("lunch.toml"),
        "{problems}"
    );
    assert_eq!(page.matches("class=\"edge\"").count(), 7, "the loaded version is drawn");

    for missing in ["/console/scenarios/nope/graph", "/console/scenarios/%00/graph"] {
        assert_eq!(get(&app.address, missing, &viewer).await.status(), 404, "{missing}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
