//! One user talking to the scenarios, in memory: the same engine decides, and
//! the guards keep their semantics (an answer is recorded once per question; a
//! guarded scenario does not start again once answered, nor twice within the
//! start dedup window; a typed answer needs its question open). No Firestore,
//! no LINE. Used by `line-survey simulate` and `line-survey test`.
//!
//! A chain that ends at a wait node is played on at once, as if the time had
//! passed: the simulated clock moves to the step's due time, the turn shows a
//! line such as `(after 1d)` and then what the step sends. Reminders and expiry
//! are not simulated.

use crate::engine::{
    AnswerPlan, Arms, Decision, Engine, OpenQuestion, QuestionRef, Rendered, RunStart, StartVerdict, TypedDecision,
    start_verdict,
};
use crate::ids::{LineUserId, NodeId, ScenarioId};
use crate::line::messages::{Action, Message, Template};
use crate::line::webhook::{Event, EventParse};
use crate::scenario::typed::AnswerValue;
use crate::scenario::{Delay, Node, WaitNode, schedule, walk_nodes};
use crate::values::{FieldValue, UserChanges};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// The most waits one user action plays on (waits can lead to waits forever).
const MAX_WAITS_PER_TURN: usize = 20;

/// The simulated user.
const USER: &str = "U00000000000000000000000000000001";

/// The simulated user, typed: splits pick its arm unless a variant is forced.
pub(crate) fn simulated_user() -> LineUserId {
    LineUserId::parse(USER).unwrap_or_else(|_| unreachable!("the simulated user id is a valid id"))
}

/// What one bot message offers to tap.
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    pub(crate) label: String,
    /// Postback data of a button; `None` for a date picker.
    data: Option<String>,
    /// A date picker's postback data and mode.
    picker: Option<(String, String)>,
}

/// What the user did, as one line of input or one transcript step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UserAction {
    Follow,
    Text(String),
    /// Taps a button of the last question, by its position (from 1).
    TapNumber(usize),
    /// Taps a button by label: of the last question, or failing that of an
    /// earlier one (a re-tap of an old card).
    TapLabel(String),
    /// Taps the image of the last Flex card.
    TapCard,
    /// Picks a value in the last date picker.
    Pick(String),
}

/// The answers and tags so far, and what the bot said last.
pub(crate) struct Conversation {
    engine: Engine,
    clock_ms: i64,
    start_dedup: Duration,
    next_id: u64,
    answers: BTreeMap<String, (String, String, AnswerValue)>,
    /// Per scenario: answered?, last start (ms).
    markers: HashMap<ScenarioId, (bool, Option<i64>)>,
    pub(crate) tags: BTreeSet<String>,
    /// The user's fields, as the scenarios' `set` and `field` leave them.
    pub(crate) fields: BTreeMap<String, FieldValue>,
    open: Option<OpenQuestion>,
    /// Every question's choices, oldest first.
    questions: Vec<Vec<Choice>>,
    last_card: Option<String>,
    /// The arm taken at each split passed, by split node.
    arms: BTreeMap<String, String>,
    /// When the simulated user was first seen (a branch's `firstSeenFrom`).
    first_seen_ms: i64,
    /// When each notice was last sent (simulated ms), by its record id.
    notices: HashMap<String, i64>,
    /// The user's LINE display name, for `{name}`.
    name: Option<String>,
}

/// What one user action did.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// The bot's messages, as a person reads them, with a line such as
    /// `(after 1d)` where a wait passed.
    pub(crate) said: Vec<String>,
    /// The positions in `said` of the wait lines.
    pub(crate) waits: BTreeSet<usize>,
    /// The labels of the question asked in this turn, if any.
    pub(crate) choices: Vec<String>,
    /// Why nothing happened, when nothing did.
    pub(crate) note: Option<String>,
    /// The splits passed in this turn: node, arm and why that arm.
    pub(crate) splits: Vec<String>,
}

impl Conversation {
    pub(crate) fn new(engine: Engine, start_dedup: Duration) -> Self {
        Self {
            engine,
            // A fixed start: transcripts give the same results every run.
            clock_ms: 1_767_225_600_000,
            start_dedup,
            next_id: 0,
            answers: BTreeMap::new(),
            markers: HashMap::new(),
            tags: BTreeSet::new(),
            fields: BTreeMap::new(),
            open: None,
            questions: Vec::new(),
            last_card: None,
            arms: BTreeMap::new(),
            first_seen_ms: 1_767_225_600_000,
            notices: HashMap::new(),
            name: None,
        }
    }

    /// A notice (`answered_text`, `hint_text`), unless one went out within
    /// its interval; `None` then.
    fn notice(&mut self, notice: &crate::engine::NoticePlan) -> Option<Turn> {
        let id = notice.record_id(&simulated_user());
        if !notice.due(self.notices.get(&id).copied(), self.clock_ms) {
            return None;
        }
        self.notices.insert(id, self.clock_ms);
        Some(self.say(notice.messages()))
    }

    /// The arm taken at each split passed so far (its label) and the way each
    /// branch went (the node it led to), by node.
    pub(crate) fn arms(&self) -> &BTreeMap<String, String> {
        &self.arms
    }

    /// The user's tags, fields and display name before the conversation begins.
    pub(crate) fn given(&mut self, tags: Vec<String>, fields: Vec<(String, FieldValue)>, name: Option<String>) {
        self.tags.extend(tags);
        self.fields.extend(fields);
        self.name = name;
    }

    /// What placeholders render with now: the name given, the fields so far and
    /// each answer's label or value, as the service decides them.
    fn personal_values(&self) -> crate::values::PersonalValues {
        let mut values = crate::values::PersonalValues {
            name: self.name.clone(),
            fields: self
                .fields
                .iter()
                .map(|(name, value)| (name.clone(), value.as_text()))
                .collect(),
            answers: BTreeMap::new(),
        };
        for (scenario, node, value) in self.answers.values() {
            let loaded = ScenarioId::parse(scenario.clone())
                .ok()
                .and_then(|id| self.engine.scenario(&id));
            values
                .answers
                .insert(node.clone(), crate::engine::personal::answer_text(loaded, node, value));
        }
        values
    }

    /// The user's state as a branch reads it.
    fn state(&self) -> crate::scenario::UserState {
        let mut state = crate::scenario::UserState {
            tags: self.tags.clone(),
            fields: self.fields.clone(),
            first_seen_ms: Some(self.first_seen_ms),
            ..Default::default()
        };
        for (scenario, node, value) in self.answers.values() {
            if let (Ok(scenario), Ok(node)) = (ScenarioId::parse(scenario.clone()), NodeId::parse(node.clone())) {
                state.answers.insert((scenario, node), value.clone());
            }
        }
        state.answered.extend(
            self.markers
                .iter()
                .filter(|(_, (answered, _))| *answered)
                .map(|(scenario, _)| scenario.clone()),
        );
        state
    }

    /// Decides the branch `chain` stopped at, if any, as the worker would:
    /// the whole chain, with a line per branch saying which way it went.
    fn through_branches(
        &mut self,
        scenario: &ScenarioId,
        chain: Rendered,
        before: &UserChanges,
        state: crate::scenario::UserState,
        turn: &mut Turn,
    ) -> Rendered {
        if chain.branch.is_none() {
            return chain;
        }
        let Some(loaded) = self.engine.scenarios().get(scenario) else {
            return chain;
        };
        let user = simulated_user();
        let run = None;
        match self.engine.resolve_branches(
            loaded,
            chain.clone(),
            run,
            self.engine.who(scenario, &user),
            &state,
            before,
        ) {
            Ok((resolved, taken)) => {
                for way in taken {
                    self.arms.insert(way.branch.to_string(), way.next.to_string());
                    turn.splits.push(match way.arm {
                        Some(arm) => format!("branch {}: arm {arm} holds, on to {}", way.branch, way.next),
                        None => format!("branch {}: no arm holds, else {}", way.branch, way.next),
                    });
                }
                resolved
            }
            Err(problem) => {
                turn.note = Some(format!("the branch could not be decided: {problem}"));
                chain
            }
        }
    }

    /// Notes the split a chain passed, and why that arm.
    fn took(&mut self, arms: &Arms, turn: &mut Turn) {
        let Some(took) = &arms.took else {
            return;
        };
        let why = if self.engine.forced_variants().contains(&took.label) {
            "forced by --variant"
        } else {
            "by the hash of scenario, node and user"
        };
        turn.splits
            .push(format!("split {}: arm {}, {why}", took.node, took.label));
        self.arms.insert(took.node.to_string(), took.label.clone());
    }

    /// Answers recorded: node id to value, per scenario.
    pub(crate) fn answers(&self) -> Vec<(String, String, AnswerValue)> {
        self.answers.values().cloned().collect()
    }

    /// Lets time pass (one minute per action by default).
    pub(crate) fn advance(&mut self, by: Duration) {
        self.clock_ms = self
            .clock_ms
            .saturating_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }

    /// A scenario's start, as an operator's manual send delivers it (no guard).
    pub(crate) fn begin(&mut self, scenario: &ScenarioId, start: Rendered) -> Turn {
        let mut lines = Turn::default();
        let start = self.through_branches(scenario, start, &UserChanges::default(), self.state(), &mut lines);
        self.apply(&start.changes);
        let arms = Arms::of(&start);
        let mut turn = self.say(start.messages);
        absorb(&mut turn, lines);
        self.took(&arms, &mut turn);
        self.open_question(start.opens);
        let from = self.start_of(scenario);
        self.play_waits(scenario, from, &mut turn);
        turn
    }

    pub(crate) fn act(&mut self, action: &UserAction) -> Turn {
        self.advance(Duration::from_secs(60));
        let event = match self.event_for(action) {
            Ok(event) => event,
            Err(note) => {
                return Turn {
                    note: Some(note),
                    ..Turn::default()
                };
            }
        };
        let decision = match Event::parse(&event) {
            EventParse::Parsed(event) => self.engine.decide(&event),
            EventParse::Malformed { reason, .. } => {
                return Turn {
                    note: Some(format!("the event could not be read: {reason}")),
                    ..Turn::default()
                };
            }
        };
        self.carry_out(decision, action)
    }

    fn new_id(&mut self) -> String {
        self.next_id += 1;
        format!("{}", self.next_id)
    }

    fn event_for(&mut self, action: &UserAction) -> Result<Value, String> {
        let base = |kind: Value, id: String, at: i64| {
            let mut event = json!({
                "webhookEventId": format!("SIM{id:0>23}"),
                "timestamp": at,
                "mode": "active",
                "deliveryContext": {"isRedelivery": false},
                "source": {"type": "user", "userId": USER},
                "replyToken": format!("sim-{id}"),
            });
            if let (Some(event), Some(kind)) = (event.as_object_mut(), kind.as_object()) {
                event.extend(kind.clone());
            }
            event
        };
        let id = self.new_id();
        let at = self.clock_ms;
        let postback = |data: &str| json!({"type": "postback", "postback": {"data": data}});
        Ok(match action {
            UserAction::Follow => base(json!({"type": "follow"}), id.clone(), at),
            UserAction::Text(text) => base(
                json!({"type": "message", "message": {"type": "text", "id": id, "text": text}}),
                id.clone(),
                at,
            ),
            UserAction::TapCard => {
                let data = self.last_card.clone().ok_or("no card to tap yet")?;
                base(postback(&data), id.clone(), at)
            }
            UserAction::TapNumber(number) => {
                let choices = self.questions.last().ok_or("no question to answer yet")?;
                let choice = number
                    .checked_sub(1)
                    .and_then(|index| choices.get(index))
                    .ok_or_else(|| format!("the last question has {} choices", choices.len()))?;
                let data = choice.data.clone().ok_or("that is a date picker: use /date VALUE")?;
                base(postback(&data), id.clone(), at)
            }
            UserAction::TapLabel(label) => {
                let data = self
                    .questions
                    .iter()
                    .rev()
                    .flatten()
                    .find(|choice| &choice.label == label && choice.data.is_some())
                    .and_then(|choice| choice.data.clone())
                    .ok_or_else(|| format!("no button labelled {label:?} was sent"))?;
                base(postback(&data), id.clone(), at)
            }
            UserAction::Pick(value) => {
                let (data, mode) = self
                    .questions
                    .iter()
                    .rev()
                    .flatten()
                    .find_map(|choice| choice.picker.clone())
                    .ok_or("no date picker was sent")?;
                let mut event = base(postback(&data), id.clone(), at);
                event["postback"]["params"] = json!({ mode: value });
                event
            }
        })
    }

    fn carry_out(&mut self, decision: Decision, action: &UserAction) -> Turn {
        let text = match action {
            UserAction::Text(text) => Some(text.as_str()),
            _ => None,
        };
        match decision {
            Decision::Ignore(reason) => noted(format!("ignored: {reason}")),
            Decision::Unsend { .. } => noted("unsent".to_owned()),
            Decision::Hint(plan) => self
                .notice(&plan.notice)
                .unwrap_or_else(|| noted("hint already sent moments ago".to_owned())),
            Decision::Follow(plan) => match plan.start {
                Some(plan) => self.carry_out(Decision::Start(plan), action),
                None if plan.following => noted("followed".to_owned()),
                None => noted("unfollowed".to_owned()),
            },
            Decision::Answer(plan) => self.answer(plan, true),
            Decision::Start(plan) => {
                let from = self.trigger_entry(&plan.scenario, action);
                self.start(
                    plan.guard.map(|guard| guard.scenario),
                    &plan.scenario,
                    plan.run_start,
                    from,
                )
            }
            Decision::MenuTap(plan) => {
                self.tags.insert(crate::engine::RICH_MENU_TAP_TAG.to_owned());
                let from = self.start_of(&plan.start.scenario);
                self.start(
                    plan.start.guard.map(|guard| guard.scenario),
                    &plan.start.scenario,
                    plan.start.run_start,
                    from,
                )
            }
            Decision::CardTap(plan) => {
                self.tags.insert(crate::engine::FLEX_TAP_TAG.to_owned());
                let from = self.start_of(&plan.guard.scenario);
                self.start(
                    Some(plan.guard.scenario.clone()),
                    &plan.guard.scenario,
                    plan.run_start,
                    from,
                )
            }
            Decision::Text(plan) => {
                let typed = self.open.clone().and_then(|open| {
                    let user = plan.user.clone();
                    self.engine
                        .typed_answer(&user, &open, text.unwrap_or(""), self.clock_ms)
                        .ok()
                        .map(|decision| (open, decision))
                });
                match typed {
                    Some((_, TypedDecision::Answer(answer))) => self.answer(*answer, false),
                    Some((
                        open,
                        TypedDecision::Invalid {
                            reason,
                            messages,
                            attempts,
                        },
                    )) => {
                        self.open = Some(OpenQuestion { attempts, ..open });
                        let mut turn = self.say(messages);
                        turn.note = Some(format!("invalid answer: {reason}"));
                        turn
                    }
                    Some((open, TypedDecision::GiveUp { reason, then })) => {
                        self.open = None;
                        let mut lines = Turn::default();
                        let then = self.through_branches(
                            &open.question.scenario,
                            *then,
                            &UserChanges::default(),
                            self.state(),
                            &mut lines,
                        );
                        self.apply(&then.changes);
                        let arms = Arms::of(&then);
                        let mut turn = self.say(then.messages);
                        absorb(&mut turn, lines);
                        self.took(&arms, &mut turn);
                        self.open_question(then.opens);
                        let from = self.node_of(&open.question.scenario, &open.question.node, |node| match node {
                            Node::TextQuestion(question) => question.on_give_up.clone(),
                            _ => None,
                        });
                        self.play_waits(&open.question.scenario, from, &mut turn);
                        turn.note = Some(format!(
                            "invalid answer ({reason}); attempts used up, the question closed"
                        ));
                        turn
                    }
                    Some((open, TypedDecision::NotTyped))
                        if plan.keyword.is_none()
                            && let Some(hint) = self.engine.hint_for(&open, self.clock_ms) =>
                    {
                        self.notice(&hint)
                            .unwrap_or_else(|| noted("hint already sent moments ago".to_owned()))
                    }
                    Some((_, TypedDecision::NotOpen | TypedDecision::NotTyped)) | None => match plan.keyword {
                        Some(start) => {
                            let from = self.trigger_entry(&start.scenario, action);
                            self.start(
                                start.guard.map(|guard| guard.scenario),
                                &start.scenario,
                                start.run_start,
                                from,
                            )
                        }
                        None => noted("no question is open and no keyword matches".to_owned()),
                    },
                }
            }
        }
    }

    /// The node the trigger that `action` fires in `scenario` leads to.
    fn trigger_entry(&self, scenario: &ScenarioId, action: &UserAction) -> Option<NodeId> {
        let scenarios = self.engine.scenarios();
        let entry = match action {
            UserAction::Follow => scenarios.follow_trigger(),
            UserAction::Text(text) => scenarios.text_trigger(text),
            _ => None,
        }?;
        (&entry.scenario == scenario).then(|| entry.node.clone())
    }

    /// Where a manual send or a card tap enters `scenario`.
    fn start_of(&self, scenario: &ScenarioId) -> Option<NodeId> {
        self.engine.scenarios().get(scenario).map(|loaded| loaded.start.clone())
    }

    /// `link` of node `node` of `scenario`.
    fn node_of(&self, scenario: &ScenarioId, node: &NodeId, link: impl Fn(&Node) -> Option<NodeId>) -> Option<NodeId> {
        self.engine.scenarios().get(scenario)?.node(node).and_then(link)
    }

    /// Where the scenario goes after `plan`'s answer.
    fn answer_next(&self, plan: &AnswerPlan) -> Option<NodeId> {
        self.node_of(&plan.scenario, &plan.node, |node| match (node, &plan.value) {
            (Node::Survey(survey), AnswerValue::Text(choice)) => {
                survey.choice(choice).and_then(|choice| choice.next.clone())
            }
            (Node::TextQuestion(question), _) => question.next.clone(),
            (Node::DateQuestion(question), _) => question.next.clone(),
            _ => None,
        })
    }

    /// Plays on the waits the chain from `from` ends at, as if their time had
    /// passed: moves the clock to each step's due time and adds a line such as
    /// `(after 1d)`, then what the step sends, to `turn`.
    fn play_waits(&mut self, scenario: &ScenarioId, from: Option<NodeId>, turn: &mut Turn) {
        let engine = self.engine.clone();
        let Some(loaded) = engine.scenarios().get(scenario) else {
            return;
        };
        let mut from = from;
        for _ in 0..MAX_WAITS_PER_TURN {
            let Some(start) = from.take() else {
                return;
            };
            let user = simulated_user();
            let who = engine.who(scenario, &user);
            let Some(Node::Wait(wait)) = walk_nodes(loaded, &start, Some(who))
                .ok()
                .and_then(|nodes| nodes.last().copied())
            else {
                return;
            };
            if let Some(delay) = loaded.delay(&wait.id)
                && let Some(now) = DateTime::<Utc>::from_timestamp_millis(self.clock_ms)
            {
                let due = schedule::step_due(delay, loaded.timing(), now);
                self.clock_ms = self.clock_ms.max(due.timestamp_millis());
            }
            turn.waits.insert(turn.said.len());
            turn.said.push(wait_line(wait, loaded.delay(&wait.id)));
            let Ok(step) = crate::engine::render_from(loaded, &wait.next, Some(who)) else {
                return;
            };
            let step = self.through_branches(scenario, step, &UserChanges::default(), self.state(), turn);
            self.apply(&step.changes);
            let arms = Arms::of(&step);
            let spoken = self.say(step.messages);
            self.took(&arms, turn);
            turn.said.extend(spoken.said);
            if !spoken.choices.is_empty() {
                turn.choices = spoken.choices;
            }
            self.open_question(step.opens);
            from = Some(wait.next.clone());
        }
        turn.note = Some(format!("stopped after {MAX_WAITS_PER_TURN} waits in a row"));
    }

    fn start(
        &mut self,
        guard: Option<ScenarioId>,
        scenario: &ScenarioId,
        run_start: RunStart,
        from: Option<NodeId>,
    ) -> Turn {
        if let Some(guarded) = guard {
            let (answered, last) = self.markers.get(&guarded).copied().unwrap_or((false, None));
            match start_verdict(answered, last, self.clock_ms, self.start_dedup) {
                StartVerdict::Start => {
                    self.markers.insert(guarded, (answered, Some(self.clock_ms)));
                }
                StartVerdict::AlreadyAnswered => {
                    return noted(format!("not started: scenario {scenario} was answered (guard)"));
                }
                StartVerdict::RecentlyStarted => {
                    return noted(format!(
                        "not started: scenario {scenario} started moments ago (dedup window)"
                    ));
                }
            }
        }
        let mut lines = Turn::default();
        let chain = self.through_branches(
            scenario,
            run_start.chain(),
            &UserChanges::default(),
            self.state(),
            &mut lines,
        );
        let run_start = run_start.with_chain(chain);
        self.apply(&run_start.changes);
        let mut turn = self.say(run_start.messages);
        absorb(&mut turn, lines);
        self.took(&run_start.arms, &mut turn);
        self.open_question(run_start.opens);
        self.play_waits(scenario, from, &mut turn);
        turn
    }

    /// What a step does to the user's tags and fields.
    fn apply(&mut self, changes: &UserChanges) {
        self.tags.extend(changes.tag.iter().cloned());
        for tag in &changes.untag {
            self.tags.remove(tag);
        }
        self.fields
            .extend(changes.set.iter().map(|(name, value)| (name.clone(), value.clone())));
    }

    /// Records `plan` (guard 1). `tapped`: a button or a picker, not typed text
    /// (a tap on an answered question gets its `answered_text`).
    fn answer(&mut self, plan: AnswerPlan, tapped: bool) -> Turn {
        if tapped
            && plan.closes.is_some()
            && self.answers.contains_key(&plan.answer_id)
            && let Some(notice) = &plan.already
        {
            let mut turn = self.notice(notice).unwrap_or_default();
            turn.note = Some(format!("nothing recorded: question {} was answered before", plan.node));
            return turn;
        }
        if let Some(closes) = &plan.closes {
            let open = self.open.as_ref().is_some_and(|open| {
                open.question.scenario == closes.scenario
                    && open.question.node == closes.node
                    && self.engine.is_open_at(open, self.clock_ms)
            });
            if !open {
                return noted(format!("nothing recorded: question {} is not open", closes.node));
            }
        }
        if self.answers.contains_key(&plan.answer_id) {
            let note = format!("nothing recorded: question {} was answered before (guard 1)", plan.node);
            // A tap (not a typed answer) gets the question's answered_text.
            let mut turn = match plan.already.as_ref().filter(|_| tapped) {
                Some(notice) => self.notice(notice).unwrap_or_default(),
                None => Turn::default(),
            };
            turn.note = Some(note);
            return turn;
        }
        self.answers.insert(
            plan.answer_id.clone(),
            (plan.scenario.to_string(), plan.node.to_string(), plan.value.clone()),
        );
        // The follow-up's branch sees this answer (and its scenario answered).
        let mut lines = Turn::default();
        let mut state = self.state();
        state.answered.insert(plan.scenario.clone());
        let plan = match plan.follow_branch {
            Some(_) => {
                let chain = self.through_branches(
                    &plan.scenario,
                    plan.follow_chain(),
                    &plan.user_changes(),
                    state,
                    &mut lines,
                );
                plan.with_follow(chain)
            }
            None => plan,
        };
        self.apply(&plan.user_changes());
        let marker = self.markers.entry(plan.scenario.clone()).or_insert((false, None));
        marker.0 = true;
        if plan.closes.is_some() {
            self.open = None;
        }
        let from = self.answer_next(&plan);
        let mut turn = self.say(plan.follow_up);
        absorb(&mut turn, lines);
        self.took(&plan.follow_arms, &mut turn);
        self.open_question(plan.opens);
        self.play_waits(&plan.scenario, from, &mut turn);
        turn
    }

    /// Whether the last thing asked waits for typed text (then "35" is an
    /// answer, not a tap of choice 35).
    pub(crate) fn awaits_text(&self) -> bool {
        self.open.as_ref().is_some_and(|open| self.engine.takes_text(open))
    }

    fn open_question(&mut self, opens: Option<QuestionRef>) {
        if let Some(question) = opens {
            self.open = Some(OpenQuestion {
                question,
                attempts: 0,
                opened_at_ms: self.clock_ms,
                reminded_at_ms: None,
            });
        }
    }

    /// Renders messages as text, remembering what can be tapped.
    fn say(&mut self, mut messages: Vec<Message>) -> Turn {
        crate::engine::personal::render(&mut messages, Some(&self.personal_values()));
        let mut turn = Turn::default();
        for message in messages {
            match message {
                Message::Text { text, quick_reply } => {
                    turn.said.push(text);
                    if let Some(quick_reply) = quick_reply {
                        let choices: Vec<Choice> =
                            quick_reply.items.into_iter().map(|item| choice(item.action)).collect();
                        turn.choices = choices.iter().map(|choice| choice.label.clone()).collect();
                        self.questions.push(choices);
                    }
                }
                Message::Template {
                    template: Template::Buttons { title, text, actions },
                    ..
                } => {
                    turn.said.push(match title {
                        Some(title) => format!("{title}: {text}"),
                        None => text,
                    });
                    let choices: Vec<Choice> = actions.into_iter().map(choice).collect();
                    turn.choices = choices.iter().map(|choice| choice.label.clone()).collect();
                    self.questions.push(choices);
                }
                Message::Flex { alt_text, contents } => {
                    turn.said.push(format!("[card] {alt_text}"));
                    if let Action::Postback { data, .. } = contents.hero.action {
                        self.last_card = Some(data);
                    }
                }
            }
        }
        turn
    }
}

fn choice(action: Action) -> Choice {
    match action {
        Action::Postback { label, data, .. } => Choice {
            label: label.unwrap_or_default(),
            data: Some(data),
            picker: None,
        },
        Action::DatetimePicker { label, data, mode, .. } => Choice {
            label,
            data: None,
            picker: Some((data, mode)),
        },
    }
}

/// How a wait shows in a turn: `(after 1d)`, `(at 10:00)`, `(at 10:00, 2 days later)`.
fn wait_line(wait: &WaitNode, delay: Option<&Delay>) -> String {
    match (delay, &wait.after) {
        (_, Some(after)) => format!("(after {})", after.trim()),
        (Some(Delay::At { time, days: 0 }), _) => format!("(at {})", time.format("%H:%M")),
        (Some(Delay::At { time, days: 1 }), _) => format!("(at {}, 1 day later)", time.format("%H:%M")),
        (Some(Delay::At { time, days }), _) => format!("(at {}, {days} days later)", time.format("%H:%M")),
        _ => format!("(wait {})", wait.id),
    }
}

fn noted(note: String) -> Turn {
    Turn {
        note: Some(note),
        ..Turn::default()
    }
}

/// Puts the branch lines (and a note) of `lines` before what `turn` says.
fn absorb(turn: &mut Turn, lines: Turn) {
    let mut splits = lines.splits;
    splits.append(&mut turn.splits);
    turn.splits = splits;
    if lines.note.is_some() {
        turn.note = lines.note;
    }
}
