//! The toolchain beside the service: `check`, `simulate`, `test` and `schema`
//! (see the README), which need neither Firestore nor LINE; and `operators`,
//! which manages the console's operators in Firestore.

mod conversation;
pub mod migrate;
pub mod operators;
mod transcript;

use crate::engine::Engine;
use crate::scenario::rich_menus::load_rich_menus;
use crate::scenario::sources::load_sources;
use crate::scenario::{LoadError, Scenario, ScenarioError, Scenarios, load_dir};
use conversation::{Conversation, UserAction};
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use transcript::run_transcripts;

/// The start dedup window the simulator applies (the service's default).
const START_DEDUP: Duration = Duration::from_secs(30);

/// How `check` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// What `check` validates besides the scenarios.
#[derive(Debug, Clone, Copy, Default)]
pub struct Also<'a> {
    /// The rich menu files of this directory.
    pub rich_menus: Option<&'a Path>,
    /// The friend-add sources file.
    pub sources: Option<&'a Path>,
}

/// Validates the scenario files in `dir`, and with `also` the rich menu
/// files and the sources file against them; prints every problem. `true`
/// when there are none.
pub fn check(dir: &Path, also: Also<'_>, format: Format, out: &mut impl Write) -> std::io::Result<bool> {
    let mut menus = 0;
    let mut sources = 0;
    let (problems, count) = match load_dir(dir) {
        Ok(scenarios) => {
            let mut problems = Vec::new();
            match also.rich_menus.map(|menus_dir| load_rich_menus(menus_dir, &scenarios)) {
                None => {}
                Some(Ok(loaded)) => menus = loaded.len(),
                Some(Err(found)) => problems.extend(found),
            }
            match also.sources.map(|file| load_sources(file, &scenarios)) {
                None => {}
                Some(Ok(loaded)) => sources = loaded.len(),
                Some(Err(found)) => problems.extend(found),
            }
            (problems, scenarios.len())
        }
        Err(LoadError::Invalid(errors)) => (errors, 0),
        Err(other) => (
            vec![ScenarioError {
                file: dir.to_owned(),
                scenario: None,
                node: None,
                problem: other.to_string(),
            }],
            0,
        ),
    };
    match format {
        Format::Json => {
            let problems: Vec<serde_json::Value> = problems
                .iter()
                .map(|problem| {
                    serde_json::json!({
                        "file": problem.file.display().to_string(),
                        "scenario": problem.scenario,
                        "node": problem.node,
                        "problem": problem.problem,
                    })
                })
                .collect();
            let mut report = serde_json::json!({"ok": problems.is_empty(), "scenarios": count, "problems": problems});
            if also.rich_menus.is_some() {
                report["richMenus"] = serde_json::json!(menus);
            }
            if also.sources.is_some() {
                report["sources"] = serde_json::json!(sources);
            }
            writeln!(out, "{report:#}")?;
        }
        Format::Text if problems.is_empty() => {
            write!(out, "{}: {count} scenario(s)", dir.display())?;
            if let Some(menus_dir) = also.rich_menus {
                write!(out, "; {}: {menus} rich menu(s)", menus_dir.display())?;
            }
            if let Some(file) = also.sources {
                write!(out, "; {}: {sources} source(s)", file.display())?;
            }
            if also.rich_menus.is_some() || also.sources.is_some() {
                writeln!(out, "; no problems")?;
            } else {
                writeln!(out, ", no problems")?;
            }
        }
        Format::Text => {
            for problem in &problems {
                writeln!(out, "{problem}")?;
            }
            writeln!(out, "{} problem(s)", problems.len())?;
        }
    }
    Ok(problems.is_empty())
}

/// The JSON Schema of a scenario file, generated from the Rust types.
pub fn schema() -> String {
    let schema = schemars::schema_for!(Scenario);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// Loads `dir` for the simulator and the transcript runner.
fn engine(dir: &Path) -> Result<Engine, String> {
    let scenarios: Scenarios = load_dir(dir).map_err(|error| error.to_string())?;
    Ok(Engine::new(Arc::new(scenarios)))
}

/// What the simulated user has before the conversation begins.
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub tags: Vec<String>,
    pub fields: Vec<(String, crate::values::FieldValue)>,
    /// Split arms forced by label.
    pub variants: Vec<String>,
    /// The LINE display name `{name}` renders (none: the fallback).
    pub name: Option<String>,
}

/// `name=value` as `--field` takes it: a whole number, a number, `true` or
/// `false`, else text.
pub fn parse_field(raw: &str) -> Result<(String, crate::values::FieldValue), String> {
    use crate::values::FieldValue;
    let (name, value) = raw
        .split_once('=')
        .ok_or_else(|| format!("{raw:?} is not name=value"))?;
    if !crate::scenario::is_field_name(name) {
        return Err(format!("{name:?} is not a field name ([a-z][a-z0-9_]{{0,39}})"));
    }
    let value = if let Ok(integer) = value.parse::<i64>() {
        FieldValue::Integer(integer)
    } else if let Ok(number) = value
        .parse::<f64>()
        .map_err(|_| ())
        .and_then(|n| if n.is_finite() { Ok(n) } else { Err(()) })
    {
        FieldValue::Number(number)
    } else if let Ok(flag) = value.parse::<bool>() {
        FieldValue::Bool(flag)
    } else {
        FieldValue::Text(value.to_owned())
    };
    Ok((name.to_owned(), value))
}

/// `engine` taking the arms labelled `variants` wherever a split has one; a
/// label no split has is an error (a typo would test the hashed arm instead).
fn forcing(engine: Engine, variants: Vec<String>) -> Result<Engine, String> {
    for label in &variants {
        let known = engine
            .scenarios()
            .iter()
            .any(|loaded| loaded.splits().any(|split| split.arm_labelled(label).is_some()));
        if !known {
            return Err(format!("no split has an arm labelled {label:?}"));
        }
    }
    Ok(engine.with_variants(variants))
}

/// A conversation in the terminal: bot messages as text, choices numbered; one
/// user action per line from `input`. `Err` when the scenarios do not load or
/// the scenario does not exist.
/// `given` is the user's state before the first line (tags, fields) and the
/// split arms to force.
pub fn simulate(
    dir: &Path,
    scenario: &str,
    given: Given,
    input: impl BufRead,
    out: &mut impl Write,
) -> Result<(), String> {
    let engine = forcing(engine(dir)?, given.variants)?;
    let id = crate::ids::ScenarioId::parse(scenario).map_err(|error| format!("scenario id {error}"))?;
    let start = engine
        .manual_start(&id, &conversation::simulated_user())
        .map_err(|error| format!("scenario {scenario:?}: {error}"))?;
    let mut conversation = Conversation::new(engine, START_DEDUP);
    conversation.given(given.tags, given.fields, given.name);
    let io = |error: std::io::Error| error.to_string();
    writeln!(
        out,
        "Simulating {scenario:?}. Type a number to tap a choice, /date VALUE to pick a date, /follow, /tap-card, /quit; anything else is sent as text."
    )
    .map_err(io)?;
    // The scenario's start, as a manual send delivers it.
    let turn = conversation.begin(&id, start);
    print_turn(out, &turn).map_err(io)?;
    for line in input.lines() {
        let line = line.map_err(io)?;
        let line = line.trim_end_matches(['\r', '\n']);
        let action = match line.trim() {
            "/quit" => break,
            "/follow" => UserAction::Follow,
            "/tap-card" => UserAction::TapCard,
            trimmed if trimmed.starts_with("/date ") => UserAction::Pick(trimmed["/date ".len()..].trim().to_owned()),
            trimmed
                if !trimmed.is_empty()
                    && trimmed.bytes().all(|b| b.is_ascii_digit())
                    && !conversation.awaits_text() =>
            {
                UserAction::TapNumber(trimmed.parse().unwrap_or(0))
            }
            _ => UserAction::Text(line.to_owned()),
        };
        writeln!(out, "> {line}").map_err(io)?;
        let turn = conversation.act(&action);
        print_turn(out, &turn).map_err(io)?;
    }
    Ok(())
}

fn print_turn(out: &mut impl Write, turn: &conversation::Turn) -> std::io::Result<()> {
    for split in &turn.splits {
        writeln!(out, "  ({split})")?;
    }
    for (index, said) in turn.said.iter().enumerate() {
        if turn.waits.contains(&index) {
            writeln!(out, "  {said}")?;
        } else {
            writeln!(out, "bot: {said}")?;
        }
    }
    for (number, label) in turn.choices.iter().enumerate() {
        writeln!(out, "  {}) {label}", number + 1)?;
    }
    if let Some(note) = &turn.note {
        writeln!(out, "  ({note})")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits are played on at once, each shown as a line, in the simulator and
    /// in transcripts alike.
    #[test]
    fn the_simulator_plays_waits_on() {
        let dir = std::env::temp_dir().join(format!("line-survey-waits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("steps.toml"),
            r#"
            id = "steps"
            [[nodes]]
            id = "hi"
            kind = "trigger"
            on = "follow"
            next = "welcome"
            [[nodes]]
            id = "welcome"
            kind = "message"
            text = "Welcome"
            next = "two_days"
            [[nodes]]
            id = "two_days"
            kind = "wait"
            at = "10:00"
            after_days = 2
            next = "tip"
            [[nodes]]
            id = "tip"
            kind = "message"
            text = "A tip"
            next = "soon"
            [[nodes]]
            id = "soon"
            kind = "wait"
            after = "90m"
            next = "bye"
            [[nodes]]
            id = "bye"
            kind = "end"
            text = "Bye"
            "#,
        )
        .unwrap();
        let mut out = Vec::new();
        let result = simulate(&dir, "steps", Given::default(), "/follow\n".as_bytes(), &mut out);
        std::fs::remove_dir_all(&dir).ok();
        result.unwrap();
        let out = String::from_utf8(out).unwrap();
        let expected = "bot: Welcome\n  (at 10:00, 2 days later)\nbot: A tip\n  (after 90m)\nbot: Bye\n";
        assert_eq!(out.matches(expected).count(), 2, "{out}");
    }
}
