//! `line-survey operators ...`: the console's operators, managed from a
//! shell against the Firestore the service's settings name (the first owner
//! is created this way).

use super::Format;
use crate::access::audit::{Action, Auditor, Via};
use crate::clock::Clock;
use crate::password;
use crate::store::{OperatorChange, OperatorDoc, OperatorWrite, Store, normalise_email};
use crate::values::OperatorRole;
use std::io::BufRead;

#[derive(Debug, clap::Subcommand)]
pub enum OperatorsCommand {
    /// Adds an operator. Prints a one-time password, or takes the first line
    /// of stdin as the password when one is piped in.
    Add {
        email: String,
        #[arg(long, value_parser = parse_role)]
        role: OperatorRole,
    },
    /// Lists every operator (never a password or its hash).
    List {
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Gives an operator another role (`set-role EMAIL editor` or `--role editor`).
    SetRole {
        email: String,
        #[arg(value_parser = parse_role)]
        role: Option<OperatorRole>,
        #[arg(long = "role", value_parser = parse_role)]
        role_flag: Option<OperatorRole>,
    },
    /// Disables an operator: their sessions and tokens stop working.
    Disable { email: String },
    /// Gives an operator a new password: a one-time one printed, or the first
    /// line of stdin when one is piped in.
    ResetPassword { email: String },
}

fn parse_role(text: &str) -> Result<OperatorRole, String> {
    text.parse()
}

/// How a command ended: its lines for stdout, and whether it did what it said.
#[derive(Debug)]
pub struct Outcome {
    pub lines: Vec<String>,
    pub success: bool,
}

/// Why a command could not run at all (exit status 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OperatorsError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("cannot read stdin: {0}")]
    Stdin(#[from] std::io::Error),
}

/// Runs `command`; a password piped in comes from `stdin` (`None`: stdin is
/// a terminal, so one is made up and printed).
pub(crate) async fn run(
    store: &Store,
    command: OperatorsCommand,
    stdin: Option<&mut dyn BufRead>,
) -> Result<Outcome, OperatorsError> {
    let auditor = Auditor::new(store.clone(), Clock::system());
    // Each change's audit entry lands in the change's own commit; then it is
    // completed with how the command ended.
    let entry = |name: &'static str, email: &str, summary: Vec<(&'static str, String)>| {
        let mut all = vec![("email", email.to_owned())];
        all.extend(summary);
        auditor.entry(
            None,
            Action {
                via: Via::Cli,
                name,
                route: format!(
                    "line-survey operators {}",
                    name.trim_start_matches("operator_").replace('_', "-")
                ),
                summary: all,
                touched: vec![crate::store::operator_id(email)],
            },
        )
    };
    // How the command ended, for its entry: done, refused (nothing changed),
    // or failed (Firestore: the change may or may not have landed).
    let finish = |entry: crate::store::AuditEntry, outcome: Result<&Outcome, &OperatorsError>, refused_status: u16| {
        let auditor = auditor.clone();
        let status = match outcome {
            Ok(outcome) if outcome.success => 200,
            Ok(_) => refused_status,
            Err(_) => 503,
        };
        async move { auditor.finish(&entry, status, None).await }
    };
    // A change of an existing operator, its entry in the change's commit and
    // completed with how it ended (also when Firestore failed under it).
    let change = |email: String, change: OperatorChange, name: &'static str, summary, done_line: String| {
        let audit = entry(name, &email, summary);
        let finish = &finish;
        async move {
            match store.change_operator(&email, &change, Some(&audit)).await {
                Ok(written) => {
                    let outcome = changed(written, &email, done_line);
                    finish(audit, Ok(&outcome), 404).await;
                    Ok(outcome)
                }
                Err(error) => {
                    let error = OperatorsError::from(error);
                    finish(audit, Err(&error), 404).await;
                    Err(error)
                }
            }
        }
    };
    match command {
        OperatorsCommand::Add { email, role } => {
            let email = valid_email(&email)?;
            let (password, shown) = password_from(stdin)?;
            let hash = password::hash(&password).map_err(|error| OperatorsError::Invalid(error.to_string()))?;
            let audit = entry("operator_add", &email, vec![("role", role.as_str().to_owned())]);
            let added = store.add_operator(&email, role, hash, Some(&audit)).await;
            let added = match added {
                Ok(added) => added,
                Err(error) => {
                    let error = OperatorsError::from(error);
                    finish(audit, Err(&error), 409).await;
                    return Err(error);
                }
            };
            let outcome = match added {
                OperatorWrite::Done => done(
                    [format!("added {email} as {}", role.as_str())]
                        .into_iter()
                        .chain(shown.then(|| one_time_line(&password)))
                        .collect(),
                ),
                OperatorWrite::Exists | OperatorWrite::NotFound => {
                    refused(format!("{email} is an operator already (nothing changed)"))
                }
            };
            finish(audit, Ok(&outcome), 409).await;
            Ok(outcome)
        }
        OperatorsCommand::List { format } => {
            let operators = store.operators().await?;
            Ok(done(match format {
                Format::Text => operators.iter().map(text_line).collect(),
                Format::Json => vec![json(&operators)],
            }))
        }
        OperatorsCommand::SetRole { email, role, role_flag } => {
            let email = valid_email(&email)?;
            let role = role
                .or(role_flag)
                .ok_or_else(|| OperatorsError::Invalid("set-role needs a role: owner, editor or viewer".into()))?;
            let line = format!("{email} is now {}", role.as_str());
            let summary = vec![("role", role.as_str().to_owned())];
            change(email, OperatorChange::Role(role), "operator_set_role", summary, line).await
        }
        OperatorsCommand::Disable { email } => {
            let email = valid_email(&email)?;
            let line = format!("{email} is disabled");
            change(email, OperatorChange::Disabled, "operator_disable", Vec::new(), line).await
        }
        OperatorsCommand::ResetPassword { email } => {
            let email = valid_email(&email)?;
            let (password, shown) = password_from(stdin)?;
            let hash = password::hash(&password).map_err(|error| OperatorsError::Invalid(error.to_string()))?;
            let line = format!("{email} has a new password");
            let new_hash = OperatorChange::PasswordHash(hash);
            let mut outcome = change(email, new_hash, "operator_reset_password", Vec::new(), line).await?;
            if outcome.success && shown {
                outcome.lines.push(one_time_line(&password));
            }
            Ok(outcome)
        }
    }
}

fn done(lines: Vec<String>) -> Outcome {
    Outcome { lines, success: true }
}

fn refused(line: String) -> Outcome {
    Outcome {
        lines: vec![line],
        success: false,
    }
}

fn changed(written: OperatorWrite, email: &str, line: String) -> Outcome {
    match written {
        OperatorWrite::Done => done(vec![line]),
        OperatorWrite::NotFound | OperatorWrite::Exists => refused(format!("no operator {email} (nothing changed)")),
    }
}

fn one_time_line(password: &str) -> String {
    format!("one-time password (shown once; change it after the first login): {password}")
}

/// The password piped in (its first line), or a one-time one made up here;
/// whether it is to be shown.
fn password_from(stdin: Option<&mut dyn BufRead>) -> Result<(String, bool), OperatorsError> {
    if let Some(stdin) = stdin {
        let mut line = String::new();
        stdin.read_line(&mut line)?;
        let line = line.trim_end_matches(['\r', '\n']);
        if !line.is_empty() {
            return Ok((line.to_owned(), false));
        }
    }
    Ok((password::one_time(), true))
}

/// An email as stored, or why it is not one.
fn valid_email(email: &str) -> Result<String, OperatorsError> {
    let email = normalise_email(email);
    let plausible = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.') && !domain.contains('@'));
    if plausible {
        Ok(email)
    } else {
        Err(OperatorsError::Invalid(format!("not an email address: {email:?}")))
    }
}

fn text_line(operator: &OperatorDoc) -> String {
    format!(
        "{}\t{}\t{}\tupdated {}",
        operator.email,
        operator.role.as_str(),
        if operator.disabled { "disabled" } else { "active" },
        operator.updated_at,
    )
}

fn json(operators: &[OperatorDoc]) -> String {
    let listed: Vec<serde_json::Value> = operators
        .iter()
        .map(|operator| {
            serde_json::json!({
                "email": operator.email,
                "role": operator.role.as_str(),
                "disabled": operator.disabled,
                "createdAt": operator.created_at.to_string(),
                "updatedAt": operator.updated_at.to_string(),
            })
        })
        .collect();
    serde_json::Value::Array(listed).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_checked_and_normalised() {
        let cases = [
            ("owner@shop.example", Some("owner@shop.example")),
            ("  Staff@Shop.Example ", Some("staff@shop.example")),
            ("店長@shop.example", Some("店長@shop.example")),
            ("no-at-sign", None),
            ("@shop.example", None),
            ("owner@localhost", None),
            ("a@b@shop.example", None),
            ("own er@shop.example", None),
            ("owner@shop.example\u{0}", None),
        ];
        for (typed, expected) in cases {
            assert_eq!(valid_email(typed).ok().as_deref(), expected, "{typed:?}");
        }
        assert!(valid_email(&format!("{}@shop.example", "a".repeat(250))).is_err());
    }

    #[test]
    fn a_piped_password_is_used_and_an_empty_one_is_made_up() {
        let mut piped: &[u8] = b"my long password 1\nignored\n";
        let (password, shown) = password_from(Some(&mut piped)).unwrap();
        assert_eq!((password.as_str(), shown), ("my long password 1", false));
        let mut empty: &[u8] = b"";
        let (password, shown) = password_from(Some(&mut empty)).unwrap();
        assert!(shown && password.len() == 29, "{password}");
        let (_, shown) = password_from(None).unwrap();
        assert!(shown);
    }
}
