//! The CSV export of a scenario's answers, streamed a page at a time.
//!
//! [`Exporter::start`] checks the request (scenario, dates) and reads the first
//! page before anything is sent, so an unknown scenario, a bad date or an
//! unreachable Firestore still gets its status code. [`Export::into_stream`]
//! then yields the BOM, the header and the first page's rows, and reads each
//! further page only when the one before has been taken by the response: memory
//! holds one page (500 answers) whatever the number of answers. A page that
//! cannot be read ends the stream with an error, which aborts the response
//! (no final chunk), so a client never takes a cut file for a whole one.
//!
//! A date range is applied to each page in memory: `answeredAt` has no index
//! (see `store::export`), so every answer of the scenario is read either way.

mod format;

pub(crate) use format::{Cells, HEADER};

use crate::engine::Engine;
use crate::engine::results::{DayRange, RangeError};
use crate::ids::ScenarioId;
use crate::scenario::schedule::day_start;
use crate::store::{AnswerPage, EXPORT_PAGE, ListedAnswer, Store, StoreError};
use actix_web::web::Bytes;
use chrono::NaiveDate;
use chrono_tz::Tz;
use format::{FirstSources, Labels};
use futures::Stream;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    #[error("no scenario with id {0:?}")]
    UnknownScenario(String),
    #[error(transparent)]
    BadRange(#[from] RangeError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the CSV could not be written: {0}")]
    Format(#[from] csv::Error),
}

/// Streams scenarios' answers as CSV.
#[derive(Clone)]
pub(crate) struct Exporter {
    engine: Engine,
    store: Store,
}

/// An export whose request was checked and whose first page was read.
pub(crate) struct Export {
    store: Store,
    scenario: String,
    zone: Tz,
    labels: Labels,
    /// `[from, to)` in microseconds since the epoch, when a range was asked.
    range: Option<(i64, i64)>,
    first: ReadPage,
    from: Option<NaiveDate>,
    to: Option<NaiveDate>,
    /// Only the answers of this campaign's run.
    campaign: Option<String>,
    /// Only the answers of users who have this tag now.
    tag: Option<String>,
    /// How text cells are written.
    cells: format::Cells,
}

impl Exporter {
    pub(crate) fn new(engine: Engine, store: Store) -> Self {
        Self { engine, store }
    }

    /// Checks the request and reads the first page.
    /// `cells`: formula-like text defused (the default) or raw.
    pub(crate) async fn start(
        &self,
        scenario: &str,
        asked: &ExportFilters<'_>,
        cells: format::Cells,
    ) -> Result<Export, ExportError> {
        let ExportFilters {
            from,
            to,
            campaign,
            tag,
        } = *asked;
        let unknown = || ExportError::UnknownScenario(scenario.to_owned());
        let id = ScenarioId::parse(scenario).map_err(|_| unknown())?;
        let loaded = self.engine.scenario(&id).ok_or_else(unknown)?;
        let timing = loaded.timing().clone();
        // The same days as the results report takes (`YYYY-MM-DD`, 1970 to 9999).
        let DayRange { from, to } = DayRange::parse(from, to)?;
        let range = (from.is_some() || to.is_some()).then(|| {
            let start = from.map_or(i64::MIN, |day| day_start(&timing, day).timestamp_micros());
            let end = to
                .and_then(|day| day.succ_opt())
                .map_or(i64::MAX, |day| day_start(&timing, day).timestamp_micros());
            (start, end)
        });
        let labels = Labels::of(loaded);
        let first = read_page(&self.store, scenario, campaign, tag, None, EXPORT_PAGE, |answer| {
            in_range(range, answer)
        })
        .await?;
        Ok(Export {
            store: self.store.clone(),
            scenario: scenario.to_owned(),
            zone: timing.zone,
            labels,
            range,
            first,
            from,
            to,
            campaign: campaign.map(str::to_owned),
            tag: tag.map(str::to_owned),
            cells,
        })
    }
}

/// Which answers an export takes: `from` and `to` are dates (`YYYY-MM-DD`,
/// both included) in the scenario's time zone; `campaign` keeps the answers of
/// that campaign's run only; `tag` those of users who have the tag now.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ExportFilters<'a> {
    pub(crate) from: Option<&'a str>,
    pub(crate) to: Option<&'a str>,
    pub(crate) campaign: Option<&'a str>,
    pub(crate) tag: Option<&'a str>,
}

/// A page of answers with the first sources of their users.
#[derive(Default)]
struct ReadPage {
    page: AnswerPage,
    first_sources: FirstSources,
    /// With a tag asked: the users of the page who have it now.
    tagged: Option<std::collections::HashSet<String>>,
}

impl ReadPage {
    /// Whether the tag asked for (if any) lets `answer` through.
    fn tag_allows(&self, answer: &ListedAnswer) -> bool {
        self.tagged
            .as_ref()
            .is_none_or(|tagged| tagged.contains(&answer.line_user_id))
    }
}

/// A page of `scenario`'s answers, and the first sources of the users of
/// those `wanted` (their records read by id: one more round trip a page,
/// none when the page has no answer wanted).
async fn read_page(
    store: &Store,
    scenario: &str,
    campaign: Option<&str>,
    tag: Option<&str>,
    after: Option<&str>,
    limit: u32,
    wanted: impl Fn(&ListedAnswer) -> bool,
) -> Result<ReadPage, StoreError> {
    let page = store.answers_page(scenario, campaign, after, limit).await?;
    let mut users: Vec<String> = page
        .answers
        .iter()
        .filter(|answer| wanted(answer))
        .map(|answer| answer.line_user_id.clone())
        .collect();
    users.sort_unstable();
    users.dedup();
    let facts = store.users_by_id(&users).await?;
    let tagged = tag.map(|tag| {
        facts
            .iter()
            .filter(|user| user.tags.iter().any(|has| has == tag))
            .map(|user| user.id.clone())
            .collect()
    });
    let first_sources = facts
        .into_iter()
        .filter_map(|user| Some((user.id, user.first_source?)))
        .collect();
    Ok(ReadPage {
        page,
        first_sources,
        tagged,
    })
}

/// One page of a scenario's answers as the CSV has them, for reading on screen.
pub(crate) struct RowsPage {
    pub(crate) rows: Vec<[String; 9]>,
    /// The cursor of the next page, when there is one.
    pub(crate) next: Option<String>,
}

impl Exporter {
    /// Up to `limit` answers of `scenario` after the answer id `after`, in
    /// answer-id order, formatted as the CSV's rows.
    pub(crate) async fn page(&self, scenario: &str, after: Option<&str>, limit: u32) -> Result<RowsPage, ExportError> {
        let unknown = || ExportError::UnknownScenario(scenario.to_owned());
        let id = ScenarioId::parse(scenario).map_err(|_| unknown())?;
        let loaded = self.engine.scenario(&id).ok_or_else(unknown)?;
        let (labels, zone) = (Labels::of(loaded), loaded.timing().zone);
        let ReadPage {
            page, first_sources, ..
        } = read_page(&self.store, scenario, None, None, after, limit, |_| true).await?;
        Ok(RowsPage {
            rows: page
                .answers
                .iter()
                // On screen (HTML-escaped there), values as stored.
                .map(|answer| format::row(answer, &labels, &first_sources, zone, format::Cells::Raw))
                .collect(),
            next: page.next,
        })
    }
}

/// Whether `answer` was answered in `range` (`[from, to)` in microseconds;
/// `None`: every answer).
fn in_range(range: Option<(i64, i64)>, answer: &ListedAnswer) -> bool {
    match range {
        None => true,
        Some((start, end)) => answer
            .answered_at
            .map(firestore::jiff::Timestamp::as_microsecond)
            .is_some_and(|at| start <= at && at < end),
    }
}

/// Where the stream is.
enum Step {
    /// The first page, read before the response began.
    First(ReadPage),
    /// The next page starts after this answer id.
    After(String),
    Done,
}

struct Progress {
    export: Export,
    step: Step,
    rows: u64,
    pages: u64,
}

impl Export {
    /// `answers-{scenario}[-from][_to].csv`, with characters other than ASCII
    /// letters, digits, `-`, `_` and `.` replaced, so the header needs no quoting
    /// rules of its own.
    pub(crate) fn filename(&self) -> String {
        let safe: String = self
            .scenario
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut name = format!("answers-{safe}");
        if let Some(campaign) = &self.campaign {
            // A campaign id is 40 hex digits (checked by the route).
            name.push_str(&format!("-campaign-{campaign}"));
        }
        if let Some(from) = self.from {
            name.push_str(&format!("-from-{from}"));
        }
        if let Some(to) = self.to {
            name.push_str(&format!("-to-{to}"));
        }
        if self.tag.is_some() {
            // A tag may be any text: the name only says the file is cut by one.
            name.push_str("-tagged");
        }
        name.push_str(".csv");
        name
    }

    fn wanted(&self, answer: &ListedAnswer) -> bool {
        in_range(self.range, answer)
    }

    /// The CSV, a chunk per page: the first chunk starts with the BOM and the
    /// header. A page that cannot be read ends it with an error.
    pub(crate) fn into_stream(mut self) -> impl Stream<Item = Result<Bytes, ExportError>> + 'static {
        let first = std::mem::take(&mut self.first);
        let progress = Progress {
            export: self,
            step: Step::First(first),
            rows: 0,
            pages: 0,
        };
        futures::stream::try_unfold(progress, |mut progress| async move {
            let head = matches!(progress.step, Step::First(_));
            loop {
                let page = match std::mem::replace(&mut progress.step, Step::Done) {
                    Step::Done => {
                        tracing::info!(
                            scenario.id = %progress.export.scenario,
                            rows = progress.rows,
                            pages = progress.pages,
                            outcome = "exported",
                            "answers exported"
                        );
                        return Ok(None);
                    }
                    Step::First(page) => page,
                    Step::After(cursor) => {
                        let export = &progress.export;
                        let read = read_page(
                            &export.store,
                            &export.scenario,
                            export.campaign.as_deref(),
                            export.tag.as_deref(),
                            Some(&cursor),
                            EXPORT_PAGE,
                            |answer| export.wanted(answer),
                        )
                        .await;
                        match read {
                            Ok(page) => page,
                            Err(error) => {
                                tracing::error!(
                                    scenario.id = %progress.export.scenario,
                                    rows = progress.rows,
                                    pages = progress.pages,
                                    error = %error,
                                    outcome = "aborted",
                                    "an answer page could not be read; the download is cut off with an error"
                                );
                                return Err(ExportError::Store(error));
                            }
                        }
                    }
                };
                progress.pages += 1;
                progress.step = page.page.next.clone().map_or(Step::Done, Step::After);
                let export = &progress.export;
                let rows: Vec<&ListedAnswer> = page
                    .page
                    .answers
                    .iter()
                    .filter(|a| export.wanted(a) && page.tag_allows(a))
                    .collect();
                let count = rows.len() as u64;
                let bytes = format::encode(
                    head,
                    rows,
                    &export.labels,
                    &page.first_sources,
                    export.zone,
                    export.cells,
                )?;
                progress.rows += count;
                if bytes.is_empty() {
                    // Nothing of this page is in the range: read on rather than
                    // send an empty chunk.
                    continue;
                }
                return Ok(Some((Bytes::from(bytes), progress)));
            }
        })
    }
}
