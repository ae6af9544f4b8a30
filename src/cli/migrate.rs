//! `line-survey migrate ...`: data migrations against the Firestore the
//! service's settings name. `legacy-answers` moves answers an earlier bot
//! saved under random ids onto their deterministic ids (see the README).

use super::Format;
use super::operators::Outcome;
use crate::clock::Clock;
use crate::pipeline::legacy_answers::{DEFAULT_BATCH, DeleteReport, LegacyMigration, MigrationError, MigrationReport};
use crate::store::Store;

#[derive(Debug, clap::Subcommand)]
pub enum MigrateCommand {
    /// Gives every answer saved under a random id its deterministic document
    /// and the user's scenario marker (safe while the service runs; a killed
    /// run goes on where it stopped). `--delete-legacy --yes`, after it
    /// finished, deletes the legacy documents.
    LegacyAnswers {
        /// Writes nothing: prints the report a run would produce.
        #[arg(long)]
        dry_run: bool,
        /// Documents per page (1 to 500): the cursor and counts are saved after each.
        #[arg(long, default_value_t = DEFAULT_BATCH, value_parser = clap::value_parser!(u32).range(1..=500))]
        batch: u32,
        /// Deletes the legacy documents whose group has its deterministic answer
        /// (only once the migration finished, and only with --yes).
        #[arg(long)]
        delete_legacy: bool,
        /// Confirms --delete-legacy.
        #[arg(long, requires = "delete_legacy")]
        yes: bool,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Prints where the legacy-answers migration stands, and whether
    /// LEGACY_ANSWER_LOOKUP can be switched off.
    Status {
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
}

/// Runs `command`; a refusal (`--delete-legacy` too early or without `--yes`)
/// or a failure is an error (exit status 2).
pub(crate) async fn run(store: Store, command: MigrateCommand) -> Result<Outcome, MigrationError> {
    match command {
        MigrateCommand::LegacyAnswers {
            dry_run,
            batch,
            delete_legacy,
            yes,
            format,
        } => {
            let migration = LegacyMigration::new(store, Clock::system(), batch);
            if delete_legacy {
                let report = migration.delete_legacy(dry_run, yes).await?;
                Ok(done(delete_lines(&report, format)))
            } else {
                let report = migration.run(dry_run).await?;
                Ok(done(report_lines(&report, format)))
            }
        }
        MigrateCommand::Status { format } => {
            let report = LegacyMigration::new(store, Clock::system(), DEFAULT_BATCH)
                .status()
                .await?;
            Ok(done(report_lines(&report, format)))
        }
    }
}

fn done(lines: Vec<String>) -> Outcome {
    Outcome { lines, success: true }
}

/// The report as JSON (the keys the README lists) or in words.
pub(crate) fn report_lines(report: &MigrationReport, format: Format) -> Vec<String> {
    let counts = &report.counts;
    match format {
        Format::Json => {
            let doubtful: Vec<serde_json::Value> = report
                .doubtful
                .iter()
                .map(|user| serde_json::json!({"lineUserId": user.line_user_id, "tags": user.tags}))
                .collect();
            vec![
                serde_json::json!({
                    "legacyDocuments": counts.legacy_documents,
                    "groups": counts.groups,
                    "duplicatedGroups": counts.duplicated_groups,
                    "conflictingGroups": counts.conflicting_groups,
                    "doubtfulTagUsers": report.doubtful_tag_users,
                    "unreadable": counts.unreadable,
                    "migrated": counts.migrated,
                    "alreadyMigrated": counts.already_migrated,
                    "finished": report.finished,
                    "dryRun": report.dry_run,
                    "lookupCanBeSwitchedOff": report.lookup_can_go,
                    "doubtfulUsers": doubtful,
                    "unreadableIds": report.unreadable_ids,
                })
                .to_string(),
            ]
        }
        Format::Text => {
            let mut lines = vec![
                if report.dry_run {
                    "Legacy answers: a dry run (nothing was written)".to_owned()
                } else {
                    "Legacy answers".to_owned()
                },
                format!("  legacy documents:                {}", counts.legacy_documents),
                format!("  groups (scenario, question, user): {}", counts.groups),
                format!("  groups with duplicates:          {}", counts.duplicated_groups),
                format!("  groups with conflicting choices: {}", counts.conflicting_groups),
                format!("  users with doubtful tags:        {}", report.doubtful_tag_users),
                format!("  unreadable documents:            {}", counts.unreadable),
                format!(
                    "  {}               {}",
                    if report.dry_run { "to migrate:" } else { "migrated:  " },
                    counts.migrated
                ),
                format!("  already migrated:                {}", counts.already_migrated),
                format!(
                    "  finished:                        {}",
                    if report.finished { "yes" } else { "no" }
                ),
            ];
            if !report.doubtful.is_empty() {
                lines.push(
                    "Users whose tags include a tag only a duplicate answer gave (tags are kept: check them):"
                        .to_owned(),
                );
                for user in &report.doubtful {
                    lines.push(format!("  {}: {}", user.line_user_id, user.tags.join(", ")));
                }
                if report.doubtful_tag_users > report.doubtful.len() as u64 {
                    lines.push(format!(
                        "  ... and {} more",
                        report.doubtful_tag_users - report.doubtful.len() as u64
                    ));
                }
            }
            if !report.unreadable_ids.is_empty() {
                lines.push("Unreadable documents (left alone):".to_owned());
                lines.extend(
                    report
                        .unreadable_ids
                        .iter()
                        .map(|id| format!("  survey_responses/{id}")),
                );
                if counts.unreadable > report.unreadable_ids.len() as u64 {
                    lines.push(format!(
                        "  ... and {} more",
                        counts.unreadable - report.unreadable_ids.len() as u64
                    ));
                }
            }
            lines.push(if report.lookup_can_go {
                "The migration has finished: LEGACY_ANSWER_LOOKUP can be switched off.".to_owned()
            } else if report.finished {
                format!(
                    "The migration has finished, but {} unreadable documents name a scenario and a user: the lookup still finds them, and without it those users could start their surveys again. Fix or delete them, run the migration again, then switch LEGACY_ANSWER_LOOKUP off.",
                    counts.unreadable_with_user
                )
            } else if report.started {
                "The migration has not finished: run `line-survey migrate legacy-answers` again to go on; keep LEGACY_ANSWER_LOOKUP=true until it has.".to_owned()
            } else {
                "The migration has not run: keep LEGACY_ANSWER_LOOKUP=true until `line-survey migrate legacy-answers` has finished.".to_owned()
            });
            lines
        }
    }
}

fn delete_lines(report: &DeleteReport, format: Format) -> Vec<String> {
    match format {
        Format::Json => vec![
            serde_json::json!({
                "deletable": report.deletable,
                "deleted": report.deleted,
                "dryRun": report.dry_run,
                "deletableIds": report.named,
            })
            .to_string(),
        ],
        Format::Text => {
            let mut lines = vec![if report.dry_run {
                format!(
                    "Legacy answers: a dry run would delete {} legacy documents whose group has its deterministic answer (nothing was deleted)",
                    report.deletable
                )
            } else {
                format!(
                    "Legacy answers: deleted {} legacy documents whose group has its deterministic answer",
                    report.deleted
                )
            }];
            lines.extend(report.named.iter().map(|id| format!("  survey_responses/{id}")));
            if report.deletable > report.named.len() as u64 {
                lines.push(format!(
                    "  ... and {} more",
                    report.deletable - report.named.len() as u64
                ));
            }
            lines
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MigrationCounts;

    fn report(dry_run: bool, started: bool, finished: bool, lookup_can_go: bool) -> MigrationReport {
        MigrationReport {
            counts: MigrationCounts {
                legacy_documents: 2900,
                groups: 2000,
                duplicated_groups: 600,
                conflicting_groups: 200,
                unreadable: 20,
                unreadable_with_user: 7,
                migrated: 1950,
                already_migrated: 50,
            },
            doubtful_tag_users: 3,
            doubtful: Vec::new(),
            unreadable_ids: vec!["0a1b".to_owned()],
            finished,
            lookup_can_go,
            started,
            dry_run,
        }
    }

    #[test]
    fn the_report_in_words_names_each_count_and_what_to_do_next() {
        // (dry run, started, finished, lookup can go), its first line, a
        // line it holds, and how it ends.
        let cases = [
            (
                (true, false, false, false),
                "Legacy answers: a dry run (nothing was written)",
                "  to migrate:               1950",
                "The migration has not run",
            ),
            (
                (false, true, false, false),
                "Legacy answers",
                "  migrated:                 1950",
                "The migration has not finished",
            ),
            (
                (false, false, true, false),
                "Legacy answers",
                "  groups with duplicates:          600",
                "The migration has finished, but 7 unreadable documents name a scenario and a user",
            ),
            (
                (false, false, true, true),
                "Legacy answers",
                "  unreadable documents:            20",
                "The migration has finished: LEGACY_ANSWER_LOOKUP can be switched off.",
            ),
        ];
        for ((dry_run, started, finished, can_go), first, holds, last) in cases {
            let lines = report_lines(&report(dry_run, started, finished, can_go), Format::Text);
            assert_eq!(lines.first().map(String::as_str), Some(first));
            assert!(lines.iter().any(|line| line == holds), "{holds:?} in {lines:#?}");
            assert!(lines.contains(&"  survey_responses/0a1b".to_owned()), "{lines:#?}");
            assert!(
                lines.last().is_some_and(|line| line.starts_with(last)),
                "{last:?} at the end of {lines:#?}"
            );
        }
    }
}
