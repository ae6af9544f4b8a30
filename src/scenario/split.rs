//! `split` nodes (A/B tests): which arm a user takes, and which split a
//! node's answers belong to.
//!
//! The arm is a pure function of (scenario, node, user): the SHA-256 of the
//! three, read as a point in [0, 1), falls in the arm whose share of the total
//! weight covers it. The same user lands in the same arm on every delivery,
//! instance and version; changing the weights moves only the users between the
//! old and the new boundaries.

use super::Node;
use crate::ids::{NodeId, ScenarioId};
use schemars::JsonSchema;
use serde::Deserialize;
use sha2::Digest;
use std::collections::{HashMap, HashSet};

/// The fewest and most arms a split may have.
pub const MIN_ARMS: usize = 2;
pub const MAX_ARMS: usize = 10;
/// The longest arm label, in characters as a person counts them.
pub const MAX_LABEL_CHARS: usize = 20;
/// The longest arm label in bytes (combining marks make one character long):
/// labels are Firestore field-path segments, which have a byte limit.
pub const MAX_LABEL_BYTES: usize = 64;
/// The largest weight of one arm (weights are relative; this keeps sums exact).
pub const MAX_WEIGHT: u32 = 1_000_000;

/// Sends each user down one of its arms, by weight (an A/B test).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SplitNode {
    pub id: NodeId,
    /// 2 to 10 arms; a user's arm never changes (see the README).
    pub arms: Vec<SplitArm>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SplitArm {
    /// The variant's name, recorded with the run and its answers (unique in
    /// the node, at most 20 characters).
    pub label: String,
    /// A positive integer: the arm's share is its weight over the sum.
    pub weight: u32,
    pub next: NodeId,
}

impl SplitNode {
    /// The index of the arm `user` takes in `scenario`. A split whose weights
    /// sum to zero (refused by validation) sends everyone down the first arm.
    pub fn arm_index(&self, scenario: &ScenarioId, user: &str) -> usize {
        let total: u128 = self.arms.iter().map(|arm| u128::from(arm.weight)).sum();
        if total == 0 {
            return 0;
        }
        let digest = sha2::Sha256::new()
            .chain_update(scenario.as_str().as_bytes())
            .chain_update([0])
            .chain_update(self.id.as_str().as_bytes())
            .chain_update([0])
            .chain_update(user.as_bytes())
            .finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        // floor(point * total), with point = hash / 2^64 in [0, 1).
        let scaled = (u128::from(u64::from_be_bytes(first)) * total) >> 64;
        let mut boundary = 0u128;
        for (index, arm) in self.arms.iter().enumerate() {
            boundary += u128::from(arm.weight);
            if scaled < boundary {
                return index;
            }
        }
        self.arms.len().saturating_sub(1)
    }

    /// The index of the arm labelled `label`, if any.
    pub fn arm_labelled(&self, label: &str) -> Option<usize> {
        self.arms.iter().position(|arm| arm.label == label)
    }
}

/// Who a walk is for: the user whose arm each split picks, and arms forced by
/// label (the simulator's `--variant`).
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    pub scenario: &'a ScenarioId,
    pub user: &'a str,
    pub variants: &'a [String],
}

impl Who<'_> {
    /// The arm this user takes at `split`.
    pub fn arm(&self, split: &SplitNode) -> usize {
        self.variants
            .iter()
            .find_map(|label| split.arm_labelled(label))
            .unwrap_or_else(|| split.arm_index(self.scenario, self.user))
    }
}

/// For each node only reachable through a split, that split: the node's
/// answers and "sent" counts belong to the arm the user took there. Errors
/// name a node reachable both through a split and without one, or through two
/// splits (its answers could not say which variant they belong to).
pub(super) fn variant_splits<'a>(
    nodes: &'a [Node],
    entries: &[&'a NodeId],
) -> Result<HashMap<NodeId, NodeId>, (NodeId, String)> {
    let by_id: HashMap<&NodeId, &Node> = nodes.iter().map(|node| (node.id(), node)).collect();
    // Everything reachable from an entry without passing a split.
    let plain = reachable(&by_id, entries.iter().copied(), true);
    let mut owner: HashMap<NodeId, NodeId> = HashMap::new();
    for node in nodes {
        let Node::Split(split) = node else { continue };
        let behind = reachable(&by_id, split.arms.iter().map(|arm| &arm.next), false);
        for id in behind {
            if id == &split.id {
                return Err((split.id.clone(), "the split can reach itself again".to_owned()));
            }
            if plain.contains(id) {
                return Err((
                    id.clone(),
                    format!(
                        "the node is reached both through split {:?} and without it; its answers could not say which variant they belong to",
                        split.id.as_str()
                    ),
                ));
            }
            if let Some(Node::Split(other)) = by_id.get(id) {
                return Err((
                    other.id.clone(),
                    format!(
                        "split {:?} is reached through split {:?}; a run takes at most one split",
                        other.id.as_str(),
                        split.id.as_str()
                    ),
                ));
            }
            if let Some(previous) = owner.insert(id.clone(), split.id.clone())
                && previous != split.id
            {
                return Err((
                    id.clone(),
                    format!(
                        "the node is reached through splits {:?} and {:?}; a run takes at most one split",
                        previous.as_str(),
                        split.id.as_str()
                    ),
                ));
            }
        }
    }
    Ok(owner)
}

/// The nodes reachable from `from` (included); with `stop_at_splits`, a
/// split is reached but not passed.
fn reachable<'a>(
    by_id: &HashMap<&'a NodeId, &'a Node>,
    from: impl Iterator<Item = &'a NodeId>,
    stop_at_splits: bool,
) -> HashSet<&'a NodeId> {
    let mut seen = HashSet::new();
    let mut queue: Vec<&NodeId> = from.collect();
    while let Some(id) = queue.pop() {
        let Some(node) = by_id.get(id) else { continue };
        if !seen.insert(node.id()) {
            continue;
        }
        if stop_at_splits && matches!(node, Node::Split(_)) {
            continue;
        }
        queue.extend(super::validate::entry_targets(node));
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(weights: &[u32]) -> SplitNode {
        SplitNode {
            id: NodeId::parse("ab").expect("valid id"),
            arms: weights
                .iter()
                .enumerate()
                .map(|(index, weight)| SplitArm {
                    label: format!("arm{index}"),
                    weight: *weight,
                    next: NodeId::parse("x").expect("valid id"),
                })
                .collect(),
        }
    }

    fn shares(node: &SplitNode, users: usize) -> Vec<f64> {
        let scenario = ScenarioId::parse("survey").expect("valid id");
        let mut counts = vec![0usize; node.arms.len()];
        for user in 0..users {
            counts[node.arm_index(&scenario, &format!("U{user:032x}"))] += 1;
        }
        counts
            .iter()
            .map(|count| *count as f64 * 100.0 / users as f64)
            .collect()
    }

    #[test]
    fn over_ten_thousand_users_the_shares_are_within_two_points_of_the_weights() {
        let cases: [&[u32]; 4] = [&[50, 50], &[90, 10], &[1, 1, 1], &[70, 20, 5, 5]];
        for weights in cases {
            let total: u32 = weights.iter().sum();
            let node = split(weights);
            for (share, weight) in shares(&node, 10_000).iter().zip(weights) {
                let expected = f64::from(*weight) * 100.0 / f64::from(total);
                assert!((share - expected).abs() <= 2.0, "{weights:?}: {share} vs {expected}");
            }
        }
    }

    #[test]
    fn the_arm_depends_on_scenario_node_and_user_only_and_weights_move_only_the_boundary() {
        let scenario = ScenarioId::parse("survey").expect("valid id");
        let other = ScenarioId::parse("other").expect("valid id");
        let even = split(&[50, 50]);
        let skewed = split(&[60, 40]);
        let mut moved = 0;
        let mut differs_by_scenario = 0;
        for user in 0..2_000 {
            let user = format!("U{user:032x}");
            let before = even.arm_index(&scenario, &user);
            assert_eq!(before, even.arm_index(&scenario, &user), "stable");
            let after = skewed.arm_index(&scenario, &user);
            // Only users of B can move to A when A's share grows.
            assert!(!(before == 0 && after == 1), "{user} left arm A");
            moved += usize::from(before != after);
            differs_by_scenario += usize::from(before != even.arm_index(&other, &user));
        }
        // About 10% move (the band between 50 and 60), and a different scenario
        // shuffles about half.
        assert!((100..=300).contains(&moved), "{moved} moved");
        assert!((800..=1200).contains(&differs_by_scenario), "{differs_by_scenario}");
    }

    #[test]
    fn a_forced_label_wins_over_the_hash() {
        let scenario = ScenarioId::parse("survey").expect("valid id");
        let node = split(&[50, 50]);
        let variants = ["arm1".to_owned()];
        for user in ["U1", "U2", "U3", "U4"] {
            let who = Who {
                scenario: &scenario,
                user,
                variants: &variants,
            };
            assert_eq!(who.arm(&node), 1);
        }
    }
}
