//! Reading the scenario directory at start.

use super::validate::{Report, ScenarioError, check_scenario, check_set};
use super::{Entry, LoadedScenario, Node, Scenario, Scenarios, TriggerOn, normalize_keyword};
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum LoadError {
    Io { path: PathBuf, source: std::io::Error },
    NoScenarios { dir: PathBuf },
    Invalid(Vec<ScenarioError>),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            LoadError::NoScenarios { dir } => {
                write!(f, "{} holds no *.toml scenario files", dir.display())
            }
            LoadError::Invalid(errors) => {
                write!(f, "{} problem(s) in the scenario files:", errors.len())?;
                for error in errors {
                    write!(f, "\n  {error}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// Loads every `*.toml` file in `dir` (in name order) and checks them together.
pub fn load_dir(dir: &Path) -> Result<Scenarios, LoadError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| LoadError::Io { path, source }
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()
        .map_err(io(dir))?;
    paths.retain(|path| path.extension().is_some_and(|ext| ext == "toml"));
    paths.sort();
    if paths.is_empty() {
        return Err(LoadError::NoScenarios { dir: dir.to_owned() });
    }
    let mut parsed = Vec::new();
    let mut unreadable = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        match toml::from_str::<Scenario>(&text) {
            Ok(scenario) => parsed.push((scenario, path)),
            Err(error) => unreadable.push(ScenarioError {
                file: path,
                scenario: None,
                node: None,
                problem: format!("not a valid scenario file: {error}"),
            }),
        }
    }
    match from_parsed(parsed) {
        Ok(scenarios) if unreadable.is_empty() => Ok(scenarios),
        Ok(_) => Err(LoadError::Invalid(unreadable)),
        Err(LoadError::Invalid(errors)) => Err(LoadError::Invalid(unreadable.into_iter().chain(errors).collect())),
        Err(other) => Err(other),
    }
}

fn from_parsed(parsed: Vec<(Scenario, PathBuf)>) -> Result<Scenarios, LoadError> {
    let mut errors = Vec::new();
    for (scenario, path) in &parsed {
        let mut report = Report::new(path, scenario.id.as_str());
        check_scenario(scenario, &mut report);
        errors.extend(report.errors);
    }
    errors.extend(check_set(&parsed));
    if !errors.is_empty() {
        return Err(LoadError::Invalid(errors));
    }
    let mut scenarios = Scenarios::default();
    for (scenario, path) in parsed {
        for node in &scenario.nodes {
            let Node::Trigger(trigger) = node else {
                continue;
            };
            let entry = Entry {
                scenario: scenario.id.clone(),
                node: trigger.next.clone(),
            };
            match trigger.on {
                TriggerOn::Follow => scenarios.follow_trigger = Some(entry),
                TriggerOn::Text if trigger.keywords.is_empty() => scenarios.any_text_trigger = Some(entry),
                TriggerOn::Text => {
                    for keyword in &trigger.keywords {
                        scenarios
                            .keyword_triggers
                            .insert(normalize_keyword(keyword), entry.clone());
                    }
                }
            }
        }
        scenarios.takes_typed_answers |= scenario.nodes.iter().any(|node| matches!(node, Node::TextQuestion(_)));
        match LoadedScenario::try_new(scenario, path) {
            Ok(loaded) => {
                scenarios.by_id.insert(loaded.id().clone(), loaded);
            }
            // Validation refuses these already; kept as an error, not a panic.
            Err(error) => errors.push(error),
        }
    }
    if !errors.is_empty() {
        return Err(LoadError::Invalid(errors));
    }
    Ok(scenarios)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(files: &[(&str, &str)]) -> Result<Scenarios, LoadError> {
        let parsed = files
            .iter()
            .map(|(name, text)| {
                (
                    toml::from_str::<Scenario>(text).expect("test file parses"),
                    PathBuf::from(name),
                )
            })
            .collect();
        from_parsed(parsed)
    }

    fn problems(files: &[(&str, &str)]) -> Vec<String> {
        match load(files) {
            Err(LoadError::Invalid(errors)) => errors.iter().map(ToString::to_string).collect(),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => Vec::new(),
        }
    }

    const SURVEY: &str = r#"
        id = "lunch"
        [[nodes]]
        id = "hello"
        kind = "trigger"
        on = "text"
        keywords = ["Lunch"]
        next = "ask"
        [[nodes]]
        id = "ask"
        kind = "survey"
        text = "How was lunch?"
        choices = [
          { label = "Good", value = "good", tags = ["happy"], next = "bye" },
          { label = "Bad", value = "bad" },
        ]
        [[nodes]]
        id = "bye"
        kind = "end"
        text = "Thanks!"
    "#;

    #[test]
    fn a_valid_survey_loads_with_its_triggers() {
        let scenarios = load(&[("lunch.toml", SURVEY)]).unwrap();
        let entry = scenarios.text_trigger("  lunch ").unwrap();
        assert_eq!(entry.scenario.as_str(), "lunch");
        assert_eq!(entry.node.as_str(), "ask");
        assert!(scenarios.text_trigger("dinner").is_none());
        let lunch = scenarios.get(&entry.scenario).unwrap();
        assert!(lunch.has_survey);
        assert_eq!(lunch.start.as_str(), "ask");
    }

    #[test]
    fn errors_name_file_scenario_and_node() {
        let broken = SURVEY.replace(r#"next = "bye""#, r#"next = "nowhere""#);
        let found = problems(&[("lunch.toml", &broken)]);
        assert_eq!(
            found,
            vec![r#"lunch.toml: scenario "lunch": node "ask": `next` names node "nowhere", which does not exist"#]
        );
    }

    const QUESTIONS: &str = r#"
        id = "profile"
        [[nodes]]
        id = "hello"
        kind = "trigger"
        on = "text"
        keywords = ["profile"]
        next = "age"
        [[nodes]]
        id = "age"
        kind = "text_question"
        text = "How old are you?"
        validate = { type = "number", min = 0, max = 120, integer = true }
        next = "when"
        [[nodes]]
        id = "when"
        kind = "date_question"
        text = "When?"
        min = "2026-01-01"
        next = "rate"
        [[nodes]]
        id = "rate"
        kind = "survey"
        style = "quick_reply"
        text = "Rate us"
        choices = [{ label = "1", value = "1" }]
    "#;

    #[test]
    fn question_kinds_load_and_their_mistakes_are_named() {
        let scenarios = load(&[("p.toml", QUESTIONS)]).unwrap_or_else(|error| panic!("{error}"));
        assert!(scenarios.takes_typed_answers());
        let thirteen: Vec<String> = (0..13)
            .map(|n| format!(r#"{{ label = "{n}", value = "{n}" }}"#))
            .collect();
        let fourteen = format!("{}, {{ label = \"x\", value = \"x\" }}", thirteen.join(", "));
        let with_choices = |choices: &str| {
            QUESTIONS.replace(
                r#"choices = [{ label = "1", value = "1" }]"#,
                &format!("choices = [{choices}]"),
            )
        };
        assert!(
            problems(&[("p.toml", &with_choices(&thirteen.join(", ")))]).is_empty(),
            "13 quick replies are fine"
        );
        let cases: Vec<(String, &str)> = vec![
            (
                with_choices(&fourteen),
                "has 14 choices; a quick reply question takes 1 to 13",
            ),
            (
                QUESTIONS.replace(
                    r#"type = "number", min = 0, max = 120, integer = true"#,
                    r#"type = "pattern", pattern = "(""#,
                ),
                r#"node "age": validate: pattern "(" does not compile"#,
            ),
            (
                QUESTIONS.replace("min = 0, max = 120", "min = 9, max = 1"),
                "min 9 is greater than max 1",
            ),
            (
                QUESTIONS.replace(r#"min = "2026-01-01""#, "min = \"2026-01-01\"\nmax = \"2025-01-01\""),
                "min must be earlier than max",
            ),
            (
                QUESTIONS.replace(r#"min = "2026-01-01""#, "min = \"2026-01-01\"\nmax = \"2026-01-01\""),
                "min must be earlier than max",
            ),
            (
                QUESTIONS.replace(r#"min = "2026-01-01""#, r#"min = "1899-12-31""#),
                "outside LINE's range",
            ),
            (
                QUESTIONS.replace(r#"min = "2026-01-01""#, r#"min = "1/1/2026""#),
                r#"min "1/1/2026" is not in the Date format"#,
            ),
            (
                QUESTIONS.replace(r#"id = "profile""#, "id = \"profile\"\nanswer_window = \"soon\""),
                r#"answer_window "soon" is not a duration"#,
            ),
            (
                QUESTIONS.replace(
                    r#"next = "when""#,
                    r#"next = "when"
        on_give_up = "nowhere""#,
                ),
                r#"node "age": `next` names node "nowhere""#,
            ),
            (
                QUESTIONS.replace(r#"next = "when""#, "next = \"when\"\nmax_attempts = 0"),
                "max_attempts must be at least 1",
            ),
            (
                QUESTIONS.replace(r#"text = "Rate us""#, "text = \"Rate us\"\ntitle = \"T\""),
                "a quick reply question has no title",
            ),
        ];
        for (file, expected) in cases {
            let found = problems(&[("p.toml", &file)]);
            assert!(
                found.iter().any(|problem| problem.contains(expected)),
                "expected {expected:?} in {found:?}"
            );
        }
    }

    #[test]
    fn limits_count_as_line_counts() {
        // 20 emoji are 20 grapheme clusters (a label's unit) but 40 UTF-16 units.
        let emoji_label = SURVEY.replace(r#"label = "Good""#, &format!(r#"label = "{}""#, "👍".repeat(20)));
        assert!(
            problems(&[("a.toml", &emoji_label)]).is_empty(),
            "labels count graphemes"
        );
        let family = SURVEY.replace(r#"label = "Good""#, &format!(r#"label = "{}""#, "👨‍👩‍👧".repeat(21)));
        assert!(problems(&[("a.toml", &family)])[0].contains("21 characters; LINE allows at most 20"));
        // A text message counts UTF-16 code units: 2,500 emoji fill 5,000.
        let message = |text: &str| {
            SURVEY.replace(
                "[[nodes]]\n        id = \"bye\"\n        kind = \"end\"\n        text = \"Thanks!\"",
                &format!("[[nodes]]\n        id = \"bye\"\n        kind = \"end\"\n        text = \"{text}\""),
            )
        };
        assert!(problems(&[("a.toml", &message(&"🍎".repeat(2500)))]).is_empty());
        let over = problems(&[("a.toml", &message(&format!("{}a", "🍎".repeat(2500))))]);
        assert!(over[0].contains("5001 characters"), "{over:?}");
    }

    #[test]
    fn line_limits_are_enforced() {
        let long_label = SURVEY.replace(r#"label = "Good""#, r#"label = "This label is far too long""#);
        assert!(problems(&[("a.toml", &long_label)])[0].contains("20"));
        let five = SURVEY.replace(
            r#"{ label = "Bad", value = "bad" },"#,
            r#"{ label = "B", value = "b" }, { label = "C", value = "c" }, { label = "D", value = "d" }, { label = "E", value = "e" },"#,
        );
        assert!(problems(&[("a.toml", &five)])[0].contains("5 choices"));
        // Non-ASCII is percent-encoded (9 characters per kana), so a valid-length
        // value can still overflow the 300-character postback data.
        let long_value = SURVEY.replace(r#"value = "bad""#, &format!("value = \"{}\"", "ア".repeat(40)));
        assert!(
            problems(&[("a.toml", &long_value)])
                .iter()
                .any(|p| p.contains("postback data"))
        );
    }

    #[test]
    fn nul_in_ids_is_refused() {
        let nul = SURVEY.replace(r#"id = "ask""#, r#"id = "a\u0000sk""#);
        assert!(problems(&[("a.toml", &nul)]).iter().any(|p| p.contains("NUL")));
    }

    #[test]
    fn message_loops_and_competing_triggers_are_refused() {
        let looping = r#"
            id = "loop"
            [[nodes]]
            id = "a"
            kind = "message"
            text = "a"
            next = "b"
            [[nodes]]
            id = "b"
            kind = "message"
            text = "b"
            next = "a"
            [[nodes]]
            id = "t"
            kind = "trigger"
            on = "text"
            keywords = ["lunch"]
            next = "a"
        "#;
        let found = problems(&[("lunch.toml", SURVEY), ("loop.toml", looping)]);
        assert!(found.iter().any(|p| p.contains("loops")), "{found:?}");
        assert!(
            found.iter().any(|p| p.contains(r#"keyword "lunch" already starts"#)),
            "{found:?}"
        );
    }

    /// Message nodes `{prefix}1` to `{prefix}{count}`, chained, the last one
    /// linking to `last_next` if given.
    fn messages(prefix: &str, count: usize, last_next: Option<&str>) -> String {
        (1..=count)
            .map(|n| {
                let next = if n < count {
                    format!("next = \"{prefix}{}\"", n + 1)
                } else {
                    last_next.map(|id| format!("next = \"{id}\"")).unwrap_or_default()
                };
                format!("[[nodes]]\nid = \"{prefix}{n}\"\nkind = \"message\"\ntext = \"{n}\"\n{next}\n")
            })
            .collect()
    }

    /// Every entry point's chain is walked: triggers, `next` links, the start
    /// (manual sends, card taps) and, for a Flex card, the start of the scenario
    /// it starts. Each case lists every problem expected, in order.
    #[test]
    fn every_entry_point_is_walked() {
        const TOO_MANY: &str = "the message chain would send 6 messages at once; LINE allows at most 5";
        let trigger_to_end = "[[nodes]]\nid = \"t\"\nkind = \"trigger\"\non = \"text\"\nkeywords = [\"go\"]\nnext = \"fine\"\n\
                              [[nodes]]\nid = \"fine\"\nkind = \"end\"\ntext = \"ok\"\n";
        // `start` names a six-message chain no trigger reaches.
        let explicit_start = format!(
            "id = \"manual\"\nstart = \"m1\"\n{trigger_to_end}{}",
            messages("m", 6, None)
        );
        // No `start`: the first non-trigger node starts a six-message chain.
        let implicit_start = format!("id = \"manual\"\n{}{trigger_to_end}", messages("m", 6, None));
        // A card starting a scenario whose start chain is five messages then a survey.
        let card = "id = \"welcome\"\n[[nodes]]\nid = \"card\"\nkind = \"flex_image\"\n\
                    image_url = \"https://example.com/a.png\"\nalt_text = \"Tap\"\nstarts = \"long\"\n";
        let long_survey = format!(
            "id = \"long\"\n{}[[nodes]]\nid = \"ask\"\nkind = \"survey\"\ntext = \"Q?\"\n\
             choices = [{{ label = \"A\", value = \"a\" }}]\n",
            messages("m", 5, Some("ask"))
        );
        // Two choices leading to the same six-message chain: one problem, on the survey.
        let choice = format!(
            "id = \"quiz\"\n[[nodes]]\nid = \"ask\"\nkind = \"survey\"\ntext = \"Q?\"\n\
             choices = [{{ label = \"A\", value = \"a\", next = \"m1\" }}, {{ label = \"B\", value = \"b\", next = \"m1\" }}]\n{}",
            messages("m", 6, None)
        );
        let five = format!("id = \"ok\"\n{}", messages("m", 5, None));
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<String>);
        let cases: Vec<Case<'_>> = vec![
            (
                "explicit start unreachable from triggers",
                vec![("manual.toml", &explicit_start)],
                vec![format!(
                    r#"manual.toml: scenario "manual": the chain from `start` (node "m1") cannot be sent: {TOO_MANY}"#
                )],
            ),
            (
                "implicit start",
                vec![("manual.toml", &implicit_start)],
                vec![format!(
                    r#"manual.toml: scenario "manual": the chain from `start` (node "m1") cannot be sent: {TOO_MANY}"#
                )],
            ),
            (
                "flex card whose target's start chain is too long",
                vec![("long.toml", &long_survey), ("welcome.toml", card)],
                vec![
                    format!(
                        r#"long.toml: scenario "long": the chain from `start` (node "m1") cannot be sent: {TOO_MANY}"#
                    ),
                    format!(
                        r#"welcome.toml: scenario "welcome": node "card": `starts` names scenario "long", which cannot be started: the chain from `start` (node "m1") cannot be sent: {TOO_MANY}"#
                    ),
                ],
            ),
            (
                "choice next",
                vec![("quiz.toml", &choice)],
                vec![format!(r#"quiz.toml: scenario "quiz": node "ask": {TOO_MANY}"#)],
            ),
            (
                "five messages from the start are fine",
                vec![("ok.toml", &five)],
                vec![],
            ),
        ];
        let failed: Vec<String> = cases
            .into_iter()
            .filter_map(|(name, files, expected)| {
                let found = problems(&files);
                (found != expected).then(|| format!("case {name:?}\n  found:    {found:?}\n  expected: {expected:?}"))
            })
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }

    #[test]
    fn an_unknown_start_is_reported_once() {
        let broken = SURVEY.replace(r#"id = "lunch""#, "id = \"lunch\"\nstart = \"nowhere\"");
        assert_eq!(
            problems(&[("lunch.toml", &broken)]),
            vec![r#"lunch.toml: scenario "lunch": `start` names node "nowhere", which does not exist"#]
        );
    }

    /// The constructor refuses, instead of panicking on, what validation should
    /// have caught: no node to start at, or a start chain that cannot be sent.
    #[test]
    fn loaded_scenarios_always_have_a_sendable_start() {
        let only_trigger = "id = \"t\"\n[[nodes]]\nid = \"t\"\nkind = \"trigger\"\non = \"follow\"\nnext = \"t\"\n";
        let long = format!("id = \"long\"\n{}", messages("m", 6, None));
        for text in [only_trigger, long.as_str()] {
            let scenario = toml::from_str::<Scenario>(text).expect("test file parses");
            assert!(
                LoadedScenario::try_new(scenario, PathBuf::from("x.toml")).is_err(),
                "{text}"
            );
        }
        let five = toml::from_str::<Scenario>(&format!("id = \"ok\"\n{}", messages("m", 5, None))).unwrap();
        let loaded = LoadedScenario::try_new(five, PathBuf::from("ok.toml")).unwrap();
        assert_eq!(loaded.start.as_str(), "m1");
    }

    #[test]
    fn the_sample_scenarios_load() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let scenarios = load_dir(&dir).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(scenarios.len(), 5);
        for loaded in scenarios.iter() {
            assert!(
                crate::scenario::walk_nodes(loaded, &loaded.start).is_ok(),
                "{}",
                loaded.id().as_str()
            );
        }
        let card_target = scenarios
            .get(&crate::ids::ScenarioId::parse("satisfaction").unwrap())
            .unwrap();
        assert_eq!(card_target.start.as_str(), "intro");
    }
}
