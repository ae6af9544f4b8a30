//! How fast due timers go: their share of the workers (and so of the LINE
//! calls, a firing pushes inline), where they stand in the workers' order, and
//! how many the timer sweeper claims at once.
//!
//! - Timers hold at most three quarters of the workers; below an eighth they
//!   go before events, so a steady stream of events cannot hold every reminder
//!   back.
//! - While users talk to the bot (a webhook event within the last
//!   [`LIVE_WINDOW`])
//!   timers keep to their floor, an eighth, and sweeps claim at most
//!   [`LIVE_TIMER_BATCH`]: a storm's commits and pushes leave Firestore and
//!   LINE to the taps, whose acknowledgements wait on Firestore. An account
//!   with no event for [`LIVE_WINDOW`] gives timers their whole share, and so
//!   does a backlog: once the oldest due timer a sweep finds was due
//!   [`OVERDUE`] ago, live traffic no longer holds timers back (steady
//!   traffic must not keep reminders crawling until they are too late).
//! - A sweep claims no more than the timers' workers can fire within half a
//!   lease at the firing time measured so far. One webhook event cuts timers
//!   to their floor while claims made for the whole share wait: a claim that
//!   runs out in the queue is given back uncounted and claimed again (writes
//!   for nothing, and a later reminder). Sizing every claim for the floor was
//!   tried: sweeps five times smaller, each a due query that the emulator
//!   answers by scanning the collection, doubled the 5,000-timer test's time
//!   and pushed the test beside it past its limit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where timers stand in the workers' order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerTurn {
    /// Before events (after sends when sends go first): timers hold less than
    /// their floor, so a steady stream of events cannot hold them back for ever.
    First,
    /// After everything else.
    Last,
    /// Not at all: timers hold their share of the workers.
    Held,
}

/// The share of the workers timers may hold at once: the rest stay for events
/// and sends, even when nothing else waits, so a tap arriving in a storm does
/// not wait behind timers.
pub(super) fn timer_share(workers: usize) -> usize {
    (workers * 3 / 4).max(1)
}

/// Timers holding fewer workers than this go before events.
pub(super) fn timer_floor(workers: usize) -> usize {
    (workers / 8).max(1)
}

/// The share timers may hold while traffic is live: their floor, an eighth of
/// the workers (2 of 16). With a quarter, the taps' acknowledgement p99 in the
/// benchmark's storm went 1.9x to 2.7x of idle in five runs; with an eighth
/// (and live from the first event), 1.1x to 1.9x in eleven (BENCHMARKS.md,
/// "Timers with taps during the storm: an eighth from the first event").
pub(super) fn live_share(workers: usize) -> usize {
    timer_floor(workers)
}

/// Where timers stand when `firing` of them run on `workers` workers.
pub(super) fn timer_turn(firing: usize, workers: usize, live: bool) -> TimerTurn {
    let share = if live {
        live_share(workers)
    } else {
        timer_share(workers)
    };
    if firing < timer_floor(workers) {
        TimerTurn::First
    } else if firing < share {
        TimerTurn::Last
    } else {
        TimerTurn::Held
    }
}

/// How long after a webhook event traffic stays live. One event is enough:
/// with ten needed (about five a second), a storm's first taps met timers at
/// their whole share until the tenth came, and they were the benchmark's
/// slowest; every tap is somebody waiting for an answer.
pub(super) const LIVE_WINDOW: Duration = Duration::from_secs(2);
/// Due timers that waited this long: live traffic no longer holds timers to
/// their floor. Longer than a storm the taps should not feel (10,000 timers
/// went in 18 to 42 s in the benchmark), short against a scenario's
/// `max_lateness` (6 hours unless it says otherwise).
pub(super) const OVERDUE: Duration = Duration::from_secs(60);
/// Timers claimed per sweep at most while traffic is live.
pub(super) const LIVE_TIMER_BATCH: usize = 32;
/// Fewer than this left to claim and the timer sweeper waits (large batches
/// matter on the emulator, where every due query scans the collection).
const MIN_TIMER_BATCH: usize = 100;
/// A firing's time before any was measured: a commit and a push.
const FIRST_FIRING_GUESS: Duration = Duration::from_millis(200);

/// The instance's traffic and its timers' firing time, shared by ingest (which
/// counts events), the workers (which time firings) and the timer sweeper.
pub(super) struct TimerPace {
    workers: usize,
    started: Instant,
    /// When the last webhook event came: milliseconds since `started`, plus
    /// one (0: none yet). Monotonic time: a test clock's jumps change nothing
    /// here.
    last_event: AtomicU64,
    /// The mean firing time in µs (weighted towards the latest), 0 before any.
    firing_micros: AtomicU64,
    /// The last timer sweep found a timer due [`OVERDUE`] ago or longer.
    overdue: AtomicBool,
}

impl TimerPace {
    pub(super) fn new(workers: usize) -> Self {
        Self {
            workers,
            started: Instant::now(),
            last_event: AtomicU64::new(0),
            firing_micros: AtomicU64::new(0),
            overdue: AtomicBool::new(false),
        }
    }

    /// Milliseconds since `started`, plus one.
    fn clock_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    /// A webhook event came in.
    pub(super) fn event_came(&self) {
        self.last_event.fetch_max(self.clock_ms(), Ordering::Relaxed);
    }

    /// Whether users are talking to the bot now.
    pub(super) fn is_live(&self) -> bool {
        self.live_at(self.clock_ms())
    }

    /// Whether traffic is live at `clock_ms` (as [`Self::clock_ms`] counts).
    fn live_at(&self, clock_ms: u64) -> bool {
        match self.last_event.load(Ordering::Relaxed) {
            0 => false,
            last => u128::from(clock_ms.saturating_sub(last)) < LIVE_WINDOW.as_millis(),
        }
    }

    /// A timer's firing took `took`.
    pub(super) fn fired(&self, took: Duration) {
        let sample = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let mean = self.firing_micros.load(Ordering::Relaxed);
        let next = if mean == 0 {
            sample
        } else {
            mean.saturating_mul(7).saturating_add(sample) / 8
        };
        self.firing_micros.store(next, Ordering::Relaxed);
    }

    fn firing_time(&self) -> Duration {
        match self.firing_micros.load(Ordering::Relaxed) {
            0 => FIRST_FIRING_GUESS,
            micros => Duration::from_micros(micros),
        }
    }

    /// A timer sweep found due timers, the oldest due `waited` ago (`None`:
    /// none due).
    pub(super) fn found_due(&self, waited: Option<Duration>) {
        self.overdue
            .store(waited.is_some_and(|waited| waited >= OVERDUE), Ordering::Relaxed);
    }

    /// Whether timers keep to their floor now: users talk to the bot, and
    /// the due timers have not waited [`OVERDUE`].
    fn held_back(&self) -> bool {
        self.is_live() && !self.overdue.load(Ordering::Relaxed)
    }

    /// Where timers stand in the workers' order with `firing` running.
    pub(super) fn turn(&self, firing: usize) -> TimerTurn {
        timer_turn(firing, self.workers, self.held_back())
    }

    /// How many due timers a sweep may claim now with `queued` waiting and
    /// `room` left in their queue, and the fewest worth a sweep.
    pub(super) fn claims(&self, queued: usize, room: usize, lease: Duration) -> Claims {
        claims(self.workers, self.held_back(), self.firing_time(), lease, queued, room)
    }
}

/// What a timer sweep may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Claims {
    pub(super) budget: usize,
    /// Less than this to claim: wait for the queue to drain.
    pub(super) least: usize,
}

/// What a sweep may claim: no more than the timers' workers fire within half
/// a lease at `firing` each (counting what waits already), no more than the
/// queue's room, and while `live` (timers held back) no more than
/// [`LIVE_TIMER_BATCH`].
fn claims(workers: usize, live: bool, firing: Duration, lease: Duration, queued: usize, room: usize) -> Claims {
    let firing_workers = if live {
        live_share(workers)
    } else {
        timer_share(workers)
    };
    let per_worker = (lease / 2).as_micros() / firing.as_micros().max(1);
    let drainable = usize::try_from(per_worker)
        .unwrap_or(usize::MAX)
        .saturating_mul(firing_workers)
        .max(1);
    // While live, what waits and what is claimed stay within one small batch:
    // small sweeps, each once the batch before is nearly gone.
    let (ceiling, least) = if live {
        (drainable.min(LIVE_TIMER_BATCH), LIVE_TIMER_BATCH / 2)
    } else {
        (drainable, MIN_TIMER_BATCH)
    };
    let budget = ceiling.saturating_sub(queued).min(room);
    // A slow firing makes what drains small: then that is worth a sweep.
    Claims {
        budget,
        least: least.min(drainable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_hold_at_most_three_quarters_of_the_workers_and_always_one() {
        for (workers, share) in [(1, 1), (2, 1), (4, 3), (16, 12), (64, 48)] {
            assert_eq!(timer_share(workers), share, "{workers} workers");
        }
    }

    #[test]
    fn timers_go_first_below_their_floor_last_below_their_share_and_not_beyond() {
        use TimerTurn::{First, Held, Last};
        // (firing, workers, live traffic, turn)
        let cases = [
            (0, 16, false, First),
            (1, 16, false, First),
            (2, 16, false, Last),
            (11, 16, false, Last),
            (12, 16, false, Held),
            (0, 1, false, First),
            (1, 1, false, Held),
            (0, 4, false, First),
            (2, 4, false, Last),
            (3, 4, false, Held),
            // Users talking to the bot: timers keep to their floor, an
            // eighth, and go before events up to it.
            (0, 16, true, First),
            (1, 16, true, First),
            (2, 16, true, Held),
            (3, 16, true, Held),
            (4, 16, true, Held),
            (11, 16, true, Held),
            (0, 1, true, First),
            (1, 1, true, Held),
            (0, 4, true, First),
            (1, 4, true, Held),
        ];
        for (firing, workers, live, turn) in cases {
            assert_eq!(
                timer_turn(firing, workers, live),
                turn,
                "{firing} of {workers}, live {live}"
            );
        }
    }

    #[test]
    fn traffic_is_live_from_the_first_event_for_a_window() {
        let pace = TimerPace::new(16);
        assert!(!pace.is_live(), "live before any event");
        pace.event_came();
        assert!(pace.is_live(), "the first event makes traffic live");
        let last = pace.last_event.load(Ordering::Relaxed);
        let window = u64::try_from(LIVE_WINDOW.as_millis()).expect("a small window");
        assert!(pace.live_at(last + window - 1), "live until a window has passed");
        assert!(!pace.live_at(last + window), "still live a window later");
        // An event that reads the clock earlier and stores later keeps the
        // latest.
        pace.last_event.store(last + window, Ordering::Relaxed);
        pace.event_came();
        assert_eq!(pace.last_event.load(Ordering::Relaxed), last + window);
    }

    #[test]
    fn live_traffic_holds_timers_back_until_the_due_ones_waited_a_minute() {
        // (due timers found by the last sweep, waited so long; timers held to
        // their floor while an event just came)
        let cases = [
            (None, true),
            (Some(Duration::ZERO), true),
            (Some(Duration::from_secs(59)), true),
            (Some(OVERDUE), false),
            (Some(Duration::from_secs(3600)), false),
        ];
        for (waited, held) in cases {
            let pace = TimerPace::new(16);
            pace.found_due(waited);
            assert!(!pace.held_back(), "held back with no event ({waited:?})");
            pace.event_came();
            assert_eq!(pace.held_back(), held, "{waited:?}");
            // Held back: the floor (2 of 16), then no more; not: up to 12.
            let turn = if held { TimerTurn::Held } else { TimerTurn::Last };
            assert_eq!(pace.turn(2), turn, "{waited:?}");
            assert_eq!(pace.turn(12), TimerTurn::Held, "{waited:?}");
        }
        // A later sweep that finds the backlog gone holds timers back again.
        let pace = TimerPace::new(16);
        pace.event_came();
        pace.found_due(Some(Duration::from_secs(120)));
        assert!(!pace.held_back());
        pace.found_due(Some(Duration::from_secs(5)));
        assert!(pace.held_back());
    }

    #[test]
    fn the_firing_time_follows_the_latest_firings() {
        let pace = TimerPace::new(16);
        assert_eq!(pace.firing_time(), FIRST_FIRING_GUESS);
        pace.fired(Duration::from_millis(40));
        assert_eq!(pace.firing_time(), Duration::from_millis(40));
        for _ in 0..40 {
            pace.fired(Duration::from_secs(3));
        }
        let slow = pace.firing_time();
        assert!(
            slow > Duration::from_millis(2900) && slow <= Duration::from_secs(3),
            "{slow:?}"
        );
    }

    #[test]
    fn a_sweep_claims_what_drains_within_half_a_lease_and_less_while_live() {
        let lease = Duration::from_secs(30);
        let fast = Duration::from_millis(25);
        let slow = Duration::from_secs(3);
        // (live, firing time, queued, room, budget, least)
        let cases = [
            // Fast firings: the queue's room is the limit.
            (false, fast, 0, 500, 500, 100),
            (false, fast, 0, 120, 120, 100),
            // LINE answering in 3 s: 12 workers fire 60 in 15 s.
            (false, slow, 0, 500, 60, 60),
            (false, slow, 50, 450, 10, 60),
            // Live: at most 32, and 2 workers at 3 s fire 10 in 15 s.
            (true, fast, 0, 500, 32, 16),
            (true, fast, 10, 490, 22, 16),
            (true, fast, 20, 480, 12, 16),
            (true, slow, 0, 500, 10, 10),
            (true, slow, 8, 492, 2, 10),
        ];
        for (live, firing, queued, room, budget, least) in cases {
            assert_eq!(
                claims(16, live, firing, lease, queued, room),
                Claims { budget, least },
                "live {live}, {firing:?} a firing, {queued} queued, room {room}"
            );
        }
    }
}
