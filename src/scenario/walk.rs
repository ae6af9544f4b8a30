//! Following `next` links from a node to the point where the scenario waits for
//! the user. Shared by validation (to reject loops and over-long chains at start)
//! and by the engine (to build the messages to send).

use super::{Node, SplitNode};
use crate::ids::NodeId;
use crate::line::messages::MAX_MESSAGES_PER_REQUEST;
use std::collections::HashSet;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error("`next` names node \"{0}\", which does not exist")]
    UnknownNode(NodeId),
    #[error("`next` leads to trigger node \"{0}\"; triggers can only start a scenario")]
    IntoTrigger(NodeId),
    #[error("the message chain loops back to node \"{0}\"")]
    Loop(NodeId),
    #[error("the message chain would send {0} messages at once; LINE allows at most {MAX_MESSAGES_PER_REQUEST}")]
    TooManyMessages(usize),
    #[error("the chain reaches split \"{0}\", which needs a user to pick an arm for")]
    SplitWithoutUser(NodeId),
    #[error("the chain from here has more than {MAX_PATHS} ways through its splits")]
    TooManyPaths,
}

/// The most distinct paths [`walk_every_way`] follows from one entry point.
pub const MAX_PATHS: usize = 1_000;

/// The nodes that speak, in order, from `from` until one waits (a question, a Flex card,
/// a wait node, which is then the last and speaks nothing) or the chain ends. At most [`MAX_MESSAGES_PER_REQUEST`] of them produce a message.
/// A split (included in the list, silent) continues down the arm `arm` picks.
pub fn walk<'a>(
    lookup: impl Fn(&NodeId) -> Option<&'a Node>,
    from: &NodeId,
    arm: impl Fn(&SplitNode) -> Option<usize>,
) -> Result<Vec<&'a Node>, WalkError> {
    let mut visited = HashSet::new();
    let mut spoken = Vec::new();
    let mut current = Some(from.clone());
    while let Some(id) = current.take() {
        if !visited.insert(id.clone()) {
            return Err(WalkError::Loop(id));
        }
        let node = lookup(&id).ok_or_else(|| WalkError::UnknownNode(id.clone()))?;
        current = match node {
            Node::Trigger(_) => return Err(WalkError::IntoTrigger(id)),
            Node::Message(message) => message.next.clone(),
            Node::Split(split) => {
                let index = arm(split).ok_or_else(|| WalkError::SplitWithoutUser(id.clone()))?;
                split.arms.get(index).map(|arm| arm.next.clone())
            }
            // Decided with the user's state, by the caller: the walk stops here.
            Node::Branch(_) => None,
            Node::Survey(_)
            | Node::TextQuestion(_)
            | Node::DateQuestion(_)
            | Node::FlexImage(_)
            | Node::Wait(_)
            | Node::End(_) => None,
        };
        spoken.push(node);
    }
    let messages = spoken.iter().filter(|node| speaks(node)).count();
    if messages > MAX_MESSAGES_PER_REQUEST {
        return Err(WalkError::TooManyMessages(messages));
    }
    Ok(spoken)
}

/// Checks that every way through the splits from `from` is a chain [`walk`]
/// accepts (for validation: whichever arm a user takes, it can be sent).
pub fn walk_every_way<'a>(lookup: impl Fn(&NodeId) -> Option<&'a Node> + Copy, from: &NodeId) -> Result<(), WalkError> {
    let mut paths = 0;
    every_way(lookup, from, &mut Vec::new(), 0, &mut paths)
}

fn every_way<'a>(
    lookup: impl Fn(&NodeId) -> Option<&'a Node> + Copy,
    from: &NodeId,
    path: &mut Vec<NodeId>,
    messages: usize,
    paths: &mut usize,
) -> Result<(), WalkError> {
    *paths += 1;
    if *paths > MAX_PATHS {
        return Err(WalkError::TooManyPaths);
    }
    let mut current = Some(from.clone());
    let mut messages = messages;
    let depth = path.len();
    let result = loop {
        let Some(id) = current.take() else { break Ok(()) };
        if path.contains(&id) {
            break Err(WalkError::Loop(id));
        }
        let Some(node) = lookup(&id) else {
            break Err(WalkError::UnknownNode(id));
        };
        path.push(id.clone());
        if speaks(node) {
            messages += 1;
            if messages > MAX_MESSAGES_PER_REQUEST {
                break Err(WalkError::TooManyMessages(messages));
            }
        }
        current = match node {
            Node::Trigger(_) => break Err(WalkError::IntoTrigger(id)),
            Node::Message(message) => message.next.clone(),
            Node::Split(split) => {
                let mut outcome = Ok(());
                for arm in &split.arms {
                    outcome = every_way(lookup, &arm.next, path, messages, paths);
                    if outcome.is_err() {
                        break;
                    }
                }
                break outcome;
            }
            // A branch is decided in the same chain: every way out of it
            // counts with the messages before it.
            Node::Branch(branch) => {
                let mut outcome = Ok(());
                for next in branch.targets() {
                    outcome = every_way(lookup, next, path, messages, paths);
                    if outcome.is_err() {
                        break;
                    }
                }
                break outcome;
            }
            _ => None,
        };
    };
    path.truncate(depth);
    result
}

/// Whether a node produces a message (an end node without text and a wait node
/// are silent).
pub fn speaks(node: &Node) -> bool {
    !matches!(node, Node::End(end) if end.text.is_none())
        && !matches!(node, Node::Wait(_) | Node::Split(_) | Node::Branch(_))
}
