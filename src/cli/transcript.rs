//! `line-survey test`: transcript files (`scenarios/tests/*.toml`) replayed
//! against the scenarios in memory. Each step is one user action with what the
//! bot must say, the choices it must offer, the tags and the answers recorded.
//!
//! ```toml
//! scenario = "ja_profile"      # optional: begin with this scenario's start
//! name = "太郎"                # optional: the LINE display name {name} renders
//!                              # (also tags, fields and variants: the user's
//!                              # state before the first step)
//! [[steps]]
//! send = "35"                  # or tap = "label", pick = "2027-03-14",
//!                              # follow = true, tap_card = true
//! bot = ["郵便番号を…"]         # the bot's messages, in order ([] = silence);
//!                              # a wait played on shows as "(after 1d)"
//! choices = ["1", "2"]         # the labels of the question asked
//! tags = ["answered:…"]        # every tag of the user afterwards
//! answers = { age = 35 }       # answers recorded so far, by node
//! fields = { plan = "gold" }   # these user fields afterwards (others may exist)
//! note = "answered before"     # part of what the simulator says about it
//! ```

use super::conversation::{Conversation, Turn, UserAction};
use super::{START_DEDUP, engine};
use crate::scenario::typed::AnswerValue;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Transcript {
    #[serde(default)]
    scenario: Option<String>,
    /// Split arms forced by label, as `simulate --variant` does.
    #[serde(default)]
    variants: Vec<String>,
    /// The user's tags before the first step (`simulate --tag`).
    #[serde(default)]
    tags: Vec<String>,
    /// The user's fields before the first step (`simulate --field`).
    #[serde(default)]
    fields: BTreeMap<String, crate::values::FieldValue>,
    /// The user's LINE display name (`simulate --name`).
    #[serde(default)]
    name: Option<String>,
    steps: Vec<Step>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    #[serde(default)]
    send: Option<String>,
    #[serde(default)]
    tap: Option<String>,
    #[serde(default)]
    pick: Option<String>,
    #[serde(default)]
    follow: bool,
    #[serde(default)]
    tap_card: bool,
    #[serde(default)]
    bot: Option<Vec<String>>,
    #[serde(default)]
    choices: Option<Vec<String>>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    answers: Option<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    fields: Option<BTreeMap<String, crate::values::FieldValue>>,
    #[serde(default)]
    note: Option<String>,
    /// The arm taken so far at each named split node.
    #[serde(default)]
    arms: Option<BTreeMap<String, String>>,
}

impl Step {
    fn action(&self) -> Result<UserAction, String> {
        let mut actions = Vec::new();
        if let Some(text) = &self.send {
            actions.push(UserAction::Text(text.clone()));
        }
        if let Some(label) = &self.tap {
            actions.push(UserAction::TapLabel(label.clone()));
        }
        if let Some(value) = &self.pick {
            actions.push(UserAction::Pick(value.clone()));
        }
        if self.follow {
            actions.push(UserAction::Follow);
        }
        if self.tap_card {
            actions.push(UserAction::TapCard);
        }
        match actions.len() {
            1 => Ok(actions.remove(0)),
            0 => Err("the step has no action (send, tap, pick, follow or tap_card)".to_owned()),
            _ => Err("the step has more than one action".to_owned()),
        }
    }
}

/// Runs every transcript in `tests_dir` against the scenarios in `scenarios_dir`.
/// Prints a line per transcript and a readable difference per failed step.
/// `Ok(true)` when all passed; `Err` when the scenarios or a file cannot be read.
pub fn run_transcripts(scenarios_dir: &Path, tests_dir: &Path, out: &mut impl Write) -> Result<bool, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(tests_dir)
        .map_err(|error| format!("cannot read {}: {error}", tests_dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("{} holds no *.toml transcripts", tests_dir.display()));
    }
    let io = |error: std::io::Error| error.to_string();
    let mut all_passed = true;
    for file in &files {
        let failures = run_one(scenarios_dir, file)?;
        if failures.is_empty() {
            writeln!(out, "ok    {}", file.display()).map_err(io)?;
        } else {
            all_passed = false;
            writeln!(out, "FAIL  {}", file.display()).map_err(io)?;
            for failure in failures {
                writeln!(out, "{failure}").map_err(io)?;
            }
        }
    }
    Ok(all_passed)
}

fn run_one(scenarios_dir: &Path, file: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(file).map_err(|error| format!("cannot read {}: {error}", file.display()))?;
    let transcript: Transcript =
        toml::from_str(&text).map_err(|error| format!("{}: not a transcript: {error}", file.display()))?;
    let engine = super::forcing(engine(scenarios_dir)?, transcript.variants.clone())
        .map_err(|problem| format!("{}: {problem}", file.display()))?;
    let begin = match &transcript.scenario {
        Some(scenario) => {
            let id = crate::ids::ScenarioId::parse(scenario.clone()).map_err(|error| format!("scenario id {error}"))?;
            let start = engine
                .manual_start(&id, &super::conversation::simulated_user())
                .map_err(|error| format!("{}: scenario {scenario:?}: {error}", file.display()))?;
            Some((id, start))
        }
        None => None,
    };
    let mut conversation = Conversation::new(engine, START_DEDUP);
    conversation.given(
        transcript.tags.clone(),
        transcript.fields.clone().into_iter().collect(),
        transcript.name.clone(),
    );
    if let Some((id, start)) = begin {
        conversation.begin(&id, start);
    }
    let mut failures = Vec::new();
    for (index, step) in transcript.steps.iter().enumerate() {
        let action = step
            .action()
            .map_err(|problem| format!("{}: step {}: {problem}", file.display(), index + 1))?;
        let turn = conversation.act(&action);
        let problems = compare(step, &turn, &conversation);
        if !problems.is_empty() {
            failures.push(format!(
                "  step {} ({}):\n{}",
                index + 1,
                describe(&action),
                problems.join("\n")
            ));
        }
    }
    Ok(failures)
}

fn describe(action: &UserAction) -> String {
    match action {
        UserAction::Follow => "follow".to_owned(),
        UserAction::Text(text) => format!("send {text:?}"),
        UserAction::TapNumber(number) => format!("tap choice {number}"),
        UserAction::TapLabel(label) => format!("tap {label:?}"),
        UserAction::TapCard => "tap the card".to_owned(),
        UserAction::Pick(value) => format!("pick {value:?}"),
    }
}

/// A readable difference: `-` what was expected, `+` what happened.
fn diff(what: &str, expected: &[String], got: &[String]) -> Option<String> {
    (expected != got).then(|| {
        let mut lines = vec![format!("    {what} differ:")];
        lines.extend(expected.iter().map(|line| format!("    - {line}")));
        lines.extend(got.iter().map(|line| format!("    + {line}")));
        lines.join("\n")
    })
}

fn compare(step: &Step, turn: &Turn, conversation: &Conversation) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(bot) = &step.bot {
        problems.extend(diff("bot messages", bot, &turn.said));
    }
    if let Some(choices) = &step.choices {
        problems.extend(diff("choices", choices, &turn.choices));
    }
    if let Some(tags) = &step.tags {
        let mut expected = tags.clone();
        expected.sort();
        let got: Vec<String> = conversation.tags.iter().cloned().collect();
        problems.extend(diff("tags", &expected, &got));
    }
    if let Some(fields) = &step.fields {
        for (name, expected) in fields {
            match conversation.fields.get(name) {
                Some(got) if got == expected => {}
                Some(got) => problems.push(format!("field {name}: expected {expected:?}, got {got:?}")),
                None => problems.push(format!("field {name}: expected {expected:?}, not set")),
            }
        }
    }
    if let Some(answers) = &step.answers {
        let recorded = conversation.answers();
        for (node, expected) in answers {
            let got = recorded
                .iter()
                .find(|(_, answered, _)| answered == node)
                .map(|(_, _, value)| value);
            let same = match (expected, got) {
                (toml::Value::Integer(a), Some(AnswerValue::Integer(b))) => a == b,
                (toml::Value::Float(a), Some(AnswerValue::Number(b))) => a == b,
                (toml::Value::String(a), Some(AnswerValue::Text(b))) => a == b,
                _ => false,
            };
            if !same {
                let got = got.map_or("nothing recorded".to_owned(), |value| format!("{value:?}"));
                problems.push(format!("    answer to {node}: expected {expected}, got {got}"));
            }
        }
    }
    if let Some(arms) = &step.arms {
        for (split, expected) in arms {
            match conversation.arms().get(split) {
                Some(got) if got == expected => {}
                Some(got) => problems.push(format!("    {split}: expected {expected:?}, took {got:?}")),
                None => problems.push(format!("    {split}: expected {expected:?}, not passed")),
            }
        }
    }
    if let Some(note) = &step.note {
        let got = turn.note.clone().unwrap_or_default();
        if !got.contains(note.as_str()) {
            problems.push(format!("    note: expected it to mention {note:?}, got {got:?}"));
        }
    }
    problems
}
