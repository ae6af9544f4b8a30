//! `GET /admin/users/{id}/timeline?limit=N`: one user's events, answers,
//! messages, dead letters and timers, newest first (see `reports::timeline`).

use super::{AdminError, require};
use crate::http::AppState;
use crate::ids::LineUserId;
use crate::reports::timeline::{DEFAULT_ENTRIES, MAX_ENTRIES};
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};

#[derive(Debug, serde::Deserialize)]
pub(crate) struct TimelineQuery {
    limit: Option<String>,
}

/// `limit`: 1 to 500 entries, 100 when absent.
fn entries(limit: Option<&str>) -> Result<usize, AdminError> {
    let Some(raw) = limit else {
        return Ok(DEFAULT_ENTRIES);
    };
    match raw.parse::<usize>() {
        Ok(limit) if (1..=MAX_ENTRIES).contains(&limit) => Ok(limit),
        _ => Err(AdminError::BadRequest(format!(
            "limit must be a whole number from 1 to {MAX_ENTRIES}"
        ))),
    }
}

pub(crate) async fn show(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    // Read only once the caller is known: a stranger learns nothing of it.
    let query: TimelineQuery = super::query_of(&request)?;
    let user =
        LineUserId::parse_line_shaped(path.into_inner()).map_err(|shape| AdminError::BadRequest(shape.to_owned()))?;
    let limit = entries(query.limit.as_deref())?;
    let timeline = state.timelines.user(&user, limit).await?;
    tracing::info!(
        entries = timeline.entries.len(),
        truncated = timeline.truncated,
        outcome = "listed",
        "user timeline read"
    );
    Ok(HttpResponse::Ok().json(timeline))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_outside_one_to_five_hundred_are_refused() {
        let cases: [(Option<&str>, Option<usize>); 8] = [
            (None, Some(100)),
            (Some("1"), Some(1)),
            (Some("500"), Some(500)),
            (Some("0"), None),
            (Some("501"), None),
            (Some("-3"), None),
            (Some("ten"), None),
            (Some(""), None),
        ];
        for (raw, expected) in cases {
            assert_eq!(entries(raw).ok(), expected, "{raw:?}");
        }
    }
}
