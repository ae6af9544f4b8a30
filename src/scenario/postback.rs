//! The postback data this service puts on the buttons and cards it sends.
//!
//! Form-encoded (`v=1&k=a&s=...&n=...&c=...`): percent-encoding keeps any id or value
//! from spilling into another field, the `k` field keeps an answer, a card tap
//! and a rich menu tap from being confused, and `v` lets the format change
//! later. Data from other sources fails to decode and is ignored.

use crate::ids::{MenuId, NodeId, ScenarioId};
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
    /// A tap on a rich menu's `scenario` area: starts `scenario` (`k=m`, no node).
    MenuTap { scenario: ScenarioId, menu: MenuId },
    /// The postback LINE sends after a `richmenuswitch` area switched to `menu`
    /// (`k=s`): LINE switched the menu itself, so there is nothing to do.
    MenuSwitch { menu: MenuId },
}

#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    v: u8,
    k: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    c: Option<String>,
    /// The run the button was sent in (absent on buttons sent before runs existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<String>,
    /// The scenario version the button was rendered from: the run is pinned to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sv: Option<u32>,
    /// The rich menu of a menu tap or switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    m: Option<String>,
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
    #[serde(rename = "m")]
    MenuTap,
    #[serde(rename = "s")]
    MenuSwitch,
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

impl Wire {
    fn of(k: Kind) -> Self {
        Wire {
            v: FORMAT_VERSION,
            k,
            s: None,
            n: None,
            c: None,
            r: None,
            sv: None,
            m: None,
        }
    }
}

impl Postback {
    /// The scenario the button, card or menu area belongs to (none for a
    /// menu switch).
    pub fn scenario(&self) -> Option<&ScenarioId> {
        match self {
            Postback::Answer { scenario, .. }
            | Postback::CardTap { scenario, .. }
            | Postback::Date { scenario, .. }
            | Postback::MenuTap { scenario, .. } => Some(scenario),
            Postback::MenuSwitch { .. } => None,
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
                s: Some(scenario.to_string()),
                n: Some(node.to_string()),
                c: Some(choice.clone()),
                r: run.map(ToString::to_string),
                sv,
                ..Wire::of(Kind::Answer)
            },
            Postback::CardTap { scenario, node } => Wire {
                s: Some(scenario.to_string()),
                n: Some(node.to_string()),
                ..Wire::of(Kind::CardTap)
            },
            Postback::Date { scenario, node } => Wire {
                s: Some(scenario.to_string()),
                n: Some(node.to_string()),
                r: run.map(ToString::to_string),
                sv,
                ..Wire::of(Kind::Date)
            },
            Postback::MenuTap { scenario, menu } => Wire {
                s: Some(scenario.to_string()),
                m: Some(menu.to_string()),
                ..Wire::of(Kind::MenuTap)
            },
            Postback::MenuSwitch { menu } => Wire {
                m: Some(menu.to_string()),
                ..Wire::of(Kind::MenuSwitch)
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
            .map_err(|_| PostbackError::Foreign("it is not form data with the fields v and k".to_owned()))?;
        if wire.v != FORMAT_VERSION {
            return Err(PostbackError::Version(wire.v));
        }
        let menu = |raw: Option<String>| {
            MenuId::parse(raw.unwrap_or_default())
                .map_err(|_| PostbackError::Foreign("a menu id that breaks the rule".to_owned()))
        };
        let scenario = |raw: Option<String>| {
            ScenarioId::parse(raw.unwrap_or_default())
                .map_err(|problem| PostbackError::BadField { field: "s", problem })
        };
        let node = |raw: Option<String>| {
            NodeId::parse(raw.unwrap_or_default()).map_err(|problem| PostbackError::BadField { field: "n", problem })
        };
        let run = wire
            .r
            .map(crate::ids::RunId::parse)
            .transpose()
            .map_err(|problem| PostbackError::BadField { field: "r", problem })?
            .map(|run| Asked { run, version: wire.sv });
        let postback = match (wire.k, wire.c) {
            (Kind::Answer, Some(choice)) => {
                crate::ids::check_id(&choice).map_err(|problem| PostbackError::BadField { field: "c", problem })?;
                Postback::Answer {
                    scenario: scenario(wire.s)?,
                    node: node(wire.n)?,
                    choice,
                }
            }
            (Kind::Answer, None) => return Err(PostbackError::Foreign("an answer without a choice".to_owned())),
            (Kind::CardTap, _) => Postback::CardTap {
                scenario: scenario(wire.s)?,
                node: node(wire.n)?,
            },
            (Kind::Date, _) => Postback::Date {
                scenario: scenario(wire.s)?,
                node: node(wire.n)?,
            },
            // A menu's taps belong to no run: a run id on one is not ours.
            (Kind::MenuTap | Kind::MenuSwitch, _) if run.is_some() => {
                return Err(PostbackError::Foreign("a menu tap with a run".to_owned()));
            }
            (Kind::MenuTap, _) => Postback::MenuTap {
                scenario: scenario(wire.s)?,
                menu: menu(wire.m)?,
            },
            (Kind::MenuSwitch, _) => Postback::MenuSwitch { menu: menu(wire.m)? },
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
    fn menu_taps_and_switches_round_trip_in_the_documented_shape() {
        let tap = Postback::MenuTap {
            scenario: ScenarioId::parse("satisfaction").unwrap(),
            menu: MenuId::parse("member").unwrap(),
        };
        assert_eq!(tap.encode(), "v=1&k=m&s=satisfaction&m=member");
        assert_eq!(Postback::decode(&tap.encode()), Ok(tap));
        let switch = Postback::MenuSwitch {
            menu: MenuId::parse("survey_tab").unwrap(),
        };
        assert_eq!(switch.encode(), "v=1&k=s&m=survey_tab");
        assert_eq!(Postback::decode(&switch.encode()), Ok(switch));
    }

    #[test]
    fn broken_menu_data_is_refused() {
        for data in [
            "v=1&k=m&s=satisfaction",
            "v=1&k=m&m=member",
            "v=1&k=m&s=satisfaction&m=default",
            "v=1&k=m&s=satisfaction&m=Member",
            "v=1&k=s",
            "v=1&k=s&m=a%2Fb",
            "v=1&k=m&s=satisfaction&m=member&r=0123456789abcdef",
            "v=1&k=t&s=lunch",
            "v=1&k=a&n=ask&c=x",
        ] {
            assert!(Postback::decode(data).is_err(), "{data}");
        }
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
