//! Branches, where the user's state is read: a chain that stopped at a branch
//! (see `Engine::resolve_branches`) is decided here, from one read of the
//! user's record and the answers and markers its conditions name, and the
//! commit that carries the step is made conditional on the record as read
//! (every step that changes what a branch reads writes `users/{id}` too: an
//! answer, a tag, a field, a follow). A conflict makes the step read and
//! decide again; it never acts on a state that changed under it.

use crate::engine::Engine;
use crate::engine::Rendered;
use crate::ids::{LineUserId, NodeId, RunId, ScenarioId, answer_id, scenario_marker_id};
use crate::scenario::UserState;
use crate::scenario::typed::AnswerValue;
use crate::store::{Expect, Store};
use crate::values::UserChanges;

/// A chain decided through its branches, and what its commit must expect of
/// `users/{id}` (`None`: no branch, nothing read).
pub(crate) struct Decided {
    pub(crate) chain: Rendered,
    pub(crate) user_read: Option<Expect>,
    /// What the branch read (with the answers the scenario's placeholders
    /// name): personal text renders from it without reading again.
    pub(crate) read: Option<PriorRead>,
}

/// The user's state as one read of the step found it.
#[derive(Debug, Clone)]
pub(crate) struct PriorRead {
    pub(crate) record: Option<crate::store::UserRecord>,
    pub(crate) expect: Expect,
    /// Each answer read, by answer id (`None`: not answered).
    pub(crate) answers: std::collections::HashMap<String, Option<AnswerValue>>,
}

/// What the step itself records before its chain: an answer being recorded
/// counts as recorded for the branches after it.
#[derive(Default)]
pub(crate) struct StepSoFar<'a> {
    pub(crate) changes: UserChanges,
    pub(crate) answer: Option<(&'a ScenarioId, &'a NodeId, &'a AnswerValue)>,
    /// The step's read of the user, when a branch made one.
    pub(crate) read: Option<PriorRead>,
}

impl super::worker::EventWorker {
    /// An answer's follow-up decided through the branch it stopped at, if any:
    /// the plan to carry out instead, and what its commit must expect of the
    /// user's record. The answer itself counts as recorded for the branches.
    pub(super) async fn decide_follow_up(
        &self,
        plan: &crate::engine::AnswerPlan,
    ) -> Result<(Option<crate::engine::AnswerPlan>, Option<Expect>, Option<PriorRead>), super::PipelineError> {
        if plan.follow_branch.is_none() {
            return Ok((None, None, None));
        }
        let engine = self.versions.engine_for(&plan.scenario, plan.scenario_version).await?;
        let step = StepSoFar {
            changes: plan.user_changes(),
            answer: Some((&plan.scenario, &plan.node, &plan.value)),
            read: None,
        };
        let decided = decide(
            &self.store,
            &engine,
            &plan.scenario,
            &plan.user,
            plan.follow_chain(),
            plan.run.as_ref(),
            step,
        )
        .await?;
        Ok((Some(plan.with_follow(decided.chain)), decided.user_read, decided.read))
    }
}

/// Decides the branch `chain` stopped at, if any, for `user` in `scenario`.
/// `Err` when the state cannot be read, or the chain cannot be rendered on
/// (a scenario changed under a stored plan: a defect to look at, not to send).
pub(crate) async fn decide(
    store: &Store,
    engine: &Engine,
    scenario: &ScenarioId,
    user: &LineUserId,
    chain: Rendered,
    run: Option<&RunId>,
    step: StepSoFar<'_>,
) -> Result<Decided, super::PipelineError> {
    let Some(at) = chain.branch.clone() else {
        return Ok(Decided {
            chain,
            user_read: None,
            read: None,
        });
    };
    let Some(loaded) = engine.scenario(scenario) else {
        return Err(super::PipelineError::Defect(format!(
            "scenario {scenario} is not loaded"
        )));
    };
    let reads = loaded.branch_reads(&at);
    let mut answers: Vec<(ScenarioId, NodeId)> = reads.answers.iter().cloned().collect();
    // The answers the scenario's texts name, in the same read: the chain's
    // personal text renders from it.
    for node in &loaded.placeholder_answers {
        let key = (scenario.clone(), node.clone());
        if !answers.contains(&key) {
            answers.push(key);
        }
    }
    let scenarios: Vec<ScenarioId> = reads.scenarios.iter().cloned().collect();
    let answer_ids: Vec<String> = answers.iter().map(|(s, n)| answer_id(s, n, user)).collect();
    let marker_ids: Vec<String> = scenarios.iter().map(|s| scenario_marker_id(s, user)).collect();
    let read = store.user_state(user.as_str(), &answer_ids, &marker_ids).await?;
    let prior = PriorRead {
        record: read.record.clone(),
        expect: read.expect,
        answers: answer_ids.iter().cloned().zip(read.answers.iter().cloned()).collect(),
    };
    let mut state = UserState::default();
    if let Some(record) = &read.record {
        state.tags = record.tags.iter().cloned().collect();
        state.fields = record.fields.clone();
        state.first_seen_ms = record
            .first_seen_ms
            .or(record.followed_at.map(firestore::jiff::Timestamp::as_millisecond));
    }
    for (key, value) in answers.into_iter().zip(read.answers) {
        if let Some(value) = value {
            state.answers.insert(key, value);
        }
    }
    for (scenario, answered) in scenarios.into_iter().zip(read.answered) {
        if answered {
            state.answered.insert(scenario);
        }
    }
    if let Some((scenario, node, value)) = step.answer {
        state.answers.insert((scenario.clone(), node.clone()), value.clone());
        state.answered.insert(scenario.clone());
    }
    let who = engine.who(scenario, user);
    let (chain, taken) = engine
        .resolve_branches(loaded, chain, run, who, &state, &step.changes)
        .map_err(|problem| {
            super::PipelineError::Defect(format!("the chain after branch {at} cannot be rendered: {problem}"))
        })?;
    for way in &taken {
        tracing::info!(
            branch = %way.branch,
            arm = way.arm.map_or_else(|| "else".to_owned(), |arm| arm.to_string()),
            next = %way.next,
            "branch decided"
        );
    }
    Ok(Decided {
        chain,
        user_read: Some(read.expect),
        read: Some(prior),
    })
}
