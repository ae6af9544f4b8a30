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
    let finish = |entry: crate::store::AuditEntry, outcome: &Outcome, refused_status: u16| {
        let auditor = auditor.clone();
        let status = if outcome.success { 200 } else { refused_status };
        async move { auditor.finish(&entry, status, None).await }
    };
    match command {
        OperatorsCommand::Add { email, role } => {
            let email = valid_email(&email)?;
            let (password, shown) = password_from(stdin)?;
            let hash = password::hash(&password).map_err(|error| OperatorsError::Invalid(error.to_string()))?;
            let audit = entry("operator_add", &email, vec![("role", role.as_str().to_owned())]);
            let outcome = match store.add_operator(&email, role, hash, Some(&audit)).await? {
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
            finish(audit, &outcome, 409).await;
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
            let audit = entry("operator_set_role", &email, vec![("role", role.as_str().to_owned())]);
            let written = store
                .change_operator(&email, &OperatorChange::Role(role), Some(&audit))
                .await?;
            let outcome = changed(written, &email, format!("{email} is now {}", role.as_str()));
            finish(audit, &outcome, 404).await;
            Ok(outcome)
        }
        OperatorsCommand::Disable { email } => {
            let email = valid_email(&email)?;
            let audit = entry("operator_disable", &email, Vec::new());
            let written = store
                .change_operator(&email, &OperatorChange::Disabled, Some(&audit))
                .await?;
            let outcome = changed(written, &email, format!("{email} is disabled"));
            finish(audit, &outcome, 404).await;
            Ok(outcome)
        }
        OperatorsCommand::ResetPassword { email } => {
            let email = valid_email(&email)?;
            let (password, shown) = password_from(stdin)?;
            let hash = password::hash(&password).map_err(|error| OperatorsError::Invalid(error.to_string()))?;
            let audit = entry("operator_reset_password", &email, Vec::new());
            let written = store
                .change_operator(&email, &OperatorChange::PasswordHash(hash), Some(&audit))
                .await?;
            let mut outcome = changed(written, &email, format!("{email} has a new password"));
            finish(audit, &outcome, 404).await;
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
