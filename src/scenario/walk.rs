//! Following `next` links from a node to the point where the scenario waits for
//! the user. Shared by validation (to reject loops and over-long chains at start)
//! and by the engine (to build the messages to send).

use super::Node;
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
}

/// The nodes that speak, in order, from `from` until one waits (a question, a Flex card,
/// a wait node, which is then the last and speaks nothing) or the chain ends. At most [`MAX_MESSAGES_PER_REQUEST`] of them produce a message.
pub fn walk<'a>(lookup: impl Fn(&NodeId) -> Option<&'a Node>, from: &NodeId) -> Result<Vec<&'a Node>, WalkError> {
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

/// Whether a node produces a message (an end node without text and a wait node
/// are silent).
pub fn speaks(node: &Node) -> bool {
    !matches!(node, Node::End(end) if end.text.is_none()) && !matches!(node, Node::Wait(_))
}
