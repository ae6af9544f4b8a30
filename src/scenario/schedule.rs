//! When a step, a reminder or an expiry falls due: pure arithmetic on a given
//! `now` (no clock is read here), in the scenario's time zone.
//!
//! - A wait's step falls due after its delay, or at its local time of day; a due
//!   time inside the quiet hours moves to the end of the window.
//! - A reminder falls due `remind_after` after the question, also moved out of
//!   the quiet hours.
//! - An expiry falls due exactly `expire_after` after the question: closing time
//!   is not moved.
//! - A step found more than `max_lateness` after its due time is too late.
//!
//! Local times that do not exist (a daylight saving gap) resolve to the first
//! valid instant after them; local times that exist twice (a fold) to the
//! earlier one.

use super::{Delay, QuestionTimers, Timing};
use chrono::{DateTime, Days, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeDelta, TimeZone, Utc};
use std::time::Duration;

/// When the step after a wait with `delay`, reached at `now`, falls due.
pub fn step_due(delay: &Delay, timing: &Timing, now: DateTime<Utc>) -> DateTime<Utc> {
    let due = match *delay {
        Delay::After(duration) => add(now, duration),
        Delay::At { time, days } => {
            let today = now.with_timezone(&timing.zone).date_naive();
            let mut due = at_local(timing, today, days, time);
            // Today's time has passed (or is now): the next day's.
            let mut extra = 1;
            while due <= now && extra <= 2 {
                due = at_local(timing, today, days.saturating_add(extra), time);
                extra += 1;
            }
            due
        }
    };
    after_quiet_hours(timing, due)
}

/// `at`, or the end of the quiet window when `at` falls inside it: local time in
/// `[start, end)` (wrapping midnight when `start > end`) moves to the next local
/// `end`.
pub fn after_quiet_hours(timing: &Timing, at: DateTime<Utc>) -> DateTime<Utc> {
    let Some(quiet) = timing.quiet_hours else {
        return at;
    };
    // Near the end of time the local clock may not be representable: unchanged.
    let offset = timing.zone.offset_from_utc_datetime(&at.naive_utc()).fix();
    let Some(local) = at.naive_utc().checked_add_offset(offset) else {
        return at;
    };
    let time = local.time();
    let date = local.date();
    let quiet_now = if quiet.start < quiet.end {
        quiet.start <= time && time < quiet.end
    } else {
        time >= quiet.start || time < quiet.end
    };
    if !quiet_now {
        return at;
    }
    // Before `end` on the same day (the morning part of a window that wraps, or
    // any part of one that does not), else the next day's `end`.
    let days = if time < quiet.end { 0 } else { 1 };
    let moved = at_local(timing, date, days, quiet.end);
    if moved > at {
        moved
    } else {
        at_local(timing, date, days + 1, quiet.end)
    }
}

/// When the first reminder of a question asked at `now` falls due (moved out of
/// the quiet hours); `None` without `remind_after`.
pub fn reminder_due(timers: &QuestionTimers, timing: &Timing, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    timers
        .remind_after
        .map(|after| after_quiet_hours(timing, add(now, after)))
}

/// When a question asked at `now` closes; `None` without `expire_after`. Not
/// moved by quiet hours: closing time is exact.
pub fn expiry_due(timers: &QuestionTimers, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    timers.expire_after.map(|after| add(now, after))
}

/// Whether a step due at `due` and found at `now` is more than `max_lateness`
/// late, so it is skipped (and recorded) instead of sent. Exactly
/// `max_lateness` late is still sent.
pub fn too_late(timing: &Timing, due: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    let late = now.signed_duration_since(due);
    let allowed = TimeDelta::from_std(timing.max_lateness).unwrap_or(TimeDelta::MAX);
    late > allowed
}

/// When local `date` begins in the scenario's zone: its midnight, or the first
/// instant after a daylight saving gap that swallows midnight.
pub fn day_start(timing: &Timing, date: NaiveDate) -> DateTime<Utc> {
    zone_day_start(timing.zone, date)
}

/// When local `date` begins in `zone` (as [`day_start`]): the one definition of
/// a local day that results, exports and campaign audiences share.
pub fn zone_day_start(zone: chrono_tz::Tz, date: NaiveDate) -> DateTime<Utc> {
    resolve(zone, date.and_time(NaiveTime::MIN))
}

/// `now + duration`, saturating at the latest representable instant.
fn add(now: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|delta| now.checked_add_signed(delta))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Local `time` on `date` plus `days` days, in the scenario's zone, as an
/// instant: the earlier one in a fold, the first valid one after a gap.
fn at_local(timing: &Timing, date: NaiveDate, days: u32, time: NaiveTime) -> DateTime<Utc> {
    let Some(date) = date.checked_add_days(Days::new(u64::from(days))) else {
        return DateTime::<Utc>::MAX_UTC;
    };
    resolve(timing.zone, date.and_time(time))
}

fn resolve(zone: chrono_tz::Tz, local: NaiveDateTime) -> DateTime<Utc> {
    if let Some(instant) = zone.from_local_datetime(&local).earliest() {
        return instant.with_timezone(&Utc);
    }
    // In a gap: the first local minute after it that exists is the instant the
    // clocks jumped. Gaps last at most a day (Samoa, 2011).
    let mut probe = local;
    for _ in 0..(2 * 24 * 60) {
        let Some(next) = probe.checked_add_signed(TimeDelta::minutes(1)) else {
            break;
        };
        probe = next;
        if let Some(instant) = zone.from_local_datetime(&probe).earliest() {
            return instant.with_timezone(&Utc);
        }
    }
    DateTime::<Utc>::MAX_UTC
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::QuietHours;
    use chrono_tz::Tz;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap_or_else(|error| panic!("{text}: {error}"))
            .with_timezone(&Utc)
    }

    fn clock(text: &str) -> NaiveTime {
        crate::scenario::parse_clock(text).unwrap()
    }

    fn timing(zone: Tz, quiet: Option<(&str, &str)>) -> Timing {
        Timing {
            zone,
            quiet_hours: quiet.map(|(start, end)| QuietHours {
                start: clock(start),
                end: clock(end),
            }),
            max_lateness: Duration::from_secs(6 * 60 * 60),
        }
    }

    const HOUR: u64 = 60 * 60;
    const TOKYO: Tz = chrono_tz::Asia::Tokyo;
    const NEW_YORK: Tz = chrono_tz::America::New_York;

    #[test]
    fn steps_fall_due_on_an_injected_clock() {
        let at = |time: &str, days: u32| Delay::At {
            time: clock(time),
            days,
        };
        let after = |seconds: u64| Delay::After(Duration::from_secs(seconds));
        // (case, zone, quiet hours, delay, now, expected due)
        type Case<'a> = (&'a str, Tz, Option<(&'a str, &'a str)>, Delay, &'a str, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (
                "after 90m",
                TOKYO,
                None,
                after(90 * 60),
                "2026-01-01T00:00:00Z",
                "2026-01-01T01:30:00Z",
            ),
            (
                "after 3d",
                TOKYO,
                None,
                after(72 * HOUR),
                "2026-01-01T00:00:00Z",
                "2026-01-04T00:00:00Z",
            ),
            // 09:00 in Tokyo: 10:00 is still ahead today.
            (
                "at later today",
                TOKYO,
                None,
                at("10:00", 0),
                "2026-01-01T00:00:00Z",
                "2026-01-01T01:00:00Z",
            ),
            // 11:00 in Tokyo: today's 10:00 has passed, so tomorrow's.
            (
                "at passed today",
                TOKYO,
                None,
                at("10:00", 0),
                "2026-01-01T02:00:00Z",
                "2026-01-02T01:00:00Z",
            ),
            (
                "at exactly now is tomorrow",
                TOKYO,
                None,
                at("10:00", 0),
                "2026-01-01T01:00:00Z",
                "2026-01-02T01:00:00Z",
            ),
            (
                "at, 1 day later",
                TOKYO,
                None,
                at("10:00", 1),
                "2026-01-01T00:00:00Z",
                "2026-01-02T01:00:00Z",
            ),
            (
                "at, 3 days later",
                TOKYO,
                None,
                at("10:00", 3),
                "2026-01-01T02:00:00Z",
                "2026-01-04T01:00:00Z",
            ),
            // 23:30 UTC on Jan 1 is 08:30 on Jan 2 in Tokyo: the local date counts.
            (
                "Tokyo's date, not UTC's",
                TOKYO,
                None,
                at("10:00", 1),
                "2026-01-01T23:30:00Z",
                "2026-01-03T01:00:00Z",
            ),
            (
                "the same in UTC",
                Tz::UTC,
                None,
                at("10:00", 1),
                "2026-01-01T23:30:00Z",
                "2026-01-02T10:00:00Z",
            ),
            // Quiet 21:00-09:00 Tokyo (12:00-00:00 UTC).
            (
                "after into quiet hours",
                TOKYO,
                Some(("21:00", "09:00")),
                after(HOUR),
                "2026-01-01T11:30:00Z",
                "2026-01-02T00:00:00Z",
            ),
            (
                "after past midnight, still quiet",
                TOKYO,
                Some(("21:00", "09:00")),
                after(6 * HOUR),
                "2026-01-01T11:30:00Z",
                "2026-01-02T00:00:00Z",
            ),
            (
                "after, not quiet",
                TOKYO,
                Some(("21:00", "09:00")),
                after(HOUR),
                "2026-01-01T02:00:00Z",
                "2026-01-01T03:00:00Z",
            ),
            (
                "at inside quiet hours",
                TOKYO,
                Some(("21:00", "09:00")),
                at("07:30", 1),
                "2026-01-01T02:00:00Z",
                "2026-01-02T00:00:00Z",
            ),
            (
                "at the end of quiet hours",
                TOKYO,
                Some(("21:00", "09:00")),
                at("09:00", 1),
                "2026-01-01T02:00:00Z",
                "2026-01-02T00:00:00Z",
            ),
            // 2026-03-08: New York skips from 02:00 EST to 03:00 EDT (07:00 UTC).
            (
                "DST gap: the first valid instant after",
                NEW_YORK,
                None,
                at("02:30", 1),
                "2026-03-07T17:00:00Z",
                "2026-03-08T07:00:00Z",
            ),
            (
                "after the gap",
                NEW_YORK,
                None,
                at("03:30", 1),
                "2026-03-07T17:00:00Z",
                "2026-03-08T07:30:00Z",
            ),
            // 2026-11-01: 01:30 happens twice (EDT 05:30 UTC, then EST 06:30 UTC).
            (
                "DST fold: the earlier instant",
                NEW_YORK,
                None,
                at("01:30", 1),
                "2026-10-31T17:00:00Z",
                "2026-11-01T05:30:00Z",
            ),
        ];
        let failed: Vec<String> = cases
            .into_iter()
            .filter_map(|(name, zone, quiet, delay, now, expected)| {
                let got = step_due(&delay, &timing(zone, quiet), utc(now));
                (got != utc(expected)).then(|| format!("{name}: expected {expected}, got {got}"))
            })
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }

    #[test]
    fn quiet_hours_move_to_their_end() {
        // (case, quiet hours, local Tokyo time of `at` on 2026-01-01, expected local result)
        let cases = [
            (
                "wrapping: just before start",
                ("21:00", "09:00"),
                "2026-01-01T20:59:59",
                "2026-01-01T20:59:59",
            ),
            (
                "wrapping: exactly at start is quiet",
                ("21:00", "09:00"),
                "2026-01-01T21:00:00",
                "2026-01-02T09:00:00",
            ),
            (
                "wrapping: late evening",
                ("21:00", "09:00"),
                "2026-01-01T23:59:00",
                "2026-01-02T09:00:00",
            ),
            (
                "wrapping: midnight",
                ("21:00", "09:00"),
                "2026-01-01T00:00:00",
                "2026-01-01T09:00:00",
            ),
            (
                "wrapping: early morning",
                ("21:00", "09:00"),
                "2026-01-01T08:59:59",
                "2026-01-01T09:00:00",
            ),
            (
                "wrapping: exactly at end is not quiet",
                ("21:00", "09:00"),
                "2026-01-01T09:00:00",
                "2026-01-01T09:00:00",
            ),
            (
                "wrapping: midday",
                ("21:00", "09:00"),
                "2026-01-01T12:00:00",
                "2026-01-01T12:00:00",
            ),
            (
                "not wrapping: before",
                ("12:00", "13:00"),
                "2026-01-01T11:59:00",
                "2026-01-01T11:59:00",
            ),
            (
                "not wrapping: at start",
                ("12:00", "13:00"),
                "2026-01-01T12:00:00",
                "2026-01-01T13:00:00",
            ),
            (
                "not wrapping: inside",
                ("12:00", "13:00"),
                "2026-01-01T12:30:00",
                "2026-01-01T13:00:00",
            ),
            (
                "not wrapping: at end",
                ("12:00", "13:00"),
                "2026-01-01T13:00:00",
                "2026-01-01T13:00:00",
            ),
            (
                "not wrapping: night",
                ("12:00", "13:00"),
                "2026-01-01T23:00:00",
                "2026-01-01T23:00:00",
            ),
        ];
        let tokyo = |text: &str| {
            let local = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").unwrap();
            TOKYO.from_local_datetime(&local).unwrap().with_timezone(&Utc)
        };
        let failed: Vec<String> = cases
            .into_iter()
            .filter_map(|(name, quiet, at, expected)| {
                let got = after_quiet_hours(&timing(TOKYO, Some(quiet)), tokyo(at));
                (got != tokyo(expected))
                    .then(|| format!("{name}: expected {expected}, got {}", got.with_timezone(&TOKYO)))
            })
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
        // No quiet hours: nothing moves.
        let at = tokyo("2026-01-01T23:00:00");
        assert_eq!(after_quiet_hours(&timing(TOKYO, None), at), at);
    }

    #[test]
    fn reminders_respect_quiet_hours_and_expiry_does_not() {
        let timers = QuestionTimers {
            remind_after: Some(Duration::from_secs(12 * HOUR)),
            remind_text: None,
            max_reminders: 1,
            expire_after: Some(Duration::from_secs(12 * HOUR)),
            on_expire: None,
        };
        let quiet = timing(TOKYO, Some(("21:00", "09:00")));
        // Asked at 12:00 Tokyo: 12 hours later is midnight, inside the window.
        let now = utc("2026-01-01T03:00:00Z");
        assert_eq!(reminder_due(&timers, &quiet, now), Some(utc("2026-01-02T00:00:00Z")));
        assert_eq!(expiry_due(&timers, now), Some(utc("2026-01-01T15:00:00Z")));
        let none = QuestionTimers {
            remind_after: None,
            expire_after: None,
            ..timers
        };
        assert_eq!(reminder_due(&none, &quiet, now), None);
        assert_eq!(expiry_due(&none, now), None);
    }

    #[test]
    fn too_late_is_strictly_past_max_lateness() {
        let six_hours = timing(TOKYO, None);
        let due = utc("2026-01-01T00:00:00Z");
        let cases = [
            ("early", "2025-12-31T23:00:00Z", false),
            ("on time", "2026-01-01T00:00:00Z", false),
            ("exactly 6h late", "2026-01-01T06:00:00Z", false),
            ("6h and a second late", "2026-01-01T06:00:01Z", true),
            ("7h late", "2026-01-01T07:00:00Z", true),
        ];
        for (name, now, expected) in cases {
            assert_eq!(too_late(&six_hours, due, utc(now)), expected, "{name}");
        }
    }

    #[test]
    fn huge_delays_saturate_instead_of_panicking() {
        let now = utc("2026-01-01T00:00:00Z");
        let forever = Delay::After(Duration::from_secs(u64::MAX));
        assert_eq!(step_due(&forever, &timing(TOKYO, None), now), DateTime::<Utc>::MAX_UTC);
        let far = Delay::At {
            time: clock("10:00"),
            days: u32::MAX,
        };
        assert!(step_due(&far, &timing(TOKYO, Some(("21:00", "09:00"))), now) > now);
    }
}
