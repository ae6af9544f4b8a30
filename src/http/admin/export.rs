//! `GET /admin/scenarios/{id}/answers.csv[?from=YYYY-MM-DD&to=YYYY-MM-DD][&campaign=ID][&raw=true]`:
//! every answer of the scenario as CSV, streamed (see `reports::export`);
//! formula-like text cells are defused unless `raw=true`.

use super::{AdminError, audited, require, route_of};
use crate::access::audit::{Action, Via};
use crate::http::AppState;
use crate::reports::export::{Cells, Export, ExportError};
use crate::values::OperatorRole;
use actix_web::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(crate) struct ExportQuery {
    from: Option<String>,
    to: Option<String>,
    /// Exact values, formula-like text included (for tools, not spreadsheets).
    #[serde(default)]
    raw: bool,
    /// Only the answers of this campaign's run (its 40-hex id).
    campaign: Option<String>,
}

pub(crate) async fn answers_csv(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Owner).await?;
    // Read only once the caller is known: a stranger learns nothing of it.
    let query: ExportQuery = super::query_of(&request)?;
    let scenario = path.into_inner();
    if let Some(campaign) = &query.campaign
        && crate::ids::DocumentHexId::parse(campaign).is_none()
    {
        return Err(AdminError::BadRequest(format!(
            "campaign {campaign:?} is not a campaign id (40 hex digits)"
        )));
    }
    let mut summary = vec![("scenarioId", scenario.clone()), ("raw", query.raw.to_string())];
    for (key, value) in [("from", &query.from), ("to", &query.to), ("campaign", &query.campaign)] {
        if let Some(value) = value {
            summary.push((key, value.clone()));
        }
    }
    let action = Action {
        via: Via::Api,
        name: "export",
        route: route_of(&request),
        summary,
        touched: Vec::new(),
    };
    // The entry is complete once the download starts: a cut-off stream is
    // the client's to notice (see `csv_response`).
    audited(&state, &actor, action, async {
        let export = state
            .exporter
            .start(
                &scenario,
                &crate::reports::export::ExportFilters {
                    from: query.from.as_deref(),
                    to: query.to.as_deref(),
                    campaign: query.campaign.as_deref(),
                    tag: None,
                },
                if query.raw { Cells::Raw } else { Cells::Safe },
            )
            .await
            .map_err(|error| match error {
                ExportError::UnknownScenario(id) => AdminError::UnknownScenario(id),
                ExportError::Store(error) => AdminError::Store(error),
                error @ ExportError::BadRange(_) => AdminError::BadRequest(error.to_string()),
                ExportError::Format(error) => AdminError::Internal(error.to_string()),
            })?;
        tracing::info!(scenario.id = %scenario, raw = query.raw, outcome = "started", "answers export started");
        Ok(csv_response(export))
    })
    .await
}

/// The streamed CSV download of an export (also the console's).
pub(crate) fn csv_response(export: Export) -> HttpResponse {
    let disposition = format!("attachment; filename=\"{}\"", export.filename());
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/csv; charset=utf-8"))
        .insert_header((CONTENT_DISPOSITION, disposition))
        // Answers are personal data: no shared cache keeps a copy.
        .insert_header(("Cache-Control", "no-store"))
        .streaming(export.into_stream())
}
