//! Branches, decided: a chain that reaches a `branch` node stops there when it
//! is rendered (the state it needs is not known at ingest); the pipeline reads
//! the user's state and asks [`Engine::resolve_branches`] to decide it and
//! render on, through any branch the chain reaches next. Pure.

use super::Engine;
use super::render::{Rendered, render_in_run};
use crate::ids::{NodeId, RunId, ScenarioId};
use crate::scenario::branch::UserState;
use crate::scenario::{LoadedScenario, Node, WalkError, Who};
use crate::values::UserChanges;
use std::collections::BTreeSet;

/// Branches one chain may pass (validation bounds chains far below this; the
/// cap keeps a bad stored plan from looping).
const MAX_BRANCHES_PER_CHAIN: usize = 20;

/// One branch decided: which way, for the simulator and the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decided {
    pub(crate) branch: NodeId,
    /// The arm's position (from 1); `None`: `else`.
    pub(crate) arm: Option<usize>,
    pub(crate) next: NodeId,
}

/// What the branches from a node read of a user: answers by (scenario, node),
/// and scenarios whose "answered" they check. Tags, fields and first seen come
/// with the user's record, which is always read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BranchReads {
    pub(crate) answers: BTreeSet<(ScenarioId, NodeId)>,
    pub(crate) scenarios: BTreeSet<ScenarioId>,
}

impl Engine {
    /// Decides the branch `prefix` stopped at (and any the chain reaches next)
    /// for a user in `state`, as of before the step: the chain's own changes
    /// so far (and `own`, such as the answer being recorded) are applied to it
    /// first. Returns the whole chain, rendered, and the ways taken.
    pub(crate) fn resolve_branches(
        &self,
        loaded: &LoadedScenario,
        mut chain: Rendered,
        run: Option<&RunId>,
        who: Who<'_>,
        state: &UserState,
        before: &UserChanges,
    ) -> Result<(Rendered, Vec<Decided>), WalkError> {
        let mut decided = Vec::new();
        let zone = loaded.timing().zone;
        let day_start = |day: &str| {
            chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d")
                .ok()
                .map(|day| super::campaign::start_of_day_ms(zone, day))
        };
        while let Some(at) = chain.branch.take() {
            if decided.len() >= MAX_BRANCHES_PER_CHAIN {
                return Err(WalkError::Loop(at));
            }
            let Some(Node::Branch(branch)) = loaded.node(&at) else {
                return Err(WalkError::UnknownNode(at));
            };
            let now = apply(state, &before.clone().then(&chain.changes));
            let taken = branch.decide(loaded.id(), &now, day_start);
            // The arm's own menu comes before what the nodes after it do.
            let arm_menu = taken
                .arm
                .and_then(|index| branch.arms.get(index))
                .and_then(|arm| arm.rich_menu.clone());
            if arm_menu.is_some() {
                chain.changes = std::mem::take(&mut chain.changes).then(&UserChanges {
                    rich_menu: arm_menu,
                    ..UserChanges::default()
                });
            }
            let rest = render_in_run(loaded, &taken.next, run, Some(who))?;
            decided.push(Decided {
                branch: at,
                arm: taken.arm.map(|index| index + 1),
                next: taken.next,
            });
            chain = chain.followed_by(rest);
        }
        Ok((chain, decided))
    }
}

/// `state` after `changes`.
fn apply(state: &UserState, changes: &UserChanges) -> UserState {
    let mut after = state.clone();
    after.tags.extend(changes.tag.iter().cloned());
    for tag in &changes.untag {
        after.tags.remove(tag);
    }
    after
        .fields
        .extend(changes.set.iter().map(|(name, value)| (name.clone(), value.clone())));
    after
}

impl LoadedScenario {
    /// Everything the branches reachable from `from` without waiting read.
    pub(crate) fn branch_reads(&self, from: &NodeId) -> BranchReads {
        let mut reads = BranchReads::default();
        let mut seen = BTreeSet::new();
        let mut queue = vec![from.clone()];
        while let Some(id) = queue.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            match self.node(&id) {
                Some(Node::Branch(branch)) => {
                    for arm in &branch.arms {
                        if let Some((scenario, node)) = arm.when.answers_read(self.id()) {
                            reads.answers.insert((scenario.clone(), node.clone()));
                        }
                        reads.scenarios.extend(arm.when.scenarios_read().cloned());
                    }
                    queue.extend(branch.targets().cloned());
                }
                Some(Node::Message(message)) => queue.extend(message.next.iter().cloned()),
                Some(Node::Split(split)) => queue.extend(split.arms.iter().map(|arm| arm.next.clone())),
                // Anything else ends the chain (it waits, asks or ends).
                _ => {}
            }
        }
        reads
    }
}
