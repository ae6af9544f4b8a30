//! `line-survey migrate legacy-answers` against the emulator: 5,000 seeded
//! documents of an earlier bot (random ids, double taps with the same or
//! another choice, answers without `answeredAt`, unreadable ones) beside
//! this service's own answers. The report's counts are exact; afterwards
//! every group has one deterministic answer (the earliest), every user a
//! marker, and the guards hold without the legacy lookup. The same under
//! SIGKILLs at random moments, and with users answering during the run.

use crate::cli::{run_piped, stdout};
use crate::helpers::firestore_rest::{FirestoreRest, document_id, string_array, string_field};
use crate::helpers::{TestApp, TestOptions, emulator_host, events, spawn_app_with};
use crate::operators::shown;
use line_survey::ids::{LineUserId, NodeId, ScenarioId, answer_id, scenario_marker_id};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SCENARIO: &str = "lunch";
const GROUPS: usize = 2000;
/// Groups whose answer this service already recorded (the user answered
/// through it before the migration).
const ANSWERED_HERE: usize = 50;
/// Answers of this service to other users: with the legacy and unreadable
/// documents, 5,000 documents in `survey_responses`.
const OTHER_ANSWERS: usize = 2030;
const UNREADABLE: usize = 20;
const LEGACY_DOCUMENTS: usize = 2900;
const LEASE_MS: &str = "2000";

/// A choice: its value and its tags, as the fixture's lunch survey has them.
fn choices(node: &str) -> [(&'static str, &'static [&'static str]); 2] {
    match node {
        "ask_food" => [("good", &["lunch_good", "foodie"]), ("bad", &["lunch_bad"])],
        _ => [("coffee", &["coffee"]), ("tea", &["tea"])],
    }
}

/// One legacy document as seeded.
#[derive(Debug, Clone)]
struct LegacyDoc {
    id: String,
    /// `None`: no `answeredAt` (the create time counts, which is later than
    /// every seeded answer).
    answered_ms: Option<i64>,
    value: &'static str,
    tags: Vec<String>,
}

#[derive(Debug, Clone)]
struct Group {
    user: String,
    node: &'static str,
    docs: Vec<LegacyDoc>,
    answered_here: bool,
}

impl Group {
    fn answer_id(&self) -> String {
        answer_id(
            &ScenarioId::parse(SCENARIO).unwrap(),
            &NodeId::parse(self.node).unwrap(),
            &LineUserId::parse(self.user.as_str()).unwrap(),
        )
    }

    /// The earliest answer; ties go to the smallest id.
    fn canonical(&self) -> &LegacyDoc {
        self.docs
            .iter()
            .min_by_key(|doc| (doc.answered_ms.unwrap_or(i64::MAX), doc.id.clone()))
            .unwrap()
    }

    fn duplicates(&self) -> Vec<String> {
        let canonical = self.canonical().id.clone();
        let mut others: Vec<String> = self
            .docs
            .iter()
            .map(|doc| doc.id.clone())
            .filter(|id| *id != canonical)
            .collect();
        others.sort();
        others
    }

    fn conflicting(&self) -> bool {
        let canonical = self.canonical().value;
        self.docs.iter().any(|doc| doc.value != canonical)
    }
}

struct Seeded {
    groups: Vec<Group>,
    /// Unreadable documents whose scenario and user are ids: the lookup
    /// still finds them.
    unreadable_with_user: Vec<String>,
    /// Each legacy user's tags on `users/{id}`.
    user_tags: BTreeMap<String, BTreeSet<String>>,
}

impl Seeded {
    /// The report a whole run must give.
    fn expected(&self) -> Value {
        let doubtful = self
            .user_tags
            .iter()
            .filter(|(user, tags)| {
                self.groups.iter().filter(|group| &group.user == *user).any(|group| {
                    let canonical = &group.canonical().tags;
                    group
                        .docs
                        .iter()
                        .flat_map(|doc| &doc.tags)
                        .any(|tag| !canonical.contains(tag) && tags.contains(tag))
                })
            })
            .count();
        let answered_here = self.groups.iter().filter(|group| group.answered_here).count();
        json!({
            "legacyDocuments": self.groups.iter().map(|group| group.docs.len()).sum::<usize>(),
            "groups": self.groups.len(),
            "duplicatedGroups": self.groups.iter().filter(|group| group.docs.len() > 1).count(),
            "conflictingGroups": self.groups.iter().filter(|group| group.conflicting()).count(),
            "doubtfulTagUsers": doubtful,
            "unreadable": UNREADABLE,
            "migrated": self.groups.len() - answered_here,
            "alreadyMigrated": answered_here,
        })
    }
}

/// A small deterministic generator, so a failure can be run again as it was.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn legacy_id() -> String {
    // Like an auto-generated Firestore id: 20 random characters.
    uuid::Uuid::new_v4().simple().to_string()[..20].to_owned()
}

fn string(text: &str) -> Value {
    json!({ "stringValue": text })
}

fn strings(all: &[String]) -> Value {
    json!({ "arrayValue": { "values": all.iter().map(|tag| string(tag)).collect::<Vec<_>>() } })
}

fn timestamp(ms: i64) -> Value {
    let at = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    json!({ "timestampValue": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true) })
}

/// Seeds 5,000 documents in `survey_responses` for `firestore`'s project:
/// 2,000 groups (1,000 users, two questions each) of 2,900 legacy answers
/// (1,400 alone, 300 twice, 300 three times, a third of those with the other
/// choice), 50 of them answered here too, 2,030 answers of other users made
/// here, and 20 unreadable documents; with the users' tags and markers.
async fn seed(firestore: &FirestoreRest) -> Seeded {
    let mut random = Lcg(2026);
    let base_ms = chrono::DateTime::parse_from_rfc3339("2025-06-01T09:00:00+09:00")
        .unwrap()
        .timestamp_millis();
    let users: Vec<String> = (0..GROUPS / 2).map(|_| events::new_user()).collect();
    let mut groups = Vec::new();
    let mut user_tags: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for index in 0..GROUPS {
        // A permutation of 0..2000, so the kinds of group are spread out.
        let p = (index * 7919) % GROUPS;
        let size = match p {
            0..1400 => 1,
            1400..1700 => 2,
            _ => 3,
        };
        let user = users[index / 2].clone();
        let node = ["ask_food", "ask_drink"][index % 2];
        let [first, other] = choices(node);
        let conflicting = size > 1 && p.is_multiple_of(3);
        let group_ms = base_ms + index as i64 * 60_000;
        let docs: Vec<LegacyDoc> = (0..size)
            .map(|k| {
                let (value, tags) = if conflicting && k > 0 { other } else { first };
                let answered_ms = match k {
                    // A double tap saved twice within the same millisecond.
                    0 | 1 if p % 10 == 1 => Some(group_ms),
                    // An old version saved no time: its create time counts.
                    k if k == size - 1 && k > 0 && p % 10 == 2 => None,
                    k => Some(group_ms + k as i64 * 700 + (random.next() % 300) as i64),
                };
                LegacyDoc {
                    id: legacy_id(),
                    answered_ms,
                    value,
                    tags: tags.iter().map(|tag| (*tag).to_owned()).collect(),
                }
            })
            .collect();
        let group = Group {
            user: user.clone(),
            node,
            docs,
            answered_here: p < ANSWERED_HERE,
        };
        // The old bot gave every tapped choice's tags; operators removed
        // some of the wrong ones by hand since.
        let tags = user_tags.entry(user).or_default();
        let keeps_every_tag = p.is_multiple_of(2);
        for doc in &group.docs {
            if keeps_every_tag || doc.id == group.canonical().id {
                tags.extend(doc.tags.iter().cloned());
            }
        }
        groups.push(group);
    }

    let mut documents: Vec<(String, String, Value)> = Vec::new();
    for group in &groups {
        for doc in &group.docs {
            let mut fields = json!({
                "scenarioId": string(SCENARIO),
                "nodeId": string(group.node),
                "lineUserId": string(&group.user),
                "value": string(doc.value),
                "valueType": string("choice"),
                "tags": strings(&doc.tags),
            });
            if let Some(ms) = doc.answered_ms {
                fields["answeredAt"] = timestamp(ms);
            }
            documents.push(("survey_responses".to_owned(), doc.id.clone(), fields));
        }
        if group.answered_here {
            let (value, tags) = choices(group.node)[0];
            let tags: Vec<String> = tags.iter().map(|tag| (*tag).to_owned()).collect();
            documents.push((
                "survey_responses".to_owned(),
                group.answer_id(),
                json!({
                    "scenarioId": string(SCENARIO),
                    "nodeId": string(group.node),
                    "lineUserId": string(&group.user),
                    "value": string(value),
                    "valueType": string("choice"),
                    "tags": strings(&tags),
                    "answeredAt": timestamp(base_ms + 400 * 86_400_000),
                    "webhookEventId": string("seeded"),
                }),
            ));
            let marker = scenario_marker_id(
                &ScenarioId::parse(SCENARIO).unwrap(),
                &LineUserId::parse(group.user.as_str()).unwrap(),
            );
            documents.push((
                "scenario_answers".to_owned(),
                marker,
                json!({
                    "scenarioId": string(SCENARIO),
                    "lineUserId": string(&group.user),
                    "lastAnswerId": string(&group.answer_id()),
                    "lastAnsweredAt": timestamp(base_ms + 400 * 86_400_000),
                }),
            ));
        }
    }
    for _ in 0..OTHER_ANSWERS {
        let user = events::new_user();
        let id = answer_id(
            &ScenarioId::parse(SCENARIO).unwrap(),
            &NodeId::parse("ask_food").unwrap(),
            &LineUserId::parse(user.as_str()).unwrap(),
        );
        documents.push((
            "survey_responses".to_owned(),
            id,
            json!({
                "scenarioId": string(SCENARIO),
                "nodeId": string("ask_food"),
                "lineUserId": string(&user),
                "value": string("good"),
                "valueType": string("choice"),
                "tags": strings(&["lunch_good".to_owned()]),
                "answeredAt": timestamp(base_ms),
                "webhookEventId": string("seeded"),
            }),
        ));
    }
    let mut unreadable_with_user = Vec::new();
    for index in 0..UNREADABLE {
        let user = events::new_user();
        let id = legacy_id();
        if index % 3 == 1 {
            unreadable_with_user.push(id.clone());
        }
        let fields = match index % 3 {
            0 => json!({ "scenarioId": string(SCENARIO), "nodeId": string("ask_food"), "value": string("good") }),
            1 => {
                json!({ "scenarioId": string(SCENARIO), "nodeId": string("ask\u{0}food"), "lineUserId": string(&user) })
            }
            _ => {
                json!({ "scenarioId": string(&"x".repeat(101)), "nodeId": string("ask_food"), "lineUserId": string(&user) })
            }
        };
        documents.push(("survey_responses".to_owned(), id, fields));
    }
    for (user, tags) in &user_tags {
        let tags: Vec<String> = tags.iter().cloned().collect();
        documents.push(("users".to_owned(), user.clone(), json!({ "tags": strings(&tags) })));
    }
    firestore.write_all(&documents).await;
    let seeded = Seeded {
        groups,
        unreadable_with_user,
        user_tags,
    };
    assert_eq!(firestore.count("survey_responses").await, 5000);
    assert_eq!(
        seeded.groups.iter().map(|group| group.docs.len()).sum::<usize>(),
        LEGACY_DOCUMENTS
    );
    seeded
}

/// `line-survey migrate ARGS` for `project`, as a command not yet started.
fn migrate_command(project: &str, args: &[&str]) -> Command {
    let mut command = crate::operators::command_for(project);
    command
        .env("LEASE_MS", LEASE_MS)
        .env("LINE_TIMEOUT_MS", "400")
        .arg("migrate")
        .args(args);
    command
}

fn migrate(project: &str, args: &[&str]) -> Output {
    run_piped(migrate_command(project, args), None)
}

/// The JSON report a successful command printed (its last stdout line).
fn report(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{}", shown(output));
    let text = stdout(output);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|error| panic!("a JSON report ({error}): {}", shown(output)))
}

/// The report's counts, without the lists and flags.
fn counts(report: &Value) -> Value {
    let keys = [
        "legacyDocuments",
        "groups",
        "duplicatedGroups",
        "conflictingGroups",
        "doubtfulTagUsers",
        "unreadable",
        "migrated",
        "alreadyMigrated",
    ];
    Value::Object(
        keys.iter()
            .map(|key| ((*key).to_owned(), report[*key].clone()))
            .collect(),
    )
}

/// Every group has exactly its deterministic answer (the earliest legacy
/// one, or the one made here), every legacy user a marker, and nothing else
/// was written to `survey_responses` besides `extra` answers.
async fn assert_migrated(firestore: &FirestoreRest, seeded: &Seeded, extra: usize) {
    let responses: HashMap<String, Value> = firestore
        .list("survey_responses")
        .await
        .into_iter()
        .map(|document| (document_id(&document), document))
        .collect();
    assert_eq!(
        responses.len(),
        5000 + GROUPS - ANSWERED_HERE + extra,
        "one new document per migrated group"
    );
    for group in &seeded.groups {
        let answer = responses
            .get(&group.answer_id())
            .unwrap_or_else(|| panic!("group {group:?} has its deterministic answer"));
        if group.answered_here {
            assert_eq!(string_field(answer, "migratedFrom"), None, "the answer made here stays");
            assert_eq!(string_field(answer, "webhookEventId").as_deref(), Some("seeded"));
            continue;
        }
        let canonical = group.canonical();
        assert_eq!(
            string_field(answer, "migratedFrom").as_deref(),
            Some(canonical.id.as_str()),
            "the earliest answer of {group:?}"
        );
        assert_eq!(string_array(answer, "legacyDuplicates"), group.duplicates());
        assert_eq!(string_field(answer, "value").as_deref(), Some(canonical.value));
        assert_eq!(string_array(answer, "tags"), canonical.tags);
        assert!(answer["fields"]["answeredAt"]["timestampValue"].is_string());
    }
    let markers: HashMap<String, Value> = firestore
        .list("scenario_answers")
        .await
        .into_iter()
        .map(|document| (document_id(&document), document))
        .collect();
    for user in seeded.user_tags.keys() {
        let marker = scenario_marker_id(
            &ScenarioId::parse(SCENARIO).unwrap(),
            &LineUserId::parse(user.as_str()).unwrap(),
        );
        let marker = markers.get(&marker).expect("every legacy user has a marker");
        let answered = string_field(marker, "lastAnswerId").expect("that says answered");
        assert!(responses.contains_key(&answered), "the marker names an answer");
    }
}

/// With `LEGACY_ANSWER_LOOKUP=false`: migrated users' taps on their answered
/// questions and the survey's trigger change nothing and send nothing.
async fn assert_guards_hold(app: &TestApp, seeded: &Seeded) {
    let before = app.firestore.count("survey_responses").await;
    let sent = app.line.accepted().len();
    let users: Vec<&Group> = seeded.groups.iter().step_by(50).collect();
    for group in &users {
        let tags_before = crate::helpers::sorted(app.user_tags(&group.user).await);
        let [_, other] = choices(group.node);
        app.deliver(&events::postback(
            &group.user,
            &events::answer_data(SCENARIO, group.node, other.0),
        ))
        .await;
        app.deliver(&events::text(&group.user, "lunch")).await;
        assert_eq!(
            crate::helpers::sorted(app.user_tags(&group.user).await),
            tags_before,
            "no tag from a second answer"
        );
    }
    assert_eq!(
        app.firestore.count("survey_responses").await,
        before,
        "no second answer"
    );
    assert_eq!(app.line.accepted().len(), sent, "no question and no survey sent again");
}

#[tokio::test]
async fn legacy_answers_move_onto_deterministic_ids_with_an_exact_report() {
    // The lookup is off: after the migration, the guards need no query.
    let app = spawn_app_with(TestOptions::default()).await;
    let project = app.project_id.clone();
    let seeded = seed(&app.firestore).await;
    let expected = seeded.expected();

    let status = report(&migrate(&project, &["status", "--format", "json"]));
    assert_eq!(status["finished"], false);
    assert_eq!(status["legacyDocuments"], 0);
    let early = migrate(&project, &["legacy-answers", "--delete-legacy", "--yes"]);
    assert_eq!(early.status.code(), Some(2), "{}", shown(&early));
    assert!(
        String::from_utf8_lossy(&early.stderr).contains("has not finished"),
        "{}",
        shown(&early)
    );

    // The dry run's report, and nothing written.
    let dry = report(&migrate(&project, &["legacy-answers", "--dry-run", "--format", "json"]));
    assert_eq!(counts(&dry), expected, "the dry run's counts");
    assert_eq!(dry["finished"], false);
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["unreadableIds"].as_array().map(Vec::len), Some(UNREADABLE));
    assert_eq!(app.firestore.count("survey_responses").await, 5000);
    assert_eq!(app.firestore.count("migrations").await, 0, "a dry run writes nothing");
    // (The report in words is table-tested in cli/migrate.rs: a second dry
    // run here, a whole pass over the 5,000 documents, only to read it in
    // words cost this test a sixth of its time.)

    let started = Instant::now();
    let run = report(&migrate(&project, &["legacy-answers", "--format", "json"]));
    println!(
        "migrated {LEGACY_DOCUMENTS} legacy documents (5,000 in all) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(counts(&run), expected);
    assert_eq!(run["finished"], true);
    // Seven unreadable documents name a scenario and a user: the lookup
    // still finds them, so it cannot go yet.
    assert_eq!(run["lookupCanBeSwitchedOff"], false);
    let doubtful = run["doubtfulUsers"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        doubtful.len() as u64,
        expected["doubtfulTagUsers"].as_u64().unwrap().min(100)
    );
    for user in &doubtful {
        let id = user["lineUserId"].as_str().unwrap();
        let has = &seeded.user_tags[id];
        for tag in user["tags"].as_array().unwrap() {
            assert!(
                has.contains(tag.as_str().unwrap()),
                "a doubtful tag is one the user has"
            );
        }
    }
    assert_migrated(&app.firestore, &seeded, 0).await;
    let status = migrate(&project, &["status"]);
    assert!(
        stdout(&status).contains("7 unreadable documents name a scenario and a user"),
        "{}",
        shown(&status)
    );
    assert_eq!(
        counts(&report(&migrate(&project, &["status", "--format", "json"]))),
        expected
    );

    // The operator deletes them and runs it again: a new pass, in which
    // every group is already migrated, and then the lookup can go.
    for id in &seeded.unreadable_with_user {
        app.firestore.delete("survey_responses", id).await;
    }
    let again = report(&migrate(&project, &["legacy-answers", "--format", "json"]));
    let mut expected_again = expected.clone();
    expected_again["unreadable"] = json!(UNREADABLE - seeded.unreadable_with_user.len());
    expected_again["migrated"] = json!(0);
    expected_again["alreadyMigrated"] = json!(GROUPS);
    assert_eq!(counts(&again), expected_again);
    assert_eq!(again["lookupCanBeSwitchedOff"], true);
    let status = migrate(&project, &["status"]);
    assert!(
        stdout(&status).contains("LEGACY_ANSWER_LOOKUP can be switched off"),
        "{}",
        shown(&status)
    );
    // A service started with the lookup on now says, once, that it can go.
    let service =
        crate::helpers::process::ServiceProcess::start(&project, &app.line.uri(), &[("LEGACY_ANSWER_LOOKUP", "true")])
            .await;
    let log = service.log_text();
    assert_eq!(log.matches("LEGACY_ANSWER_LOOKUP=true can go").count(), 1, "{log}");
    drop(service);

    assert_guards_hold(&app, &seeded).await;

    // The legacy documents go only when asked twice.
    let unconfirmed = migrate(&project, &["legacy-answers", "--delete-legacy"]);
    assert_eq!(unconfirmed.status.code(), Some(2), "{}", shown(&unconfirmed));
    let would = report(&migrate(
        &project,
        &["legacy-answers", "--delete-legacy", "--dry-run", "--format", "json"],
    ));
    assert_eq!(would["deletable"], LEGACY_DOCUMENTS);
    assert_eq!(would["deleted"], 0);
    let responses = app.firestore.count("survey_responses").await;
    let deleted = report(&migrate(
        &project,
        &["legacy-answers", "--delete-legacy", "--yes", "--format", "json"],
    ));
    assert_eq!(deleted["deleted"], LEGACY_DOCUMENTS);
    assert_eq!(
        app.firestore.count("survey_responses").await,
        responses - LEGACY_DOCUMENTS
    );
    assert_migrated_after_deletion(&app.firestore, &seeded).await;
    assert_guards_hold(&app, &seeded).await;
}

/// After `--delete-legacy`: no legacy document is left; the answers made
/// from them and the unreadable documents are.
async fn assert_migrated_after_deletion(firestore: &FirestoreRest, seeded: &Seeded) {
    let ids: BTreeSet<String> = firestore
        .list("survey_responses")
        .await
        .iter()
        .map(document_id)
        .collect();
    for group in &seeded.groups {
        assert!(ids.contains(&group.answer_id()));
        for doc in &group.docs {
            assert!(!ids.contains(&doc.id), "legacy document {} deleted", doc.id);
        }
    }
    assert_eq!(
        ids.len(),
        5000 + GROUPS - ANSWERED_HERE - LEGACY_DOCUMENTS - seeded.unreadable_with_user.len()
    );
}

/// Starts `line-survey migrate legacy-answers` in the background.
fn start_migration(project: &str, log: &std::path::Path) -> Child {
    let file = std::fs::File::create(log).unwrap();
    migrate_command(project, &["legacy-answers", "--batch", "50", "--format", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("the migration starts")
}

#[tokio::test]
async fn a_migration_killed_ten_times_ends_as_one_run() {
    let project = crate::helpers::new_project_id();
    let firestore = FirestoreRest::new(&emulator_host(), &project);
    let seeded = seed(&firestore).await;
    let log = std::env::temp_dir().join(format!("migration-{project}.log"));
    let mut random = Lcg(std::process::id() as u64);
    let saved = || async {
        firestore
            .get("migrations", "legacy-answers")
            .await
            .and_then(|progress| string_field(&progress, "cursor"))
    };
    for kill in 1..=10 {
        let before = saved().await;
        let mut child = start_migration(&project, &log);
        // Once this run saved a page (its cursor moved; a restarted run
        // first waits for the killed one's lease to run out), kill it at a
        // random moment of the pages that follow.
        let deadline = Instant::now() + Duration::from_secs(60);
        while saved().await == before {
            assert!(Instant::now() < deadline, "run {kill} saved no progress");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(random.next() % 800)).await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "the migration ended before kill {kill}; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let progress = firestore
        .get("migrations", "legacy-answers")
        .await
        .expect("progress kept");
    assert!(
        string_field(&progress, "cursor").is_some(),
        "the killed runs got somewhere"
    );

    let last = report(&migrate(&project, &["legacy-answers", "--format", "json"]));
    assert_eq!(counts(&last), seeded.expected(), "the counts are exact after 10 kills");
    assert_eq!(last["finished"], true);
    assert_migrated(&firestore, &seeded, 0).await;
}

#[tokio::test]
async fn users_answering_during_the_migration_get_one_answer_each() {
    let app = spawn_app_with(TestOptions {
        legacy_answer_lookup: true,
        ..TestOptions::default()
    })
    .await;
    let seeded = seed(&app.firestore).await;
    // 100 users who answered the first question with the old bot, 100 who
    // never did: each taps both choices at once, while the migration runs.
    let legacy_users: Vec<String> = seeded
        .groups
        .iter()
        .filter(|group| group.node == "ask_food" && !group.answered_here)
        .take(100)
        .map(|group| group.user.clone())
        .collect();
    let new_users: Vec<String> = (0..100).map(|_| events::new_user()).collect();
    let tags_before: HashMap<String, Vec<String>> = futures::future::join_all(
        legacy_users
            .iter()
            .map(|user| async { (user.clone(), crate::helpers::sorted(app.user_tags(user).await)) }),
    )
    .await
    .into_iter()
    .collect();

    let log = std::env::temp_dir().join(format!("migration-{}.log", app.project_id));
    let mut child = start_migration(&app.project_id, &log);
    let deadline = Instant::now() + Duration::from_secs(30);
    while app.firestore.get("migrations", "legacy-answers").await.is_none() {
        assert!(Instant::now() < deadline, "the migration started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let everyone: Vec<&String> = legacy_users.iter().chain(&new_users).collect();
    let mut taps = Vec::new();
    for user in &everyone {
        for choice in ["good", "bad"] {
            taps.push(events::postback(
                user,
                &events::answer_data(SCENARIO, "ask_food", choice),
            ));
        }
    }
    // In four waves over the run.
    for wave in taps.chunks(taps.len() / 4) {
        let bodies: Vec<Value> = wave.iter().map(|tap| events::envelope(vec![tap.clone()])).collect();
        let responses = futures::future::join_all(bodies.iter().map(|body| app.post_webhook(body))).await;
        for response in responses {
            assert_eq!(response.status(), 200);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let still_running = child.try_wait().unwrap().is_none();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(still_running, "the taps came while the migration ran");
    app.settled().await;

    assert_migrated(&app.firestore, &seeded, new_users.len()).await;
    for user in &legacy_users {
        assert_eq!(
            &crate::helpers::sorted(app.user_tags(user).await),
            &tags_before[user],
            "the old bot's answer stands"
        );
    }
    for user in &new_users {
        let tags = app.user_tags(user).await;
        let good = tags.iter().any(|tag| tag == "lunch_good");
        let bad = tags.iter().any(|tag| tag == "lunch_bad");
        assert!(good != bad, "one answer's tags, not two: {tags:?}");
        let answer = app
            .firestore
            .get(
                "survey_responses",
                &answer_id(
                    &ScenarioId::parse(SCENARIO).unwrap(),
                    &NodeId::parse("ask_food").unwrap(),
                    &LineUserId::parse(user.as_str()).unwrap(),
                ),
            )
            .await
            .expect("the answer");
        assert_eq!(string_field(&answer, "migratedFrom"), None);
    }
    // The next question went once to each new user, never to a legacy one.
    let token_users: HashMap<String, String> = taps
        .iter()
        .filter_map(|tap| {
            Some((
                tap["replyToken"].as_str()?.to_owned(),
                tap["source"]["userId"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let accepted = app.line.accepted();
    let asked = |user: &str| {
        accepted
            .iter()
            .filter(|call| {
                call.to() == Some(user)
                    || call
                        .reply_token()
                        .and_then(|token| token_users.get(token))
                        .is_some_and(|to| to == user)
            })
            .filter(|call| {
                call.messages()
                    .iter()
                    .any(|message| message["template"]["text"] == "Coffee or tea?")
            })
            .count()
    };
    for user in &new_users {
        assert_eq!(asked(user), 1, "the next question once");
    }
    for user in &legacy_users {
        assert_eq!(asked(user), 0, "nothing for an answered question");
    }
    let last = report(&migrate(&app.project_id, &["status", "--format", "json"]));
    assert_eq!(counts(&last), seeded.expected());

    // Unreadable documents the lookup still finds: a service started with
    // the lookup on does not say it can go.
    let service = crate::helpers::process::ServiceProcess::start(
        &app.project_id,
        &app.line.uri(),
        &[("LEGACY_ANSWER_LOOKUP", "true")],
    )
    .await;
    let log = service.log_text();
    assert!(log.contains("scenarios loaded"), "{log}");
    assert!(!log.contains("LEGACY_ANSWER_LOOKUP=true can go"), "{log}");
}
