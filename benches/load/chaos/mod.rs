//! `--chaos [SECONDS]` (default 1800): three release instances behind the
//! driver while everything fails at once, then a count of every user's effects
//! against what the user did.
//!
//! Faults: a random instance SIGKILLed every 60 to 120 s and started again 2 s
//! later; the TCP proxy between the instances and Firestore stalling answers or
//! resetting connections for about 20% of the time (`faults.rs`); LINE answering
//! 500 to 10% of message calls (half of them after accepting), 429 with
//! `Retry-After` to 2%, and 3 s late to 5% (`line.rs`). Traffic: new users at
//! `--rate N` a second (default 2), each taking the chaos survey with double
//! taps, redeliveries, a second typed text, re-taps of old cards and unsends,
//! or only following (and unfollowing), or sending a text and taking it back
//! (`journey.rs`); step timers, reminders and expiries come due; a campaign to
//! every follower 60 s in and every 10 minutes after.
//!
//! At SECONDS the faults and new users stop; the run waits for every journey and
//! campaign, then for LINE to be quiet for 30 s, and counts: per user, each
//! message received against what it should have received, each answer and tag
//! in Firestore against the taps and texts acknowledged, each campaign's
//! multicasts; and the dead letters. Lost, doubled and false dead letters must
//! all be 0 (exit status 1 otherwise).

mod faults;
mod journey;
mod line;

use crate::driver;
use crate::service::{ADMIN_TOKEN, CHANNEL_SECRET, Launch, Service};
use crate::soak::Rng;
use crate::tcp_proxy::TcpProxy;
use journey::{Journey, Role};
use line::ChaosLine;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

pub const DEFAULT_SECONDS: u64 = 1800;
pub const DEFAULT_RATE: u32 = 2;
const INSTANCES: usize = 3;
/// How long the driver keeps redelivering an event no instance acknowledged.
const DELIVERY_PATIENCE: Duration = Duration::from_secs(120);
const REDELIVERY_PAUSE: Duration = Duration::from_millis(500);
const CAMPAIGN_FIRST: Duration = Duration::from_secs(60);
const CAMPAIGN_EVERY: Duration = Duration::from_secs(600);
/// A user known this long before a campaign's POST must be in its audience; a
/// user who unfollowed this long before must not be.
const AUDIENCE_MARGIN: Duration = Duration::from_secs(60);
/// LINE must have been quiet this long before the count.
const QUIET: Duration = Duration::from_secs(30);

/// Signed webhook deliveries to the instances, round robin; an event no
/// instance acknowledges is sent again, marked as a redelivery, as LINE does.
#[derive(Clone)]
pub struct Webhook {
    client: reqwest::Client,
    addresses: Arc<Vec<String>>,
    next: Arc<AtomicUsize>,
}

/// How one event's delivery went.
pub struct Delivery {
    pub requests: u32,
    pub acknowledged: bool,
}

impl Webhook {
    fn new(addresses: Vec<String>) -> Webhook {
        Webhook {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
            addresses: Arc::new(addresses),
            next: Arc::default(),
        }
    }

    fn address(&self) -> &str {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.addresses.len();
        &self.addresses[index]
    }

    /// Sends `event` until an instance answers 200, for `DELIVERY_PATIENCE`.
    pub async fn deliver(&self, mut event: Value) -> Delivery {
        let deadline = Instant::now() + DELIVERY_PATIENCE;
        let mut requests = 0;
        loop {
            requests += 1;
            let posted = driver::post(&self.client, self.address(), CHANNEL_SECRET, &event).await;
            if posted.status == Some(200) {
                return Delivery {
                    requests,
                    acknowledged: true,
                };
            }
            if Instant::now() > deadline {
                return Delivery {
                    requests,
                    acknowledged: false,
                };
            }
            event["deliveryContext"]["isRedelivery"] = true.into();
            tokio::time::sleep(REDELIVERY_PAUSE).await;
        }
    }

    /// An admin call to any instance that answers (the others may be down).
    async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> Option<(u16, Value)> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.address()))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        let body = response.json().await.unwrap_or(Value::Null);
        Some((status, body))
    }
}

/// The three instances, each on a port of its own that survives its restarts.
pub struct Instances {
    project: String,
    firestore: String,
    line_url: String,
    settings: Vec<(String, String)>,
    slots: Vec<Slot>,
}

struct Slot {
    port: u16,
    log: std::path::PathBuf,
    service: tokio::sync::Mutex<Option<Service>>,
}

impl Instances {
    async fn start(project: &str, firestore: &str, line_url: &str, settings: &[(String, String)]) -> Instances {
        let mut slots = Vec::new();
        for index in 0..INSTANCES {
            let log = std::env::temp_dir().join(format!("{project}-instance-{index}.log"));
            slots.push(Slot {
                port: crate::service::free_port(),
                log,
                service: tokio::sync::Mutex::new(None),
            });
        }
        let instances = Instances {
            project: project.to_owned(),
            firestore: firestore.to_owned(),
            line_url: line_url.to_owned(),
            settings: settings.to_vec(),
            slots,
        };
        for slot in 0..INSTANCES {
            instances.restart(slot).await;
        }
        instances
    }

    pub fn count(&self) -> usize {
        self.slots.len()
    }

    fn addresses(&self) -> Vec<String> {
        self.slots
            .iter()
            .map(|slot| format!("http://127.0.0.1:{}", slot.port))
            .collect()
    }

    /// SIGKILLs the instance in `slot` (dropping a `Service` kills it).
    pub async fn kill(&self, slot: usize) {
        self.slots[slot].service.lock().await.take();
    }

    /// Starts the instance in `slot` on its port, unless it runs.
    pub async fn restart(&self, slot: usize) {
        let slot = &self.slots[slot];
        let mut service = slot.service.lock().await;
        if service.is_some() {
            return;
        }
        let launch = Launch {
            port: Some(slot.port),
            scenarios: Some(crate::repo_path("benches/load/chaos/scenarios").display().to_string()),
            log: Some(slot.log.clone()),
            // Firestore may be stalled while it starts.
            start_limit: Duration::from_secs(60),
        };
        *service = Some(Service::launch(&self.project, &self.firestore, &self.line_url, &self.settings, &launch).await);
    }

    async fn stop_all(&self) {
        for slot in 0..self.count() {
            self.kill(slot).await;
        }
    }
}

/// One campaign as the run saw it.
#[derive(Debug, Clone)]
struct Campaign {
    /// The first POST attempt.
    posted_at: Instant,
    done_at: Option<Instant>,
    id: String,
    unit: String,
    status: Value,
    post_attempts: u32,
}

/// Sends one campaign to every follower and follows it until `done`.
async fn campaign(webhook: Webhook, number: usize) -> Result<Campaign, String> {
    let key = format!("chaos-{number}-{}", uuid::Uuid::new_v4().simple());
    let body = json!({"scenarioId": "chaos_news"});
    let posted_at = Instant::now();
    let mut post_attempts = 0;
    let id = loop {
        post_attempts += 1;
        match webhook
            .admin(reqwest::Method::POST, "/admin/campaigns", Some(&body), Some(&key))
            .await
        {
            Some((202, answer)) => break answer["campaignId"].as_str().unwrap_or_default().to_owned(),
            Some((status, answer)) if status < 500 && status != 409 => {
                return Err(format!("POST /admin/campaigns answered {status}: {answer}"));
            }
            _ if posted_at.elapsed() > Duration::from_secs(300) => {
                return Err("POST /admin/campaigns got no 202 in 300 s".into());
            }
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    };
    let path = format!("/admin/campaigns/{id}");
    loop {
        if let Some((200, status)) = webhook.admin(reqwest::Method::GET, &path, None, None).await {
            if status["state"] == "done" {
                return Ok(Campaign {
                    posted_at,
                    done_at: Some(Instant::now()),
                    id,
                    unit: status["aggregationUnit"].as_str().unwrap_or_default().to_owned(),
                    status,
                    post_attempts,
                });
            }
            if status["state"] == "cancelled" {
                return Err(format!("campaign {id} was cancelled: {status}"));
            }
        }
        if posted_at.elapsed() > Duration::from_secs(1800) {
            return Err(format!("campaign {id} was not done 1800 s after its POST"));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

pub async fn run(firestore: &str, settings: &[(String, String)], seconds: u64, rate: u32) -> ExitCode {
    let project = format!("chaos-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let line = ChaosLine::new();
    let line_url = line.serve();
    let proxy = Arc::new(TcpProxy::start(firestore.to_owned()).await);
    let instances = Arc::new(Instances::start(&project, &proxy.address, &line_url, settings).await);
    let webhook = Webhook::new(instances.addresses());
    println!(
        "chaos: {seconds} s, {rate} new users/s, {INSTANCES} instances (logs: {}), project {project}",
        instances.slots[0].log.display()
    );
    let began = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    line.set_faulty(true);
    let kills = tokio::spawn(faults::kill_now_and_then(instances.clone(), stop.clone()));
    let network = tokio::spawn(faults::disturb_firestore(proxy.clone(), stop.clone()));

    let mut journeys = Vec::new();
    let mut campaigns = Vec::new();
    let mut next_campaign = began + CAMPAIGN_FIRST;
    let mut rng = Rng::new();
    let pause = Duration::from_secs_f64(1.0 / f64::from(rate));
    let end = began + Duration::from_secs(seconds);
    let mut next_user = began;
    let mut last_progress = began;
    while Instant::now() < end {
        if Instant::now() >= next_campaign {
            campaigns.push(tokio::spawn(campaign(webhook.clone(), campaigns.len() + 1)));
            next_campaign += CAMPAIGN_EVERY;
        }
        let role = journey::role(&mut rng);
        journeys.push(tokio::spawn(journey::run(webhook.clone(), line.clone(), role)));
        next_user += pause;
        tokio::time::sleep_until(next_user).await;
        if last_progress.elapsed() >= Duration::from_secs(60) {
            last_progress = Instant::now();
            let injected = line.injected();
            println!(
                "  {:>5.0} s: {} users started, LINE calls {} ({} refused, {} lost answers, {} rate-limited, {} slow)",
                began.elapsed().as_secs_f64(),
                journeys.len(),
                injected.calls,
                injected.refused_500,
                injected.accepted_then_500,
                injected.rate_limited,
                injected.slow
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    line.set_faulty(false);
    let kills = kills.await.unwrap_or_default();
    let network = network.await.unwrap_or_default();
    let faults_ended = Instant::now();
    println!(
        "  {:>5.0} s: faults stopped; waiting for {} journeys and {} campaigns",
        began.elapsed().as_secs_f64(),
        journeys.len(),
        campaigns.len()
    );
    let mut finished = Vec::new();
    for handle in journeys {
        finished.push(handle.await.expect("a journey panicked"));
    }
    let mut sent_campaigns = Vec::new();
    let mut problems = Vec::new();
    for handle in campaigns {
        match handle.await.expect("a campaign task panicked") {
            Ok(campaign) => sent_campaigns.push(campaign),
            Err(problem) => problems.push(problem),
        }
    }
    // Nothing may still be on its way when the count starts.
    while line.last_call().is_some_and(|last| last.elapsed() < QUIET) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let settled = faults_ended.elapsed();
    let dead_letters = match webhook
        .admin(reqwest::Method::GET, "/admin/dead-letters?limit=100", None, None)
        .await
    {
        Some((200, body)) => body["deadLetters"].as_array().cloned().unwrap_or_default(),
        other => {
            problems.push(format!("GET /admin/dead-letters answered {other:?}"));
            Vec::new()
        }
    };
    let stored = Stored::read(firestore, &project).await;
    instances.stop_all().await;

    let mut count = Count::default();
    for journey in &finished {
        count.user(journey, &line.inbox(&journey.user), &stored);
    }
    for campaign in &sent_campaigns {
        count.campaign(campaign, &finished, &line);
    }
    for (text, times) in line.unknown_texts() {
        problems.push(format!("LINE received {times} messages of an unknown text: {text:?}"));
    }
    for letter in &dead_letters {
        problems.push(format!(
            "dead letter {} ({}): {}",
            letter["id"].as_str().unwrap_or("?"),
            letter["kind"].as_str().unwrap_or("?"),
            letter["reason"].as_str().unwrap_or("?")
        ));
    }
    report(&Report {
        seconds,
        finished: &finished,
        kills: &kills,
        network,
        injected: line.injected(),
        campaigns: &sent_campaigns,
        settled,
        dead_letters: dead_letters.len(),
        count: &count,
    });
    problems.extend(count.problems.iter().take(50).cloned());
    if count.problems.len() > 50 {
        problems.push(format!("... and {} more", count.problems.len() - 50));
    }
    if problems.is_empty() && count.lost == 0 && count.doubled == 0 {
        println!("PASS: nothing lost, nothing doubled, no dead letters");
        ExitCode::SUCCESS
    } else {
        for problem in &problems {
            println!("FAIL: {problem}");
        }
        ExitCode::from(1)
    }
}

/// What Firestore holds at the end: answers by (user, node), tags by user.
#[derive(Default)]
struct Stored {
    answers: HashMap<(String, String), Vec<Option<String>>>,
    tags: HashMap<String, Vec<String>>,
}

impl Stored {
    async fn read(firestore: &str, project: &str) -> Stored {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct AnswerDoc {
            line_user_id: String,
            node_id: String,
            #[serde(default)]
            value: Option<String>,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct UserDoc {
            line_user_id: String,
            #[serde(default)]
            tags: Vec<String>,
        }
        let db = driver::emulator_db(firestore, project).await;
        let answers: Vec<AnswerDoc> = db
            .fluent()
            .select()
            .from("survey_responses")
            .obj()
            .query()
            .await
            .unwrap();
        let users: Vec<UserDoc> = db.fluent().select().from("users").obj().query().await.unwrap();
        let mut stored = Stored::default();
        for answer in answers {
            stored
                .answers
                .entry((answer.line_user_id, answer.node_id))
                .or_default()
                .push(answer.value);
        }
        for user in users {
            stored.tags.insert(user.line_user_id, user.tags);
        }
        stored
    }

    fn answers(&self, user: &str, node: &str) -> &[Option<String>] {
        self.answers
            .get(&(user.to_owned(), node.to_owned()))
            .map_or(&[], Vec::as_slice)
    }

    fn has_tag(&self, user: &str, tag: &str) -> bool {
        self.tags.get(user).is_some_and(|tags| tags.iter().any(|t| t == tag))
    }
}

/// The effects counted against what the users did.
#[derive(Default)]
struct Count {
    /// Effects that had to happen, and those of them missing.
    expected: u64,
    lost: u64,
    /// Effects found more often than allowed (or that must not have happened).
    doubled: u64,
    /// Taps on the last question that came after it closed (a consistent outcome).
    closed_before_tap: u64,
    campaign_must_receive: u64,
    campaign_received: u64,
    campaign_must_not: u64,
    problems: Vec<String>,
}

impl Count {
    fn lose(&mut self, user: &str, what: String) {
        self.lost += 1;
        self.problems.push(format!("lost: {user} {what}"));
    }

    fn double(&mut self, user: &str, what: String) {
        self.doubled += 1;
        self.problems.push(format!("doubled: {user} {what}"));
    }

    /// `kind` must have arrived exactly `want` times (0: must not have come).
    fn message(&mut self, user: &str, inbox: &line::Inbox, kind: &str, want: u32) {
        let got = inbox.count(kind);
        if want > 0 {
            self.expected += 1;
            if got < want {
                self.lose(user, format!("received {kind} {got} times, owed {want}"));
            }
        }
        if got > want {
            self.double(user, format!("received {kind} {got} times, owed {want}"));
        }
    }

    /// `node` must be answered exactly once with a value in `values` (any value
    /// when empty; `None` for a redacted one).
    fn answer(&mut self, user: &str, stored: &Stored, node: &str, values: &[Option<String>]) {
        let found = stored.answers(user, node);
        self.expected += 1;
        match found {
            [] => self.lose(user, format!("answer to {node} missing")),
            [value] if values.is_empty() || values.contains(value) => {}
            [value] => self.double(
                user,
                format!("answer to {node} is {value:?}, expected one of {values:?}"),
            ),
            _ => self.double(user, format!("{} answers to {node}", found.len())),
        }
    }

    fn at_most_one_answer(&mut self, user: &str, stored: &Stored, node: &str) {
        let found = stored.answers(user, node).len();
        if found > 1 {
            self.double(user, format!("{found} answers to {node}"));
        }
    }

    fn no_answer(&mut self, user: &str, stored: &Stored, node: &str) {
        let found = stored.answers(user, node).len();
        if found > 0 {
            self.double(user, format!("{found} answers to {node}, expected none"));
        }
    }

    fn tag(&mut self, user: &str, stored: &Stored, tag: &str, want: bool) {
        if want {
            self.expected += 1;
        }
        match (want, stored.has_tag(user, tag)) {
            (true, false) => self.lose(user, format!("tag {tag} missing")),
            (false, true) => self.double(user, format!("tag {tag} present, not earned")),
            _ => {}
        }
    }

    /// Upper bounds that hold for everyone, whatever was acknowledged.
    fn bounds(&mut self, user: &str, inbox: &line::Inbox, stored: &Stored) {
        for (kind, most) in [
            ("intro", 1),
            ("ask_food", 1),
            ("ask_name", 1),
            ("got_name", 1),
            ("ask_drink", 2),
            ("reminder", 1),
            ("thanks", 1),
            ("closed", 1),
        ] {
            let got = inbox.count(kind);
            if got > most {
                self.double(user, format!("received {kind} {got} times, at most {most}"));
            }
        }
        if inbox.count("thanks") + inbox.count("closed") > 1 {
            self.double(user, "received both thanks and closed".into());
        }
        for node in ["ask_food", "ask_name", "ask_drink"] {
            self.at_most_one_answer(user, stored, node);
        }
        for (a, b) in [("chaos_good", "chaos_bad"), ("chaos_coffee", "chaos_tea")] {
            if stored.has_tag(user, a) && stored.has_tag(user, b) {
                self.double(user, format!("both {a} and {b}"));
            }
        }
    }

    fn user(&mut self, journey: &Journey, inbox: &line::Inbox, stored: &Stored) {
        let user = journey.user.as_str();
        self.bounds(user, inbox, stored);
        if journey.role != Role::Surveyed {
            for (kind, _) in line::KINDS.iter().filter(|(kind, _)| *kind != "news") {
                self.message(user, inbox, kind, 0);
            }
            for node in ["ask_food", "ask_name", "ask_drink"] {
                self.no_answer(user, stored, node);
            }
            return;
        }
        if !journey.started {
            return;
        }
        self.message(user, inbox, "intro", 1);
        self.message(user, inbox, "ask_food", 1);
        let Some(food) = journey.food else { return };
        self.answer(user, stored, "ask_food", &[Some(food.to_owned())]);
        self.tag(user, stored, &format!("chaos_{food}"), true);
        self.tag(
            user,
            stored,
            &format!("chaos_{}", if food == "good" { "bad" } else { "good" }),
            false,
        );
        self.message(user, inbox, "ask_name", 1);
        if !journey.typed {
            return;
        }
        let values: Vec<Option<String>> = if journey.unsent_name {
            vec![None]
        } else {
            journey.answer_texts.iter().cloned().map(Some).collect()
        };
        self.answer(user, stored, "ask_name", &values);
        self.message(user, inbox, "got_name", 1);
        // The step timer fired: the last question came, once (twice with its reminder).
        self.expected += 1;
        let asked = inbox.count("ask_drink");
        let reminded = inbox.count("reminder");
        if asked == 0 {
            self.lose(user, "the step timer's ask_drink never came".into());
            return;
        }
        if asked != 1 + reminded {
            self.double(user, format!("ask_drink {asked} times with {reminded} reminders"));
        }
        if journey.drink_skipped {
            self.message(user, inbox, "reminder", 1);
            self.message(user, inbox, "closed", 1);
            self.message(user, inbox, "thanks", 0);
            self.no_answer(user, stored, "ask_drink");
            return;
        }
        let Some(drink) = journey.drink else { return };
        if inbox.count("closed") == 1 && stored.answers(user, "ask_drink").is_empty() {
            // The tap arrived after the expiry (a delivery retried past it):
            // closed and nothing recorded is the promised outcome.
            self.closed_before_tap += 1;
            self.message(user, inbox, "thanks", 0);
            return;
        }
        self.answer(user, stored, "ask_drink", &[Some(drink.to_owned())]);
        self.tag(user, stored, &format!("chaos_{drink}"), true);
        self.message(user, inbox, "thanks", 1);
        self.message(user, inbox, "closed", 0);
    }

    /// Every user known well before the POST who never unfollowed got it once;
    /// nobody got it twice; nobody who unfollowed well before got it.
    fn campaign(&mut self, campaign: &Campaign, journeys: &[Journey], line: &ChaosLine) {
        let done_at = campaign.done_at.unwrap_or_else(Instant::now);
        for journey in journeys {
            let got = line
                .inbox(&journey.user)
                .campaigns
                .get(&campaign.unit)
                .copied()
                .unwrap_or(0);
            if got > 1 {
                self.double(&journey.user, format!("campaign {} received {got} times", campaign.id));
            }
            let known = journey
                .known_at
                .is_some_and(|at| at + AUDIENCE_MARGIN <= campaign.posted_at);
            let unfollowed_before = journey
                .unfollowed_at
                .is_some_and(|at| at + AUDIENCE_MARGIN <= campaign.posted_at);
            let unfollowed_ever = journey.unfollowed_at.is_some_and(|at| at <= done_at);
            if known && !unfollowed_ever {
                self.expected += 1;
                self.campaign_must_receive += 1;
                if got == 1 {
                    self.campaign_received += 1;
                } else {
                    self.lose(&journey.user, format!("campaign {} not received", campaign.id));
                }
            }
            if unfollowed_before {
                self.campaign_must_not += 1;
                if got > 0 {
                    self.double(
                        &journey.user,
                        format!("campaign {} received after an unfollow", campaign.id),
                    );
                }
            }
        }
    }
}

struct Report<'a> {
    seconds: u64,
    finished: &'a [Journey],
    kills: &'a [Duration],
    network: faults::NetworkFaults,
    injected: line::Injected,
    campaigns: &'a [Campaign],
    settled: Duration,
    dead_letters: usize,
    count: &'a Count,
}

fn report(report: &Report) {
    let mut roles: BTreeMap<String, usize> = BTreeMap::new();
    for journey in report.finished {
        *roles.entry(format!("{:?}", journey.role)).or_default() += 1;
    }
    let requests: u64 = report.finished.iter().map(|j| u64::from(j.requests)).sum();
    let retried: u64 = report.finished.iter().map(|j| u64::from(j.retried)).sum();
    let unacknowledged: u64 = report.finished.iter().map(|j| u64::from(j.unacknowledged)).sum();
    let gave_up = report.finished.iter().filter(|j| j.gave_up_at.is_some()).count();
    let typed = report.finished.iter().filter(|j| j.typed).count();
    let tapped = report.finished.iter().filter(|j| j.drink.is_some()).count();
    let skipped = report.finished.iter().filter(|j| j.drink_skipped).count();
    let injected = report.injected;
    let network = report.network;
    println!();
    println!("chaos run of {} s", report.seconds);
    println!("| | |");
    println!("|---|---|");
    println!("| users | {} ({roles:?}) |", report.finished.len());
    println!("| typed the name / tapped the last question / left it to expire | {typed} / {tapped} / {skipped} |");
    println!(
        "| webhook requests | {requests} ({retried} events needed a redelivery, {unacknowledged} never acknowledged) |"
    );
    println!("| users who stopped waiting for a message (240 s) | {gave_up} |");
    println!(
        "| SIGKILLs | {} (at {:?} s) |",
        report.kills.len(),
        report.kills.iter().map(Duration::as_secs).collect::<Vec<_>>()
    );
    println!(
        "| Firestore network faults | {} stalls ({:.0} s), {} reset stretches ({:.0} s) of {:.0} s: {:.0}% of the time |",
        network.stalls,
        network.stalled.as_secs_f64(),
        network.resets,
        network.reset.as_secs_f64(),
        network.total.as_secs_f64(),
        100.0 * (network.stalled + network.reset).as_secs_f64() / network.total.as_secs_f64().max(1.0)
    );
    println!(
        "| LINE message calls | {} ({} answered 500, {} accepted then 500, {} 429, {} 3 s late; {} used tokens, {} repeated retry keys) |",
        injected.calls,
        injected.refused_500,
        injected.accepted_then_500,
        injected.rate_limited,
        injected.slow,
        injected.used_tokens,
        injected.repeated_keys
    );
    for campaign in report.campaigns {
        println!(
            "| campaign {} | planned {}, sent {}, failed {}; {:.0} s from POST to done, {} POST attempts |",
            campaign.id,
            campaign.status["planned"],
            campaign.status["sent"],
            campaign.status["failed"],
            campaign
                .done_at
                .map_or(f64::NAN, |done| (done - campaign.posted_at).as_secs_f64()),
            campaign.post_attempts
        );
    }
    let count = report.count;
    println!(
        "| campaign recipients owed / received / unfollowed before (none may get it) | {} / {} / {} |",
        count.campaign_must_receive, count.campaign_received, count.campaign_must_not
    );
    println!("| effects owed | {} |", count.expected);
    println!("| **lost** | **{}** |", count.lost);
    println!("| **doubled** | **{}** |", count.doubled);
    println!("| **dead letters** | **{}** |", report.dead_letters);
    println!(
        "| taps after the question closed (closed, nothing recorded) | {} |",
        count.closed_before_tap
    );
    println!(
        "| from the faults' end to LINE quiet for 30 s | {:.0} s |",
        report.settled.as_secs_f64()
    );
}
