use clap::{Parser, Subcommand};
use line_survey::cli::{self, Format};
use line_survey::config::Config;
use line_survey::startup::Application;
use line_survey::telemetry;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// LINE survey scenarios on Firestore: the webhook service and its tools.
#[derive(Parser)]
#[command(name = "line-survey", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the service (the default): settings come from the environment.
    Serve,
    /// Validates scenario files without Firestore or LINE; exit status 1 on any problem.
    Check {
        /// The scenario directory (default: $SCENARIOS_DIR, else ./scenarios).
        dir: Option<PathBuf>,
        /// Also the rich menu files of this directory (default: $RICH_MENUS_DIR
        /// when set, else none).
        #[arg(long = "rich-menus", value_name = "DIR")]
        rich_menus: Option<PathBuf>,
        /// Also the friend-add sources file (default: $SOURCES_FILE when set,
        /// else ./sources.toml when it exists).
        #[arg(long = "sources", value_name = "FILE")]
        sources: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// A conversation with one scenario in the terminal, in memory: reads one
    /// action per line (a number taps a choice, /date VALUE picks a date,
    /// /follow, /tap-card, /quit; anything else is sent as text).
    Simulate {
        scenario: String,
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Takes the arm with this label at every split that has one, instead
        /// of the simulated user's own arm (repeatable: `--variant A --variant B2`).
        #[arg(long = "variant", value_name = "LABEL")]
        variants: Vec<String>,
        /// A tag the user has before the first line (repeatable).
        #[arg(long = "tag", value_name = "TAG")]
        tags: Vec<String>,
        /// A user field before the first line, `name=value` (repeatable).
        #[arg(long = "field", value_name = "NAME=VALUE", value_parser = cli::parse_field)]
        fields: Vec<(String, line_survey::values::FieldValue)>,
        /// The user's LINE display name, for `{name}` (without it, the fallback).
        #[arg(long = "name", value_name = "NAME")]
        name: Option<String>,
    },
    /// Replays transcript files against the scenarios; exit status 1 on a difference.
    Test {
        /// The transcripts' directory (default: the scenario directory's tests/).
        dir: Option<PathBuf>,
        /// The scenario directory (default: $SCENARIOS_DIR, else ./scenarios).
        #[arg(long)]
        scenarios: Option<PathBuf>,
    },
    /// Prints the JSON Schema of the scenario file format.
    Schema,
    /// The console's operators: add, list, set-role, disable, reset-password
    /// (against the Firestore the settings name).
    Operators {
        #[command(subcommand)]
        command: cli::operators::OperatorsCommand,
    },
    /// Data migrations against the Firestore the settings name:
    /// `legacy-answers` (answers an earlier bot saved under random ids) and
    /// `status`.
    Migrate {
        #[command(subcommand)]
        command: cli::migrate::MigrateCommand,
    },
    /// Rich menus on LINE, from the files of $RICH_MENUS_DIR (needs the
    /// service's settings: LINE and Firestore).
    Richmenus {
        #[command(subcommand)]
        command: RichMenusCommand,
    },
}

#[derive(Subcommand)]
enum RichMenusCommand {
    /// Creates, updates and retires the menus on LINE so they match the files;
    /// resumable, one deploy at a time.
    Deploy {
        /// Prints what would be created, moved and deleted; changes nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// The sources file `check` validates: the one given, else `$SOURCES_FILE`,
/// else `./sources.toml` when it exists (none otherwise).
fn sources_file(given: Option<PathBuf>) -> Option<PathBuf> {
    given
        .or_else(|| {
            std::env::var_os("SOURCES_FILE")
                .filter(|file| !file.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| Some(PathBuf::from("sources.toml")).filter(|file| file.exists()))
}

fn scenarios_dir(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("SCENARIOS_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("scenarios"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Only the tools hold stdout: the service's log writes to it from many threads.
    let stdout = || std::io::stdout().lock();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(),
        Command::Check {
            dir,
            rich_menus,
            sources,
            format,
        } => match cli::check(
            &scenarios_dir(dir),
            cli::Also {
                rich_menus: rich_menus
                    .or_else(|| {
                        std::env::var_os("RICH_MENUS_DIR")
                            .filter(|dir| !dir.is_empty())
                            .map(PathBuf::from)
                    })
                    .as_deref(),
                sources: sources_file(sources).as_deref(),
            },
            format,
            &mut stdout(),
        ) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(error) => failed(&error.to_string()),
        },
        Command::Simulate {
            scenario,
            dir,
            variants,
            tags,
            fields,
            name,
        } => {
            let stdin = std::io::stdin().lock();
            let given = cli::Given {
                tags,
                fields,
                variants,
                name,
            };
            match cli::simulate(&scenarios_dir(dir), &scenario, given, stdin, &mut stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => failed(&error),
            }
        }
        Command::Test { dir, scenarios } => {
            let scenarios = scenarios_dir(scenarios);
            let tests = dir.unwrap_or_else(|| scenarios.join("tests"));
            match cli::run_transcripts(&scenarios, &tests, &mut stdout()) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(error) => failed(&error),
            }
        }
        Command::Richmenus {
            command: RichMenusCommand::Deploy { dry_run },
        } => deploy_rich_menus(dry_run),
        Command::Operators { command } => operators(command),
        Command::Migrate { command } => migrate(command),
        Command::Schema => match stdout().write_all(cli::schema().as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            // A closed pipe (`| head`) is not worth a panic.
            Err(error) => failed(&error.to_string()),
        },
    }
}

fn failed(error: &str) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::from(2)
}

/// Runs `work` on a runtime with the settings from the environment and the
/// log set up, as the service and the commands that need its settings do.
fn with_settings<F: std::future::Future<Output = ExitCode>>(work: impl FnOnce(Config) -> F) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => return failed(&format!("cannot start the runtime: {error}")),
    };
    runtime.block_on(async {
        let config = match Config::from_env() {
            Ok(config) => config,
            Err(error) => {
                eprintln!("configuration error: {error}");
                return ExitCode::from(2);
            }
        };
        telemetry::init(config.log_format);
        work(config).await
    })
}

fn serve() -> ExitCode {
    with_settings(|config| async {
        let application = match Application::build(config).await {
            Ok(application) => application,
            Err(error) => {
                tracing::error!(error = format!("{error:#}"), "start-up failed");
                eprintln!("start-up failed: {error:#}");
                return ExitCode::from(1);
            }
        };
        match application.run_until_stopped().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(error = %error, "server stopped with an error");
                ExitCode::FAILURE
            }
        }
    })
}

fn operators(command: cli::operators::OperatorsCommand) -> ExitCode {
    with_settings(|config| async move {
        match line_survey::startup::operators(config, command).await {
            Ok(outcome) => {
                let mut out = std::io::stdout().lock();
                for line in &outcome.lines {
                    if writeln!(out, "{line}").is_err() {
                        break;
                    }
                }
                if outcome.success {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(error) => failed(&format!("{error:#}")),
        }
    })
}

fn migrate(command: cli::migrate::MigrateCommand) -> ExitCode {
    with_settings(|config| async move {
        match line_survey::startup::migrate(config, command).await {
            Ok(lines) => {
                let mut out = std::io::stdout().lock();
                for line in &lines {
                    if writeln!(out, "{line}").is_err() {
                        break;
                    }
                }
                ExitCode::SUCCESS
            }
            Err(error) => failed(&format!("{error:#}")),
        }
    })
}

fn deploy_rich_menus(dry_run: bool) -> ExitCode {
    with_settings(|config| async move {
        match line_survey::startup::deploy_rich_menus(config, dry_run).await {
            Ok(lines) => {
                let mut out = std::io::stdout().lock();
                for line in lines {
                    if writeln!(out, "{line}").is_err() {
                        break;
                    }
                }
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("rich menu deploy failed: {error:#}");
                ExitCode::from(1)
            }
        }
    })
}
