//! Answers an earlier bot saved under random document ids: which document of a
//! (scenario, question, user) group is the answer, and what the others got
//! wrong. Pure decisions for the legacy-answers migration.

use std::collections::BTreeSet;

/// One legacy answer document, as the migration needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LegacyAnswer {
    pub(crate) id: String,
    /// `answeredAt` in epoch ms, or the document's create time without one.
    pub(crate) answered_ms: i64,
    /// The stored value, rendered so equal values compare equal (`None`: none).
    pub(crate) value: Option<String>,
    pub(crate) tags: Vec<String>,
}

/// What a group of legacy answers comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupVerdict {
    /// The answer that counts: the earliest; ties go to the smallest id.
    pub(crate) canonical: String,
    /// The other documents' ids, in id order.
    pub(crate) duplicates: Vec<String>,
    /// Whether some duplicate holds another value than the canonical answer.
    pub(crate) conflicting: bool,
    /// Tags the user has that only a duplicate gave (the canonical answer did
    /// not): only the operator knows whether they are right.
    pub(crate) doubtful_tags: Vec<String>,
}

/// Decides `members` (one group; `None` when it is empty), given the tags the
/// user has now.
pub(crate) fn decide(members: &[LegacyAnswer], user_tags: &[String]) -> Option<GroupVerdict> {
    let canonical = members
        .iter()
        .min_by(|a, b| a.answered_ms.cmp(&b.answered_ms).then_with(|| a.id.cmp(&b.id)))?;
    let mut duplicates: Vec<String> = members
        .iter()
        .filter(|member| member.id != canonical.id)
        .map(|member| member.id.clone())
        .collect();
    duplicates.sort();
    let others = || members.iter().filter(|member| member.id != canonical.id);
    let conflicting = others().any(|member| member.value != canonical.value);
    let given_only_by_duplicates: BTreeSet<&String> = others()
        .flat_map(|member| &member.tags)
        .filter(|tag| !canonical.tags.contains(tag))
        .collect();
    let doubtful_tags = given_only_by_duplicates
        .into_iter()
        .filter(|tag| user_tags.contains(tag))
        .cloned()
        .collect();
    Some(GroupVerdict {
        canonical: canonical.id.clone(),
        duplicates,
        conflicting,
        doubtful_tags,
    })
}

/// The first legacy document of a group met in document-id order decides the
/// group: a pass in id order then decides each group once, whatever it met
/// before, and a pass started again after a kill decides it at the same
/// document.
pub(crate) fn decides_group(id: &str, members: &[LegacyAnswer]) -> bool {
    members.iter().map(|member| member.id.as_str()).min() == Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: &str, answered_ms: i64, value: &str, tags: &[&str]) -> LegacyAnswer {
        LegacyAnswer {
            id: id.to_owned(),
            answered_ms,
            value: Some(value.to_owned()),
            tags: tags.iter().map(|tag| (*tag).to_owned()).collect(),
        }
    }

    fn tags(all: &[&str]) -> Vec<String> {
        all.iter().map(|tag| (*tag).to_owned()).collect()
    }

    #[test]
    fn groups_are_decided_by_the_earliest_answer_and_say_what_the_others_got_wrong() {
        struct Case {
            name: &'static str,
            members: Vec<LegacyAnswer>,
            user_tags: Vec<String>,
            canonical: &'static str,
            duplicates: &'static [&'static str],
            conflicting: bool,
            doubtful: &'static [&'static str],
        }
        let cases = [
            Case {
                name: "one answer",
                members: vec![answer("k", 5, "good", &["lunch_good"])],
                user_tags: tags(&["lunch_good"]),
                canonical: "k",
                duplicates: &[],
                conflicting: false,
                doubtful: &[],
            },
            Case {
                name: "a double tap with the same choice",
                members: vec![
                    answer("z", 10, "good", &["lunch_good"]),
                    answer("a", 11, "good", &["lunch_good"]),
                ],
                user_tags: tags(&["lunch_good"]),
                canonical: "z",
                duplicates: &["a"],
                conflicting: false,
                doubtful: &[],
            },
            Case {
                name: "a second, different choice whose tag the user has",
                members: vec![
                    answer("m", 20, "bad", &["lunch_bad"]),
                    answer("b", 10, "good", &["lunch_good"]),
                    answer("c", 30, "good", &["lunch_good"]),
                ],
                user_tags: tags(&["lunch_good", "lunch_bad", "vip"]),
                canonical: "b",
                duplicates: &["c", "m"],
                conflicting: true,
                doubtful: &["lunch_bad"],
            },
            Case {
                name: "a different choice whose tag the user no longer has",
                members: vec![
                    answer("b", 10, "good", &["lunch_good"]),
                    answer("m", 20, "bad", &["lunch_bad"]),
                ],
                user_tags: tags(&["lunch_good"]),
                canonical: "b",
                duplicates: &["m"],
                conflicting: true,
                doubtful: &[],
            },
            Case {
                name: "a tie goes to the smallest id",
                members: vec![answer("q", 10, "bad", &["x"]), answer("p", 10, "good", &["y"])],
                user_tags: tags(&["x", "y"]),
                canonical: "p",
                duplicates: &["q"],
                conflicting: true,
                doubtful: &["x"],
            },
        ];
        for case in cases {
            let verdict = decide(&case.members, &case.user_tags).expect(case.name);
            assert_eq!(verdict.canonical, case.canonical, "{}", case.name);
            assert_eq!(verdict.duplicates, case.duplicates, "{}", case.name);
            assert_eq!(verdict.conflicting, case.conflicting, "{}", case.name);
            assert_eq!(verdict.doubtful_tags, case.doubtful, "{}", case.name);
        }
        assert_eq!(decide(&[], &[]), None);
    }

    #[test]
    fn a_group_is_decided_at_its_smallest_id() {
        let members = [
            answer("m", 1, "a", &[]),
            answer("c", 2, "a", &[]),
            answer("x", 0, "a", &[]),
        ];
        assert!(decides_group("c", &members));
        assert!(!decides_group("m", &members));
        assert!(!decides_group("x", &members), "not the earliest: the first met");
        assert!(!decides_group("a", &members), "not a member");
    }
}
