//! Friend-add sources as a file (`SOURCES_FILE`, default `sources.toml`): one
//! entry per link or QR code (`/r/{id}`), with the tags a user gets when the
//! source is recorded and the scenario it starts once for them. Validated
//! with the scenarios it names, so `line-survey check` refuses what the
//! service could not follow.

use super::{ScenarioError, Scenarios};
use crate::ids::ScenarioId;
use serde::Deserialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The longest source id: it is part of a link and of document ids.
pub const MAX_SOURCE_ID_CHARS: usize = 40;
/// A label is for people (the console, reports).
pub const MAX_LABEL_CHARS: usize = 100;
/// The callback's path segment: no source may take it.
pub const RESERVED_ID: &str = "callback";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourcesFile {
    #[serde(default)]
    sources: Vec<SourceEntry>,
}

/// One source as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceEntry {
    id: String,
    label: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    scenario: Option<String>,
}

/// A checked source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub id: String,
    pub label: String,
    pub tags: Vec<String>,
    pub scenario: Option<ScenarioId>,
}

/// Every source of the file, in its order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    list: Vec<Source>,
}

impl Sources {
    pub fn get(&self, id: &str) -> Option<&Source> {
        self.list.iter().find(|source| source.id == id)
    }

    pub fn all(&self) -> &[Source] {
        &self.list
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }
}

/// Whether `id` may name a source: `[a-z0-9_]{1,40}`, not `callback`.
pub fn valid_source_id(id: &str) -> bool {
    (1..=MAX_SOURCE_ID_CHARS).contains(&id.len())
        && id != RESERVED_ID
        && id
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_')
}

/// Reads and checks `path` against `scenarios`. Every problem is listed.
pub fn load_sources(path: &Path, scenarios: &Scenarios) -> Result<Sources, Vec<ScenarioError>> {
    let problem = |problem: String| ScenarioError {
        file: path.to_owned(),
        scenario: None,
        node: None,
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|error| vec![problem(format!("cannot be read: {error}"))])?;
    parse_sources(path, &text, scenarios)
}

/// Checks the text of a sources file (`path` names it in the problems).
pub fn parse_sources(path: &Path, text: &str, scenarios: &Scenarios) -> Result<Sources, Vec<ScenarioError>> {
    let problem = |problem: String| ScenarioError {
        file: PathBuf::from(path),
        scenario: None,
        node: None,
        problem,
    };
    let file: SourcesFile = toml::from_str(text).map_err(|error| vec![problem(format!("is not valid: {error}"))])?;
    let mut problems = Vec::new();
    let mut seen = HashSet::new();
    let mut list = Vec::new();
    for entry in file.sources {
        let named = |text: String| problem(format!("source {:?}: {text}", entry.id));
        if !valid_source_id(&entry.id) {
            problems.push(named(format!(
                "the id must be 1 to {MAX_SOURCE_ID_CHARS} of a-z, 0-9 and _, and not {RESERVED_ID:?}"
            )));
        } else if !seen.insert(entry.id.clone()) {
            problems.push(named("the id is used twice".to_owned()));
        }
        let label = entry.label.trim();
        if label.is_empty() || label.chars().count() > MAX_LABEL_CHARS || label.contains('\0') {
            problems.push(named(format!("the label must be 1 to {MAX_LABEL_CHARS} characters")));
        }
        let mut tags = Vec::new();
        for tag in &entry.tags {
            let tag = tag.trim();
            if tag.is_empty() || tag.chars().count() > 100 || tag.contains('\0') {
                problems.push(named(format!("the tag {tag:?} must be 1 to 100 characters")));
            } else if !tags.iter().any(|seen| seen == tag) {
                tags.push(tag.to_owned());
            }
        }
        let scenario = match entry.scenario.as_deref().map(str::trim) {
            None => None,
            Some(name) => match ScenarioId::parse(name) {
                Ok(id) if scenarios.get(&id).is_some() => Some(id),
                _ => {
                    problems.push(named(format!("the scenario {name:?} does not exist")));
                    None
                }
            },
        };
        list.push(Source {
            id: entry.id,
            label: label.to_owned(),
            tags,
            scenario,
        });
    }
    if problems.is_empty() {
        Ok(Sources { list })
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenarios() -> Scenarios {
        let survey = "id = \"welcome_insta\"\n[[nodes]]\nid = \"hi\"\nkind = \"message\"\ntext = \"ようこそ\"\n";
        super::super::load::load_str(&[("welcome_insta.toml", survey)]).expect("the sample loads")
    }

    #[test]
    fn ids_follow_the_link_rules() {
        let cases = [
            ("instagram_dec", true),
            ("a", true),
            ("poster_2026", true),
            ("callback", false),
            ("", false),
            ("Instagram", false),
            ("with-dash", false),
            ("日本", false),
            ("a/b", false),
            (&*"x".repeat(40), true),
            (&*"x".repeat(41), false),
        ];
        for (id, valid) in cases {
            assert_eq!(valid_source_id(id), valid, "{id:?}");
        }
    }

    #[test]
    fn a_good_file_loads_in_order() {
        let text = r#"
[[sources]]
id = "instagram_dec"
label = "Instagram 12月広告"
tags = ["src_instagram", "src_instagram"]
scenario = "welcome_insta"

[[sources]]
id = "shop_counter"
label = "店頭ポスター"
"#;
        let sources = parse_sources(Path::new("sources.toml"), text, &scenarios()).expect("valid");
        assert_eq!(sources.len(), 2);
        let first = sources.get("instagram_dec").expect("first");
        assert_eq!(first.tags, vec!["src_instagram".to_owned()]);
        assert_eq!(first.scenario.as_ref().map(ScenarioId::as_str), Some("welcome_insta"));
        assert_eq!(sources.all()[1].scenario, None);
        assert!(sources.get("nope").is_none());
    }

    #[test]
    fn every_problem_is_named() {
        let cases = [
            ("[[sources]]\nid = \"callback\"\nlabel = \"x\"\n", "the id must be"),
            ("[[sources]]\nid = \"Bad-Id\"\nlabel = \"x\"\n", "the id must be"),
            (
                "[[sources]]\nid = \"a\"\nlabel = \"x\"\n[[sources]]\nid = \"a\"\nlabel = \"y\"\n",
                "the id is used twice",
            ),
            ("[[sources]]\nid = \"a\"\nlabel = \" \"\n", "the label must be"),
            (
                "[[sources]]\nid = \"a\"\nlabel = \"x\"\nscenario = \"missing\"\n",
                "the scenario \"missing\" does not exist",
            ),
            (
                "[[sources]]\nid = \"a\"\nlabel = \"x\"\ntags = [\"\"]\n",
                "the tag \"\" must be",
            ),
            ("[[sources]]\nid = \"a\"\nlabel = \"x\"\nurl = \"y\"\n", "is not valid"),
            ("[[sources]\n", "is not valid"),
        ];
        for (text, expected) in cases {
            let problems = parse_sources(Path::new("sources.toml"), text, &scenarios()).expect_err(text);
            assert!(
                problems.iter().any(|problem| problem.to_string().contains(expected)),
                "{text:?}: {problems:?}"
            );
            assert!(problems[0].to_string().starts_with("sources.toml: "), "{problems:?}");
        }
    }
}
