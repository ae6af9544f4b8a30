//! The shipped sample scenarios, and start-up with broken scenario files.

use crate::helpers::{TestOptions, line_stand_in::LineStandIn, test_config};
use line_survey::scenario::{Node, load_dir};
use line_survey::startup::Application;
use std::path::Path;

#[test]
fn the_sample_scenarios_load_and_use_every_node_kind() {
    let scenarios = load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")).expect("samples are valid");
    let mut kinds = std::collections::BTreeSet::new();
    for scenario in scenarios.iter() {
        for node in &scenario.scenario.nodes {
            kinds.insert(match node {
                Node::Trigger(trigger) => format!("trigger:{:?}", trigger.on),
                Node::Message(_) => "message".to_owned(),
                Node::Survey(_) => "survey".to_owned(),
                Node::FlexImage(_) => "flex_image".to_owned(),
                Node::End(_) => "end".to_owned(),
            });
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "end",
            "flex_image",
            "message",
            "survey",
            "trigger:Follow",
            "trigger:Text"
        ]
    );
}

#[tokio::test]
async fn a_broken_scenario_file_stops_start_up_naming_file_scenario_and_node() {
    let dir = std::env::temp_dir().join(format!("scenarios-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("broken.toml"),
        r#"
id = "broken"
[[nodes]]
id = "ask"
kind = "survey"
text = "Pick one"
choices = [{ label = "A label that is much too long", value = "a", next = "missing" }]
"#,
    )
    .unwrap();
    let line = LineStandIn::start().await;
    let mut config = test_config("unused", &line.uri(), &TestOptions::default());
    config.scenarios_dir = dir.clone();

    let error = Application::build(config)
        .await
        .err()
        .expect("start-up fails")
        .to_string();

    assert!(error.contains("broken.toml"), "{error}");
    assert!(error.contains(r#"scenario "broken""#), "{error}");
    assert!(error.contains(r#"node "ask""#), "{error}");
    assert!(error.contains("at most 20"), "{error}");
    assert!(error.contains(r#""missing""#), "{error}");
    std::fs::remove_dir_all(dir).unwrap();
}
