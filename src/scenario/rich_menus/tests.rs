use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A PNG header of `width` x `height` (what the checks read of an image).
fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
    bytes.extend_from_slice(b"IHDR");
    bytes.extend_from_slice(&width.to_be_bytes());
    bytes.extend_from_slice(&height.to_be_bytes());
    bytes.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    bytes
}

fn samples() -> Scenarios {
    super::super::load_dir(&crate::repo_path("scenarios")).expect("the samples load")
}

/// A directory of its own under the system's temporary one.
fn fresh_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rich-menus-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const MEMBER: &str = r#"
id = "member"
image = "member.png"
size = { width = 2500, height = 843 }
chat_bar_text = "メニュー"
default = true

[[areas]]
bounds = { x = 0, y = 0, width = 1250, height = 843 }
action = { type = "scenario", scenario = "ja_satisfaction", label = "アンケート" }
[[areas]]
bounds = { x = 1250, y = 0, width = 1250, height = 843 }
action = { type = "switch", to = "survey_tab" }
"#;

const SURVEY_TAB: &str = r#"
id = "survey_tab"
image = "tab.png"
size = { width = 2500, height = 843 }
chat_bar_text = "アンケート"

[[areas]]
bounds = { x = 0, y = 0, width = 1250, height = 843 }
action = { type = "switch", to = "member" }
[[areas]]
bounds = { x = 1250, y = 0, width = 1250, height = 843 }
action = { type = "uri", uri = "https://example.com/shop" }
"#;

/// Writes the two menus (the first as `member`) with their images, and
/// checks them.
fn check(member: &str, image: &[u8]) -> Result<Vec<RichMenu>, Vec<String>> {
    let dir = fresh_dir();
    std::fs::write(dir.join("member.toml"), member).unwrap();
    std::fs::write(dir.join("member.png"), image).unwrap();
    std::fs::write(dir.join("survey_tab.toml"), SURVEY_TAB).unwrap();
    std::fs::write(dir.join("tab.png"), png(2500, 843)).unwrap();
    let checked = load_rich_menus(&dir, &samples())
        .map_err(|problems| problems.iter().map(ToString::to_string).collect::<Vec<_>>());
    std::fs::remove_dir_all(&dir).ok();
    checked
}

#[test]
fn a_valid_pair_of_menus_loads_with_its_images() {
    let menus = check(MEMBER, &png(2500, 843)).expect("valid");
    let ids: Vec<&str> = menus.iter().map(|menu| menu.file.id.as_str()).collect();
    assert_eq!(ids, ["member", "survey_tab"]);
    assert!(menus[0].file.default);
    assert_eq!(
        image_facts(&menus[0].image),
        Some((
            ImageKind::Png,
            Size {
                width: 2500,
                height: 843
            }
        ))
    );
}

#[test]
fn each_thing_line_or_the_service_would_refuse_is_named() {
    let one_area = |action: &str| {
        MEMBER.replace(
            r#"action = { type = "scenario", scenario = "ja_satisfaction", label = "アンケート" }"#,
            action,
        )
    };
    // (what is changed, the image, a phrase the problem must hold)
    let cases: Vec<(String, Vec<u8>, &str)> = vec![
        (
            MEMBER.replace(r#"id = "member""#, r#"id = "default""#),
            png(2500, 843),
            "not \"default\"",
        ),
        (
            MEMBER.replace(r#"id = "member""#, r#"id = "Member!""#),
            png(2500, 843),
            "a-z, 0-9",
        ),
        (
            MEMBER.replace(
                "width = 2500, height = 843 }\nchat",
                "width = 700, height = 843 }\nchat",
            ),
            png(700, 843),
            "size.width 700",
        ),
        (
            MEMBER.replace(
                "width = 2500, height = 843 }\nchat",
                "width = 2500, height = 200 }\nchat",
            ),
            png(2500, 200),
            "size.height 200",
        ),
        (
            MEMBER
                .replace(
                    "width = 2500, height = 843 }\nchat",
                    "width = 1000, height = 800 }\nchat",
                )
                .replace("width = 1250, height = 843", "width = 500, height = 800")
                .replace(
                    "x = 1250, y = 0, width = 1250, height = 843",
                    "x = 500, y = 0, width = 500, height = 800",
                ),
            png(1000, 800),
            "at least 1.45",
        ),
        (
            MEMBER.to_owned(),
            png(2500, 1686),
            "2500x1686 pixels but size says 2500x843",
        ),
        (
            MEMBER.to_owned(),
            b"GIF89a not a menu image".to_vec(),
            "not a PNG or JPEG",
        ),
        (
            MEMBER.replace(r#"image = "member.png""#, r#"image = "../member.png""#),
            png(2500, 843),
            "a file name beside",
        ),
        (
            MEMBER.replace(r#"image = "member.png""#, r#"image = "missing.png""#),
            png(2500, 843),
            "cannot be read",
        ),
        (
            MEMBER.replace("メニュー", "とても長いメニューの名前ですよね"),
            png(2500, 843),
            "chat_bar_text must be 1 to 14",
        ),
        (
            MEMBER.replace("x = 1250, y = 0, width = 1250", "x = 1300, y = 0, width = 1250"),
            png(2500, 843),
            "reach outside",
        ),
        (
            MEMBER.replace("x = 1250, y = 0, width = 1250", "x = 1000, y = 0, width = 1250"),
            png(2500, 843),
            "areas 1 and 2 overlap",
        ),
        (
            one_area(r#"action = { type = "scenario", scenario = "nope" }"#),
            png(2500, 843),
            "\"nope\" is not a loaded scenario",
        ),
        (
            MEMBER.replace(r#"to = "survey_tab""#, r#"to = "nowhere""#),
            png(2500, 843),
            "no menu file has that id",
        ),
        (
            MEMBER.replace(r#"to = "survey_tab""#, r#"to = "member""#),
            png(2500, 843),
            "this menu itself",
        ),
        (
            one_area(r#"action = { type = "uri", uri = "javascript:alert(1)" }"#),
            png(2500, 843),
            "uri must be https://",
        ),
        (
            one_area(r#"action = { type = "message", text = " " }"#),
            png(2500, 843),
            "message text must be",
        ),
        (
            one_area(
                r#"action = { type = "message", text = "hi", label = "ラベルがとても長すぎて二十文字を超えてしまうもの" }"#,
            ),
            png(2500, 843),
            "label must be 1 to 20",
        ),
        (
            MEMBER.replace("[[areas]]", "[[nope]]"),
            png(2500, 843),
            "not a valid rich menu file",
        ),
    ];
    for (member, image, expected) in cases {
        let problems = check(&member, &image).expect_err(expected);
        assert!(
            problems.iter().any(|problem| problem.contains(expected)),
            "{expected}: {problems:?}"
        );
    }
}

#[test]
fn ids_must_be_unique_and_only_one_menu_the_default() {
    let twin = MEMBER.replace("member.png", "tab.png");
    let dir = fresh_dir();
    std::fs::write(dir.join("member.toml"), MEMBER).unwrap();
    std::fs::write(dir.join("member2.toml"), &twin).unwrap();
    std::fs::write(dir.join("survey_tab.toml"), SURVEY_TAB).unwrap();
    std::fs::write(dir.join("member.png"), png(2500, 843)).unwrap();
    std::fs::write(dir.join("tab.png"), png(2500, 843)).unwrap();
    let problems: Vec<String> = load_rich_menus(&dir, &samples())
        .expect_err("refused")
        .iter()
        .map(ToString::to_string)
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        problems.iter().any(|problem| problem.contains("is also the id of")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|problem| problem.contains("more than one default menu")),
        "{problems:?}"
    );
}

#[test]
fn areas_overlap_only_when_they_share_a_pixel() {
    let area = |x, y, width, height| Bounds { x, y, width, height };
    // (a, b, overlap)
    let cases = [
        (area(0, 0, 100, 100), area(100, 0, 100, 100), false),
        (area(0, 0, 100, 100), area(99, 99, 10, 10), true),
        (area(0, 0, 100, 100), area(0, 100, 100, 100), false),
        (area(10, 10, 10, 10), area(0, 0, 100, 100), true),
        (area(u32::MAX, 0, u32::MAX, 1), area(0, 0, 1, 1), false),
    ];
    for (a, b, overlap) in cases {
        assert_eq!(a.overlaps(&b), overlap, "{a:?} {b:?}");
        assert_eq!(b.overlaps(&a), overlap, "{b:?} {a:?}");
    }
}

#[test]
fn limits_hold_exactly_at_their_edges_counted_as_line_counts() {
    let chat_bar = |text: &str| MEMBER.replace("chat_bar_text = \"メニュー\"", &format!("chat_bar_text = \"{text}\""));
    let label = |text: &str| MEMBER.replace("label = \"アンケート\"", &format!("label = \"{text}\""));
    let uri = |uri: &str| {
        MEMBER.replace(
            r#"action = { type = "scenario", scenario = "ja_satisfaction", label = "アンケート" }"#,
            &format!(r#"action = {{ type = "uri", uri = "{uri}" }}"#),
        )
    };
    let sized = |width: u32, height: u32| {
        (
            MEMBER
                .replace(
                    "width = 2500, height = 843 }\nchat",
                    &format!("width = {width}, height = {height} }}\nchat"),
                )
                .replace(
                    "x = 0, y = 0, width = 1250, height = 843",
                    "x = 0, y = 0, width = 100, height = 100",
                )
                .replace(
                    "x = 1250, y = 0, width = 1250, height = 843",
                    "x = 100, y = 0, width = 100, height = 100",
                ),
            png(width, height),
        )
    };
    let family = "👨‍👩‍👧"; // one grapheme, five chars
    // (file, image, accepted)
    let cases: Vec<(String, Vec<u8>, bool)> = vec![
        (chat_bar(&"あ".repeat(14)), png(2500, 843), true),
        (chat_bar(&"あ".repeat(15)), png(2500, 843), false),
        (chat_bar(&family.repeat(14)), png(2500, 843), true),
        (chat_bar(""), png(2500, 843), false),
        (label(&"ラ".repeat(20)), png(2500, 843), true),
        (label(&"ラ".repeat(21)), png(2500, 843), false),
        (label(&family.repeat(20)), png(2500, 843), true),
        (
            uri(&format!("https://example.com/{}", "a".repeat(1000 - 20))),
            png(2500, 843),
            true,
        ),
        (
            uri(&format!("https://example.com/{}", "a".repeat(1001 - 20))),
            png(2500, 843),
            false,
        ),
        (uri("HTTPS://example.com/"), png(2500, 843), true),
        (uri("https://"), png(2500, 843), false),
        (uri("https://example.com/a b"), png(2500, 843), false),
        (sized(800, 250).0, sized(800, 250).1, true),
        (sized(799, 250).0, sized(799, 250).1, false),
        (sized(2501, 843).0, sized(2501, 843).1, false),
        (sized(2500, 249).0, sized(2500, 249).1, false),
        // 1.45 exactly is allowed; a pixel taller is not.
        (sized(1450, 1000).0, sized(1450, 1000).1, true),
        (sized(1450, 1001).0, sized(1450, 1001).1, false),
    ];
    for (index, (file, image, accepted)) in cases.into_iter().enumerate() {
        assert_eq!(
            check(&file, &image).is_ok(),
            accepted,
            "case {index}: {:?}",
            check(&file, &image)
        );
    }
    // Ids: 32 characters are fine, 33 are not (the other file's switch to
    // "member" aside).
    let id_problem = |length: usize| {
        let file = MEMBER.replace("id = \"member\"", &format!("id = \"{}\"", "m".repeat(length)));
        check(&file, &png(2500, 843))
            .err()
            .unwrap_or_default()
            .iter()
            .any(|problem| problem.contains("a-z, 0-9"))
    };
    assert!(!id_problem(32));
    assert!(id_problem(33));
}

#[test]
fn images_are_plain_files_within_the_limit_png_or_jpeg() {
    // A JPEG's header: SOI, then a baseline frame of 843 x 2500.
    let mut jpeg = vec![0xff, 0xd8, 0xff, 0xc0, 0x00, 0x11, 0x08];
    jpeg.extend_from_slice(&843u16.to_be_bytes());
    jpeg.extend_from_slice(&2500u16.to_be_bytes());
    jpeg.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1, 0xff, 0xd9]);
    assert_eq!(
        image_facts(&jpeg),
        Some((
            ImageKind::Jpeg,
            Size {
                width: 2500,
                height: 843
            }
        ))
    );
    assert!(check(MEMBER, &jpeg).is_ok(), "{:?}", check(MEMBER, &jpeg));

    let mut large = png(2500, 843);
    large.resize(1_000_001, 0);
    let problems = check(MEMBER, &large).expect_err("over 1 MB");
    assert!(
        problems.iter().any(|problem| problem.contains("at most 1 MB")),
        "{problems:?}"
    );

    // A link, even to a valid image beside it, is refused.
    let dir = fresh_dir();
    std::fs::write(
        dir.join("member.toml"),
        MEMBER.replace("to = \"survey_tab\"", "to = \"member2\""),
    )
    .unwrap();
    std::fs::write(dir.join("real.png"), png(2500, 843)).unwrap();
    std::os::unix::fs::symlink(dir.join("real.png"), dir.join("member.png")).unwrap();
    let problems: Vec<String> = load_rich_menus(&dir, &samples())
        .expect_err("a link")
        .iter()
        .map(ToString::to_string)
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        problems.iter().any(|problem| problem.contains("must be a plain file")),
        "{problems:?}"
    );
}

#[test]
fn a_scenario_linking_a_menu_no_file_has_is_a_problem_and_default_is_not() {
    let dir = fresh_dir();
    let scenario = |menu: &str| {
        format!(
            r#"
id = "links"
version = 1
[[nodes]]
id = "hello"
kind = "message"
text = "こんにちは"
rich_menu = "{menu}"
"#
        )
    };
    let scenarios_dir = dir.join("scenarios");
    let menus_dir = dir.join("menus");
    std::fs::create_dir_all(&scenarios_dir).unwrap();
    std::fs::create_dir_all(&menus_dir).unwrap();
    let alone = SURVEY_TAB.replace(
        r#"{ type = "switch", to = "member" }"#,
        r#"{ type = "uri", uri = "https://example.com" }"#,
    );
    std::fs::write(menus_dir.join("survey_tab.toml"), alone).unwrap();
    std::fs::write(menus_dir.join("tab.png"), png(2500, 843)).unwrap();
    for (menu, problem) in [
        ("survey_tab", None),
        ("default", None),
        ("member", Some("rich_menu \"member\": no menu file")),
    ] {
        std::fs::write(scenarios_dir.join("links.toml"), scenario(menu)).unwrap();
        let scenarios = super::super::load_dir(&scenarios_dir).expect("the scenario loads");
        let found = load_rich_menus(&menus_dir, &scenarios)
            .map_err(|problems| problems.iter().map(ToString::to_string).collect::<Vec<_>>());
        match problem {
            None => assert!(found.is_ok(), "{menu}: {found:?}"),
            Some(problem) => {
                let problems = found.expect_err(menu);
                assert!(problems.iter().any(|found| found.contains(problem)), "{problems:?}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
