//! The soak (`--soak SECONDS`): one release binary, mixed traffic at a steady
//! rate for a long time, reported per 30-second window, to show whether latency
//! or memory drift.
//!
//! A ticker fires `--rate` times a second; each tick sends one request (one
//! signed event) unless 16 are already in flight, in which case the tick is
//! counted as behind schedule and dropped. The traffic is dealt from a shuffled
//! deck of 100 slots: 46 of survey traffic (new users typing "lunch", their
//! answers, duplicate taps, redeliveries, "news", Flex card taps, follows),
//! 6 unsends (half of them right after their text, half naming an older text)
//! and 48 of every other kind of event (`catalogue.rs`, two of each).

use crate::catalogue;
use crate::driver::{self, ms, quantile};
use crate::events;
use crate::service::{CHANNEL_SECRET, Service};
use crate::stand_in::StandIn;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::MissedTickBehavior;

pub const IN_FLIGHT: usize = 16;
pub const DEFAULT_SECONDS: u64 = 300;
pub const DEFAULT_RATE: u32 = 400;
const WINDOW: Duration = Duration::from_secs(30);
/// The last window's ack p99 may be at most this many times the first's.
const P99_DRIFT_LIMIT: f64 = 1.5;
const RSS_GROWTH_LIMIT_MIB: f64 = 10.0;

pub struct Options {
    pub duration: Duration,
    /// Requests per second.
    pub rate: u32,
}

pub async fn run(
    emulator: &str,
    stand_in: &StandIn,
    line_url: &str,
    settings: &[(String, String)],
    options: &Options,
) -> ExitCode {
    let project = format!("bench-soak-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let service = Service::start(&project, emulator, line_url, settings).await;
    println!(
        "service started in {} ms; sending for {} s ...",
        service.startup.as_millis(),
        options.duration.as_secs()
    );
    let calls_before = stand_in.accepted_calls();
    let recorded = drive(&service, stand_in, options).await;
    let windows = summarize(&recorded, options.duration);
    print_windows(&windows);
    print_totals(&recorded, options, stand_in.accepted_calls() - calls_before);
    let checks = checks(&windows);
    for check in &checks {
        println!(
            "check: {}: {}: {}",
            check.name,
            check.detail,
            if check.pass { "PASS" } else { "FAIL" }
        );
    }
    if checks.iter().all(|check| check.pass) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What happened to one request.
struct Outcome {
    window: usize,
    latency: Duration,
    status: Option<u16>,
}

struct Recorded {
    outcomes: Vec<Outcome>,
    /// Per window: ticks dropped because 16 requests were in flight.
    behind: Vec<u64>,
    /// Per window: the service's VmRSS at the window's end, in KiB.
    rss_kib: Vec<u64>,
    /// Requests sent per kind of event.
    mix: BTreeMap<&'static str, u64>,
    elapsed: Duration,
}

fn window_count(duration: Duration) -> usize {
    duration.as_millis().div_ceil(WINDOW.as_millis()) as usize
}

async fn drive(service: &Service, stand_in: &StandIn, options: &Options) -> Recorded {
    let windows = window_count(options.duration);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(IN_FLIGHT)
        .build()
        .unwrap();
    let address: Arc<str> = service.address.as_str().into();
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let (done, mut outcomes_rx) = mpsc::unbounded_channel();
    let mut traffic = Traffic::new();
    let mut behind = vec![0; windows];
    let mut rss_kib = Vec::with_capacity(windows);
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(options.rate)));
    // Late ticks fire at once, so the average rate holds after a stall.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let began = tokio::time::Instant::now();
    loop {
        let at = ticker.tick().await.saturating_duration_since(began);
        if at >= options.duration {
            break;
        }
        let window = (at.as_secs_f64() / WINDOW.as_secs_f64()) as usize;
        while rss_kib.len() < window {
            rss_kib.push(service.rss_kib());
        }
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            behind[window] += 1;
            continue;
        };
        let event = traffic.next();
        register(stand_in, &event);
        let (client, address, done) = (client.clone(), address.clone(), done.clone());
        tokio::spawn(async move {
            let posted = driver::post(&client, &address, CHANNEL_SECRET, &event).await;
            drop(permit);
            let _ = done.send(Outcome {
                window,
                latency: posted.latency,
                status: posted.status,
            });
        });
    }
    while rss_kib.len() < windows {
        rss_kib.push(service.rss_kib());
    }
    let elapsed = began.elapsed();
    // Every request in flight holds a sender: the channel closes when the last answers.
    drop(done);
    let mut outcomes = Vec::new();
    while let Some(outcome) = outcomes_rx.recv().await {
        outcomes.push(outcome);
    }
    Recorded {
        outcomes,
        behind,
        rss_kib,
        mix: traffic.mix,
        elapsed,
    }
}

/// Tells the stand-in whose reply token this is, as the storm does.
fn register(stand_in: &StandIn, event: &Value) {
    if let (Some(token), Some(user)) = (event["replyToken"].as_str(), event["source"]["userId"].as_str()) {
        stand_in.register_token(token, user);
    }
}

struct Window {
    start: Duration,
    end: Duration,
    sent: usize,
    p50: Duration,
    p99: Duration,
    server_errors: usize,
    non_200: usize,
    rss_kib: u64,
    behind: u64,
}

fn summarize(recorded: &Recorded, duration: Duration) -> Vec<Window> {
    (0..recorded.rss_kib.len())
        .map(|index| {
            let outcomes: Vec<&Outcome> = recorded.outcomes.iter().filter(|o| o.window == index).collect();
            let mut latencies: Vec<Duration> = outcomes
                .iter()
                .filter(|o| o.status == Some(200))
                .map(|o| o.latency)
                .collect();
            latencies.sort();
            Window {
                start: WINDOW * index as u32,
                end: (WINDOW * (index as u32 + 1)).min(duration),
                sent: outcomes.len(),
                p50: quantile(&latencies, 0.50),
                p99: quantile(&latencies, 0.99),
                server_errors: outcomes
                    .iter()
                    .filter(|o| o.status.is_some_and(|status| status >= 500))
                    .count(),
                non_200: outcomes.iter().filter(|o| o.status != Some(200)).count(),
                rss_kib: recorded.rss_kib[index],
                behind: recorded.behind[index],
            }
        })
        .collect()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_windows(windows: &[Window]) {
    println!("\n| window | requests sent | ack p50 | ack p99 | 5xx | non-200 | RSS at end | behind schedule |");
    println!("|---|---|---|---|---|---|---|---|");
    for w in windows {
        println!(
            "| {}–{} s | {} | {:.1} ms | {:.1} ms | {} | {} | {:.1} MiB | {} |",
            w.start.as_secs(),
            w.end.as_secs(),
            w.sent,
            ms(w.p50),
            ms(w.p99),
            w.server_errors,
            w.non_200,
            mib(w.rss_kib),
            w.behind,
        );
    }
}

fn print_totals(recorded: &Recorded, options: &Options, line_calls: u64) {
    let sent = recorded.outcomes.len();
    let behind: u64 = recorded.behind.iter().sum();
    println!(
        "\n{sent} requests in {:.1} s ({:.0}/s, target {}/s), {behind} ticks behind schedule; the LINE stand-in accepted {line_calls} calls",
        recorded.elapsed.as_secs_f64(),
        sent as f64 / recorded.elapsed.as_secs_f64(),
        options.rate,
    );
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    for outcome in recorded.outcomes.iter().filter(|o| o.status != Some(200)) {
        let status = outcome.status.map_or("no answer".to_owned(), |s| s.to_string());
        *statuses.entry(status).or_default() += 1;
    }
    if !statuses.is_empty() {
        println!("answers other than 200: {statuses:?}");
    }
    let unsends: u64 = recorded
        .mix
        .iter()
        .filter(|(kind, _)| kind.starts_with("unsend"))
        .map(|(_, n)| n)
        .sum();
    println!(
        "mix ({:.1}% unsend): {}",
        100.0 * unsends as f64 / sent.max(1) as f64,
        recorded
            .mix
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

struct Check {
    name: &'static str,
    detail: String,
    pass: bool,
}

fn checks(windows: &[Window]) -> Vec<Check> {
    let (first, last) = (&windows[0], &windows[windows.len() - 1]);
    let drift = ms(last.p99) / ms(first.p99).max(f64::MIN_POSITIVE);
    let server_errors: usize = windows.iter().map(|w| w.server_errors).sum();
    let growth = mib(last.rss_kib) - mib(first.rss_kib);
    vec![
        Check {
            name: "last window's ack p99 within 1.5x of the first window's",
            detail: format!("{:.1} ms vs {:.1} ms ({drift:.2}x)", ms(last.p99), ms(first.p99)),
            pass: drift <= P99_DRIFT_LIMIT,
        },
        Check {
            name: "no 5xx answers",
            detail: format!("{server_errors}"),
            pass: server_errors == 0,
        },
        Check {
            name: "RSS growth (last window minus first) under 10 MiB",
            detail: format!("{growth:+.1} MiB"),
            pass: growth < RSS_GROWTH_LIMIT_MIB,
        },
    ]
}

/// One slot of the deck the traffic is dealt from.
#[derive(Clone, Copy)]
enum Slot {
    /// A new user types "lunch": the survey starts.
    Start,
    /// A started user answers the first question.
    FoodTap,
    /// A user who answered the first question answers the second.
    DrinkTap,
    /// An answered user taps the first question again.
    DuplicateTap,
    /// LINE redelivers an earlier tap (`isRedelivery`).
    Redelivery,
    News,
    CardTap,
    Follow,
    Unsend,
    /// `catalogue::KINDS[i]`.
    Other(usize),
}

/// Slots per deck of 100: 46 survey, 6 unsend, 48 (2 x 24) other kinds.
const SURVEY_SLOTS: &[(Slot, usize)] = &[
    (Slot::Start, 11),
    (Slot::FoodTap, 11),
    (Slot::DrinkTap, 4),
    (Slot::DuplicateTap, 5),
    (Slot::Redelivery, 5),
    (Slot::News, 4),
    (Slot::CardTap, 4),
    (Slot::Follow, 2),
    (Slot::Unsend, 6),
];
const OTHER_COPIES: usize = 2;
/// How many earlier taps, answered users and texts are remembered.
const MEMORY: usize = 2000;

/// xorshift64*: enough randomness for shuffling and picking, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        Rng(uuid::Uuid::new_v4().as_u64_pair().0 | 1)
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }

    pub fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
}

/// The last `MEMORY` items of a kind, to pick from at random.
struct Memory<T>(VecDeque<T>);

impl<T: Clone> Memory<T> {
    fn push(&mut self, item: T) {
        if self.0.len() == MEMORY {
            self.0.pop_front();
        }
        self.0.push_back(item);
    }

    fn pick(&self, rng: &mut Rng) -> Option<T> {
        (!self.0.is_empty()).then(|| self.0[rng.below(self.0.len())].clone())
    }
}

struct Traffic {
    rng: Rng,
    deck: Vec<Slot>,
    /// Events due before the next slot (an unsend right after its text).
    pending: VecDeque<(&'static str, Value)>,
    /// Users who started the survey and have not answered yet.
    started: VecDeque<String>,
    /// Users who answered the first question but not the second.
    food_answered: VecDeque<String>,
    answered: Memory<String>,
    taps: Memory<Value>,
    /// Text messages sent: (user, message id).
    texts: Memory<(String, String)>,
    unsends: u64,
    mix: BTreeMap<&'static str, u64>,
}

impl Traffic {
    fn new() -> Traffic {
        Traffic {
            rng: Rng::new(),
            deck: Vec::new(),
            pending: VecDeque::new(),
            started: VecDeque::new(),
            food_answered: VecDeque::new(),
            answered: Memory(VecDeque::new()),
            taps: Memory(VecDeque::new()),
            texts: Memory(VecDeque::new()),
            unsends: 0,
            mix: BTreeMap::new(),
        }
    }

    /// The next request's event.
    fn next(&mut self) -> Value {
        let (kind, event) = match self.pending.pop_front() {
            Some(due) => due,
            None => {
                let slot = self.draw();
                self.build(slot)
            }
        };
        if event["message"]["type"] == "text" {
            let user = event["source"]["userId"].as_str().unwrap_or_default().to_owned();
            let id = event["message"]["id"].as_str().unwrap_or_default().to_owned();
            self.texts.push((user, id));
        }
        *self.mix.entry(kind).or_default() += 1;
        event
    }

    fn draw(&mut self) -> Slot {
        if self.deck.is_empty() {
            self.deal();
        }
        self.deck.pop().expect("a dealt deck")
    }

    /// A new shuffled deck of 100 slots.
    fn deal(&mut self) {
        for &(slot, copies) in SURVEY_SLOTS {
            self.deck.extend(std::iter::repeat_n(slot, copies));
        }
        for kind in 0..catalogue::KINDS.len() {
            self.deck.extend(std::iter::repeat_n(Slot::Other(kind), OTHER_COPIES));
        }
        for i in (1..self.deck.len()).rev() {
            let j = self.rng.below(i + 1);
            self.deck.swap(i, j);
        }
    }

    fn build(&mut self, slot: Slot) -> (&'static str, Value) {
        match slot {
            Slot::Start => self.start(),
            Slot::FoodTap => self.food_tap(),
            Slot::DrinkTap => match self.food_answered.pop_front() {
                Some(user) => {
                    let choice = if self.rng.coin() { "coffee" } else { "tea" };
                    ("tap: second question", events::answer_with(&user, "ask_drink", choice))
                }
                None => self.food_tap(),
            },
            Slot::DuplicateTap => match self.answered.pick(&mut self.rng) {
                Some(user) => ("tap: duplicate", events::answer(&user)),
                None => self.food_tap(),
            },
            Slot::Redelivery => match self.taps.pick(&mut self.rng) {
                Some(tap) => ("tap: redelivery", events::redelivered(&tap)),
                None => self.food_tap(),
            },
            Slot::News => {
                let user = self.answered.pick(&mut self.rng).unwrap_or_else(events::new_user);
                ("text \"news\"", events::text(&user, "news"))
            }
            Slot::CardTap => {
                let answered = self.answered.pick(&mut self.rng).filter(|_| self.rng.coin());
                let user = answered.unwrap_or_else(events::new_user);
                ("card tap", events::card_tap(&user))
            }
            Slot::Follow => ("follow", events::follow(&events::new_user())),
            Slot::Unsend => self.unsend(),
            Slot::Other(kind) => {
                let (name, build) = catalogue::KINDS[kind];
                (name, build(&events::new_user()))
            }
        }
    }

    fn start(&mut self) -> (&'static str, Value) {
        let user = events::new_user();
        let event = events::text(&user, "lunch");
        self.started.push_back(user);
        ("text \"lunch\" (start)", event)
    }

    fn food_tap(&mut self) -> (&'static str, Value) {
        let Some(user) = self.started.pop_front() else {
            return self.start();
        };
        let choice = if self.rng.below(4) == 0 { "bad" } else { "good" };
        let event = events::answer_with(&user, "ask_food", choice);
        self.taps.push(event.clone());
        self.answered.push(user.clone());
        self.food_answered.push_back(user);
        ("tap: first answer", event)
    }

    /// Every other unsend names the text sent just before it (a new text, its
    /// unsend queued as the very next request); the others an older text.
    fn unsend(&mut self) -> (&'static str, Value) {
        self.unsends += 1;
        let older = self
            .texts
            .pick(&mut self.rng)
            .filter(|_| self.unsends.is_multiple_of(2));
        if let Some((user, message_id)) = older {
            return ("unsend: older text", events::unsend(&user, &message_id));
        }
        let user = events::new_user();
        let text = events::text(&user, "see you at noon");
        let message_id = text["message"]["id"].as_str().unwrap_or_default().to_owned();
        self.pending
            .push_back(("unsend: right after", events::unsend(&user, &message_id)));
        ("text (unsent right after)", text)
    }
}
