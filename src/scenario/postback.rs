//! The postback data this service puts on the buttons and cards it sends.
//!
//! Form-encoded (`v=1&k=a&s=...&n=...&c=...`): percent-encoding keeps any id or value
//! from spilling into another field, the `k` field keeps an answer and a card tap
//! from being confused, and `v` lets the format change later. Data from other
//! sources (a rich menu, say) fails to decode and is ignored.

use crate::ids::{NodeId, ScenarioId};
use serde::{Deserialize, Serialize};

const FORMAT_VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Postback {
    /// A survey button: the answer `choice` to survey node `node`.
    Answer {
        scenario: ScenarioId,
        node: NodeId,
        choice: String,
    },
    /// A tap on the image of Flex card `node`.
    CardTap { scenario: ScenarioId, node: NodeId },
    /// A value picked in date question `node`'s datetime picker (the value comes
    /// in the event's `params`).
    Date { scenario: ScenarioId, node: NodeId },
}

#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    v: u8,
    k: Kind,
    s: String,
    n: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    c: Option<String>,
    /// The run the button was sent in (absent on buttons sent before runs existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<String>,
    /// The scenario version the button was rendered from: the run is pinned to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sv: Option<u32>,
}

/// Where a button was sent: the run it belongs to and the scenario version it
/// was rendered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub run: crate::ids::RunId,
    pub version: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    #[serde(rename = "a")]
    Answer,
    #[serde(rename = "t")]
    CardTap,
    #[serde(rename = "d")]
    Date,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostbackError {
    #[error("not postback data of this service: {0}")]
    Foreign(String),
    #[error("unsupported postback format version {0}")]
    Version(u8),
    #[error("postback field {field} {problem}")]
    BadField {
        field: &'static str,
        problem: crate::ids::IdError,
    },
}

/// The characters a run adds to postback data at most (`&r=` and its id,
/// `&sv=` and a version).
pub const RUN_FIELD_CHARS: usize = 3 + 16 + 4 + 10;

impl Postback {
    /// The scenario the button or card belongs to.
    pub fn scenario(&self) -> &ScenarioId {
        match self {
            Postback::Answer { scenario, .. }
            | Postback::CardTap { scenario, .. }
            | Postback::Date { scenario, .. } => scenario,
        }
    }

    pub fn encode(&self) -> String {
        self.encode_in_run(None)
    }

    /// The data of a button sent in `run`: its answer continues that run.
    #[allow(clippy::expect_used, reason = "a flat struct of strings always encodes")]
    pub fn encode_in_run(&self, asked: Option<&Asked>) -> String {
        let run = asked.map(|asked| &asked.run);
        let sv = asked.and_then(|asked| asked.version);
        let wire = match self {
            Postback::Answer { scenario, node, choice } => Wire {
                v: FORMAT_VERSION,
                k: Kind::Answer,
                s: scenario.to_string(),
                n: node.to_string(),
                c: Some(choice.clone()),
                r: run.map(ToString::to_string),
                sv,
            },
            Postback::CardTap { scenario, node } => Wire {
                v: FORMAT_VERSION,
                k: Kind::CardTap,
                s: scenario.to_string(),
                n: node.to_string(),
                c: None,
                r: None,
                sv: None,
            },
            Postback::Date { scenario, node } => Wire {
                v: FORMAT_VERSION,
                k: Kind::Date,
                s: scenario.to_string(),
                n: node.to_string(),
                c: None,
                r: run.map(ToString::to_string),
                sv,
            },
        };
        serde_urlencoded::to_string(&wire).expect("a flat struct of strings always encodes")
    }

    pub fn decode(data: &str) -> Result<Self, PostbackError> {
        Self::decode_with_run(data).map(|(postback, _)| postback)
    }

    /// The postback and the run its button was sent in, if it names one.
    pub fn decode_with_run(data: &str) -> Result<(Self, Option<Asked>), PostbackError> {
        // The parser's message can quote the data: it is not kept, so no log
        // line repeats what another system put into a postback.
        let wire: Wire = serde_urlencoded::from_str(data)
            .map_err(|_| PostbackError::Foreign("it is not form data with the fields v, k, s and n".to_owned()))?;
        if wire.v != FORMAT_VERSION {
            return Err(PostbackError::Version(wire.v));
        }
        let scenario = ScenarioId::parse(wire.s).map_err(|problem| PostbackError::BadField { field: "s", problem })?;
        let node = NodeId::parse(wire.n).map_err(|problem| PostbackError::BadField { field: "n", problem })?;
        let run = wire
            .r
            .map(crate::ids::RunId::parse)
            .transpose()
            .map_err(|problem| PostbackError::BadField { field: "r", problem })?
            .map(|run| Asked { run, version: wire.sv });
        let postback = match (wire.k, wire.c) {
            (Kind::Answer, Some(choice)) => {
                crate::ids::check_id(&choice).map_err(|problem| PostbackError::BadField { field: "c", problem })?;
                Postback::Answer { scenario, node, choice }
            }
            (Kind::Answer, None) => return Err(PostbackError::Foreign("an answer without a choice".to_owned())),
            (Kind::CardTap, _) => Postback::CardTap { scenario, node },
            (Kind::Date, _) => Postback::Date { scenario, node },
        };
        Ok((postback, run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(s: &str, n: &str, c: &str) -> Postback {
        Postback::Answer {
            scenario: ScenarioId::parse(s).unwrap(),
            node: NodeId::parse(n).unwrap(),
            choice: c.to_owned(),
        }
    }

    #[test]
    fn answers_and_taps_round_trip_and_stay_distinct() {
        let a = answer("lunch", "ask", "great");
        assert_eq!(Postback::decode(&a.encode()), Ok(a.clone()));
        let tap = Postback::CardTap {
            scenario: ScenarioId::parse("lunch").unwrap(),
            node: NodeId::parse("ask").unwrap(),
        };
        assert_eq!(Postback::decode(&tap.encode()), Ok(tap.clone()));
        assert_ne!(a.encode(), tap.encode());
        let date = Postback::Date {
            scenario: ScenarioId::parse("lunch").unwrap(),
            node: NodeId::parse("ask").unwrap(),
        };
        assert_eq!(Postback::decode(&date.encode()), Ok(date.clone()));
        assert_ne!(date.encode(), tap.encode());
    }

    #[test]
    fn a_run_rides_along_and_old_data_has_none() {
        let a = answer("lunch", "ask", "great");
        let asked = Asked {
            run: crate::ids::RunId::begun_by("inbox-1"),
            version: Some(u32::MAX),
        };
        let data = a.encode_in_run(Some(&asked));
        assert_eq!(Postback::decode_with_run(&data), Ok((a.clone(), Some(asked))));
        assert_eq!(Postback::decode_with_run(&a.encode()), Ok((a, None)));
        assert!(data.len() <= answer("lunch", "ask", "great").encode().len() + RUN_FIELD_CHARS);
    }

    #[test]
    fn separators_inside_ids_cannot_move_field_boundaries() {
        let tricky = answer("a&k=t", "n=x", "c&v=2");
        assert_eq!(Postback::decode(&tricky.encode()), Ok(tricky));
    }

    #[test]
    fn foreign_and_hostile_data_is_refused() {
        assert!(matches!(
            Postback::decode("action=richmenu"),
            Err(PostbackError::Foreign(_))
        ));
        assert!(matches!(
            Postback::decode("v=2&k=a&s=x&n=y&c=z"),
            Err(PostbackError::Version(2))
        ));
        assert!(matches!(
            Postback::decode("v=1&k=a&s=x%00y&n=y&c=z"),
            Err(PostbackError::BadField { field: "s", .. })
        ));
        assert!(matches!(
            Postback::decode("v=1&k=a&s=x&n=y"),
            Err(PostbackError::Foreign(_))
        ));
    }
}
