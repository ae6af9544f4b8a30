//! `line-survey operators ...` against the emulator: the first owner added
//! from a shell, a password piped in or made up and printed once, stored
//! only as an Argon2id hash; list, set-role, disable and reset-password, and
//! every refusal (a duplicate, an unknown operator, a bad email or role).

use crate::cli::{run_piped, stdout};
use crate::helpers::firestore_rest::{FirestoreRest, string_field};
use crate::helpers::{CHANNEL_SECRET, emulator_host, new_project_id};
use std::process::{Command, Output};

/// The binary with the settings a command against `project`'s Firestore
/// needs (and nothing else from the environment), not yet started.
pub(crate) fn command_for(project: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_line-survey"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("LINE_CHANNEL_SECRET", CHANNEL_SECRET)
        .env("LINE_DRY_RUN", "true")
        .env("GOOGLE_CLOUD_PROJECT", project)
        .env("FIRESTORE_EMULATOR_HOST", emulator_host())
        .env("LOG_FORMAT", "json");
    command
}

/// Runs `line-survey operators ARGS` for `project`, with `stdin` piped in.
pub(crate) fn operators(project: &str, args: &[&str], stdin: &str) -> Output {
    let mut command = command_for(project);
    command.arg("operators").args(args);
    run_piped(command, Some(stdin))
}

/// A command's status and output, for assertion messages.
pub(crate) fn shown(output: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

async fn the_operator(firestore: &FirestoreRest) -> serde_json::Value {
    let all = firestore.list("operators").await;
    assert_eq!(all.len(), 1, "{all:?}");
    all.into_iter().next().expect("one operator")
}

#[tokio::test]
async fn the_first_owner_is_added_from_a_shell_and_managed_there() {
    let project = new_project_id();
    let firestore = FirestoreRest::new(&emulator_host(), &project);

    // A password piped in is used, never printed, stored only hashed.
    let added = operators(
        &project,
        &["add", " Owner@Shop.Example ", "--role", "owner"],
        "店長のパスワード 2026\n",
    );
    assert_eq!(added.status.code(), Some(0), "{}", shown(&added));
    assert_eq!(stdout(&added).trim(), "added owner@shop.example as owner");
    let record = the_operator(&firestore).await;
    assert_eq!(string_field(&record, "email").as_deref(), Some("owner@shop.example"));
    assert_eq!(string_field(&record, "role").as_deref(), Some("owner"));
    let hash = string_field(&record, "passwordHash").expect("a hash");
    assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
    assert!(!record.to_string().contains("店長のパスワード"));

    // The same email, however typed, is one operator: refused, nothing changed.
    let again = operators(&project, &["add", "OWNER@shop.example", "--role", "viewer"], "");
    assert_eq!(again.status.code(), Some(1), "{}", shown(&again));
    assert_eq!(
        string_field(&the_operator(&firestore).await, "role").as_deref(),
        Some("owner")
    );

    // Bad input is refused before anything is written.
    for (args, status) in [
        (vec!["add", "not-an-email", "--role", "editor"], 2),
        (vec!["add", "staff@shop.example", "--role", "admin"], 2),
        (vec!["set-role", "owner@shop.example"], 2),
        (vec!["set-role", "nobody@shop.example", "editor"], 1),
        (vec!["disable", "nobody@shop.example"], 1),
    ] {
        let refused = operators(&project, &args, "");
        assert_eq!(refused.status.code(), Some(status), "{args:?}: {}", shown(&refused));
    }
    let short = operators(&project, &["add", "staff@shop.example", "--role", "editor"], "short\n");
    assert_eq!(short.status.code(), Some(2), "{}", shown(&short));
    assert_eq!(firestore.list("operators").await.len(), 1);

    // With nothing piped in, a one-time password is made up and shown once.
    let staff = operators(&project, &["add", "staff@shop.example", "--role", "viewer"], "");
    assert_eq!(staff.status.code(), Some(0), "{}", shown(&staff));
    let text = stdout(&staff);
    let one_time = text
        .lines()
        .find_map(|line| {
            line.rsplit_once(": ")
                .filter(|(label, _)| label.starts_with("one-time"))
        })
        .map(|(_, password)| password.to_owned())
        .expect("a one-time password");
    assert_eq!(one_time.len(), 29, "{text}");
    assert!(!firestore.dump().await.contains(&one_time));

    // set-role (either form), disable, reset-password; list shows it all.
    for args in [
        vec!["set-role", "staff@shop.example", "editor"],
        vec!["set-role", "staff@shop.example", "--role", "editor"],
    ] {
        let set = operators(&project, &args, "");
        assert_eq!(set.status.code(), Some(0), "{}", shown(&set));
        assert_eq!(stdout(&set).trim(), "staff@shop.example is now editor");
    }
    let staff_record = |all: Vec<serde_json::Value>| {
        all.into_iter()
            .find(|record| string_field(record, "email").as_deref() == Some("staff@shop.example"))
            .expect("the staff member")
    };
    let before = staff_record(firestore.list("operators").await);
    let reset = operators(&project, &["reset-password", "staff@shop.example"], "");
    assert_eq!(reset.status.code(), Some(0), "{}", shown(&reset));
    assert!(stdout(&reset).contains("one-time password"), "{}", shown(&reset));
    let after = staff_record(firestore.list("operators").await);
    assert_ne!(
        string_field(&before, "passwordHash"),
        string_field(&after, "passwordHash"),
        "a new hash"
    );
    let disabled = operators(&project, &["disable", "staff@shop.example"], "");
    assert_eq!(disabled.status.code(), Some(0), "{}", shown(&disabled));

    let listed = operators(&project, &["list", "--format", "json"], "");
    assert_eq!(listed.status.code(), Some(0), "{}", shown(&listed));
    let list: serde_json::Value = serde_json::from_str(stdout(&listed).trim()).expect("JSON");
    assert_eq!(
        list,
        serde_json::json!([
            {"email": "owner@shop.example", "role": "owner", "disabled": false,
             "createdAt": list[0]["createdAt"], "updatedAt": list[0]["updatedAt"]},
            {"email": "staff@shop.example", "role": "editor", "disabled": true,
             "createdAt": list[1]["createdAt"], "updatedAt": list[1]["updatedAt"]},
        ])
    );
    let text = operators(&project, &["list"], "");
    assert!(!stdout(&text).contains("argon2"), "{}", shown(&text));
    assert!(
        stdout(&text).contains("staff@shop.example\teditor\tdisabled"),
        "{}",
        shown(&text)
    );
}
