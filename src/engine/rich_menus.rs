//! A rich menu deploy's decisions: where a menu's deploy starts, given what
//! `rich_menus/{id}` recorded and the file's hash now, and which LINE menu a
//! user's link uses at each step. Pure, so every case is a table row.

pub(crate) use crate::values::DeployStep;

/// What a menu's record says, as far as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded<'a> {
    pub(crate) hash: &'a str,
    pub(crate) step: DeployStep,
    pub(crate) rich_menu_id: Option<&'a str>,
    pub(crate) old: &'a [String],
}

/// Where a menu's deploy begins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Begin {
    /// This hash is deployed: nothing to do.
    Unchanged,
    /// A deploy of this hash stopped at this step: it goes on from there.
    Resume(DeployStep),
    /// A new hash (or a first deploy): recorded as planned with the LINE menus
    /// whose users move to the new one, and which are then deleted.
    Plan { old: Vec<String> },
}

pub(crate) fn begin(recorded: Option<&Recorded<'_>>, hash: &str) -> Begin {
    let Some(recorded) = recorded else {
        return Begin::Plan { old: Vec::new() };
    };
    if recorded.hash == hash {
        return match recorded.step {
            DeployStep::Done => Begin::Unchanged,
            step => Begin::Resume(step),
        };
    }
    // A newer file replaces a deployed menu, or one whose deploy stopped half
    // way: both its menu and the menus it was replacing are old now (users may
    // be on any of them once its alias moved).
    let mut old: Vec<String> = recorded.old.to_vec();
    if let Some(id) = recorded.rich_menu_id
        && !old.iter().any(|known| known == id)
    {
        old.push(id.to_owned());
    }
    Begin::Plan { old }
}

/// The LINE menu a per-user link to this menu uses once `step` is recorded:
/// the new one from its image on (LINE links only menus with an image),
/// before that the newest old one.
pub(crate) fn live_menu<'a>(step: DeployStep, rich_menu_id: Option<&'a str>, old: &'a [String]) -> Option<&'a str> {
    match (step >= DeployStep::ImageUploaded, rich_menu_id) {
        (true, Some(id)) => Some(id),
        _ => old.last().map(String::as_str),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn where_a_deploy_begins() {
        let none: Vec<String> = Vec::new();
        let a = owned(&["A"]);
        let cases: Vec<(Option<Recorded<'_>>, &str, Begin)> = vec![
            (None, "h1", Begin::Plan { old: Vec::new() }),
            (
                Some(Recorded {
                    hash: "h1",
                    step: DeployStep::Done,
                    rich_menu_id: Some("A"),
                    old: &none,
                }),
                "h1",
                Begin::Unchanged,
            ),
            (
                Some(Recorded {
                    hash: "h1",
                    step: DeployStep::Aliased,
                    rich_menu_id: Some("B"),
                    old: &a,
                }),
                "h1",
                Begin::Resume(DeployStep::Aliased),
            ),
            (
                Some(Recorded {
                    hash: "h1",
                    step: DeployStep::Planned,
                    rich_menu_id: None,
                    old: &none,
                }),
                "h1",
                Begin::Resume(DeployStep::Planned),
            ),
            // A changed file replaces the deployed menu.
            (
                Some(Recorded {
                    hash: "h1",
                    step: DeployStep::Done,
                    rich_menu_id: Some("A"),
                    old: &none,
                }),
                "h2",
                Begin::Plan { old: owned(&["A"]) },
            ),
            // Changed again half way: the half-deployed menu is old too.
            (
                Some(Recorded {
                    hash: "h2",
                    step: DeployStep::Aliased,
                    rich_menu_id: Some("B"),
                    old: &a,
                }),
                "h3",
                Begin::Plan {
                    old: owned(&["A", "B"]),
                },
            ),
            // Changed before its menu was created: only the old ones.
            (
                Some(Recorded {
                    hash: "h2",
                    step: DeployStep::Planned,
                    rich_menu_id: None,
                    old: &a,
                }),
                "h3",
                Begin::Plan { old: owned(&["A"]) },
            ),
        ];
        for (recorded, hash, expected) in cases {
            assert_eq!(begin(recorded.as_ref(), hash), expected, "{recorded:?} -> {hash}");
        }
    }

    #[test]
    fn links_use_the_new_menu_once_it_has_its_image() {
        let old = owned(&["A", "B"]);
        let cases = [
            (DeployStep::Planned, None, Some("B")),
            (DeployStep::Created, Some("C"), Some("B")),
            (DeployStep::ImageUploaded, Some("C"), Some("C")),
            (DeployStep::Done, Some("C"), Some("C")),
        ];
        for (step, id, expected) in cases {
            assert_eq!(live_menu(step, id, &old), expected, "{step:?}");
        }
        assert_eq!(live_menu(DeployStep::Created, Some("C"), &[]), None);
    }
}
