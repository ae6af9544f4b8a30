//! The shipped sample scenarios, and start-up with broken scenario files.

use crate::helpers::{TestOptions, line_stand_in::LineStandIn, test_config};
use line_survey::scenario::{Node, Validation, load_dir};
use line_survey::startup::Application;

#[test]
fn the_sample_scenarios_load_and_use_every_node_kind() {
    let scenarios = load_dir(&crate::helpers::repo_path("scenarios")).expect("samples are valid");
    let mut kinds = std::collections::BTreeSet::new();
    for scenario in scenarios.iter() {
        for node in &scenario.scenario.nodes {
            kinds.insert(match node {
                Node::Trigger(trigger) => format!("trigger:{:?}", trigger.on),
                Node::Message(_) => "message".to_owned(),
                Node::Survey(survey) => format!("survey:{:?}", survey.style),
                Node::TextQuestion(question) => match &question.validate {
                    Some(validation) => format!("text_question:{}", validation_kind(validation)),
                    None => "text_question:free".to_owned(),
                },
                Node::DateQuestion(question) => format!("date_question:{:?}", question.mode),
                Node::FlexImage(_) => "flex_image".to_owned(),
                Node::End(_) => "end".to_owned(),
                Node::Wait(_) => "wait".to_owned(),
                Node::Split(_) => "split".to_owned(),
                Node::Branch(_) => "branch".to_owned(),
            });
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "branch",
            "date_question:Date",
            "end",
            "flex_image",
            "message",
            "split",
            "survey:Buttons",
            "survey:QuickReply",
            "text_question:length",
            "text_question:number",
            "text_question:postal_code_jp",
            "trigger:Follow",
            "trigger:Text",
            "wait"
        ]
    );
}

fn validation_kind(validation: &Validation) -> &'static str {
    match validation {
        Validation::Number { .. } => "number",
        Validation::Email => "email",
        Validation::PhoneJp => "phone_jp",
        Validation::PostalCodeJp => "postal_code_jp",
        Validation::Length { .. } => "length",
        Validation::Pattern { .. } => "pattern",
    }
}

/// Starts the service with `file` as its only scenario file and returns why it
/// refused to start.
async fn start_up_error(name: &str, file: &str) -> String {
    let dir = std::env::temp_dir().join(format!("scenarios-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), file).unwrap();
    let line = LineStandIn::start().await;
    let mut config = test_config("unused", &line.uri(), &TestOptions::default());
    config.scenarios_dir = dir.clone();
    let error = Application::build(config)
        .await
        .err()
        .expect("start-up fails")
        .to_string();
    std::fs::remove_dir_all(dir).unwrap();
    error
}

/// Builds the service for `project` with `files` as its scenarios.
async fn build_with(project: &str, files: &[(&str, &str)]) -> anyhow::Result<Application> {
    let dir = std::env::temp_dir().join(format!("scenarios-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, file) in files {
        std::fs::write(dir.join(name), file).unwrap();
    }
    let line = LineStandIn::start().await;
    let mut config = test_config(project, &line.uri(), &TestOptions::default());
    config.scenarios_dir = dir.clone();
    let built = Application::build(config).await;
    std::fs::remove_dir_all(dir).unwrap();
    built
}

#[tokio::test]
async fn a_scenario_changed_without_a_new_version_stops_start_up_naming_the_file() {
    let project = crate::helpers::new_project_id();
    let v1 = "id = \"news\"\nversion = 1\n[[nodes]]\nid = \"hello\"\nkind = \"message\"\ntext = \"Hello\"\n";
    build_with(&project, &[("news.toml", v1)])
        .await
        .expect("the first version loads");
    build_with(&project, &[("news.toml", v1)])
        .await
        .expect("the same content loads again");

    let changed = v1.replace("Hello", "Hello again");
    let error = build_with(&project, &[("news.toml", &changed)])
        .await
        .err()
        .expect("changed content under the same version is refused")
        .to_string();
    assert!(error.contains("news.toml"), "{error}");
    assert!(error.contains(r#"scenario "news" version 1"#), "{error}");

    let bumped = changed.replace("version = 1", "version = 2");
    build_with(&project, &[("news.toml", &bumped)])
        .await
        .expect("a new version loads");
    let firestore = crate::helpers::firestore_rest::FirestoreRest::new(&crate::helpers::emulator_host(), &project);
    let v1_doc = firestore
        .get("scenario_versions", "news@1")
        .await
        .expect("v1 is recorded");
    assert_eq!(
        crate::helpers::firestore_rest::string_field(&v1_doc, "content").as_deref(),
        Some(v1),
        "the first content is kept"
    );
    assert!(firestore.get("scenario_versions", "news@2").await.is_some());
}

#[tokio::test]
async fn a_broken_scenario_file_stops_start_up_naming_file_scenario_and_node() {
    let error = start_up_error(
        "broken.toml",
        r#"
id = "broken"
[[nodes]]
id = "ask"
kind = "survey"
text = "Pick one"
choices = [{ label = "A label that is much too long", value = "a", next = "missing" }]
"#,
    )
    .await;

    assert!(error.contains("broken.toml"), "{error}");
    assert!(error.contains(r#"scenario "broken""#), "{error}");
    assert!(error.contains(r#"node "ask""#), "{error}");
    assert!(error.contains("at most 20"), "{error}");
    assert!(error.contains(r#""missing""#), "{error}");
}

#[tokio::test]
async fn a_pattern_that_does_not_compile_stops_start_up() {
    let error = start_up_error(
        "codes.toml",
        r#"
id = "codes"
[[nodes]]
id = "code"
kind = "text_question"
text = "Your member code?"
validate = { type = "pattern", pattern = "[A-Z]{2}(" }
"#,
    )
    .await;

    assert!(error.contains("codes.toml"), "{error}");
    assert!(error.contains(r#"node "code""#), "{error}");
    assert!(error.contains("does not compile"), "{error}");
}

#[tokio::test]
async fn a_start_whose_chain_sends_six_messages_stops_start_up() {
    // Reachable only from `start` (manual sends, card taps): once, it passed
    // validation and then panicked the handler of a card tap.
    let mut file = String::from("id = \"long\"\nstart = \"m1\"\n");
    for n in 1..=6 {
        let next = if n < 6 {
            format!("next = \"m{}\"", n + 1)
        } else {
            String::new()
        };
        file.push_str(&format!(
            "[[nodes]]\nid = \"m{n}\"\nkind = \"message\"\ntext = \"part {n}\"\n{next}\n"
        ));
    }
    file.push_str(
        "[[nodes]]\nid = \"ask\"\nkind = \"survey\"\ntext = \"?\"\nchoices = [{ label = \"A\", value = \"a\" }]\n",
    );

    let error = start_up_error("long.toml", &file).await;

    assert!(error.contains("`start`"), "{error}");
    assert!(error.contains("6 messages"), "{error}");
}

/// Runs the binary with exactly `env` and returns its exit code and output.
fn run_binary(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_line-survey"))
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs");
    let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[test]
fn misconfiguration_stops_start_up_naming_the_setting() {
    let base = [
        ("LINE_CHANNEL_SECRET", "s"),
        ("GOOGLE_CLOUD_PROJECT", "p"),
        ("LINE_CHANNEL_ACCESS_TOKEN", "t"),
        ("PORT", "0"),
    ];
    let cases: [(&[(&str, &str)], &str); 5] = [
        // Outside the emulator, without a token: nothing would ever be sent.
        (&base[..2], "LINE_CHANNEL_ACCESS_TOKEN"),
        (&[("SWEEP_INTERVAL_MS", "0")], "SWEEP_INTERVAL_MS"),
        (&[("HTTP_WORKERS", "0")], "HTTP_WORKERS"),
        (&[("LEASE_MS", "3000")], "LEASE_MS"),
        (&[("FIRESTORE_DATABASE", "a/b")], "FIRESTORE_DATABASE"),
    ];
    for (settings, named) in cases {
        let mut env: Vec<(&str, &str)> = if settings.len() == 2 && settings[0].0 == "LINE_CHANNEL_SECRET" {
            settings.to_vec()
        } else {
            base.iter().copied().chain(settings.iter().copied()).collect()
        };
        env.push(("LOG_FORMAT", "pretty"));
        let (code, output) = run_binary(&env);
        assert_eq!(code, Some(2), "{settings:?}: {output}");
        assert!(output.contains(named), "{settings:?}: {output}");
    }
}
