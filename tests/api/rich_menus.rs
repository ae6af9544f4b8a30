//! Rich menus: taps on a menu's scenario areas (guard 3's rules, tagged
//! either way), switches acknowledged without a write.

use crate::helpers::events::{self, postback, text};
use crate::helpers::firestore_rest::string_array;
use crate::helpers::{sorted, spawn_app};

const INTRO: &str = "A quick survey about today's lunch.";
const NEWS: &str = "Today's news: the cafeteria has a new menu.";

/// What a rich menu's `scenario` area sends (the documented format).
fn menu_tap(scenario: &str, menu: &str) -> String {
    format!("v=1&k=m&s={scenario}&m={menu}")
}

/// How many of `user`'s accepted calls carried `text`.
fn received(app: &crate::helpers::TestApp, user: &str, events: &[serde_json::Value], text: &str) -> usize {
    app.line
        .accepted_by_user(events)
        .iter()
        .filter(|(to, call)| to == user && call.texts().iter().any(|sent| sent == text))
        .count()
}

#[tokio::test]
async fn a_menu_tapped_twice_at_once_starts_the_survey_once_tags_the_user_and_records_the_menu() {
    let app = spawn_app().await;
    let users: Vec<String> = (0..20).map(|_| events::new_user()).collect();
    let taps: Vec<serde_json::Value> = users
        .iter()
        .flat_map(|user| {
            let data = menu_tap("lunch", "member");
            [postback(user, &data), postback(user, &data)]
        })
        .collect();

    let bodies: Vec<serde_json::Value> = taps.iter().map(|tap| events::envelope(vec![tap.clone()])).collect();
    let responses = futures::future::join_all(bodies.iter().map(|body| app.post_webhook(body))).await;
    assert!(responses.iter().all(|response| response.status() == 200));
    app.settled().await;

    for user in &users {
        assert_eq!(received(&app, user, &taps, INTRO), 1, "one start for {user}");
        let record = app.firestore.get("users", user).await.expect("the user is recorded");
        assert_eq!(string_array(&record, "tags"), ["rich_menu_tap"]);
        assert_eq!(string_array(&record, "richMenuTaps"), ["member"]);
    }
}

#[tokio::test]
async fn a_menu_tap_after_answering_is_tagged_and_recorded_but_does_not_restart_the_survey() {
    let app = spawn_app().await;
    let user = events::new_user();
    app.answer(&user, "ask_food", "bad").await;
    let sent = app.line.accepted().len();

    app.deliver(&postback(&user, &menu_tap("lunch", "member"))).await;
    app.deliver(&postback(&user, &menu_tap("lunch", "survey_tab"))).await;

    assert_eq!(app.line.accepted().len(), sent, "nothing more was sent");
    let record = app.firestore.get("users", &user).await.expect("the user is recorded");
    assert_eq!(
        sorted(string_array(&record, "tags")),
        ["answered:lunch", "lunch_bad", "rich_menu_tap"]
    );
    assert_eq!(sorted(string_array(&record, "richMenuTaps")), ["member", "survey_tab"]);
}

#[tokio::test]
async fn a_menu_tap_dedups_even_a_scenario_without_a_survey_and_a_keyword_after_it_too() {
    let app = spawn_app().await;
    let user = events::new_user();
    // 40 s ago (outside the start dedup window), then twice now.
    let early = events::with_timestamp(&postback(&user, &menu_tap("news", "member")), events::now_ms() - 40_000);

    app.deliver(&early).await;
    app.deliver(&postback(&user, &menu_tap("news", "member"))).await;
    app.deliver(&postback(&user, &menu_tap("news", "member"))).await;
    // A menu start and a keyword within the start dedup window: one start.
    app.deliver(&postback(&user, &menu_tap("lunch", "member"))).await;
    app.deliver(&text(&user, "lunch")).await;

    assert_eq!(
        app.line.accepted_with_text(NEWS),
        2,
        "the tap after the window starts it again"
    );
    assert_eq!(app.line.accepted_with_text(INTRO), 1);
}

#[tokio::test]
async fn a_menu_switch_is_acknowledged_with_no_effect_and_no_write() {
    let app = spawn_app().await;
    let user = events::new_user();
    let before = app.firestore.counts().await;

    let switch = postback(&user, "v=1&k=s&m=survey_tab");
    let response = app.post_webhook(&events::envelope(vec![switch])).await;
    // Taps that are not ours, or name what does not exist, are no different.
    for data in [
        menu_tap("no_such_scenario", "member"),
        "v=1&k=m&s=lunch&m=default".to_owned(),
        "v=1&k=s&m=BAD".to_owned(),
    ] {
        let other = app.post_webhook(&events::envelope(vec![postback(&user, &data)])).await;
        assert_eq!(other.status(), 200, "{data}");
    }
    app.settled().await;

    assert_eq!(response.status(), 200);
    assert!(app.line.calls().is_empty(), "nothing was sent");
    assert_eq!(app.firestore.counts().await, before, "no document was written");
    assert!(app.firestore.get("users", &user).await.is_none());
}

// ---- Deploy: `line-survey richmenus deploy`, run as an operator runs it ----

mod deploy {
    use crate::helpers::line_rich_menus::RichMenuOp;
    use crate::helpers::line_stand_in::{ACCESS_TOKEN, Fault, LineStandIn};
    use crate::helpers::{CHANNEL_SECRET, emulator_host, new_project_id, repo_path};
    use std::collections::{BTreeMap, HashMap};
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output, Stdio};
    use std::time::{Duration, Instant};

    const BINARY: &str = env!("CARGO_BIN_EXE_line-survey");

    /// A copy of the fixture pair (member, the default; survey_tab) that a
    /// test may change.
    pub(super) fn menu_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("richmenus-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["member.toml", "member.png", "survey_tab.toml", "survey_tab.png"] {
            std::fs::copy(repo_path("tests/fixtures/richmenus").join(name), dir.join(name)).unwrap();
        }
        dir
    }

    /// A new version of both files (their hashes change; LINE sees no difference).
    fn touch_menus(dir: &Path, version: usize) {
        for name in ["member.toml", "survey_tab.toml"] {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, format!("{text}\n# version {version}\n")).unwrap();
        }
    }

    fn command(project: &str, line: &LineStandIn, dir: &Path, dry_run: bool) -> Command {
        let mut command = Command::new(BINARY);
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LINE_CHANNEL_SECRET", CHANNEL_SECRET)
            .env("LINE_CHANNEL_ACCESS_TOKEN", ACCESS_TOKEN)
            .env("LINE_API_BASE_URL", line.uri())
            .env("LINE_DATA_API_BASE_URL", line.uri())
            .env("GOOGLE_CLOUD_PROJECT", project)
            .env("FIRESTORE_EMULATOR_HOST", emulator_host())
            .env("SCENARIOS_DIR", repo_path("scenarios"))
            .env("RICH_MENUS_DIR", dir)
            .env("LOG_FORMAT", "json")
            // A killed deploy's lease runs out soon; LEASE_MS must exceed
            // FIRESTORE_TIMEOUT_MS + LINE_TIMEOUT_MS.
            .env("LEASE_MS", "3000")
            .env("LINE_TIMEOUT_MS", "1000")
            .args(["richmenus", "deploy"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if dry_run {
            command.arg("--dry-run");
        }
        command
    }

    pub(super) fn deploy(project: &str, line: &LineStandIn, dir: &Path) -> Output {
        let output = command(project, line, dir, false).output().expect("the binary runs");
        assert!(
            output.status.success(),
            "the deploy failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    fn text(output: &Output) -> String {
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }

    /// The current LINE menu of each file, as the aliases say.
    fn current(line: &LineStandIn) -> BTreeMap<String, String> {
        line.rich_menu_aliases()
    }

    /// After a finished deploy: one menu per file, each with its image and
    /// alias, `member` the default, every user on a current menu, nothing
    /// left over.
    fn assert_deployed(line: &LineStandIn, users: &HashMap<String, &str>) {
        let aliases = current(line);
        let menus = line.rich_menus();
        assert_eq!(menus.len(), 2, "one menu per file: {menus:#?}");
        let mut ids: Vec<&String> = aliases.values().collect();
        ids.sort();
        let mut listed: Vec<&String> = menus.iter().map(|menu| &menu.id).collect();
        listed.sort();
        assert_eq!(ids, listed, "the aliases point at the menus there are");
        assert!(menus.iter().all(|menu| menu.has_image), "every menu has its image");
        assert_eq!(
            line.default_rich_menu().as_ref(),
            aliases.get("member"),
            "member is the default"
        );
        for (user, menu) in users {
            assert_eq!(
                line.user_rich_menu(user).as_ref(),
                aliases.get(*menu),
                "{user} is on the current {menu} menu"
            );
        }
        assert!(
            line.users_left_on_deleted_menus().is_empty(),
            "no user was left on a deleted menu"
        );
    }

    /// Users linked to each file's current menu (as a scenario would have).
    fn link_users(line: &LineStandIn) -> HashMap<String, &'static str> {
        let aliases = current(line);
        let mut users = HashMap::new();
        for (index, menu) in ["member", "member", "member", "survey_tab", "survey_tab"]
            .iter()
            .enumerate()
        {
            let user = format!("U{:032x}", 0xabc0 + index);
            line.link_user_rich_menu(&user, &aliases[*menu]);
            users.insert(user, *menu);
        }
        users
    }

    /// Runs a deploy and SIGKILLs it as soon as its next call of `op` has
    /// reached LINE (its answer may still be held back).
    async fn killed_at_call(project: &str, line: &LineStandIn, dir: &Path, op: RichMenuOp) {
        let seen = line.rich_menu_calls_of(op).len();
        let mut child = command(project, line, dir, false).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while line.rich_menu_calls_of(op).len() <= seen {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the deploy ended ({status}) before calling {op:?}");
            }
            assert!(Instant::now() < deadline, "no {op:?} call within 20 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[tokio::test]
    async fn a_deploy_creates_each_menu_once_and_a_second_changes_nothing() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();

        let first = deploy(&project, &line, &dir);
        let users = link_users(&line);
        let calls = line.rich_menu_calls().len();
        let second = deploy(&project, &line, &dir);

        assert_deployed(&line, &users);
        let report = text(&first);
        assert!(report.contains("member: created richmenu-"), "{report}");
        assert!(report.contains("member: the account's default menu"), "{report}");
        let again = text(&second);
        assert!(
            again.contains("member: unchanged") && again.contains("survey_tab: unchanged"),
            "{again}"
        );
        let mutations = line.rich_menu_calls()[calls..]
            .iter()
            .filter(|call| call.method != "GET")
            .count();
        assert_eq!(mutations, 0, "an unchanged deploy changes nothing on LINE");
        // The menus' postback data is the service's, and the names carry the hashes.
        let member = line
            .rich_menus()
            .into_iter()
            .find(|menu| Some(&menu.id) == current(&line).get("member"))
            .unwrap();
        assert_eq!(
            member.body["areas"][0]["action"]["data"],
            "v=1&k=m&s=ja_satisfaction&m=member"
        );
        assert_eq!(member.body["areas"][1]["action"]["type"], "richmenuswitch");
        assert_eq!(member.body["areas"][1]["action"]["richMenuAliasId"], "survey_tab");
        assert_eq!(member.body["areas"][1]["action"]["data"], "v=1&k=s&m=survey_tab");
        assert!(member.name.starts_with("line-survey member "), "{}", member.name);
    }

    #[tokio::test]
    async fn a_changed_file_replaces_its_menu_and_moves_its_users_and_a_dry_run_changes_nothing() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();
        deploy(&project, &line, &dir);
        let users = link_users(&line);
        let before = current(&line);
        touch_menus(&dir, 1);

        let calls = line.rich_menu_calls().len();
        let dry = command(&project, &line, &dir, true).output().unwrap();
        assert!(dry.status.success(), "{}", text(&dry));
        let plan = text(&dry);
        assert!(
            plan.contains("member: would create a menu")
                && plan.contains(&format!("move the users of {}", before["member"]))
                && plan.contains("set it as the account's default"),
            "{plan}"
        );
        assert!(
            line.rich_menu_calls()[calls..].iter().all(|call| call.method == "GET"),
            "a dry run only reads"
        );
        assert_eq!(current(&line), before, "a dry run changes nothing");

        let report = text(&deploy(&project, &line, &dir));

        assert_deployed(&line, &users);
        assert_ne!(current(&line)["member"], before["member"], "a new menu");
        assert!(
            report.contains(&format!("member: deleted the old menu {}", before["member"])),
            "{report}"
        );
        assert_eq!(
            line.rich_menu_calls_of(RichMenuOp::Batch).len(),
            1,
            "one batch moves the users of both menus (LINE allows three an hour)"
        );
        // What the deploy sent LINE, against LINE's own schemas.
        if let Some(shared) = crate::contract::shared_dir() {
            let calls = line.rich_menu_calls_for_contract();
            let (ok, report) = crate::rich_menu_stand_in::check_requests(&shared, &calls);
            assert!(ok && report.contains(" 0 schema problems"), "{report}");
        }
    }

    #[tokio::test]
    async fn a_deploy_killed_after_each_step_finishes_the_same_work_when_run_again() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();
        // Nine deploys that each move users: LINE allows three batches an hour.
        line.set_rich_menu_rate_limits(false);
        deploy(&project, &line, &dir);
        let users = link_users(&line);
        // Each step in turn: LINE acts, its answer is held, the deploy is
        // killed before it can record the step; then the step before LINE
        // acts at all (the call fails slowly) for the create.
        let kills = [
            (RichMenuOp::Create, Fault::AcceptSlowly(Duration::from_secs(30))),
            (RichMenuOp::Create, Fault::FailSlowly(Duration::from_secs(30))),
            (RichMenuOp::Upload, Fault::AcceptSlowly(Duration::from_secs(30))),
            (RichMenuOp::AliasUpdate, Fault::AcceptSlowly(Duration::from_secs(30))),
            (RichMenuOp::Batch, Fault::AcceptSlowly(Duration::from_secs(30))),
            (RichMenuOp::Progress, Fault::AcceptSlowly(Duration::from_secs(30))),
            (RichMenuOp::SetDefault, Fault::AcceptSlowly(Duration::from_secs(30))),
            (RichMenuOp::Delete, Fault::AcceptSlowly(Duration::from_secs(30))),
        ];
        for (round, (op, fault)) in kills.into_iter().enumerate() {
            touch_menus(&dir, round + 1);
            line.fail_next_rich_menu_calls(op, [fault.clone()]);
            killed_at_call(&project, &line, &dir, op).await;

            let report = text(&deploy(&project, &line, &dir));

            assert_deployed(&line, &users);
            assert!(
                report.contains("member: resuming after step"),
                "round {round} ({op:?}, {fault:?}): the re-run goes on from the recorded step: {report}"
            );
        }
    }

    #[tokio::test]
    async fn two_deploys_at_once_are_one_deploy() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();

        let mut one = command(&project, &line, &dir, false);
        let mut other = command(&project, &line, &dir, false);
        let (first, second) = tokio::join!(
            tokio::task::spawn_blocking(move || one.output().unwrap()),
            tokio::task::spawn_blocking(move || other.output().unwrap()),
        );
        let (first, second) = (first.unwrap(), second.unwrap());

        assert!(
            first.status.success() && second.status.success(),
            "{}\n{}",
            text(&first),
            text(&second)
        );
        assert_eq!(
            line.rich_menu_calls_of(RichMenuOp::Create).len(),
            2,
            "one create per file"
        );
        assert_deployed(&line, &HashMap::new());
    }

    /// The fixture files as they were (their first hashes).
    fn restore_menus(dir: &Path) {
        for name in ["member.toml", "survey_tab.toml"] {
            std::fs::copy(repo_path("tests/fixtures/richmenus").join(name), dir.join(name)).unwrap();
        }
    }

    #[tokio::test]
    async fn a_file_changed_back_after_a_stopped_deploy_keeps_its_menu_and_its_users() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();
        deploy(&project, &line, &dir);
        let first = current(&line);
        let users = link_users(&line);
        // A change whose deploy stops at the batch (LINE's three an hour).
        touch_menus(&dir, 1);
        line.fail_next_rich_menu_calls(RichMenuOp::Batch, [Fault::RateLimit { retry_after_secs: 60 }]);
        let stopped = command(&project, &line, &dir, false).output().unwrap();
        assert!(!stopped.status.success(), "{}", text(&stopped));

        restore_menus(&dir);
        let report = text(&deploy(&project, &line, &dir));

        assert_deployed(&line, &users);
        assert_eq!(
            current(&line),
            first,
            "the first menus are back, adopted by name: {report}"
        );
    }

    #[tokio::test]
    async fn a_batch_of_a_killed_deploy_is_not_credited_to_a_file_changed_since() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();
        deploy(&project, &line, &dir);
        let users = link_users(&line);
        touch_menus(&dir, 1);
        // The batch stays under way until the test completes it: killed while polling.
        line.set_rich_menu_batch_polls(1000);
        killed_at_call(&project, &line, &dir, RichMenuOp::Progress).await;
        line.complete_rich_menu_batches();
        line.set_rich_menu_batch_polls(2);
        touch_menus(&dir, 2);

        let report = text(&deploy(&project, &line, &dir));

        assert_deployed(&line, &users);
        assert!(
            report.contains("moved or unlinked in one batch"),
            "a batch of its own: {report}"
        );
    }

    #[tokio::test]
    async fn a_removed_file_is_retired_its_users_unlinked_before_its_menu_goes() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();
        let extra = std::fs::read_to_string(dir.join("survey_tab.toml"))
            .unwrap()
            .replace("id = \"survey_tab\"", "id = \"extra\"")
            .replace("image = \"survey_tab.png\"", "image = \"extra.png\"")
            .replace(
                "{ type = \"switch\", to = \"member\", label = \"会員メニュー\" }",
                "{ type = \"uri\", uri = \"https://example.com/extra\" }",
            );
        std::fs::write(dir.join("extra.toml"), extra).unwrap();
        std::fs::copy(dir.join("survey_tab.png"), dir.join("extra.png")).unwrap();
        deploy(&project, &line, &dir);
        let users = link_users(&line);
        let extra_menu = current(&line)["extra"].clone();
        let extra_user = format!("U{:032x}", 0xeee);
        line.link_user_rich_menu(&extra_user, &extra_menu);

        std::fs::remove_file(dir.join("extra.toml")).unwrap();
        let report = text(&deploy(&project, &line, &dir));

        assert!(report.contains("extra: no file any more"), "{report}");
        assert!(!current(&line).contains_key("extra"), "its alias is gone");
        assert!(line.rich_menu(&extra_menu).is_none(), "its menu is gone");
        assert_eq!(line.user_rich_menu(&extra_user), None, "its user is unlinked");
        assert_deployed(&line, &users);
    }

    /// `RICH_MENUS_DEPLOY=1`: the menus of the fixture pair, with the
    /// sample scenarios they start.
    fn deploying_at_start_up(config: &mut line_survey::config::Config) {
        config.rich_menus_deploy = true;
        config.rich_menus_dir = repo_path("tests/fixtures/richmenus");
        config.scenarios_dir = repo_path("scenarios");
    }

    #[tokio::test]
    async fn two_instances_starting_with_rich_menus_deploy_make_one_deploy() {
        let first = crate::helpers::spawn_app_with(crate::helpers::TestOptions {
            adjust: deploying_at_start_up,
            ..Default::default()
        })
        .await;
        let second = crate::helpers::spawn_app_with(crate::helpers::TestOptions {
            adjust: deploying_at_start_up,
            ..first.beside()
        })
        .await;
        let line = &first.line;

        // The first deploy lists LINE's menus four times (before each create,
        // before the batch, for leftovers); the second, finding both menus
        // deployed, twice.
        crate::helpers::wait_until(Duration::from_secs(30), || {
            line.rich_menu_calls_of(RichMenuOp::List).len() >= 6
        })
        .await;

        assert_eq!(
            line.rich_menu_calls_of(RichMenuOp::Create).len(),
            2,
            "one create per file"
        );
        assert_deployed(line, &HashMap::new());
        let records = first.firestore.list("rich_menus").await;
        assert_eq!(records.len(), 2);
        drop(second);
    }

    #[tokio::test]
    async fn a_refusal_from_line_names_the_file_and_the_field() {
        let project = new_project_id();
        let line = LineStandIn::start().await;
        let dir = menu_dir();
        line.refuse_next_rich_menu_create("areas[0].action.data", "Length must be between 0 and 300");

        let output = command(&project, &line, &dir, false).output().unwrap();

        assert!(!output.status.success());
        let said = text(&output);
        assert!(
            said.contains("member.toml") && said.contains("creating the menu failed"),
            "{said}"
        );
        assert!(said.contains("areas[0]"), "LINE's property is named: {said}");
    }
}

// ---- Per-user menus: `rich_menu` on a step, linked through the ledger ----

/// The rich menu ledger entries of `user`.
fn menu_entries(ledger: &[serde_json::Value], user: &str) -> Vec<serde_json::Value> {
    ledger
        .iter()
        .filter(|entry| {
            crate::helpers::firestore_rest::string_field(entry, "route").as_deref() == Some("rich_menu")
                && crate::helpers::firestore_rest::string_field(entry, "lineUserId").as_deref() == Some(user)
        })
        .cloned()
        .collect()
}

/// Waits until every event is done and every rich menu link entry is sent
/// (link calls that fail are retried: waits from 0.5 s doubling to 60 s);
/// the ledger as it then stands.
async fn links_sent(app: &crate::helpers::TestApp) -> Vec<serde_json::Value> {
    use crate::helpers::firestore_rest::string_field;
    app.firestore.settled(std::time::Duration::from_secs(300)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let ledger = app.firestore.list("outbound_ledger").await;
        let open = ledger
            .iter()
            .filter(|entry| {
                string_field(entry, "route").as_deref() == Some("rich_menu")
                    && string_field(entry, "state").as_deref() != Some("sent")
            })
            .count();
        if open == 0 {
            return ledger;
        }
        assert!(std::time::Instant::now() < deadline, "{open} link entries still open");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn two_hundred_users_double_tapping_choices_that_link_menus_end_on_the_menu_of_their_recorded_answer() {
    use crate::helpers::firestore_rest::string_field;
    let app = spawn_app().await;
    deploy::deploy(&app.project_id, &app.line, &deploy::menu_dir());
    let aliases = app.line.rich_menu_aliases();
    app.line.fail_rich_menu_links_randomly(0.3);
    let users: Vec<String> = (0..200).map(|_| events::new_user()).collect();
    // Each user taps two different choices at once: guard 1 records one.
    let choices = ["member", "survey", "none"];
    let taps: Vec<serde_json::Value> = users
        .iter()
        .enumerate()
        .flat_map(|(index, user)| {
            let (first, second) = (choices[index % 3], choices[(index + 1) % 3]);
            [
                postback(user, &events::answer_data("membership", "plan", first)),
                postback(user, &events::answer_data("membership", "plan", second)),
            ]
        })
        .collect();

    let bodies: Vec<serde_json::Value> = taps.iter().map(|tap| events::envelope(vec![tap.clone()])).collect();
    let responses = futures::future::join_all(bodies.iter().map(|body| app.post_webhook(body))).await;
    assert!(responses.iter().all(|response| response.status() == 200));
    // Every event done and every link entry settled: 30% of LINE's link calls
    // fail and are retried (waits from 0.5 s doubling to 10 s).
    let ledger = links_sent(&app).await;

    let failed_calls = app
        .line
        .rich_menu_calls()
        .iter()
        .filter(|call| call.path.starts_with("/v2/bot/user/U") && call.status == 500)
        .count();
    assert!(
        failed_calls > 20,
        "LINE failed link calls ({failed_calls}) and they were retried"
    );
    for user in &users {
        let answer_id = line_survey::ids::answer_id(
            &line_survey::ids::ScenarioId::parse("membership").unwrap(),
            &line_survey::ids::NodeId::parse("plan").unwrap(),
            &line_survey::ids::LineUserId::parse(user.as_str()).unwrap(),
        );
        let answer = app
            .firestore
            .get("survey_responses", &answer_id)
            .await
            .expect("one answer recorded");
        let recorded = string_field(&answer, "value").expect("a choice");
        let (asked, expected) = match recorded.as_str() {
            "member" => ("member", aliases.get("member").cloned()),
            "survey" => ("survey_tab", aliases.get("survey_tab").cloned()),
            _ => ("default", None),
        };
        let record = app.firestore.get("users", user).await.expect("the user is recorded");
        assert_eq!(string_field(&record, "richMenu").as_deref(), Some(asked), "{user}");
        assert_eq!(
            app.line.user_rich_menu(user),
            expected,
            "{user} is on the menu of {recorded}"
        );
        assert_eq!(
            menu_entries(&ledger, user).len(),
            1,
            "{user}: one decision, one link entry"
        );
    }
}

/// `count` users in Firestore, those `tagged(i)` with `vip`.
async fn seed_users(app: &crate::helpers::TestApp, count: usize, tagged: impl Fn(usize) -> bool) -> Vec<String> {
    let users: Vec<String> = (0..count).map(|_| events::new_user()).collect();
    let documents: Vec<(String, String, serde_json::Value)> = users
        .iter()
        .enumerate()
        .map(|(index, user)| {
            let tags: Vec<serde_json::Value> = if tagged(index) {
                vec![serde_json::json!({"stringValue": "vip"})]
            } else {
                Vec::new()
            };
            let fields = serde_json::json!({
                "lineUserId": {"stringValue": user},
                "following": {"booleanValue": true},
                "tags": {"arrayValue": {"values": tags}},
            });
            ("users".to_owned(), user.clone(), fields)
        })
        .collect();
    app.firestore.write_all(&documents).await;
    users
}

async fn link_request(
    app: &crate::helpers::TestApp,
    menu: &str,
    key: &str,
    body: serde_json::Value,
) -> (reqwest::StatusCode, serde_json::Value) {
    let response = app
        .http
        .post(format!("{}/admin/rich-menus/{menu}/link", app.address))
        .bearer_auth(crate::helpers::ADMIN_TOKEN)
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .expect("service reachable");
    let status = response.status();
    (status, response.json().await.unwrap_or_default())
}

#[tokio::test]
async fn linking_a_menu_to_an_audience_goes_500_a_call_resumes_after_a_failure_and_a_dry_run_links_nothing() {
    use crate::helpers::line_rich_menus::RichMenuOp;
    use crate::helpers::line_stand_in::Fault;
    let app = crate::helpers::spawn_app_with(crate::helpers::TestOptions {
        test_clock: true,
        ..Default::default()
    })
    .await;
    deploy::deploy(&app.project_id, &app.line, &deploy::menu_dir());
    let member = app.line.rich_menu_aliases()["member"].clone();
    let users = seed_users(&app, 1150, |index| index % 23 != 0).await;
    let vip: Vec<&String> = users
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 23 != 0)
        .map(|(_, user)| user)
        .collect();
    let audience = serde_json::json!({"audience": {"tags": {"anyOf": ["vip"]}}});

    let mut dry = audience.clone();
    dry["dryRun"] = serde_json::Value::from(true);
    let (status, report) = link_request(&app, "member", "dry", dry).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["users"], vip.len());
    assert_eq!(report["sample"].as_array().map(Vec::len), Some(20));
    assert!(
        app.line.rich_menu_calls_of(RichMenuOp::BulkLink).is_empty(),
        "a dry run calls nothing"
    );
    assert!(app.line.user_rich_menus().is_empty());

    // The first page's two calls go through; the second page's fails five times.
    app.line.fail_next_rich_menu_calls(
        RichMenuOp::BulkLink,
        std::iter::repeat_n(Fault::AcceptSlowly(std::time::Duration::from_millis(1)), 2)
            .chain(std::iter::repeat_n(Fault::Refuse(500), 5)),
    );
    let (status, failed) = link_request(&app, "member", "vip-1", audience.clone()).await;
    assert_eq!(status, 502, "{failed}");
    let linked_before = app.line.user_rich_menus().len();
    assert!(
        linked_before > 500 && linked_before < vip.len(),
        "the first page: {linked_before}"
    );
    // The failed page's users were recorded with link entries that wait 30 s:
    // once they run, those users are linked even before the request is resent.
    app.advance_clock(std::time::Duration::from_secs(31)).await;
    links_sent(&app).await;
    let asked = app
        .firestore
        .list("users")
        .await
        .iter()
        .filter(|user| crate::helpers::firestore_rest::string_field(user, "richMenu").as_deref() == Some("member"))
        .count();
    assert!(
        asked > linked_before,
        "the failed page's users were asked for ({asked})"
    );
    assert_eq!(
        app.line.user_rich_menus().len(),
        asked,
        "every user asked for is linked"
    );

    let (status, report) = link_request(&app, "member", "vip-1", audience.clone()).await;

    assert_eq!(status, 200, "{report}");
    assert_eq!(report["done"], true);
    assert_eq!(report["users"], vip.len());
    let bulk_calls = app.line.rich_menu_calls_of(RichMenuOp::BulkLink);
    let took_effect: Vec<_> = bulk_calls.iter().filter(|call| call.took_effect).collect();
    assert_eq!(took_effect.len(), 3, "the first page was not linked again");
    assert!(
        took_effect
            .iter()
            .all(|call| call.body["userIds"].as_array().is_some_and(|ids| ids.len() <= 500))
    );
    let links = app.line.user_rich_menus();
    for user in &users {
        let expected = vip.contains(&user).then_some(&member);
        assert_eq!(links.get(user), expected, "{user}");
    }
    let record = app.firestore.get("users", vip[0]).await.unwrap();
    assert_eq!(
        crate::helpers::firestore_rest::string_field(&record, "richMenu").as_deref(),
        Some("member"),
        "the user's record says which menu was asked for"
    );
    // What the service sent LINE (the deploy's and the bulk calls' bodies),
    // against LINE's own schemas.
    if let Some(shared) = crate::contract::shared_dir() {
        let calls = app.line.rich_menu_calls_for_contract();
        let (ok, report) = crate::rich_menu_stand_in::check_requests(&shared, &calls);
        assert!(ok && report.contains(" 0 schema problems"), "{report}");
    }
    // The same key for another request, a menu never deployed, a bad id.
    assert_eq!(link_request(&app, "survey_tab", "vip-1", audience.clone()).await.0, 422);
    assert_eq!(link_request(&app, "nothing_here", "k2", audience.clone()).await.0, 404);
    assert_eq!(link_request(&app, "Bad%20Id", "k3", audience).await.0, 400);
}

#[tokio::test]
async fn two_decisions_of_one_user_racing_on_two_instances_end_on_the_newest() {
    use crate::helpers::firestore_rest::string_field;
    use crate::helpers::line_rich_menus::RichMenuOp;
    let app = spawn_app().await;
    let other = crate::helpers::spawn_app_with(app.beside()).await;
    deploy::deploy(&app.project_id, &app.line, &deploy::menu_dir());
    let aliases = app.line.rich_menu_aliases();
    let users: Vec<String> = (0..40).map(|_| events::new_user()).collect();
    let post_all = |node: &'static str, choice: &'static str| {
        let bodies: Vec<serde_json::Value> = users
            .iter()
            .map(|user| events::envelope(vec![postback(user, &events::answer_data("membership", node, choice))]))
            .collect();
        let (app, other) = (&app, &other);
        async move {
            // Half to each instance, all at once.
            let responses = futures::future::join_all(bodies.iter().enumerate().map(|(index, body)| {
                let target = if index % 2 == 0 { app } else { other };
                target.post_webhook(body)
            }))
            .await;
            assert!(responses.iter().all(|response| response.status() == 200));
        }
    };
    // The first decisions' link calls reach LINE late (1.5 s): they are in
    // flight when the second decisions are made and linked.
    app.line
        .delay_rich_menu_links_randomly(1.0, std::time::Duration::from_millis(1500));
    post_all("plan", "member").await;
    crate::helpers::wait_until(std::time::Duration::from_secs(30), || {
        app.line.rich_menu_calls_of(RichMenuOp::Link).len() >= users.len()
    })
    .await;
    app.line.delay_rich_menu_links_randomly(0.0, std::time::Duration::ZERO);
    app.line.fail_rich_menu_links_randomly(0.2);
    post_all("tab", "yes").await;
    // Every link entry sent: each one's last call was answered, and a late
    // link is answered only once it took effect (checked below), so none is
    // left to land; the wait says so.
    links_sent(&app).await;
    crate::helpers::wait_until(std::time::Duration::from_secs(10), || {
        app.line.rich_menu_links_in_flight() == 0
    })
    .await;

    for user in &users {
        let record = app.firestore.get("users", user).await.expect("the user is recorded");
        let newest = string_field(&record, "richMenu").expect("a menu asked for");
        assert_eq!(newest, "survey_tab", "the second decision is the newest");
        assert_eq!(
            app.line.user_rich_menu(user).as_ref(),
            aliases.get(&newest),
            "{user} is on the newest decision's menu ({newest})"
        );
        assert_eq!(
            record["fields"]["richMenuSeq"]["integerValue"].as_str(),
            Some("2"),
            "two decisions"
        );
    }
}

/// The stand-in's late links behave as LINE's: a link that reached LINE late
/// has taken effect by the time its answer comes back, so whatever the
/// caller does on that answer comes after it. The racing test above needs
/// this: the service answers a late link by linking the newest menu again,
/// and were the answer let go before the late link landed, that corrective
/// link could land first and leave the user on the older menu.
#[tokio::test]
async fn a_late_link_has_taken_effect_when_its_answer_comes() {
    use crate::helpers::line_stand_in::ACCESS_TOKEN;
    let app = spawn_app().await;
    deploy::deploy(&app.project_id, &app.line, &deploy::menu_dir());
    let member = app.line.rich_menu_aliases()["member"].clone();
    let users: Vec<String> = (0..200).map(|_| events::new_user()).collect();
    app.line
        .delay_rich_menu_links_randomly(1.0, std::time::Duration::from_millis(300));

    let seen = futures::future::join_all(users.iter().map(|user| {
        let (app, member) = (&app, &member);
        async move {
            let answer = app
                .http
                .post(format!("{}/v2/bot/user/{user}/richmenu/{member}", app.line.uri()))
                .bearer_auth(ACCESS_TOKEN)
                .send()
                .await
                .expect("the stand-in answers");
            assert_eq!(answer.status(), 200);
            // What LINE holds the moment its answer is in.
            app.line.user_rich_menu(user)
        }
    }))
    .await;

    let early = seen.iter().filter(|seen| seen.as_ref() != Some(&member)).count();
    assert_eq!(early, 0, "links answered before they took effect");
    assert_eq!(app.line.rich_menu_links_in_flight(), 0);
}

#[tokio::test]
async fn a_link_to_a_menu_not_yet_deployed_is_retried_until_the_deploy_makes_it() {
    let app = spawn_app().await;
    let user = events::new_user();
    let answer = postback(&user, &events::answer_data("membership", "plan", "member"));
    let response = app.post_webhook(&events::envelope(vec![answer])).await;
    assert_eq!(response.status(), 200);
    // The link is tried and put off while no deploy made the menu.
    crate::helpers::wait_until(std::time::Duration::from_secs(30), || {
        app.line.rich_menu_calls().is_empty() && !app.line.accepted().is_empty()
    })
    .await;

    deploy::deploy(&app.project_id, &app.line, &deploy::menu_dir());
    links_sent(&app).await;

    assert_eq!(
        app.line.user_rich_menu(&user),
        app.line.rich_menu_aliases().get("member").cloned()
    );
}

#[tokio::test]
async fn a_link_line_refused_is_parked_and_a_replay_links_it_without_pushing_anything() {
    use crate::helpers::firestore_rest::document_id;
    use crate::helpers::line_rich_menus::RichMenuOp;
    use crate::helpers::line_stand_in::Fault;
    let app = spawn_app().await;
    deploy::deploy(&app.project_id, &app.line, &deploy::menu_dir());
    app.line
        .fail_next_rich_menu_calls(RichMenuOp::Link, [Fault::Refuse(400)]);
    let user = events::new_user();
    app.deliver(&postback(&user, &events::answer_data("membership", "plan", "member")))
        .await;
    app.firestore.settled(std::time::Duration::from_secs(30)).await;
    let letters = app.firestore.list("dead_letters").await;
    assert_eq!(letters.len(), 1, "the refused link is parked");
    let letter = document_id(&letters[0]);

    let replayed = app.post_admin(&format!("/admin/dead-letters/{letter}/replay")).await;

    assert_eq!(replayed.status(), 200, "{}", replayed.text().await.unwrap_or_default());
    assert_eq!(
        app.line.user_rich_menu(&user),
        app.line.rich_menu_aliases().get("member").cloned(),
        "the replayed link entry linked the menu (not a push of no messages)"
    );
    assert!(
        app.line.calls().iter().all(|call| call.path != "/v2/bot/message/push"),
        "nothing was pushed"
    );
}
