//! Identifier newtypes and the deterministic document ids built from them.
//!
//! Every id that ends up inside a deterministic document id must be free of NUL:
//! NUL is the separator between the hashed parts, so a part containing it could
//! make two different tuples hash alike ("a\0b" + "c" vs "a" + "b\0c").

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// Why a string was refused as an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("is empty")]
    Empty,
    #[error("contains a NUL character")]
    ContainsNul,
    #[error("is {0} characters long; at most {MAX_ID_CHARS} are allowed")]
    TooLong(usize),
}

/// Generous upper bound: keeps ids and the postback data built from them small.
pub const MAX_ID_CHARS: usize = 100;

/// Checks the rules every id shares.
pub fn check_id(raw: &str) -> Result<(), IdError> {
    if raw.is_empty() {
        return Err(IdError::Empty);
    }
    if raw.contains('\0') {
        return Err(IdError::ContainsNul);
    }
    let chars = raw.chars().count();
    if chars > MAX_ID_CHARS {
        return Err(IdError::TooLong(chars));
    }
    Ok(())
}

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        ///
        /// Deserialises without checks (scenario files are checked as a whole by the
        /// loader, which names file, scenario and node); input from LINE goes
        /// through [`Self::parse`].
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(raw: impl Into<String>) -> Result<Self, IdError> {
                let raw = raw.into();
                check_id(&raw)?;
                Ok(Self(raw))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_id!(
    /// A scenario's id, as written in its scenario file.
    ScenarioId
);
string_id!(
    /// A node's id, unique within its scenario.
    NodeId
);
string_id!(
    /// The LINE user id of a friend of the Official Account (`U` + 32 hex digits in practice).
    LineUserId
);

impl LineUserId {
    /// What an operator is told about an id that is not LINE's shape.
    pub const SHAPE: &'static str = "a LINE user id is U followed by 32 lowercase hexadecimal digits";

    /// An id an operator typed, accepted only in LINE's shape.
    pub fn parse_line_shaped(raw: impl Into<String>) -> Result<Self, &'static str> {
        Self::parse(raw).ok().filter(Self::is_line_shaped).ok_or(Self::SHAPE)
    }

    /// Whether it has the shape LINE gives user ids: `U` and 32 lowercase hex
    /// digits. Lookups by an operator check it, so a typo gets a clear answer
    /// rather than an empty result (or a Firestore refusal of a reserved id).
    pub fn is_line_shaped(&self) -> bool {
        let id = self.as_str();
        id.len() == 33 && id.starts_with('U') && id[1..].bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
    }
}

/// A rich menu's id in the service (its file's `id`, its alias on LINE):
/// 1 to 32 of `a-z`, `0-9`, `_` and `-`, and not `default` (the word a scenario
/// uses to unlink a user's menu).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MenuId(String);

impl MenuId {
    pub const MAX_CHARS: usize = 32;
    /// What an operator is told about an id that breaks the rule.
    pub const RULE: &'static str = "1 to 32 of a-z, 0-9, _ and -, and not \"default\"";

    pub fn parse(raw: impl Into<String>) -> Result<Self, &'static str> {
        let raw = raw.into();
        let shaped = (1..=Self::MAX_CHARS).contains(&raw.len())
            && raw
                .bytes()
                .all(|byte| matches!(byte, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
            && raw != "default";
        if shaped { Ok(Self(raw)) } else { Err(Self::RULE) }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MenuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

string_id!(
    /// One pass of a user through a scenario: started by a trigger, a card tap or
    /// a manual send, continued by its answers and timers. Timers of a run that a
    /// newer run replaced send nothing.
    RunId
);

/// Hex characters of a run id: short, since it rides in postback data.
const RUN_ID_HEX_CHARS: usize = 16;

/// The first character of a campaign's run id: never a hex digit, so no run
/// begun by an event or a manual send looks like a campaign's.
const CAMPAIGN_RUN_MARK: char = 'k';

/// The first character of a test send's run id: never a hex digit nor `k`.
const TEST_SEND_RUN_MARK: char = 't';

impl RunId {
    /// The run begun by `origin` (an inbox id, a manual send's action key).
    pub fn begun_by(origin: &str) -> Self {
        let mut id = deterministic_id(&["run", origin]);
        id.truncate(RUN_ID_HEX_CHARS);
        Self(id)
    }

    /// The run every recipient of campaign `campaign_id` (40 hex digits) is in:
    /// `k` and the id's first 15 hex digits, as short as any run (it rides in
    /// postback data), and telling its answers that they belong to a campaign.
    pub fn of_campaign(campaign_id: &str) -> Self {
        let head: String = campaign_id.chars().take(RUN_ID_HEX_CHARS - 1).collect();
        Self(format!("{CAMPAIGN_RUN_MARK}{head}"))
    }

    /// Whether this is a campaign's run (see [`Self::of_campaign`]).
    pub fn is_campaign_run(&self) -> bool {
        self.0.starts_with(CAMPAIGN_RUN_MARK)
    }

    /// The run a campaign's test send (テスト配信) names on its buttons: `t`
    /// and `nonce`'s first 15 characters. Taps on them record nothing, so an
    /// operator trying the survey leaves no answer, tag or timer behind.
    pub fn of_test_send(nonce: &str) -> Self {
        let head: String = nonce.chars().take(RUN_ID_HEX_CHARS - 1).collect();
        Self(format!("{TEST_SEND_RUN_MARK}{head}"))
    }

    /// Whether this is a test send's run (see [`Self::of_test_send`]).
    pub fn is_test_send_run(&self) -> bool {
        self.0.starts_with(TEST_SEND_RUN_MARK)
    }
}

/// What a timer does when it falls due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    /// A wait node's `next`.
    Step,
    /// A reminder of an unanswered question.
    Remind,
    /// The end of a question's answer time.
    Expire,
}

impl TimerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TimerKind::Step => "step",
            TimerKind::Remind => "remind",
            TimerKind::Expire => "expire",
        }
    }
}

/// The id of a timer: one per scenario, node, user, run and kind, so the commit
/// that schedules it can be repeated without scheduling it twice.
pub fn timer_id(scenario: &ScenarioId, node: &NodeId, user: &LineUserId, run: &RunId, kind: TimerKind) -> String {
    deterministic_id(&[
        "timer",
        scenario.as_str(),
        node.as_str(),
        user.as_str(),
        run.as_str(),
        kind.as_str(),
    ])
}

/// Number of hex characters kept from the SHA-256 digest: 160 bits, far beyond any
/// realistic collision risk, and short enough to read in the console.
const DOCUMENT_ID_HEX_CHARS: usize = 40;

/// LINE user ids are `U` followed by 32 lowercase hex digits.
pub fn is_line_user_id(raw: &str) -> bool {
    raw.len() == 33 && raw.starts_with('U') && raw[1..].bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// The first 40 hex characters of SHA-256 over the parts joined with NUL.
///
/// Callers pass parts that passed [`check_id`] (or, for LINE's own ids, were checked
/// for NUL), which is what makes the NUL separator unambiguous.
pub fn deterministic_id(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for (index, part) in parts.iter().enumerate() {
        debug_assert!(!part.contains('\0'), "id parts must not contain NUL");
        if index > 0 {
            hasher.update([0u8]);
        }
        hasher.update(part.as_bytes());
    }
    let mut hex = hex::encode(hasher.finalize());
    hex.truncate(DOCUMENT_ID_HEX_CHARS);
    hex
}

/// A document id in [`deterministic_id`]'s shape, as an operator typed it (a
/// timer's, a campaign's): checked before it is looked up, so anything else
/// names no document and never reaches Firestore as a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentHexId(String);

impl DocumentHexId {
    /// `Some` only for exactly 40 hexadecimal digits.
    pub fn parse(raw: &str) -> Option<Self> {
        (raw.len() == DOCUMENT_ID_HEX_CHARS && raw.bytes().all(|byte| byte.is_ascii_hexdigit()))
            .then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DocumentHexId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The id of a user's answer to one survey node: the guard of every survey answer.
pub fn answer_id(scenario: &ScenarioId, node: &NodeId, user: &LineUserId) -> String {
    deterministic_id(&[scenario.as_str(), node.as_str(), user.as_str()])
}

/// The id of the "this user answered this scenario" marker.
pub fn scenario_marker_id(scenario: &ScenarioId, user: &LineUserId) -> String {
    deterministic_id(&[scenario.as_str(), user.as_str()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_campaigns_run_is_as_short_as_any_and_never_looks_like_another_run() {
        let campaign = deterministic_id(&["campaign", "winter-2026"]);
        let run = RunId::of_campaign(&campaign);
        assert_eq!(run.as_str().len(), RUN_ID_HEX_CHARS);
        assert!(run.is_campaign_run());
        assert_eq!(&run.as_str()[1..], &campaign[..RUN_ID_HEX_CHARS - 1]);
        for origin in ["inbox-1", "manual-2", "x"] {
            assert!(!RunId::begun_by(origin).is_campaign_run(), "{origin}");
        }
    }

    #[test]
    fn answer_id_is_the_documented_sha256_prefix() {
        // echo -n 'lunch\0ask\0U1' | sha256sum, first 40 hex characters
        let id = answer_id(
            &ScenarioId::parse("lunch").unwrap(),
            &NodeId::parse("ask").unwrap(),
            &LineUserId::parse("U1").unwrap(),
        );
        let mut expected = hex::encode(Sha256::digest(b"lunch\0ask\0U1"));
        expected.truncate(40);
        assert_eq!(id, expected);
        assert_eq!(id.len(), 40);
    }

    #[test]
    fn separator_keeps_field_boundaries_apart() {
        assert_ne!(deterministic_id(&["ab", "c"]), deterministic_id(&["a", "bc"]));
    }

    #[test]
    fn ids_with_nul_are_refused() {
        assert_eq!(ScenarioId::parse("a\0b"), Err(IdError::ContainsNul));
        assert_eq!(NodeId::parse(""), Err(IdError::Empty));
        assert!(LineUserId::parse("x".repeat(101)).is_err());
    }

    #[test]
    fn line_shaped_user_ids_are_u_and_32_lowercase_hex_digits() {
        let cases = [
            ("U4af4980629e0e4a9c2fbd5b2ad1d7e9b", true),
            ("U00000000000000000000000000000000", true),
            ("U4AF4980629E0E4A9C2FBD5B2AD1D7E9B", false),
            ("u4af4980629e0e4a9c2fbd5b2ad1d7e9b", false),
            ("U4af4980629e0e4a9c2fbd5b2ad1d7e9", false),
            ("U4af4980629e0e4a9c2fbd5b2ad1d7e9bb", false),
            ("U4af4980629e0e4a9c2fbd5b2ad1d7e9g", false),
            ("__users__", false),
            ("U1", false),
        ];
        for (raw, expected) in cases {
            assert_eq!(LineUserId::parse(raw).unwrap().is_line_shaped(), expected, "{raw}");
        }
    }

    #[test]
    fn a_document_hex_id_is_forty_hex_digits_and_nothing_else() {
        let made = deterministic_id(&["timer", "a"]);
        assert_eq!(DocumentHexId::parse(&made).map(|id| id.to_string()), Some(made.clone()));
        assert!(DocumentHexId::parse(&made.to_uppercase()).is_some());
        for refused in [
            "",
            &made[..39],
            &format!("{made}0"),
            &format!("{}g", &made[..39]),
            "../../../../../../../../../../../../../..",
            // 40 bytes, but not 40 ASCII digits.
            &format!("{}é", &made[..38]),
        ] {
            assert_eq!(DocumentHexId::parse(refused), None, "{refused:?}");
        }
    }
}
