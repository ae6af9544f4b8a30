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

/// A user field's value (`users/{id}.fields.<name>`): what a scenario's `set`
/// writes, or a question's answer stored with `field`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FieldValue {
    Bool(bool),
    Integer(i64),
    Number(f64),
    Text(String),
}

impl FieldValue {
    /// The number a `min`/`max` condition compares (`None` for texts and booleans).
    pub fn as_number(&self) -> Option<f64> {
        match self {
            // Field values are small integers (ages, counts): exact in an f64.
            #[allow(clippy::cast_precision_loss)]
            FieldValue::Integer(value) => Some(*value as f64),
            FieldValue::Number(value) => Some(*value),
            FieldValue::Bool(_) | FieldValue::Text(_) => None,
        }
    }

    /// How the value reads in an `equals`/`in` comparison and in a text.
    pub fn as_text(&self) -> String {
        match self {
            FieldValue::Bool(value) => value.to_string(),
            FieldValue::Integer(value) => value.to_string(),
            FieldValue::Number(value) => value.to_string(),
            FieldValue::Text(value) => value.clone(),
        }
    }
}

impl From<&AnswerValue> for FieldValue {
    fn from(value: &AnswerValue) -> Self {
        match value {
            AnswerValue::Integer(value) => FieldValue::Integer(*value),
            AnswerValue::Number(value) => FieldValue::Number(*value),
            AnswerValue::Text(value) => FieldValue::Text(value.clone()),
        }
    }
}

/// What one step does to the user's record, netted over the nodes it passes:
/// tags to add, tags to remove and fields to set. A later node wins over an
/// earlier one (a tag added then removed is removed), so `tag` and `untag` never
/// share a tag and each can be one array transform of the same commit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserChanges {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untag: Vec<String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub set: std::collections::BTreeMap<String, FieldValue>,
    /// The rich menu to link to the user (a menu file's id), or `default` to
    /// unlink theirs; the last one a step passes wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rich_menu: Option<String>,
}

impl UserChanges {
    pub fn is_empty(&self) -> bool {
        self.tag.is_empty() && self.untag.is_empty() && self.set.is_empty() && self.rich_menu.is_none()
    }

    /// Adds `tags` after what is already planned.
    pub fn add_tags<'a>(&mut self, tags: impl IntoIterator<Item = &'a String>) {
        for tag in tags {
            self.untag.retain(|planned| planned != tag);
            if !self.tag.contains(tag) {
                self.tag.push(tag.clone());
            }
        }
    }

    /// Removes `tags` after what is already planned.
    pub fn remove_tags<'a>(&mut self, tags: impl IntoIterator<Item = &'a String>) {
        for tag in tags {
            self.tag.retain(|planned| planned != tag);
            if !self.untag.contains(tag) {
                self.untag.push(tag.clone());
            }
        }
    }

    /// Sets `fields` after what is already planned (a later value wins).
    pub fn set_fields<'a>(&mut self, fields: impl IntoIterator<Item = (&'a String, &'a FieldValue)>) {
        for (name, value) in fields {
            self.set.insert(name.clone(), value.clone());
        }
    }

    /// These changes, then `later`'s.
    pub fn then(mut self, later: &UserChanges) -> Self {
        self.add_tags(&later.tag);
        self.remove_tags(&later.untag);
        self.set_fields(&later.set);
        if later.rich_menu.is_some() {
            self.rich_menu.clone_from(&later.rich_menu);
        }
        self
    }
}

/// Where a rich menu file's deploy stands: decided by the engine
/// (`engine::rich_menus`), recorded by the store (`rich_menus/{id}.step`),
/// so it lives on this floor, below both. Each step is recorded after LINE did it, so
/// a deploy killed between a call and its record repeats the call: every step
/// is safe to repeat (the create is found again by its name first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeployStep {
    /// The hash is recorded; no menu on LINE is known to carry it yet.
    Planned,
    /// LINE has the menu (created, or adopted from its list by name).
    Created,
    ImageUploaded,
    /// The alias (the menu's id) points at it.
    Aliased,
    /// The users of the old menus are on it (one batch, polled to the end).
    UsersMoved,
    /// The account's default is set (or cancelled) as the file says.
    Defaulted,
    /// The old menus are deleted: nothing is left to do for this hash.
    Done,
}

impl DeployStep {
    /// What reaching this step does, for a message about its failure.
    pub fn doing(self) -> &'static str {
        match self {
            DeployStep::Planned => "recording the plan",
            DeployStep::Created => "creating the menu",
            DeployStep::ImageUploaded => "uploading the image",
            DeployStep::Aliased => "pointing the alias at the menu",
            DeployStep::UsersMoved => "moving the users of the old menus",
            DeployStep::Defaulted => "setting the account's default menu",
            DeployStep::Done => "deleting the old menus",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeployStep::Planned => "planned",
            DeployStep::Created => "created",
            DeployStep::ImageUploaded => "image_uploaded",
            DeployStep::Aliased => "aliased",
            DeployStep::UsersMoved => "users_moved",
            DeployStep::Defaulted => "defaulted",
            DeployStep::Done => "done",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_may_do_what_the_ones_below_it_may() {
        use OperatorRole::{Editor, Owner, Viewer};
        let cases = [
            (Viewer, Viewer, true),
            (Viewer, Editor, false),
            (Viewer, Owner, false),
            (Editor, Viewer, true),
            (Editor, Editor, true),
            (Editor, Owner, false),
            (Owner, Viewer, true),
            (Owner, Editor, true),
            (Owner, Owner, true),
        ];
        for (role, needed, allowed) in cases {
            assert_eq!(role.allows(needed), allowed, "{role:?} {needed:?}");
        }
        for role in [Viewer, Editor, Owner] {
            assert_eq!(role.as_str().parse::<OperatorRole>(), Ok(role));
        }
        assert!("admin".parse::<OperatorRole>().is_err());
        assert!("Owner".parse::<OperatorRole>().is_err());
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    #[test]
    fn later_steps_win_and_tag_and_untag_stay_apart() {
        // (adds, removes, then adds, then removes) -> (tag, untag)
        type Tags<'a> = &'a [&'a str];
        let cases: &[(Tags, Tags, Tags, Tags, Tags, Tags)] = &[
            (&["a"], &[], &[], &[], &["a"], &[]),
            (&["a"], &[], &[], &["a"], &[], &["a"]),
            (&[], &["a"], &["a"], &[], &["a"], &[]),
            (&["a", "b"], &["c"], &["c"], &["b"], &["a", "c"], &["b"]),
            (&["a"], &[], &["a"], &[], &["a"], &[]),
        ];
        for (add, remove, later_add, later_remove, tag, untag) in cases {
            let mut first = UserChanges::default();
            first.add_tags(&strings(add));
            first.remove_tags(&strings(remove));
            let later = UserChanges {
                tag: strings(later_add),
                untag: strings(later_remove),
                ..UserChanges::default()
            };
            let net = first.then(&later);
            assert_eq!(
                net.tag,
                strings(tag),
                "{add:?} {remove:?} then {later_add:?} {later_remove:?}"
            );
            assert_eq!(
                net.untag,
                strings(untag),
                "{add:?} {remove:?} then {later_add:?} {later_remove:?}"
            );
            assert!(net.tag.iter().all(|tag| !net.untag.contains(tag)));
        }
    }

    #[test]
    fn a_later_rich_menu_wins_and_none_keeps_the_earlier() {
        let with = |menu: Option<&str>| UserChanges {
            rich_menu: menu.map(str::to_owned),
            ..UserChanges::default()
        };
        let cases = [
            (None, None, None),
            (Some("member"), None, Some("member")),
            (None, Some("member"), Some("member")),
            (Some("member"), Some("default"), Some("default")),
        ];
        for (first, later, expected) in cases {
            assert_eq!(
                with(first).then(&with(later)).rich_menu.as_deref(),
                expected,
                "{first:?} then {later:?}"
            );
        }
        assert!(!with(Some("member")).is_empty());
    }

    #[test]
    fn a_later_field_value_wins() {
        let mut first = UserChanges::default();
        first.set_fields([(&"plan".to_owned(), &FieldValue::Text("silver".into()))]);
        let mut later = UserChanges::default();
        later.set_fields([(&"plan".to_owned(), &FieldValue::Text("gold".into()))]);
        assert_eq!(first.then(&later).set["plan"], FieldValue::Text("gold".into()));
    }

    #[test]
    fn field_values_keep_their_toml_and_json_types() {
        let parsed: std::collections::BTreeMap<String, FieldValue> =
            serde_json::from_str(r#"{"a": true, "b": 3, "c": 2.5, "d": "x"}"#).unwrap();
        assert_eq!(parsed["a"], FieldValue::Bool(true));
        assert_eq!(parsed["b"], FieldValue::Integer(3));
        assert_eq!(parsed["c"], FieldValue::Number(2.5));
        assert_eq!(parsed["d"], FieldValue::Text("x".into()));
    }
}

/// The values a step's placeholders render with (`{name}`, `{field.x}`,
/// `{answer.n}`), decided with the step and kept on its ledger entry until the
/// entry is settled, so a retry sends the same bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersonalValues {
    /// The user's LINE display name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// User fields, as text.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub fields: std::collections::BTreeMap<String, String>,
    /// Answers to this scenario's questions by node: a choice's label, a typed value.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub answers: std::collections::BTreeMap<String, String>,
}

/// Where a user stands with one friend-add source (`user_sources`): decided
/// by the engine, recorded by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SourceStanding {
    /// Recorded, the user not (yet) a friend: their follow decides.
    Waiting,
    /// Became a friend through the link: counted as a new friend.
    Friend,
    /// Was a friend before the link was opened: not a new friend.
    WasFriend,
}

/// The language of the console's pages (`CONSOLE_LANG`): Japanese unless
/// an account's operators read English.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsoleLang {
    #[default]
    Ja,
    En,
}

impl ConsoleLang {
    /// The value of the `lang` attribute of a page.
    pub fn as_str(self) -> &'static str {
        match self {
            ConsoleLang::Ja => "ja",
            ConsoleLang::En => "en",
        }
    }

    /// The text in this language; the Japanese comes first, as the default.
    pub fn t(self, ja: &'static str, en: &'static str) -> &'static str {
        match self {
            ConsoleLang::Ja => ja,
            ConsoleLang::En => en,
        }
    }
}

impl std::str::FromStr for ConsoleLang {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "ja" => Ok(ConsoleLang::Ja),
            "en" => Ok(ConsoleLang::En),
            other => Err(format!("{other:?} is not ja or en")),
        }
    }
}

/// What an operator of the console may do. Each role may do all that the
/// ones below it may: a viewer reads, an editor also sends, an owner also
/// manages operators, exports answers and reads the audit log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperatorRole {
    Viewer,
    Editor,
    Owner,
}

impl OperatorRole {
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorRole::Viewer => "viewer",
            OperatorRole::Editor => "editor",
            OperatorRole::Owner => "owner",
        }
    }

    /// Whether this role may do what `needed` may.
    pub fn allows(self, needed: OperatorRole) -> bool {
        self >= needed
    }
}

impl std::str::FromStr for OperatorRole {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "viewer" => Ok(OperatorRole::Viewer),
            "editor" => Ok(OperatorRole::Editor),
            "owner" => Ok(OperatorRole::Owner),
            other => Err(format!("no such role: {other:?} (owner, editor or viewer)")),
        }
    }
}
