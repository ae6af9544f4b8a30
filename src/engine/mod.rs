//! The scenario runtime's decisions: pure code that turns an event into a plan.
//! It reads scenarios and the event, nothing else. The engine decides once per
//! event, at ingest; the plan is stored with the event and the pipeline carries
//! it out against Firestore and LINE.

pub(crate) mod branch;
pub(crate) mod campaign;
pub(crate) mod crosstab;
pub(crate) mod hand_edit;
pub(crate) mod legacy;
mod notice;
pub(crate) mod personal;
mod render;
pub(crate) mod results;
pub(crate) mod rich_menus;
pub(crate) mod source_link;
mod start;
mod typed;

mod timers;

pub(crate) use notice::{HintPlan, NoticeKind, NoticePlan};
pub(crate) use render::{QuestionRef, Rendered, TimerPlan, Variant, render_from};
pub(crate) use start::{StartVerdict, start_verdict};
pub(crate) use timers::{DueTimer, Firing, FiringSeen, OpenRead, QuestionMove, Skip, ends_sibling, question_move};
pub(crate) use typed::{OpenQuestion, TypedDecision};

use crate::ids::{LineUserId, NodeId, RunId, ScenarioId, answer_id, scenario_marker_id};
use crate::line::messages::Message;
use crate::line::webhook::{Event, EventKind, MessageContent, Mode, PostbackContent, Source};
use crate::scenario::postback::{Postback, PostbackError};
use crate::scenario::typed::{AnswerValue, parse_picked};
use crate::scenario::{DateMode, Entry, LoadedScenario, Node, Scenarios, WalkError, Who};
use crate::values::{FieldValue, UserChanges};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The tag every Flex card tap adds, answered or not.
pub(crate) const FLEX_TAP_TAG: &str = "flex_image_tap";

/// The tag every tap on a rich menu's scenario area adds, started or not.
pub(crate) const RICH_MENU_TAP_TAG: &str = "rich_menu_tap";

#[derive(Debug, Clone, PartialEq)]
// One decision per event, made and moved once: a box would save no copy worth it.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Decision {
    Ignore(Ignored),
    /// Guard 1: a survey answer.
    Answer(AnswerPlan),
    /// Guard 2: a tap on a Flex card that starts a survey scenario.
    CardTap(CardTapPlan),
    /// Guard 3: a follow or text trigger.
    Start(StartPlan),
    /// A tap on a rich menu's scenario area: a start under guard 3's rules,
    /// tagged either way.
    MenuTap(MenuTapPlan),
    /// A text message while some scenario asks typed questions: the worker reads
    /// whether the user has one open (then the text answers it) before the
    /// keyword trigger, if any, may fire.
    Text(TextPlan),
    /// A follow or an unfollow: recorded on the user; an unfollow cancels the
    /// user's timers, a follow may start the follow trigger's scenario.
    Follow(FollowPlan),
    /// Text typed while a date picker with `hint_text` waits: the hint, once
    /// per interval.
    Hint(HintPlan),
    /// The user unsent a message: it must have no effect if it has had none yet.
    Unsend {
        message_id: String,
    },
}

/// Why an event has no effect. Logged, never an error: LINE gets 200.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Ignored {
    #[error("the channel is in standby mode; another module owns the chat")]
    Standby,
    #[error("the event has no user id")]
    NoUser,
    #[error("the user id is not acceptable")]
    InvalidUser,
    #[error("the event comes from a group or room; surveys run in one-to-one chats only")]
    NotOneToOne,
    #[error("event type not handled")]
    UnhandledType,
    #[error("message type not handled")]
    NotText,
    #[error("no trigger matches")]
    NoTrigger,
    #[error("postback data is not ours: {0}")]
    ForeignPostback(PostbackError),
    #[error("a tap on a test send's button: nothing is recorded")]
    TestSendTap,
    #[error("a rich menu switch: LINE switched the menu itself")]
    MenuSwitch,
    #[error("postback names an unknown scenario")]
    UnknownScenario,
    #[error("postback names an unknown node")]
    UnknownNode,
    #[error("postback names a node of another kind")]
    WrongNodeKind,
    #[error("postback names an unknown choice")]
    UnknownChoice,
    #[error("a date postback without the picked value")]
    NoPickedValue,
    #[error("the picked value is not in the question's format or range")]
    PickedOutOfRange,
    /// Validation at start-up rules this out; kept so that no input can panic.
    #[error("scenario {scenario} cannot be rendered: {problem}")]
    BrokenScenario { scenario: ScenarioId, problem: WalkError },
}

/// Record one answer; only if it is the first, send what follows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AnswerPlan {
    pub(crate) user: LineUserId,
    pub(crate) scenario: ScenarioId,
    pub(crate) scenario_version: u32,
    pub(crate) node: NodeId,
    /// The recorded value, typed: a choice's value, a number, a text or a date.
    pub(crate) value: AnswerValue,
    /// `choice`, `text`, `number`, `date`, `time` or `datetime`.
    pub(crate) value_type: String,
    pub(crate) tags: Vec<String>,
    pub(crate) answer_id: String,
    pub(crate) marker_id: String,
    pub(crate) follow_up: Vec<Message>,
    /// The text or date question the follow-up asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) opens: Option<QuestionRef>,
    /// For a typed or date answer: the open question it answers. It is recorded
    /// only while that question is still open, and closes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) closes: Option<QuestionRef>,
    /// The run the question was asked in (absent for buttons sent before runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<RunId>,
    /// What the follow-up schedules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) timers: Vec<TimerPlan>,
    /// The question node the follow-up asks (counted as sent with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asks: Option<NodeId>,
    /// What the answer does to the user beyond adding `tags`: the question's
    /// and the choice's `untag` and `set`, the answer's `field`, then the
    /// follow-up's nodes. Applied after `tags`, in the answer's commit.
    #[serde(default, skip_serializing_if = "UserChanges::is_empty")]
    pub(crate) changes: UserChanges,
    /// The arm of the split the answered question is behind (recorded on the
    /// answer and the marker, and counted by arm).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) variant: Option<String>,
    /// The arms the follow-up takes and asks in (see [`Arms`]).
    #[serde(default, skip_serializing_if = "Arms::is_empty")]
    pub(crate) follow_arms: Arms,
    /// The question's `answered_text`: sent instead of silence when the user
    /// had answered it before (a tap, not a typed answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) already: Option<NoticePlan>,
    /// The branch the follow-up stopped at: decided by the worker, with the
    /// user's state and this answer, before anything is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) follow_branch: Option<NodeId>,
}

/// Where a chain's messages stand in an A/B test: the split it passed (a run
/// of that arm, counted with its ledger entry) and the arm of the question it
/// asks (whose "sent" is counted by arm).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Arms {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) took: Option<Variant>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asks: Option<String>,
}

impl Arms {
    pub(crate) fn of(rendered: &Rendered) -> Self {
        Self {
            took: rendered.variant.clone(),
            asks: rendered.asks_variant.clone(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.took.is_none() && self.asks.is_none()
    }
}

impl AnswerPlan {
    /// The follow-up, as a chain (to decide a branch it stopped at). Its
    /// changes are the plan's after the answer's own.
    pub(crate) fn follow_chain(&self) -> Rendered {
        Rendered {
            messages: self.follow_up.clone(),
            opens: self.opens.clone(),
            timers: self.timers.clone(),
            asks: self.asks.clone(),
            changes: UserChanges::default(),
            variant: self.follow_arms.took.clone(),
            asks_variant: self.follow_arms.asks.clone(),
            branch: self.follow_branch.clone(),
        }
    }

    /// This answer, followed by `chain` (decided from [`Self::follow_chain`]).
    pub(crate) fn with_follow(&self, chain: Rendered) -> Self {
        Self {
            changes: self.changes.clone().then(&chain.changes),
            follow_arms: Arms::of(&chain),
            follow_branch: chain.branch,
            follow_up: chain.messages,
            opens: chain.opens,
            timers: chain.timers,
            asks: chain.asks,
            ..self.clone()
        }
    }

    /// Everything the answer's commit does to the user's record: `tags`, then
    /// `changes`. (Plans stored before `changes` existed carry only `tags`.)
    pub(crate) fn user_changes(&self) -> UserChanges {
        let mut changes = UserChanges::default();
        changes.add_tags(&self.tags);
        changes.then(&self.changes)
    }
}

/// "Has this user answered `scenario`, and when was it last started?" — one get
/// of the marker by id, and a commit conditional on what it read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScenarioGuard {
    pub(crate) scenario: ScenarioId,
    pub(crate) marker_id: String,
}

/// What every start carries, whether a trigger or a card tap began it: whom it
/// starts for, what it sends, and the run it begins. Flattened into the plans,
/// so stored plans keep their shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunStart {
    pub(crate) user: LineUserId,
    pub(crate) messages: Vec<Message>,
    /// The text or date question the messages ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) opens: Option<QuestionRef>,
    /// The run the start begins, and the scenario version it is pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<RunId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run_version: Option<u32>,
    /// What the messages schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) timers: Vec<TimerPlan>,
    /// The question node the messages ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asks: Option<NodeId>,
    /// What the messages' nodes do to the user's tags and fields.
    #[serde(default, skip_serializing_if = "UserChanges::is_empty")]
    pub(crate) changes: UserChanges,
    /// The split the messages passed and the arm of what they ask.
    #[serde(default, skip_serializing_if = "Arms::is_empty")]
    pub(crate) arms: Arms,
    /// The branch the messages stopped at: decided by the worker, with the
    /// user's state, before anything is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) branch: Option<NodeId>,
}

impl RunStart {
    /// What the start sends, as a chain (to decide a branch it stopped at).
    pub(crate) fn chain(&self) -> Rendered {
        Rendered {
            messages: self.messages.clone(),
            opens: self.opens.clone(),
            timers: self.timers.clone(),
            asks: self.asks.clone(),
            changes: self.changes.clone(),
            variant: self.arms.took.clone(),
            asks_variant: self.arms.asks.clone(),
            branch: self.branch.clone(),
        }
    }

    /// This start, sending `chain` instead.
    pub(crate) fn with_chain(&self, chain: Rendered) -> Self {
        Self {
            arms: Arms::of(&chain),
            branch: chain.branch,
            messages: chain.messages,
            opens: chain.opens,
            timers: chain.timers,
            asks: chain.asks,
            changes: chain.changes,
            ..self.clone()
        }
    }

    /// The start of a run for `user` that sends `rendered`.
    pub(crate) fn of(user: LineUserId, rendered: Rendered, run: RunId, version: u32) -> Self {
        Self {
            arms: Arms::of(&rendered),
            branch: rendered.branch.clone(),
            messages: rendered.messages,
            opens: rendered.opens,
            user,
            run: Some(run),
            run_version: Some(version),
            timers: rendered.timers,
            asks: rendered.asks,
            changes: rendered.changes,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CardTapPlan {
    #[serde(flatten)]
    pub(crate) run_start: RunStart,
    pub(crate) card_scenario: ScenarioId,
    pub(crate) card_node: NodeId,
    /// The survey scenario the card starts, unless the user answered it.
    pub(crate) guard: ScenarioGuard,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MenuTapPlan {
    pub(crate) start: StartPlan,
    /// The menu tapped: recorded on the user (`richMenuTaps`).
    pub(crate) menu: crate::ids::MenuId,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StartPlan {
    #[serde(flatten)]
    pub(crate) run_start: RunStart,
    pub(crate) scenario: ScenarioId,
    /// `None` for scenarios without a survey node: nothing to check, no read.
    pub(crate) guard: Option<ScenarioGuard>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FollowPlan {
    pub(crate) user: LineUserId,
    pub(crate) following: bool,
    /// The follow trigger's start, if a scenario has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) start: Option<StartPlan>,
}

/// A text message that may answer an open question. Its text is not here: it is
/// kept by message id until the event is processed (an unsend deletes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TextPlan {
    pub(crate) user: LineUserId,
    /// What the text starts when no question is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) keyword: Option<StartPlan>,
    /// The open question the text arrived to (read at ingest): it can answer
    /// that one only, never a question asked after it arrived (such as the one
    /// that the winner of a race of answers asked next). `None` when the read
    /// failed; then the question's opening time decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) arrived_to: Option<OpenQuestionSeen>,
}

/// One asking of one question: the same node asked again is another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OpenQuestionSeen {
    pub(crate) scenario: ScenarioId,
    pub(crate) node: NodeId,
    pub(crate) opened_at_ms: i64,
}

impl OpenQuestionSeen {
    pub(crate) fn of(open: &OpenQuestion) -> Self {
        Self {
            scenario: open.question.scenario.clone(),
            node: open.question.node.clone(),
            opened_at_ms: open.opened_at_ms,
        }
    }
}

/// Why a manual send cannot start a scenario.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ManualStartError {
    #[error("no such scenario")]
    UnknownScenario,
    #[error("the scenario cannot be rendered: {0}")]
    Broken(WalkError),
}

#[derive(Clone)]
pub(crate) struct Engine {
    scenarios: Arc<Scenarios>,
    /// An older version of one scenario, which this engine uses instead of the
    /// loaded one: a run started on it finishes on it.
    pinned: Option<Arc<LoadedScenario>>,
    /// Split arms forced by label (the simulator's `--variant`); empty in the
    /// service, where every arm comes from the hash.
    variants: Arc<[String]>,
}

impl Engine {
    pub(crate) fn new(scenarios: Arc<Scenarios>) -> Self {
        Self {
            scenarios,
            pinned: None,
            variants: Arc::from(Vec::new()),
        }
    }

    /// This engine, taking the split arms labelled `variants` wherever a split
    /// has one (the simulator's `--variant`).
    pub(crate) fn with_variants(self, variants: Vec<String>) -> Self {
        Self {
            variants: Arc::from(variants),
            ..self
        }
    }

    /// Who a walk for `user` in `scenario` is for.
    /// The split arms this engine forces by label (the simulator's `--variant`).
    pub(crate) fn forced_variants(&self) -> &[String] {
        &self.variants
    }

    pub(crate) fn who<'a>(&'a self, scenario: &'a ScenarioId, user: &'a LineUserId) -> Who<'a> {
        Who {
            scenario,
            user: user.as_str(),
            variants: &self.variants,
        }
    }

    /// This engine, deciding with `version` in place of the loaded version of
    /// the same scenario.
    pub(crate) fn pinned_to(&self, version: Arc<LoadedScenario>) -> Self {
        Self {
            scenarios: self.scenarios.clone(),
            pinned: Some(version),
            variants: self.variants.clone(),
        }
    }

    /// The scenario `id` as this engine knows it (the pinned version first).
    pub(crate) fn scenario(&self, id: &ScenarioId) -> Option<&LoadedScenario> {
        match &self.pinned {
            Some(pinned) if pinned.id() == id => Some(pinned),
            _ => self.scenarios.get(id),
        }
    }

    pub(crate) fn scenarios(&self) -> &Scenarios {
        &self.scenarios
    }

    pub(crate) fn decide(&self, event: &Event) -> Decision {
        match self.try_decide(event) {
            Ok(decision) => decision,
            Err(ignored) => Decision::Ignore(ignored),
        }
    }

    fn try_decide(&self, event: &Event) -> Result<Decision, Ignored> {
        // Privacy comes first: even in standby mode an unsent message must not act.
        if let EventKind::Unsend { unsend } = &event.kind {
            return Ok(Decision::Unsend {
                message_id: unsend.message_id.clone(),
            });
        }
        if event.mode != Mode::Active {
            return Err(Ignored::Standby);
        }
        let acts = matches!(
            event.kind,
            EventKind::Message { .. } | EventKind::Postback { .. } | EventKind::Follow | EventKind::Unfollow
        );
        if !acts {
            return Err(Ignored::UnhandledType);
        }
        let source = event.source.as_ref().ok_or(Ignored::NoUser)?;
        let user = source.user_id().ok_or(Ignored::NoUser)?;
        // A 1:1 survey must never be answered into a group chat: a reply goes
        // where the event came from.
        if !matches!(source, Source::User { .. }) {
            return Err(Ignored::NotOneToOne);
        }
        // Only a LINE user id (`U` + 32 lower-case hex) becomes part of a
        // document path or id: anything else gets no effect and no document.
        let user = LineUserId::parse_line_shaped(user).map_err(|_| Ignored::InvalidUser)?;
        // A start begins a run; its id comes from the event, so a redelivery of
        // the event begins the same run.
        let run = RunId::begun_by(&event.webhook_event_id);
        match &event.kind {
            EventKind::Follow => {
                let start = self
                    .scenarios
                    .follow_trigger()
                    .map(|entry| self.start(user.clone(), entry, run))
                    .transpose()?;
                Ok(Decision::Follow(FollowPlan {
                    user,
                    following: true,
                    start,
                }))
            }
            EventKind::Unfollow => Ok(Decision::Follow(FollowPlan {
                user,
                following: false,
                start: None,
            })),
            EventKind::Message {
                message: MessageContent::Text { text, .. },
            } => {
                let entry = self.scenarios.text_trigger(text);
                if self.scenarios.takes_typed_answers() {
                    let keyword = entry.map(|entry| self.start(user.clone(), entry, run)).transpose()?;
                    return Ok(Decision::Text(TextPlan {
                        user,
                        keyword,
                        arrived_to: None,
                    }));
                }
                let entry = entry.ok_or(Ignored::NoTrigger)?;
                Ok(Decision::Start(self.start(user, entry, run)?))
            }
            EventKind::Message { .. } => Err(Ignored::NotText),
            EventKind::Postback { postback: content } => {
                let (postback, asked_in) =
                    Postback::decode_with_run(&content.data).map_err(Ignored::ForeignPostback)?;
                if asked_in.as_ref().is_some_and(|asked| asked.run.is_test_send_run()) {
                    return Err(Ignored::TestSendTap);
                }
                self.postback(user, postback, asked_in, run, content)
            }
            _ => Err(Ignored::UnhandledType),
        }
    }

    fn start(&self, user: LineUserId, entry: &Entry, run: RunId) -> Result<StartPlan, Ignored> {
        let scenario = self.loaded(&entry.scenario)?;
        // A scenario with timers is guarded too: its marker names the current
        // run, which is how a timer of a replaced run knows to send nothing.
        let guard = (scenario.has_survey || scenario.has_timers()).then(|| ScenarioGuard {
            scenario: entry.scenario.clone(),
            marker_id: scenario_marker_id(&entry.scenario, &user),
        });
        let rendered = rendered_in(scenario, &entry.node, Some(&run), self.who(&entry.scenario, &user))?;
        Ok(StartPlan {
            run_start: RunStart::of(user, rendered, run, scenario.scenario.version),
            scenario: entry.scenario.clone(),
            guard,
        })
    }

    /// A friend-add source's scenario, from its start, for `user`: a start
    /// under guard 3's rules (it does not restart a survey the user
    /// answered), in the run `begun_by` names (the same for every queuing of
    /// it, so a repeat begins the same run).
    pub(crate) fn source_start(
        &self,
        scenario: &ScenarioId,
        user: LineUserId,
        begun_by: &str,
    ) -> Result<StartPlan, Ignored> {
        let loaded = self.loaded(scenario)?;
        let entry = Entry {
            scenario: scenario.clone(),
            node: loaded.start.clone(),
        };
        self.start(user, &entry, RunId::begun_by(begun_by))
    }

    /// The messages an operator's manual send delivers: the scenario from its start,
    /// with no guard at all (re-sending is the point of a manual send).
    /// A split on the way takes `user`'s arm.
    pub(crate) fn manual_start(&self, id: &ScenarioId, user: &LineUserId) -> Result<Rendered, ManualStartError> {
        let scenario = self.scenario(id).ok_or(ManualStartError::UnknownScenario)?;
        render_from(scenario, &scenario.start, Some(self.who(id, user))).map_err(ManualStartError::Broken)
    }

    /// Whether a manual send of `scenario` can start: it exists (loading
    /// checked every way from its start).
    pub(crate) fn can_start(&self, id: &ScenarioId) -> Result<(), ManualStartError> {
        self.scenario(id).map(|_| ()).ok_or(ManualStartError::UnknownScenario)
    }

    /// A manual send's messages to one user, in the run it begins, with the
    /// scenario version the run is pinned to.
    pub(crate) fn manual_start_in_run(
        &self,
        id: &ScenarioId,
        run: &RunId,
        user: &LineUserId,
    ) -> Result<(Rendered, u32), ManualStartError> {
        let scenario = self.scenario(id).ok_or(ManualStartError::UnknownScenario)?;
        let rendered = render::render_in_run(scenario, &scenario.start, Some(run), Some(self.who(id, user)))
            .map_err(ManualStartError::Broken)?;
        Ok((rendered, scenario.scenario.version))
    }

    /// The version a new run of `scenario` is pinned to.
    pub(crate) fn current_version(&self, scenario: &ScenarioId) -> Option<u32> {
        self.scenario(scenario).map(|loaded| loaded.scenario.version)
    }

    fn loaded(&self, id: &ScenarioId) -> Result<&LoadedScenario, Ignored> {
        self.scenario(id).ok_or(Ignored::UnknownScenario)
    }

    fn postback(
        &self,
        user: LineUserId,
        postback: Postback,
        asked: Option<crate::scenario::postback::Asked>,
        run: RunId,
        content: &PostbackContent,
    ) -> Result<Decision, Ignored> {
        let asked_in = asked.map(|asked| asked.run);
        match postback {
            Postback::Answer { scenario, node, choice } => {
                let loaded = self.loaded(&scenario)?;
                let Node::Survey(survey) = loaded.node(&node).ok_or(Ignored::UnknownNode)? else {
                    return Err(Ignored::WrongNodeKind);
                };
                let picked = survey.choice(&choice).ok_or(Ignored::UnknownChoice)?;
                let answer = Answering {
                    variants: &self.variants,
                    loaded,
                    node,
                    user,
                    value: AnswerValue::Text(choice),
                    value_type: "choice",
                    choice: Some(picked.actions()),
                    next: picked.next.as_ref(),
                    closes: None,
                    run: asked_in,
                };
                Ok(Decision::Answer(answer.plan()?))
            }
            Postback::Date { scenario, node } => {
                let loaded = self.loaded(&scenario)?;
                let Node::DateQuestion(question) = loaded.node(&node).ok_or(Ignored::UnknownNode)? else {
                    return Err(Ignored::WrongNodeKind);
                };
                let params = content.params.as_ref().ok_or(Ignored::NoPickedValue)?;
                let (raw, value_type) = match question.mode {
                    DateMode::Date => (params.date.as_deref(), "date"),
                    DateMode::Time => (params.time.as_deref(), "time"),
                    DateMode::Datetime => (params.datetime.as_deref(), "datetime"),
                };
                let picked = parse_picked(question.mode, raw.ok_or(Ignored::NoPickedValue)?)
                    .map_err(|_| Ignored::PickedOutOfRange)?;
                let bound = |bound: &Option<String>| bound.as_deref().and_then(|b| parse_picked(question.mode, b).ok());
                let below = bound(&question.min).is_some_and(|min| picked < min);
                let above = bound(&question.max).is_some_and(|max| picked > max);
                if below || above {
                    return Err(Ignored::PickedOutOfRange);
                }
                let closes = QuestionRef {
                    scenario: scenario.clone(),
                    version: loaded.scenario.version,
                    node: node.clone(),
                    run: asked_in.clone(),
                };
                let answer = Answering {
                    variants: &self.variants,
                    loaded,
                    node,
                    user,
                    value: AnswerValue::Text(picked.iso()),
                    value_type,
                    choice: None,
                    next: question.next.as_ref(),
                    closes: Some(closes),
                    run: asked_in,
                };
                Ok(Decision::Answer(answer.plan()?))
            }
            Postback::MenuTap { scenario, menu } => {
                let node = self.loaded(&scenario)?.start.clone();
                let entry = Entry { scenario, node };
                let mut start = self.start(user, &entry, run)?;
                // A menu tap is always guarded: even a scenario without a
                // survey starts once for a double tap (start dedup).
                start.guard.get_or_insert_with(|| ScenarioGuard {
                    scenario: entry.scenario.clone(),
                    marker_id: scenario_marker_id(&entry.scenario, &start.run_start.user),
                });
                Ok(Decision::MenuTap(MenuTapPlan { start, menu }))
            }
            Postback::MenuSwitch { .. } => Err(Ignored::MenuSwitch),
            Postback::CardTap { scenario, node } => {
                let loaded = self.loaded(&scenario)?;
                let Node::FlexImage(card) = loaded.node(&node).ok_or(Ignored::UnknownNode)? else {
                    return Err(Ignored::WrongNodeKind);
                };
                let target = self.loaded(&card.starts)?;
                let rendered = rendered_in(target, &target.start, Some(&run), self.who(&card.starts, &user))?;
                Ok(Decision::CardTap(CardTapPlan {
                    guard: ScenarioGuard {
                        scenario: card.starts.clone(),
                        marker_id: scenario_marker_id(&card.starts, &user),
                    },
                    run_start: RunStart::of(user, rendered, run, target.scenario.version),
                    card_scenario: scenario,
                    card_node: node,
                }))
            }
        }
    }
}

/// One answer to plan, of any question kind.
struct Answering<'a> {
    loaded: &'a LoadedScenario,
    node: NodeId,
    user: LineUserId,
    value: AnswerValue,
    value_type: &'static str,
    /// The choice tapped (for a choice question): its tags, untag and set come
    /// after the question's.
    choice: Option<crate::scenario::Actions<'a>>,
    next: Option<&'a NodeId>,
    closes: Option<QuestionRef>,
    /// The run the question was asked in: the follow-up continues it.
    run: Option<RunId>,
    /// Split arms forced by label (see [`Engine::with_variants`]).
    variants: &'a [String],
}

impl Answering<'_> {
    fn plan(self) -> Result<AnswerPlan, Ignored> {
        let follow_up = match self.next {
            Some(next) => rendered_in(
                self.loaded,
                next,
                self.run.as_ref(),
                Who {
                    scenario: self.loaded.id(),
                    user: self.user.as_str(),
                    variants: self.variants,
                },
            )?,
            None => Rendered::default(),
        };
        let scenario = self.loaded.id().clone();
        // The answer's own tags (recorded on the answer) come first; what it
        // removes and sets, and what the follow-up does, apply after them.
        let question = self.loaded.node(&self.node).and_then(Node::answer_actions);
        let mut own = UserChanges::default();
        if let Some((actions, _)) = &question {
            actions.apply_to(&mut own);
        }
        if let Some(choice) = &self.choice {
            choice.apply_to(&mut own);
        }
        if let Some((_, Some(field))) = &question {
            own.set_fields([(&(*field).to_owned(), &FieldValue::from(&self.value))]);
        }
        let mut tags = own.tag.clone();
        if let Some(tag) = &self.loaded.answer_tag
            && !tags.contains(tag)
        {
            tags.push(tag.clone());
        }
        let changes = UserChanges { tag: Vec::new(), ..own }.then(&follow_up.changes);
        let who = Who {
            scenario: self.loaded.id(),
            user: self.user.as_str(),
            variants: self.variants,
        };
        let variant = self
            .loaded
            .variant_of(&self.node, who)
            .map(|(_, label)| label.to_owned());
        let already = self
            .loaded
            .node(&self.node)
            .and_then(Node::answered_notice)
            .map(|notice| NoticePlan::of(NoticeKind::Answered, self.loaded.id(), &self.node, notice));
        Ok(AnswerPlan {
            follow_branch: follow_up.branch.clone(),
            already,
            variant,
            follow_arms: Arms::of(&follow_up),
            answer_id: answer_id(&scenario, &self.node, &self.user),
            marker_id: scenario_marker_id(&scenario, &self.user),
            scenario_version: self.loaded.scenario.version,
            value: self.value,
            value_type: self.value_type.to_owned(),
            tags,
            follow_up: follow_up.messages,
            opens: follow_up.opens,
            closes: self.closes,
            run: self.run,
            timers: follow_up.timers,
            asks: follow_up.asks,
            changes,
            user: self.user,
            scenario,
            node: self.node,
        })
    }
}

fn rendered_in(
    scenario: &LoadedScenario,
    from: &NodeId,
    run: Option<&RunId>,
    who: Who<'_>,
) -> Result<Rendered, Ignored> {
    render::render_in_run(scenario, from, run, Some(who)).map_err(|problem| Ignored::BrokenScenario {
        scenario: scenario.id().clone(),
        problem,
    })
}

#[cfg(test)]
mod tests;
