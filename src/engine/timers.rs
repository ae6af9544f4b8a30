//! Timers, the decisions: when a planned timer falls due, and whether a timer
//! that fell due still has a reason to fire, and what it sends. Pure: the
//! pipeline reads the user's state, passes the clock in, and commits the
//! firing conditional on what it read.

use super::render::{QuestionRef, TimerPlan, render_in_run, render_question};
use super::{Engine, OpenQuestion};
use crate::ids::{NodeId, RunId, ScenarioId, TimerKind};
use crate::line::messages::Message;
use crate::scenario::{Node, schedule};
use crate::values::UserChanges;
use chrono::{DateTime, Utc};

/// A timer that fell due, as its document holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DueTimer {
    pub(crate) kind: TimerKind,
    pub(crate) scenario: ScenarioId,
    pub(crate) version: u32,
    pub(crate) run: RunId,
    pub(crate) node: NodeId,
    /// The user the timer is for (a split on the way takes their arm).
    pub(crate) user: crate::ids::LineUserId,
    pub(crate) due: DateTime<Utc>,
    /// Reminders already sent.
    pub(crate) reminders: u32,
}

/// The user's state as read when the timer fell due.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FiringSeen {
    /// The run the user's marker of the scenario names.
    pub(crate) current_run: Option<String>,
    pub(crate) following: bool,
    /// Whether the timer's question has an answer.
    pub(crate) answered: bool,
    /// The user's open (text or date) question.
    pub(crate) open: Option<OpenQuestion>,
    /// For a reminder: its question's expiry fired already.
    pub(crate) expired: bool,
    /// For a reminder: when its question's pending expiry is due.
    pub(crate) expires_at: Option<DateTime<Utc>>,
    /// The timer's run is a campaign's and the user has since taken the
    /// campaigns' opt-out tag: nothing more of it is sent.
    pub(crate) opted_out: bool,
}

/// Why a timer that fell due sends nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    UnknownScenario,
    UnknownNode,
    /// The user unfollowed (blocked) the account.
    Unfollowed,
    /// A newer run of the scenario replaced the timer's run.
    Superseded,
    /// The question was answered.
    Answered,
    /// The question is no longer the user's open one (answered, or replaced by
    /// another question).
    NotOpen,
    /// Found later than the scenario's `max_lateness`: not sent late.
    Late,
    /// A reminder of a question that expired (or is due to).
    Expired,
    /// A campaign's timer for a user who took the opt-out tag.
    OptedOut,
}

impl Skip {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Skip::UnknownScenario => "unknown_scenario",
            Skip::UnknownNode => "unknown_node",
            Skip::Unfollowed => "unfollowed",
            Skip::Superseded => "superseded",
            Skip::Answered => "answered",
            Skip::NotOpen => "not_open",
            Skip::Late => "late",
            Skip::Expired => "expired",
            Skip::OptedOut => "opted_out",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
// One short-lived value per firing, matched at once: boxing `Fire` would buy
// nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Firing {
    Skip(Skip),
    Fire {
        messages: Vec<Message>,
        /// Timers the sent chain schedules (a next wait, the question it asks).
        timers: Vec<TimerPlan>,
        /// The text or date question the sent chain asks.
        opens: Option<QuestionRef>,
        /// The question node the sent chain asks for the first time in the
        /// run (a reminder asks again: not counted as sent).
        asks: Option<NodeId>,
        /// The split arm the sent chain took and the arm of what it asks.
        arms: super::Arms,
        /// The branch the sent chain stopped at: decided by the caller with
        /// the user's state (see `Engine::resolve_branches`).
        branch: Option<NodeId>,
        /// What the sent chain's nodes do to the user's tags and fields.
        changes: UserChanges,
        /// The expiry closes the user's open question (it is this one).
        closes: bool,
        /// A reminder with reminders left: when the next one is due.
        rearm: Option<DateTime<Utc>>,
        outcome: &'static str,
    },
}

impl Engine {
    /// When a timer planned now falls due; `None` when the scenario or the node
    /// no longer asks for it.
    pub(crate) fn due_at(&self, plan: &TimerPlan, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let loaded = self.scenario(&plan.scenario)?;
        let timing = loaded.timing();
        match plan.kind {
            TimerKind::Step => Some(schedule::step_due(loaded.delay(&plan.node)?, timing, now)),
            TimerKind::Remind => schedule::reminder_due(loaded.question_timers(&plan.node)?, timing, now),
            TimerKind::Expire => schedule::expiry_due(loaded.question_timers(&plan.node)?, now),
        }
    }

    /// What a due timer does, given the user's state now.
    pub(crate) fn fire(&self, timer: &DueTimer, seen: &FiringSeen, now: DateTime<Utc>) -> Firing {
        match self.try_fire(timer, seen, now) {
            Ok(firing) => firing,
            Err(skip) => Firing::Skip(skip),
        }
    }

    fn try_fire(&self, timer: &DueTimer, seen: &FiringSeen, now: DateTime<Utc>) -> Result<Firing, Skip> {
        let loaded = self.scenario(&timer.scenario).ok_or(Skip::UnknownScenario)?;
        if !seen.following {
            return Err(Skip::Unfollowed);
        }
        // Opted out of campaigns: no step, no reminder; an expiry still closes
        // the question, silently.
        if seen.opted_out && timer.kind != TimerKind::Expire {
            return Err(Skip::OptedOut);
        }
        if seen.current_run.as_deref() != Some(timer.run.as_str()) {
            return Err(Skip::Superseded);
        }
        let node = loaded.node(&timer.node).ok_or(Skip::UnknownNode)?;
        let late = schedule::too_late(loaded.timing(), timer.due, now);
        match timer.kind {
            TimerKind::Step => {
                let Node::Wait(wait) = node else {
                    return Err(Skip::UnknownNode);
                };
                if late {
                    return Err(Skip::Late);
                }
                let who = self.who(&timer.scenario, &timer.user);
                let rendered =
                    render_in_run(loaded, &wait.next, Some(&timer.run), Some(who)).map_err(|_| Skip::UnknownNode)?;
                Ok(Firing::Fire {
                    arms: super::Arms::of(&rendered),
                    branch: rendered.branch,
                    messages: rendered.messages,
                    timers: rendered.timers,
                    opens: rendered.opens,
                    asks: rendered.asks,
                    changes: rendered.changes,
                    closes: false,
                    rearm: None,
                    outcome: "sent",
                })
            }
            TimerKind::Remind => {
                let timers = loaded.question_timers(&timer.node).ok_or(Skip::UnknownNode)?;
                still_asked(node, timer, seen)?;
                if seen.expired || seen.expires_at.is_some_and(|at| at <= now) {
                    return Err(Skip::Expired);
                }
                if late {
                    return Err(Skip::Late);
                }
                let mut messages: Vec<Message> = timers
                    .remind_text
                    .iter()
                    .map(|text| Message::Text {
                        text: text.clone(),
                        quick_reply: None,
                    })
                    .collect();
                messages.extend(render_question(loaded, node, &timer.run));
                let sent = timer.reminders.saturating_add(1);
                // No reminder after the question closes.
                let rearm = (sent < timers.max_reminders)
                    .then(|| schedule::reminder_due(timers, loaded.timing(), now))
                    .flatten()
                    .filter(|next| seen.expires_at.is_none_or(|expiry| *next < expiry));
                Ok(Firing::Fire {
                    messages,
                    timers: Vec::new(),
                    opens: None,
                    asks: None,
                    arms: super::Arms::default(),
                    branch: None,
                    changes: UserChanges::default(),
                    closes: false,
                    rearm,
                    outcome: "reminded",
                })
            }
            TimerKind::Expire => {
                let timers = loaded.question_timers(&timer.node).ok_or(Skip::UnknownNode)?;
                still_asked(node, timer, seen)?;
                let closes = !matches!(node, Node::Survey(_));
                // Late (or opted out), it still closes the question, but sends nothing.
                let rendered = match (&timers.on_expire, late || seen.opted_out) {
                    (Some(next), false) => Some(
                        render_in_run(
                            loaded,
                            next,
                            Some(&timer.run),
                            Some(self.who(&timer.scenario, &timer.user)),
                        )
                        .map_err(|_| Skip::UnknownNode)?,
                    ),
                    _ => None,
                };
                let rendered = rendered.unwrap_or_default();
                Ok(Firing::Fire {
                    arms: super::Arms::of(&rendered),
                    branch: rendered.branch,
                    messages: rendered.messages,
                    timers: rendered.timers,
                    opens: rendered.opens,
                    asks: rendered.asks,
                    changes: rendered.changes,
                    closes,
                    rearm: None,
                    outcome: if seen.opted_out {
                        "expired_opted_out"
                    } else if late {
                        "expired_late"
                    } else {
                        "expired"
                    },
                })
            }
        }
    }
}

/// The user's open question as the firing read it: the ids it names, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenRead<'a> {
    pub(crate) scenario: &'a str,
    pub(crate) node: &'a str,
}

/// What a firing does to the user's open question.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum QuestionMove {
    /// Opens the question the sent chain asks. `replace_only_read`: it replaces
    /// only the open question as read (a reminder's or an expiry's chain);
    /// otherwise whatever is open (a step follows the scenario).
    Open {
        question: QuestionRef,
        replace_only_read: bool,
    },
    /// Closes the open question as read (an expiry of it).
    Close,
    /// Asks the open question as read again (a reminder of it): open from now,
    /// so a reply to the reminder is in the answer window.
    Remind,
    /// Leaves the open question as it is.
    Keep,
}

/// What the firing of `timer` does to the open question, given what the fired
/// chain opens (`opens`), whether it closes the timer's question (`closes`,
/// from [`Firing::Fire`]) and the open question read (`read`).
pub(crate) fn question_move(
    timer: &DueTimer,
    opens: Option<&QuestionRef>,
    closes: bool,
    read: Option<OpenRead<'_>>,
) -> QuestionMove {
    match (opens, closes) {
        (Some(question), _) => QuestionMove::Open {
            question: question.clone(),
            replace_only_read: timer.kind != TimerKind::Step,
        },
        (None, true) if read.is_some() => QuestionMove::Close,
        // Re-asked only if it is still the open question as read.
        (None, false)
            if timer.kind == TimerKind::Remind
                && read.is_some_and(|read| {
                    read.scenario == timer.scenario.as_str() && read.node == timer.node.as_str()
                }) =>
        {
            QuestionMove::Remind
        }
        _ => QuestionMove::Keep,
    }
}

/// Whether the firing of a `fired` timer ends its question's sibling timer of
/// kind `sibling`, found pending or not: an expiry ends its pending reminder in
/// the same commit.
pub(crate) fn ends_sibling(fired: TimerKind, sibling: TimerKind, sibling_pending: bool) -> bool {
    fired == TimerKind::Expire && sibling == TimerKind::Remind && sibling_pending
}

/// A reminder or an expiry has a reason only while its question waits for this
/// run's answer: not answered, and (for a text or date question) still the
/// user's open question.
fn still_asked(node: &Node, timer: &DueTimer, seen: &FiringSeen) -> Result<(), Skip> {
    if seen.answered {
        return Err(Skip::Answered);
    }
    if matches!(node, Node::Survey(_)) {
        return Ok(());
    }
    let open = seen.open.as_ref().is_some_and(|open| {
        open.question.scenario == timer.scenario
            && open.question.node == timer.node
            && open.question.run.as_ref().is_none_or(|run| *run == timer.run)
    });
    if open { Ok(()) } else { Err(Skip::NotOpen) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::load_dir;
    use std::sync::Arc;

    fn engine() -> Engine {
        let dir = crate::repo_path("scenarios");
        Engine::new(Arc::new(load_dir(&dir).expect("the samples load")))
    }

    fn id<T>(parse: fn(String) -> Result<T, crate::ids::IdError>, raw: &str) -> T {
        parse(raw.to_owned()).expect("valid id")
    }

    fn timer(kind: TimerKind, node: &str, due: DateTime<Utc>) -> DueTimer {
        DueTimer {
            kind,
            scenario: id(ScenarioId::parse, "ja_followup"),
            version: 1,
            run: id(RunId::parse, "0123456789abcdef"),
            node: id(NodeId::parse, node),
            user: id(crate::ids::LineUserId::parse, "U0123456789abcdef0123456789abcdef"),
            due,
            reminders: 0,
        }
    }

    fn seen(run: &str, following: bool, answered: bool) -> FiringSeen {
        FiringSeen {
            current_run: Some(run.to_owned()),
            following,
            answered,
            open: None,
            expired: false,
            expires_at: None,
            opted_out: false,
        }
    }

    fn texts(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|message| match message {
                Message::Text { text, .. } => text.clone(),
                Message::Template { alt_text, .. } => format!("[{alt_text}]"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_due_timer_fires_only_with_a_reason() {
        let engine = engine();
        let now = DateTime::parse_from_rfc3339("2026-12-01T10:00:00+09:00")
            .expect("valid")
            .with_timezone(&Utc);
        let hours = |h: i64| now - chrono::Duration::hours(h);
        let run = "0123456789abcdef";
        // (case, timer, what was read, texts sent and outcome, or why skipped)
        type Expected = Result<(Vec<&'static str>, &'static str), Skip>;
        let cases: Vec<(&str, DueTimer, FiringSeen, Expected)> = vec![
            (
                "a step sends the next chain",
                timer(TimerKind::Step, "one_day", hours(0)),
                seen(run, true, false),
                Ok((vec!["[またご来店いただけそうですか?]"], "sent")),
            ),
            (
                "unfollowed",
                timer(TimerKind::Step, "one_day", hours(0)),
                seen(run, false, false),
                Err(Skip::Unfollowed),
            ),
            (
                "a newer run",
                timer(TimerKind::Step, "one_day", hours(0)),
                seen("fedcba9876543210", true, false),
                Err(Skip::Superseded),
            ),
            (
                "seven hours late",
                timer(TimerKind::Step, "one_day", hours(7)),
                seen(run, true, false),
                Err(Skip::Late),
            ),
            (
                "five hours late is still sent",
                timer(TimerKind::Step, "one_day", hours(5)),
                seen(run, true, false),
                Ok((vec!["[またご来店いただけそうですか?]"], "sent")),
            ),
            (
                "a reminder to who answered",
                timer(TimerKind::Remind, "revisit", hours(0)),
                seen(run, true, true),
                Err(Skip::Answered),
            ),
            (
                "a reminder: its text, then the question again",
                timer(TimerKind::Remind, "revisit", hours(0)),
                seen(run, true, false),
                Ok((
                    vec![
                        "昨日の質問へのご回答をお待ちしています。ボタンをタップするだけで完了します。",
                        "[またご来店いただけそうですか?]",
                    ],
                    "reminded",
                )),
            ),
            (
                "expiry sends on_expire",
                timer(TimerKind::Expire, "revisit", hours(0)),
                seen(run, true, false),
                Ok((
                    vec!["この質問の受付は終了しました。またのご来店をお待ちしています。"],
                    "expired",
                )),
            ),
            (
                "a late expiry closes silently",
                timer(TimerKind::Expire, "revisit", hours(7)),
                seen(run, true, false),
                Ok((vec![], "expired_late")),
            ),
            (
                "a reminder of an expired question",
                timer(TimerKind::Remind, "revisit", hours(0)),
                FiringSeen {
                    expired: true,
                    ..seen(run, true, false)
                },
                Err(Skip::Expired),
            ),
            (
                "a reminder at the expiry's time",
                timer(TimerKind::Remind, "revisit", hours(0)),
                FiringSeen {
                    expires_at: Some(now),
                    ..seen(run, true, false)
                },
                Err(Skip::Expired),
            ),
            (
                "an expiry of an answered question",
                timer(TimerKind::Expire, "revisit", hours(0)),
                seen(run, true, true),
                Err(Skip::Answered),
            ),
            (
                "a campaign's step to who opted out",
                timer(TimerKind::Step, "one_day", hours(0)),
                FiringSeen {
                    opted_out: true,
                    ..seen(run, true, false)
                },
                Err(Skip::OptedOut),
            ),
            (
                "a campaign's reminder to who opted out",
                timer(TimerKind::Remind, "revisit", hours(0)),
                FiringSeen {
                    opted_out: true,
                    ..seen(run, true, false)
                },
                Err(Skip::OptedOut),
            ),
            (
                "a campaign's expiry for who opted out closes silently",
                timer(TimerKind::Expire, "revisit", hours(0)),
                FiringSeen {
                    opted_out: true,
                    ..seen(run, true, false)
                },
                Ok((vec![], "expired_opted_out")),
            ),
        ];
        for (name, due, seen, expected) in cases {
            let found = match engine.fire(&due, &seen, now) {
                Firing::Skip(skip) => Err(skip),
                Firing::Fire { messages, outcome, .. } => Ok((texts(&messages), outcome)),
            };
            let expected =
                expected.map(|(texts, outcome)| (texts.into_iter().map(str::to_owned).collect::<Vec<_>>(), outcome));
            assert_eq!(found, expected, "{name}");
        }
    }

    fn question(scenario: &str, node: &str) -> QuestionRef {
        QuestionRef {
            scenario: id(ScenarioId::parse, scenario),
            version: 1,
            node: id(NodeId::parse, node),
            run: Some(id(RunId::parse, "0123456789abcdef")),
        }
    }

    /// (case, timer, what its chain opens, whether it closes, the open question read, the move)
    type MoveCase<'a> = (
        &'a str,
        DueTimer,
        Option<QuestionRef>,
        bool,
        Option<OpenRead<'a>>,
        QuestionMove,
    );

    #[test]
    fn a_firing_opens_closes_re_asks_or_keeps_the_open_question() {
        let now = Utc::now();
        let revisit = OpenRead {
            scenario: "ja_followup",
            node: "revisit",
        };
        let other = OpenRead {
            scenario: "ja_followup",
            node: "postal_code",
        };
        let next = question("ja_followup", "postal_code");
        let cases: Vec<MoveCase> = vec![
            (
                "a step opening a question replaces whatever is open",
                timer(TimerKind::Step, "one_day", now),
                Some(next.clone()),
                false,
                Some(revisit),
                QuestionMove::Open {
                    question: next.clone(),
                    replace_only_read: false,
                },
            ),
            (
                "an expiry's chain opening a question replaces only the one read",
                timer(TimerKind::Expire, "revisit", now),
                Some(next.clone()),
                true,
                Some(revisit),
                QuestionMove::Open {
                    question: next.clone(),
                    replace_only_read: true,
                },
            ),
            (
                "a reminder re-asks its still open question",
                timer(TimerKind::Remind, "revisit", now),
                None,
                false,
                Some(revisit),
                QuestionMove::Remind,
            ),
            (
                "a reminder while another question is open leaves it",
                timer(TimerKind::Remind, "revisit", now),
                None,
                false,
                Some(other),
                QuestionMove::Keep,
            ),
            (
                "a reminder with no question open leaves it",
                timer(TimerKind::Remind, "revisit", now),
                None,
                false,
                None,
                QuestionMove::Keep,
            ),
            (
                "an expiry closes the open question",
                timer(TimerKind::Expire, "revisit", now),
                None,
                true,
                Some(revisit),
                QuestionMove::Close,
            ),
            (
                "an expiry with no question open closes nothing",
                timer(TimerKind::Expire, "revisit", now),
                None,
                true,
                None,
                QuestionMove::Keep,
            ),
            (
                "an expiry of a survey question (not closing) leaves it",
                timer(TimerKind::Expire, "revisit", now),
                None,
                false,
                Some(revisit),
                QuestionMove::Keep,
            ),
            (
                "a step that asks nothing leaves it",
                timer(TimerKind::Step, "one_day", now),
                None,
                false,
                Some(revisit),
                QuestionMove::Keep,
            ),
        ];
        for (name, due, opens, closes, read, expected) in cases {
            assert_eq!(question_move(&due, opens.as_ref(), closes, read), expected, "{name}");
        }
    }

    #[test]
    fn only_an_expiry_ends_its_pending_reminder() {
        // (fired, sibling, sibling pending, ends it)
        let cases = [
            (TimerKind::Expire, TimerKind::Remind, true, true),
            (TimerKind::Expire, TimerKind::Remind, false, false),
            (TimerKind::Remind, TimerKind::Expire, true, false),
            (TimerKind::Step, TimerKind::Remind, true, false),
            (TimerKind::Expire, TimerKind::Expire, true, false),
        ];
        for (fired, sibling, pending, ends) in cases {
            assert_eq!(
                ends_sibling(fired, sibling, pending),
                ends,
                "{fired:?} with a {sibling:?} sibling, pending: {pending}"
            );
        }
    }

    #[test]
    fn a_step_plans_the_reminder_and_expiry_of_the_question_it_asks() {
        let engine = engine();
        let now = Utc::now();
        let Firing::Fire { timers, rearm, .. } = engine.fire(
            &timer(TimerKind::Step, "one_day", now),
            &seen("0123456789abcdef", true, false),
            now,
        ) else {
            panic!("the step fires")
        };
        let kinds: Vec<TimerKind> = timers.iter().map(|plan| plan.kind).collect();
        assert_eq!(kinds, [TimerKind::Remind, TimerKind::Expire]);
        assert!(timers.iter().all(|plan| plan.node.as_str() == "revisit"));
        assert_eq!(rearm, None);
        // Its expiry is 3 days from now, exactly (quiet hours do not move it).
        let expiry = engine.due_at(&timers[1], now).expect("planned");
        assert_eq!(expiry - now, chrono::Duration::days(3));
    }
}
