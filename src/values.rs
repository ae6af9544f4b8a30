//! The value a recorded answer holds: a choice, a picked date or a typed
//! answer. On the bottom floor because both sides need it: scenarios and the
//! engine produce it (`scenario::typed` checks a typed answer into one), the
//! store writes and reads it, and the store knows nothing of scenarios.

use serde::{Deserialize, Serialize};

/// A recorded answer's value, keeping its type: a number is stored as a number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AnswerValue {
    Integer(i64),
    Number(f64),
    Text(String),
}

impl std::fmt::Display for AnswerValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerValue::Integer(value) => write!(f, "{value}"),
            AnswerValue::Number(value) => write!(f, "{value}"),
            AnswerValue::Text(value) => f.write_str(value),
        }
    }
}
