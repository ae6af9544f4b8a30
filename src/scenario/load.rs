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
            Ok(scenario) => parsed.push((scenario, path, text)),
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

/// Checks and indexes parsed files: each is the scenario, its path and its text
/// as read.
/// One recorded version of a scenario (the content of its file then), checked
/// on its own: a run pinned to an old version reads it back with this.
pub fn load_version(text: &str, source: PathBuf) -> Result<LoadedScenario, LoadError> {
    let scenario = toml::from_str::<Scenario>(text).map_err(|error| {
        LoadError::Invalid(vec![ScenarioError {
            file: source.clone(),
            scenario: None,
            node: None,
            problem: format!("not a valid scenario file: {error}"),
        }])
    })?;
    let mut report = Report::new(&source, scenario.id.as_str());
    check_scenario(&scenario, &mut report);
    if !report.errors.is_empty() {
        return Err(LoadError::Invalid(report.errors));
    }
    LoadedScenario::try_new(scenario, source, text.to_owned()).map_err(|error| LoadError::Invalid(vec![error]))
}

fn from_parsed(parsed: Vec<(Scenario, PathBuf, String)>) -> Result<Scenarios, LoadError> {
    let mut errors = Vec::new();
    for (scenario, path, _) in &parsed {
        let mut report = Report::new(path, scenario.id.as_str());
        check_scenario(scenario, &mut report);
        errors.extend(report.errors);
    }
    let files: Vec<(&Scenario, &Path)> = parsed
        .iter()
        .map(|(scenario, path, _)| (scenario, path.as_path()))
        .collect();
    errors.extend(check_set(&files));
    if !errors.is_empty() {
        return Err(LoadError::Invalid(errors));
    }
    let mut scenarios = Scenarios::default();
    for (scenario, path, content) in parsed {
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
        // A date question's hint answers text typed at its picker: the user's
        // open question is read for texts then too (the text is still kept
        // only for a text question).
        scenarios.takes_typed_answers |= scenario
            .nodes
            .iter()
            .any(|node| matches!(node, Node::TextQuestion(_)) || node.hint_notice().is_some());
        match LoadedScenario::try_new(scenario, path, content) {
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

/// Loads scenarios from `(file name, text)` pairs, as `load_dir` would: for
/// other modules' tests.
#[cfg(test)]
pub(crate) fn load_str(files: &[(&str, &str)]) -> Result<Scenarios, LoadError> {
    let mut parsed = Vec::new();
    for (name, text) in files {
        let scenario = toml::from_str::<Scenario>(text).map_err(|error| {
            LoadError::Invalid(vec![ScenarioError {
                file: PathBuf::from(name),
                scenario: None,
                node: None,
                problem: error.to_string(),
            }])
        })?;
        parsed.push((scenario, PathBuf::from(name), (*text).to_owned()));
    }
    from_parsed(parsed)
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
                    (*text).to_owned(),
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

    /// A scenario whose nodes and choice carry `extra` (TOML keys, one per
    /// line) in the place named.
    fn with_actions(on_message: &str, on_question: &str, on_choice: &str) -> String {
        format!(
            r#"
        id = "acts"
        [[nodes]]
        id = "hello"
        kind = "message"
        text = "Hi"
        next = "ask"
        {on_message}
        [[nodes]]
        id = "ask"
        kind = "survey"
        text = "Plan?"
        {on_question}
        choices = [{{ label = "Gold", value = "gold", next = "age" {on_choice} }}]
        [[nodes]]
        id = "age"
        kind = "text_question"
        text = "Age?"
        validate = {{ type = "number" }}
        field = "age"
        "#
        )
    }

    #[test]
    fn actions_load_and_their_mistakes_are_named() {
        let long = "あ".repeat(501);
        let cases: Vec<(String, Option<&str>)> = vec![
            (
                with_actions(r#"tags = ["a"]"#, r#"untag = ["a"]"#, r#", set = { plan = "gold" }"#),
                None,
            ),
            (
                with_actions(r#"set = { ok = true, n = 2.5 }"#, r#"field = "plan""#, ""),
                None,
            ),
            (
                with_actions(&format!(r#"set = {{ note = "{long}" }}"#), "", ""),
                Some(r#"node "hello": set: the value of "note" is 501 characters; at most 500"#),
            ),
            (
                with_actions(r#"set = { Plan = "x" }"#, "", ""),
                Some(r#"node "hello": set: field name "Plan" must look like [a-z][a-z0-9_]{0,39}"#),
            ),
            (
                with_actions(
                    r#"tags = ["x"]
        untag = ["x"]"#,
                    "",
                    "",
                ),
                Some(r#"node "hello": tag "x" is both in tags and in untag"#),
            ),
            (
                with_actions("", "", r#", untag = [" "]"#),
                Some(r#"node "ask": choice "gold": untag has an empty tag"#),
            ),
            (
                with_actions(r#"rich_menu = "member""#, "", r#", rich_menu = "default""#),
                None,
            ),
            (
                with_actions(r#"rich_menu = "Member Menu""#, "", ""),
                Some(r#"node "hello": rich_menu "Member Menu" must be a menu file's id"#),
            ),
            (
                with_actions("", "", r#", rich_menu = "x/y""#),
                Some(r#"node "ask": choice "gold": rich_menu "x/y" must be a menu file's id"#),
            ),
            (
                with_actions("", r#"field = "9lives""#, ""),
                Some(r#"node "ask": field name "9lives" must look like"#),
            ),
            (
                with_actions("", "", "").replace(r#"validate = { type = "number" }"#, ""),
                Some(r#"node "age": field "age" needs a bounded answer"#),
            ),
            (
                with_actions("", "", "").replace(
                    r#"validate = { type = "number" }"#,
                    r#"validate = { type = "length", max = 501 }"#,
                ),
                Some(r#"node "age": field "age" needs a bounded answer"#),
            ),
            (
                with_actions("", "", "").replace(
                    r#"validate = { type = "number" }"#,
                    r#"validate = { type = "length", max = 500 }"#,
                ),
                None,
            ),
        ];
        for (text, expected) in &cases {
            let found = problems(&[("acts.toml", text)]);
            match expected {
                None => assert!(found.is_empty(), "{found:?}\n{text}"),
                Some(expected) => assert!(
                    found
                        .iter()
                        .any(|problem| problem.contains(expected) && problem.contains("acts.toml")),
                    "expected {expected:?} in {found:?}"
                ),
            }
        }
    }

    #[test]
    fn more_than_fifty_field_names_across_scenarios_are_refused() {
        let sets = |from: usize, to: usize| (from..to).map(|n| format!("f{n} = {n}")).collect::<Vec<_>>().join(", ");
        let first = with_actions(&format!("set = {{ {} }}", sets(0, 30)), "", "");
        // `age` (the text question's field) is the 51st name.
        let second =
            with_actions(&format!("set = {{ {} }}", sets(30, 50)), "", "").replace(r#"id = "acts""#, r#"id = "more""#);
        let found = problems(&[("acts.toml", &first), ("more.toml", &second)]);
        assert!(found.iter().any(|problem| problem.contains("at most 50")), "{found:?}");
        let fewer =
            with_actions(&format!("set = {{ {} }}", sets(30, 49)), "", "").replace(r#"id = "acts""#, r#"id = "more""#);
        assert!(problems(&[("acts.toml", &first), ("more.toml", &fewer)]).is_empty());
    }

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
    fn branches_that_loop_name_nothing_or_could_send_too_much_are_refused() {
        let scenario = |route: &str, extra: &str| {
            format!(
                r#"
                id = "b"
                [[nodes]]
                id = "go"
                kind = "trigger"
                on = "text"
                keywords = ["go"]
                next = "route"
                [[nodes]]
                id = "route"
                kind = "branch"
                {route}
                [[nodes]]
                id = "rating"
                kind = "survey"
                style = "quick_reply"
                text = "Rate"
                choices = [{{ label = "1", value = "1", next = "route" }}]
                [[nodes]]
                id = "m"
                kind = "message"
                text = "hi"
                {extra}
                "#
            )
        };
        let good = scenario(
            r#"arms = [{ when = { answer = { node = "rating", in = ["1"] } }, next = "m" }]
                else = "rating""#,
            "",
        );
        assert!(
            problems(&[("b.toml", &good)]).is_empty(),
            "{:?}",
            problems(&[("b.toml", &good)])
        );
        let chain = (1..=5)
            .map(|n| {
                format!(
                    "[[nodes]]\nid = \"c{n}\"\nkind = \"message\"\ntext = \"{n}\"\nnext = \"c{}\"",
                    n + 1
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
            .replace("next = \"c6\"", "");
        let cases = [
            (
                scenario(
                    r#"arms = [{ when = { tags = { anyOf = ["x"] } }, next = "route" }]
                else = "m""#,
                    "",
                ),
                "loops back to node \"route\"",
            ),
            (
                scenario(
                    r#"arms = [{ when = { tags = { anyOf = ["x"] } }, next = "nowhere" }]
                else = "m""#,
                    "",
                ),
                r#"`next` names node "nowhere""#,
            ),
            (
                scenario(
                    r#"arms = [{ when = { tags = { anyOf = ["x"] } }, next = "m" }]
                else = "gone""#,
                    "",
                ),
                r#"`next` names node "gone""#,
            ),
            (
                scenario(
                    r#"arms = [{ when = { answer = { node = "m", in = ["1"] } }, next = "m" }]
                else = "m""#,
                    "",
                ),
                r#"`answer` names node "m", which is not a question"#,
            ),
            (
                scenario(
                    r#"arms = [{ when = { answer = { node = "rating", min = 9, max = 1 } }, next = "m" }]
                else = "m""#,
                    "",
                ),
                "min is greater than max",
            ),
            (
                scenario(
                    r#"arms = [{ when = { answer = { node = "rating", min = 4 } }, next = "m" }]
                else = "m""#,
                    "",
                ),
                "its values are texts; compare them with `in`",
            ),
            (
                scenario(
                    r#"arms = [{ when = { answer = { node = "rating", in = ["5"] } }, next = "m" }]
                else = "m""#,
                    "",
                ),
                r#"`answer`: "5" is not a choice value of "rating""#,
            ),
            (
                scenario(
                    r#"arms = [{ when = { answered = ["nope"] }, next = "m" }]
                else = "m""#,
                    "",
                ),
                r#"names scenario "nope", which does not exist"#,
            ),
            (
                scenario(
                    r#"arms = [{ when = {}, next = "m" }]
                else = "m""#,
                    "",
                ),
                "`when` names no condition",
            ),
            (
                scenario(
                    r#"arms = [{ when = { field = { name = "Plan", equals = "x" } }, next = "m" }]
                else = "m""#,
                    "",
                ),
                "is not a field name",
            ),
            (
                scenario(
                    r#"arms = [{ when = { firstSeenFrom = "2026-12-31", firstSeenTo = "2026-01-01" }, next = "m" }]
                else = "m""#,
                    "",
                ),
                "is after firstSeenTo",
            ),
            // Whichever way the branch goes, the chain may send at most five.
            (
                scenario(
                    r#"arms = [{ when = { tags = { anyOf = ["x"] } }, next = "rating" }]
                else = "m""#,
                    &format!("next = \"c1\"\n{chain}"),
                ),
                "would send 6 messages",
            ),
        ];
        for (file, expected) in cases {
            let found = problems(&[("b.toml", &file)]);
            assert!(
                found.iter().any(|problem| problem.contains(expected)),
                "expected {expected:?} in {found:?}"
            );
        }
        let unknown = scenario(
            r#"arms = [{ when = { colour = "red" }, next = "m" }]
                else = "m""#,
            "",
        );
        let error = toml::from_str::<Scenario>(&unknown)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `colour`"), "{error}");
    }

    #[test]
    fn split_labels_that_could_not_be_told_apart_or_stored_are_refused() {
        let split = |labels: [&str; 2]| {
            format!(
                r#"
                id = "s"
                [[nodes]]
                id = "go"
                kind = "trigger"
                on = "text"
                keywords = ["go"]
                next = "ab"
                [[nodes]]
                id = "ab"
                kind = "split"
                arms = [{{ label = "{}", weight = 1, next = "m" }}, {{ label = "{}", weight = 1, next = "m" }}]
                [[nodes]]
                id = "m"
                kind = "message"
                text = "hi"
                "#,
                labels[0], labels[1]
            )
        };
        assert!(problems(&[("s.toml", &split(["A", "B"]))]).is_empty());
        assert!(problems(&[("s.toml", &split(["割引", "ポイント"]))]).is_empty());
        let combining = format!("a{}", "\u{0301}".repeat(40));
        let cases = [
            (["A", "A "], "starts or ends with a space"),
            (["A", "\u{200B}"], "invisible character"),
            (["A", &combining], "bytes in UTF-8; at most 64"),
            (["A", "A"], "used twice"),
            (["A", "twenty-one characters"], "at most 20"),
        ];
        for (labels, expected) in cases {
            let found = problems(&[("s.toml", &split(labels))]);
            assert!(
                found.iter().any(|problem| problem.contains(expected)),
                "{labels:?}: expected {expected:?} in {found:?}"
            );
        }
    }

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
                QUESTIONS.replace(r#"next = "when""#, "next = \"when\"\nexpire_after = \"2d\""),
                r#"node "age": expire_after of 2days is longer than the answer_window of 1day"#,
            ),
            (
                QUESTIONS.replace(
                    r#"next = "when""#,
                    "next = \"when\"\nremind_after = \"20h\"\nexpire_after = \"45h\"",
                ),
                r#"node "age": expire_after of 1day 21h is longer than the answer_window of 1day after the last reminder (20h in)"#,
            ),
            (
                QUESTIONS
                    .replace(r#"id = "profile""#, "id = \"profile\"\nanswer_window = \"2h\"")
                    .replace(r#"min = "2026-01-01""#, "min = \"2026-01-01\"\nexpire_after = \"3h\""),
                r#"node "when": expire_after of 3h is longer than the answer_window of 2h"#,
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
            (
                QUESTIONS.replace(
                    r#"text = "Rate us""#,
                    "text = \"Rate us\"\nanswered_text_every = \"5m\"",
                ),
                r#"node "rate": answered_text_every needs answered_text"#,
            ),
            (
                QUESTIONS.replace(
                    r#"text = "When?""#,
                    "text = \"When?\"\nhint_text = \"Pick one\"\nhint_text_every = \"soon\"",
                ),
                r#"node "when": hint_text_every "soon" is not a duration"#,
            ),
            (
                QUESTIONS.replace(
                    r#"text = "How old are you?""#,
                    "text = \"How old are you?\"\nanswered_text = \"Done\"\nanswered_text_every = \"10s\"",
                ),
                r#"node "age": answered_text_every must be from 1m to 30d"#,
            ),
            (
                QUESTIONS.replace(r#"text = "When?""#, "text = \"When?\"\nanswered_text = \" \""),
                r#"node "when": answered_text is empty"#,
            ),
            (
                QUESTIONS.replace(
                    r#"text = "Rate us""#,
                    &format!("text = \"Rate us\"\nanswered_text = \"{}\"", "あ".repeat(5001)),
                ),
                r#"node "rate": answered_text"#,
            ),
        ];
        for (file, expected) in cases {
            let found = problems(&[("p.toml", &file)]);
            assert!(
                found.iter().any(|problem| problem.contains(expected)),
                "expected {expected:?} in {found:?}"
            );
        }
        // A reminder opens the window again: an expiry within a window of the
        // last reminder is fine, and so is one exactly at the window's end.
        for timers in [
            "remind_after = \"20h\"\nexpire_after = \"36h\"",
            "expire_after = \"24h\"",
            "remind_after = \"10h\"\nmax_reminders = 2\nexpire_after = \"44h\"",
        ] {
            let file = QUESTIONS.replace(r#"next = "when""#, &format!("next = \"when\"\n{timers}"));
            assert_eq!(problems(&[("p.toml", &file)]), Vec::<String>::new(), "{timers}");
        }
    }

    const STEPS: &str = r#"
        id = "steps"
        time_zone = "America/New_York"
        quiet_hours = "21:00-09:00"
        max_lateness = "2h"
        [[nodes]]
        id = "hello"
        kind = "trigger"
        on = "text"
        keywords = ["steps"]
        next = "intro"
        [[nodes]]
        id = "intro"
        kind = "message"
        text = "Hi"
        next = "later"
        [[nodes]]
        id = "later"
        kind = "wait"
        after = "90m"
        next = "ask"
        [[nodes]]
        id = "ask"
        kind = "survey"
        text = "Q?"
        choices = [{ label = "A", value = "a", next = "tomorrow" }]
        remind_after = "1d"
        remind_text = "Still there?"
        max_reminders = 2
        expire_after = "3d"
        on_expire = "closed"
        [[nodes]]
        id = "tomorrow"
        kind = "wait"
        at = "10:00"
        after_days = 1
        next = "age"
        [[nodes]]
        id = "age"
        kind = "text_question"
        text = "Age?"
        expire_after = "2h"
        next = "when"
        [[nodes]]
        id = "when"
        kind = "date_question"
        text = "When?"
        remind_after = "1h"
        next = "closed"
        [[nodes]]
        id = "closed"
        kind = "end"
        text = "Closed"
    "#;

    #[test]
    fn waits_and_question_timers_compile() {
        use super::super::{Delay, QuestionTimers, QuietHours, parse_clock};
        use std::time::Duration;
        let scenarios = load(&[("s.toml", STEPS)]).unwrap_or_else(|error| panic!("{error}"));
        let steps = scenarios.get(&crate::ids::ScenarioId::parse("steps").unwrap()).unwrap();
        let node = |id: &str| crate::ids::NodeId::parse(id).unwrap();
        let timing = steps.timing();
        assert_eq!(timing.zone, chrono_tz::America::New_York);
        assert_eq!(
            timing.quiet_hours,
            Some(QuietHours {
                start: parse_clock("21:00").unwrap(),
                end: parse_clock("09:00").unwrap(),
            })
        );
        assert_eq!(timing.max_lateness, Duration::from_secs(2 * 3600));
        assert_eq!(
            steps.delay(&node("later")),
            Some(&Delay::After(Duration::from_secs(90 * 60)))
        );
        assert_eq!(
            steps.delay(&node("tomorrow")),
            Some(&Delay::At {
                time: parse_clock("10:00").unwrap(),
                days: 1
            })
        );
        assert_eq!(steps.delay(&node("ask")), None);
        assert_eq!(
            steps.question_timers(&node("ask")),
            Some(&QuestionTimers {
                remind_after: Some(Duration::from_secs(24 * 3600)),
                remind_text: Some("Still there?".to_owned()),
                max_reminders: 2,
                expire_after: Some(Duration::from_secs(3 * 24 * 3600)),
                on_expire: Some(node("closed")),
            })
        );
        let age = steps.question_timers(&node("age")).unwrap();
        assert_eq!(
            (age.remind_after, age.expire_after),
            (None, Some(Duration::from_secs(2 * 3600)))
        );
        assert_eq!(age.max_reminders, 1, "the default");
        let when = steps.question_timers(&node("when")).unwrap();
        assert_eq!(
            (when.remind_after, when.expire_after),
            (Some(Duration::from_secs(3600)), None)
        );
        assert!(steps.has_timers());
        // A wait stops the walk and sends nothing.
        let walked: Vec<&str> = crate::scenario::walk_nodes(steps, &node("intro"), None)
            .unwrap()
            .iter()
            .map(|node| node.id().as_str())
            .collect();
        assert_eq!(walked, ["intro", "later"]);
        assert_eq!(steps.content, STEPS);
        assert_eq!(
            steps.content_hash,
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(STEPS.as_bytes()))
        );
        assert_eq!(steps.content_hash.len(), 64);

        let lunch = load(&[("lunch.toml", SURVEY)]).unwrap();
        let lunch = lunch.iter().next().unwrap();
        assert!(!lunch.has_timers());
        assert_eq!(lunch.question_timers(&node("ask")), None);
        assert_eq!(lunch.timing(), &super::super::Timing::default());
        assert_eq!(lunch.timing().zone, chrono_tz::Asia::Tokyo);
        assert_eq!(lunch.timing().max_lateness, Duration::from_secs(6 * 3600));
    }

    #[test]
    fn step_delivery_mistakes_are_named() {
        let scenario_key = |key: &str, value: &str| {
            STEPS
                .lines()
                .map(|line| {
                    if line.trim_start().starts_with(&format!("{key} = ")) {
                        format!("{key} = {value}")
                    } else {
                        line.to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let six_messages = format!(
            "{}\n{}",
            STEPS.replace(
                r#"after = "90m"
        next = "ask""#,
                r#"after = "90m"
        next = "m1""#
            ),
            messages("m", 6, None)
        );
        let cases: Vec<(String, &str)> = vec![
            (
                scenario_key("time_zone", r#""Asia/Tokio""#),
                r#"s.toml: scenario "steps": time_zone "Asia/Tokio" is not an IANA time zone name"#,
            ),
            (
                scenario_key("quiet_hours", r#""21:00""#),
                r#"scenario "steps": quiet_hours "21:00" is not a range of local times"#,
            ),
            (
                scenario_key("quiet_hours", r#""9:00-09:00""#),
                r#"quiet_hours "9:00-09:00" starts and ends at the same time"#,
            ),
            (
                scenario_key("quiet_hours", r#""25:00-09:00""#),
                r#"quiet_hours "25:00" is not a 24-hour time"#,
            ),
            (
                scenario_key("max_lateness", r#""late""#),
                r#"scenario "steps": max_lateness "late" is not a duration"#,
            ),
            (
                STEPS.replace(r#"after = "90m""#, r#"after = "soon""#),
                r#"node "later": after "soon" is not a duration"#,
            ),
            (
                STEPS.replace(r#"after = "90m""#, r#"after = "100000d""#),
                r#"node "later": after "100000d" is longer than 3650 days"#,
            ),
            (
                STEPS.replace(r#"after = "90m""#, "after = \"90m\"\nat = \"10:00\""),
                r#"node "later": set either `after` or `at`, not both"#,
            ),
            (STEPS.replace(r#"after = "90m""#, ""), r#"node "later": needs `after`"#),
            (
                STEPS.replace(r#"after = "90m""#, "after = \"90m\"\nafter_days = 2"),
                r#"node "later": after_days goes with `at`"#,
            ),
            (
                STEPS.replace(r#"at = "10:00""#, r#"at = "10am""#),
                r#"node "tomorrow": at "10am" is not a 24-hour time"#,
            ),
            (
                STEPS.replace(r#"at = "10:00""#, r#"at = "24:00""#),
                r#"node "tomorrow": at "24:00" is not a 24-hour time"#,
            ),
            (
                STEPS.replace("after_days = 1", "after_days = 5000"),
                r#"node "tomorrow": after_days is 5000; at most 3650"#,
            ),
            (
                STEPS.replace(r#"next = "ask""#, r#"next = "nowhere""#),
                r#"node "later": `next` names node "nowhere", which does not exist"#,
            ),
            (
                STEPS.replace(r#"on_expire = "closed""#, r#"on_expire = "nowhere""#),
                r#"node "ask": `next` names node "nowhere", which does not exist"#,
            ),
            (
                STEPS.replace(r#"on_expire = "closed""#, r#"on_expire = "hello""#),
                r#"node "ask": `next` leads to trigger node "hello""#,
            ),
            (
                six_messages,
                r#"node "later": the message chain would send 6 messages at once"#,
            ),
            (
                STEPS.replace(r#"expire_after = "3d""#, ""),
                r#"node "ask": on_expire needs expire_after"#,
            ),
            (
                STEPS.replace(r#"remind_after = "1d""#, ""),
                r#"node "ask": remind_text needs remind_after"#,
            ),
            (
                STEPS.replace(r#"remind_after = "1d""#, ""),
                r#"node "ask": max_reminders needs remind_after"#,
            ),
            (
                STEPS.replace("max_reminders = 2", "max_reminders = 0"),
                r#"node "ask": max_reminders is 0; it must be 1 to 10"#,
            ),
            (
                STEPS.replace("max_reminders = 2", "max_reminders = 11"),
                "max_reminders is 11; it must be 1 to 10",
            ),
            (
                STEPS.replace(r#"remind_after = "1d""#, r#"remind_after = "3d""#),
                r#"node "ask": remind_after must be shorter than expire_after"#,
            ),
            (
                STEPS.replace(
                    r#"remind_text = "Still there?""#,
                    &format!("remind_text = \"{}a\"", "🍎".repeat(2500)),
                ),
                r#"node "ask": remind_text is 5001 characters; LINE allows at most 5000"#,
            ),
            (
                STEPS.replace(r#"remind_text = "Still there?""#, r#"remind_text = " ""#),
                r#"node "ask": remind_text is empty"#,
            ),
            (
                STEPS.replace(r#"expire_after = "2h""#, r#"expire_after = "0s""#),
                r#"node "age": expire_after "0s" is zero"#,
            ),
            (
                STEPS.replace(r#"remind_after = "1h""#, r#"remind_after = "later""#),
                r#"node "when": remind_after "later" is not a duration"#,
            ),
        ];
        let failed: Vec<String> = cases
            .into_iter()
            .filter_map(|(file, expected)| {
                let found = problems(&[("s.toml", &file)]);
                let ok = found.iter().any(|problem| problem.contains(expected));
                (!ok).then(|| format!("expected {expected:?} in {found:?}"))
            })
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
        // 2,500 emoji fill a reminder exactly.
        let at_limit = STEPS.replace(
            r#"remind_text = "Still there?""#,
            &format!("remind_text = \"{}\"", "🍎".repeat(2500)),
        );
        assert!(problems(&[("s.toml", &at_limit)]).is_empty());
        // A wait after five messages is fine: it sends nothing.
        let five_then_wait = format!(
            "id = \"five\"\n{}[[nodes]]\nid = \"w\"\nkind = \"wait\"\nafter = \"1d\"\nnext = \"bye\"\n\
             [[nodes]]\nid = \"bye\"\nkind = \"end\"\ntext = \"bye\"\n",
            messages("m", 5, Some("w"))
        );
        assert!(problems(&[("f.toml", &five_then_wait)]).is_empty());
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
                LoadedScenario::try_new(scenario, PathBuf::from("x.toml"), text.to_owned()).is_err(),
                "{text}"
            );
        }
        let five = toml::from_str::<Scenario>(&format!("id = \"ok\"\n{}", messages("m", 5, None))).unwrap();
        let loaded = LoadedScenario::try_new(five, PathBuf::from("ok.toml"), String::new()).unwrap();
        assert_eq!(loaded.start.as_str(), "m1");
    }

    #[test]
    fn the_sample_scenarios_load() {
        let dir = crate::repo_path("scenarios");
        let scenarios = load_dir(&dir).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(scenarios.len(), 8);
        for loaded in scenarios.iter() {
            assert!(
                crate::scenario::walk::walk_every_way(|id| loaded.node(id), &loaded.start).is_ok(),
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
