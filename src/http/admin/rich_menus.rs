//! `POST /admin/rich-menus/{id}/link`: menu `id` linked to every user of a
//! campaign-style audience (`default`: their own menus unlinked), with a dry
//! run; see `pipeline::rich_menu_links`.

use super::send::idempotency_key;
use super::{AdminError, audited, require, route_of};
use crate::access::audit::{Action, Via};
use crate::engine::campaign::AudienceRequest;
use crate::http::AppState;
use crate::pipeline::rich_menu_links::{LinkError, LinkRequest};
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LinkBody {
    #[serde(default)]
    audience: AudienceRequest,
    #[serde(default)]
    dry_run: bool,
}

pub(crate) async fn link(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Editor).await?;
    let body: LinkBody = if body.is_empty() {
        LinkBody {
            audience: AudienceRequest::default(),
            dry_run: false,
        }
    } else {
        serde_json::from_slice(&body).map_err(|error| {
            AdminError::BadRequest(format!(
                "body must be {{\"audience\": {{...}}, \"dryRun\": ...}} (both optional): {error}"
            ))
        })?
    };
    let asked = LinkRequest {
        menu: path.into_inner(),
        audience: body.audience,
        dry_run: body.dry_run,
        idempotency_key: idempotency_key(&request)?,
    };
    if asked.dry_run {
        return link_now(&state, asked).await;
    }
    let action = Action {
        via: Via::Api,
        name: "rich_menu_link",
        route: route_of(&request),
        summary: vec![
            ("menu", asked.menu.clone()),
            ("audience", asked.audience.audit_summary()),
        ],
        // The link's job: its id names what `GET .../link/{job}` reports.
        touched: vec![crate::pipeline::rich_menu_links::link_job_id(&asked.idempotency_key)],
    };
    audited(&state, &actor, action, link_now(&state, asked)).await
}

async fn link_now(state: &AppState, asked: LinkRequest) -> Result<HttpResponse, AdminError> {
    let report = state.menu_links.link(asked).await.map_err(|error| match error {
        LinkError::BadMenu(_) | LinkError::Audience(_) => AdminError::BadRequest(error.to_string()),
        LinkError::NotDeployed(_) => AdminError::NotFound(error.to_string()),
        LinkError::Busy => AdminError::Conflict {
            message: error.to_string(),
            state: "running",
        },
        LinkError::OtherRequest => AdminError::KeyReused,
        LinkError::Line(_) => AdminError::Upstream(error.to_string()),
        LinkError::NoLine => AdminError::Conflict {
            message: error.to_string(),
            state: "dry_run",
        },
        LinkError::Pipeline(error) => error.into(),
    })?;
    Ok(HttpResponse::Ok().json(report))
}
