//! The toolchain: `check`, `simulate`, `test` and `schema`, run as a user runs
//! them (the built binary, no Firestore, no LINE).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const BINARY: &str = env!("CARGO_BIN_EXE_line-survey");

fn repo(path: &str) -> PathBuf {
    crate::helpers::repo_path(path)
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(BINARY);
    command.args(args);
    run_piped(command, stdin)
}

/// Runs `command` with `stdin` piped in (closed at once with `None`), and
/// collects what it printed.
pub(crate) fn run_piped(mut command: Command, stdin: Option<&str>) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(input.as_bytes())
            .expect("stdin takes the input");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("the binary ends")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A scenario directory holding `files` (name, content).
fn scenario_dir(files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cli-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, content) in files {
        std::fs::write(dir.join(name), content).expect("file written");
    }
    dir
}

#[test]
fn check_accepts_the_samples() {
    let output = run(&["check", repo("scenarios").to_str().unwrap_or_default()], None);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(stdout(&output).contains("8 scenario(s), no problems"));
}

#[test]
fn check_lists_every_problem_of_each_kind_of_broken_file() {
    let dir = scenario_dir(&[
        ("a_unparsable.toml", "id = \"a\"\nnodes = [ {"),
        (
            "b_unknown_kind.toml",
            "id = \"b\"\n[[nodes]]\nid = \"n\"\nkind = \"carousel\"\ntext = \"x\"\n",
        ),
        (
            "c_bad_question.toml",
            r#"id = "c"
[[nodes]]
id = "q"
kind = "text_question"
text = "Code?"
validate = { type = "pattern", pattern = "([a-z]" }
next = "missing"
[[nodes]]
id = "d"
kind = "date_question"
text = "When?"
min = "2026-12-31"
max = "2026-01-01"
[[nodes]]
id = "s"
kind = "survey"
style = "quick_reply"
text = "Pick"
choices = [{ label = "twenty-one characters", value = "x" }]
"#,
        ),
    ]);
    let text = run(&["check", dir.to_str().unwrap_or_default()], None);
    assert_eq!(text.status.code(), Some(1));
    let report = stdout(&text);
    for expected in [
        "a_unparsable.toml: not a valid scenario file",
        "b_unknown_kind.toml: not a valid scenario file",
        r#"c_bad_question.toml: scenario "c": node "q": validate: pattern "([a-z]" does not compile"#,
        r#"c_bad_question.toml: scenario "c": node "q": `next` names node "missing", which does not exist"#,
        r#"c_bad_question.toml: scenario "c": node "d": min must be earlier than max"#,
        r#"c_bad_question.toml: scenario "c": node "s": label of choice "x" is 21 characters; LINE allows at most 20"#,
        "6 problem(s)",
    ] {
        assert!(report.contains(expected), "{expected:?} missing from:\n{report}");
    }

    let json = run(&["check", dir.to_str().unwrap_or_default(), "--format", "json"], None);
    assert_eq!(json.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON output");
    assert_eq!(report["ok"], false);
    let problems = report["problems"].as_array().cloned().unwrap_or_default();
    assert_eq!(problems.len(), 6);
    assert!(
        problems
            .iter()
            .any(|problem| problem["node"] == "q" && problem["scenario"] == "c")
    );
    assert!(
        problems
            .iter()
            .all(|problem| problem["file"].as_str().is_some_and(|f| f.ends_with(".toml")))
    );

    let splits = scenario_dir(&[(
        "s.toml",
        r#"id = "s"
[[nodes]]
id = "go"
kind = "trigger"
on = "text"
keywords = ["go"]
next = "ab"
[[nodes]]
id = "ab"
kind = "split"
arms = [{ label = "A", weight = 0, next = "wait" }, { label = "A", weight = 1, next = "shared" }]
[[nodes]]
id = "one"
kind = "split"
arms = [{ label = "only", weight = 1, next = "shared" }]
[[nodes]]
id = "wait"
kind = "wait"
after = "1d"
next = "shared"
[[nodes]]
id = "shared"
kind = "message"
text = "hi"
"#,
    )]);
    let report = stdout(&run(&["check", splits.to_str().unwrap_or_default()], None));
    for expected in [
        r#"node "ab": arm label "A" is used twice"#,
        r#"node "ab": arm "A": weight must be a whole number from 1 to 1000000, not 0"#,
        r#"node "ab": arm "A" sends no message before it waits"#,
        r#"node "one": a split has 2 to 10 arms, not 1"#,
    ] {
        assert!(report.contains(expected), "{expected:?} missing from:\n{report}");
    }

    // Personal text: placeholders only in texts, known ones, of fields some
    // scenario sets and of questions that come before.
    let personal = scenario_dir(&[(
        "p.toml",
        r#"id = "p"
[[nodes]]
id = "q"
kind = "survey"
text = "{name|お客さま}さん、いかがでしたか"
remind_after = "1d"
remind_text = "前回: {answer.q}"
choices = [{ label = "{name}", value = "a", set = { plan = "gold" }, next = "done" }]
[[nodes]]
id = "done"
kind = "end"
text = "{answer.q} {field.plan} {field.shoe} {nickname}"
"#,
    )]);
    let report = stdout(&run(&["check", personal.to_str().unwrap_or_default()], None));
    for expected in [
        r#"p.toml: scenario "p": node "q": choice 1 label: placeholders are not rendered in labels, display texts or titles"#,
        r#"p.toml: scenario "p": node "q": remind_text: {answer.q} must name a question of this scenario that comes before this node"#,
        r#"p.toml: scenario "p": node "done": text: unknown placeholder {nickname}"#,
        "3 problem(s)",
    ] {
        assert!(report.contains(expected), "{expected:?} missing from:\n{report}");
    }
    let fields = scenario_dir(&[(
        "p.toml",
        r#"id = "p"
[[nodes]]
id = "m"
kind = "message"
text = "{field.shoe}"
"#,
    )]);
    let report = stdout(&run(&["check", fields.to_str().unwrap_or_default()], None));
    assert!(
        report.contains(r#"node "m": text: {field.shoe} names a field no scenario sets"#),
        "{report}"
    );

    let empty = scenario_dir(&[]);
    let nothing = run(&["check", empty.to_str().unwrap_or_default()], None);
    assert_eq!(nothing.status.code(), Some(1));
    assert!(stdout(&nothing).contains("holds no *.toml scenario files"));
}

#[test]
fn simulate_through_a_pipe() {
    let dir = repo("scenarios");
    let input = "abc\n３５\n100-0001\n/date 2027-03-14\n/date 2027-03-15\n/quit\nnever read\n";
    let output = run(
        &["simulate", "ja_profile", "--dir", dir.to_str().unwrap_or_default()],
        Some(input),
    );
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let transcript = stdout(&output);
    for expected in [
        "bot: 年齢を数字でお送りください。(例: 35)",
        "> abc\nbot: 0〜120の数字でお送りください。",
        "> ３５\nbot: 郵便番号を7桁でお送りください。(例: 100-0001)",
        "  1) 日付を選ぶ",
        "> /date 2027-03-14\nbot: ありがとうございました。登録が完了しました。",
        "> /date 2027-03-15\nbot: ご来店予定日は登録済みです。ありがとうございます。\n  (nothing recorded: question next_visit was answered before)",
    ] {
        assert!(
            transcript.contains(expected),
            "{expected:?} missing from:\n{transcript}"
        );
    }
    assert!(!transcript.contains("never read"), "/quit ends it");

    let taps = run(
        &["simulate", "satisfaction", "--dir", dir.to_str().unwrap_or_default()],
        Some("1\n/tap-card\n9\n"),
    );
    let transcript = stdout(&taps);
    assert!(
        transcript.contains("  1) Very satisfied"),
        "choices are numbered:\n{transcript}"
    );
    assert!(transcript.contains("> 1\nbot: Would you visit us again?"));
    assert!(transcript.contains("no card to tap yet"));
    assert!(transcript.contains("the last question has 3 choices"));

    // The split takes the simulated user's own arm unless one is forced.
    let dir_arg = dir.to_str().unwrap_or_default();
    let own = stdout(&run(&["simulate", "ja_vip", "--dir", dir_arg], Some("/quit\n")));
    assert!(own.contains("by the hash of scenario, node and user"), "{own}");
    for (label, text) in [("A", "10%オフ"), ("B", "ポイントが2倍")] {
        let forced = stdout(&run(
            &["simulate", "ja_vip", "--dir", dir_arg, "--variant", label],
            Some("/quit\n"),
        ));
        assert!(
            forced.contains(&format!("(split ab: arm {label}, forced by --variant)")),
            "{forced}"
        );
        assert!(forced.contains(text), "arm {label} sends its own opening:\n{forced}");
    }

    // --name is the LINE display name {name|お客} renders; without it, the fallback.
    let named = stdout(&run(
        &["simulate", "ja_vip", "--dir", dir_arg, "--tag", "VIP", "--name", "山田"],
        Some("/quit\n"),
    ));
    assert!(named.contains("bot: 【VIP会員さま限定】山田さま、今月は"), "{named}");
    let unnamed = stdout(&run(
        &["simulate", "ja_vip", "--dir", dir_arg, "--tag", "VIP"],
        Some("/quit\n"),
    ));
    assert!(
        unnamed.contains("bot: 【VIP会員さま限定】お客さま、今月は"),
        "{unnamed}"
    );

    let typo = run(&["simulate", "ja_vip", "--dir", dir_arg, "--variant", "C"], Some(""));
    assert_eq!(typo.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&typo.stderr).contains(r#"no split has an arm labelled "C""#));

    let unknown = run(
        &["simulate", "nope", "--dir", dir.to_str().unwrap_or_default()],
        Some(""),
    );
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn the_sample_transcripts_pass_and_a_wrong_one_fails_with_a_diff() {
    let samples = run(
        &["test", "--scenarios", repo("scenarios").to_str().unwrap_or_default()],
        None,
    );
    assert!(samples.status.success(), "{}", stdout(&samples));
    assert_eq!(
        stdout(&samples).lines().filter(|line| line.starts_with("ok ")).count(),
        9
    );

    let tests = scenario_dir(&[(
        "wrong.toml",
        "[[steps]]\nsend = \"survey\"\nbot = [\"Hello\"]\n\n[[steps]]\ntap = \"Very satisfied\"\nanswers = { rating = \"4\" }\n",
    )]);
    let wrong = run(
        &[
            "test",
            tests.to_str().unwrap_or_default(),
            "--scenarios",
            repo("scenarios").to_str().unwrap_or_default(),
        ],
        None,
    );
    assert_eq!(wrong.status.code(), Some(1));
    let report = stdout(&wrong);
    for expected in [
        "FAIL",
        "step 1 (send \"survey\")",
        "    - Hello",
        "    + Thanks for visiting! Two quick questions about your visit.",
        "answer to rating: expected \"4\", got Text(\"5\")",
    ] {
        assert!(report.contains(expected), "{expected:?} missing from:\n{report}");
    }
}

#[test]
fn the_shipped_schema_is_current() {
    let output = run(&["schema"], None);
    assert!(output.status.success());
    let shipped = std::fs::read_to_string(repo("schema/scenario.schema.json")).expect("the schema is shipped");
    assert_eq!(
        stdout(&output),
        shipped,
        "schema/scenario.schema.json is stale: run `line-survey schema > schema/scenario.schema.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&shipped).expect("JSON");
    let kinds = schema.to_string();
    for kind in [
        "text_question",
        "date_question",
        "quick_reply",
        "postal_code_jp",
        "answer_tag",
        "split",
        "weight",
        "branch",
        "noneOf",
        "answered_text",
        "hint_text",
    ] {
        assert!(kinds.contains(kind), "{kind} is described");
    }
}

#[test]
fn check_accepts_the_sample_rich_menus_with_the_sample_scenarios() {
    let scenarios = repo("scenarios");
    let menus = repo("richmenus");
    let output = run(
        &[
            "check",
            scenarios.to_str().unwrap_or_default(),
            "--rich-menus",
            menus.to_str().unwrap_or_default(),
        ],
        None,
    );
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("2 rich menu(s); no problems"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn check_validates_rich_menus_with_the_scenarios_they_start() {
    let scenarios = repo("scenarios");
    let menus = repo("tests/fixtures/richmenus");
    let args = |menus: &std::path::Path| {
        vec![
            "check".to_owned(),
            scenarios.to_str().unwrap_or_default().to_owned(),
            "--rich-menus".to_owned(),
            menus.to_str().unwrap_or_default().to_owned(),
        ]
    };
    let owned = args(&menus);
    let output = run(&owned.iter().map(String::as_str).collect::<Vec<_>>(), None);
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("2 rich menu(s); no problems"),
        "{}",
        stdout(&output)
    );

    // A menu starting a scenario nobody loaded, its image of another size.
    let member = std::fs::read_to_string(menus.join("member.toml")).expect("fixture");
    let broken = member.replace("ja_satisfaction", "no_such_survey");
    let tab = std::fs::read_to_string(menus.join("survey_tab.toml")).expect("fixture");
    let dir = scenario_dir(&[("member.toml", &broken), ("survey_tab.toml", &tab)]);
    std::fs::copy(menus.join("member.png"), dir.join("member.png")).expect("image");
    std::fs::write(dir.join("survey_tab.png"), b"not an image").expect("image");
    let owned = args(&dir);
    let mut json_args: Vec<&str> = owned.iter().map(String::as_str).collect();
    let text = run(&json_args, None);
    assert_eq!(text.status.code(), Some(1));
    let report = stdout(&text);
    assert!(
        report.contains("scenario \"no_such_survey\" is not a loaded scenario"),
        "{report}"
    );
    assert!(report.contains("not a PNG or JPEG"), "{report}");
    json_args.extend(["--format", "json"]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&run(&json_args, None))).expect("JSON");
    assert_eq!(json["ok"], false);
    assert_eq!(json["problems"].as_array().map(Vec::len), Some(2), "{json}");
}

#[test]
fn check_validates_the_sources_file_with_the_scenarios() {
    let scenarios = repo("scenarios");
    let sample = repo("sources.sample.toml");
    let output = run(
        &[
            "check",
            scenarios.to_str().unwrap_or_default(),
            "--sources",
            sample.to_str().unwrap_or_default(),
        ],
        None,
    );
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("2 source(s); no problems"),
        "{}",
        stdout(&output)
    );

    let dir = scenario_dir(&[(
        "sources.toml",
        "[[sources]]\nid = \"callback\"\nlabel = \"x\"\n\
         [[sources]]\nid = \"poster\"\nlabel = \"店頭\"\nscenario = \"no_such_survey\"\n\
         [[sources]]\nid = \"poster\"\nlabel = \"again\"\n",
    )]);
    let file = dir.join("sources.toml");
    let args = [
        "check",
        scenarios.to_str().unwrap_or_default(),
        "--sources",
        file.to_str().unwrap_or_default(),
        "--format",
        "json",
    ];
    let output = run(&args, None);
    assert_eq!(output.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    let problems: Vec<String> = json["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|problem| problem["problem"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(
        problems[0].contains("source \"callback\": the id must be"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("the scenario \"no_such_survey\" does not exist"),
        "{problems:?}"
    );
    assert!(
        problems[2].contains("source \"poster\": the id is used twice"),
        "{problems:?}"
    );
}
