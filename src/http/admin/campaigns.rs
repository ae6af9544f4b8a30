//! Campaigns (see `pipeline::campaigns`):
//!
//! - `POST /admin/campaigns`: with `"dryRun": true`, 200 with the audience's
//!   size and up to 20 user ids; otherwise 202 with the campaign id, derived
//!   from the `Idempotency-Key` (required: 400 without it).
//! - `GET /admin/campaigns` and `GET /admin/campaigns/{id}`: state and counts.
//! - `POST /admin/campaigns/{id}/cancel`: chunks not yet claimed are not sent.

use super::send::idempotency_key;
use super::{AdminError, ListQuery, answered, audited, require, route_of};
use crate::access::audit::{Action, Via};
use crate::http::AppState;
use crate::ids::LineUserId;
use crate::ids::{DocumentHexId, ScenarioId};
use crate::pipeline::campaigns::{
    AudienceRequest, CampaignError, CampaignRequest, CampaignStartError, MAX_TEST_RECIPIENTS,
};
use crate::reports::campaign_results::CampaignRef;
use crate::values::OperatorRole;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CampaignBody {
    scenario_id: String,
    #[serde(default)]
    audience: AudienceRequest,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    skip_answered: bool,
    #[serde(default)]
    calls_per_second: Option<u32>,
    /// RFC 3339 with an offset: `2026-12-07T10:00:00+09:00`.
    #[serde(default)]
    send_at: Option<String>,
    #[serde(default)]
    allow_over_quota: bool,
    /// Up to ten users to send the first messages to now, as a test.
    #[serde(default)]
    test_to: Option<Vec<String>>,
}

/// What a `POST /admin/campaigns` asks for.
enum Asked {
    DryRun,
    /// A test send to these users.
    Test(Vec<LineUserId>),
    Create,
}

fn parse_body(body: &[u8]) -> Result<(CampaignRequest, Asked), AdminError> {
    // The operator's own request: serde's message (the field, the position) is
    // what they need to fix it.
    let body: CampaignBody = serde_json::from_slice(body).map_err(|error| {
        AdminError::BadRequest(format!(
            "body must be {{\"scenarioId\": ..., \"audience\": {{...}}, \"dryRun\": ...}}: {error}"
        ))
    })?;
    let scenario_id = ScenarioId::parse(body.scenario_id.clone())
        .map_err(|_| AdminError::BadRequest(format!("no scenario with id {:?}", body.scenario_id)))?;
    let send_at = body
        .send_at
        .as_deref()
        .map(|raw| {
            chrono::DateTime::parse_from_rfc3339(raw).map_err(|_| {
                AdminError::BadRequest(format!(
                    "sendAt {raw:?} is not a time with an offset such as \"2026-12-07T10:00:00+09:00\""
                ))
            })
        })
        .transpose()?;
    let asked = match (body.dry_run, body.test_to) {
        (true, Some(_)) => {
            return Err(AdminError::BadRequest(
                "testTo sends now and dryRun sends nothing: give one of them".into(),
            ));
        }
        (true, None) => Asked::DryRun,
        (false, Some(users)) => Asked::Test(super::send::user_ids(users, "testTo", MAX_TEST_RECIPIENTS)?),
        (false, None) => Asked::Create,
    };
    Ok((
        CampaignRequest {
            scenario_id,
            audience: body.audience,
            skip_answered: body.skip_answered,
            calls_per_second: body.calls_per_second,
            send_at,
            allow_over_quota: body.allow_over_quota,
        },
        asked,
    ))
}

fn admin_error(error: CampaignError) -> AdminError {
    match error {
        CampaignError::Scenario(CampaignStartError::Broken(..)) => AdminError::Internal(error.to_string()),
        CampaignError::Audience(_)
        | CampaignError::Scenario(_)
        | CampaignError::SendAt(_)
        | CampaignError::BadRate(_)
        | CampaignError::BadKey => AdminError::BadRequest(error.to_string()),
        CampaignError::KeyReused => AdminError::KeyReused,
        CampaignError::OverQuota(figures) => AdminError::OverQuota {
            message: error.to_string(),
            figures,
        },
        CampaignError::QuotaUnknown(_) => AdminError::Upstream(error.to_string()),
        CampaignError::UnknownCampaign(id) => AdminError::UnknownCampaign(id),
        CampaignError::Finished(state) => AdminError::Conflict {
            message: error.to_string(),
            state,
        },
        CampaignError::Pipeline(error) => error.into(),
    }
}

pub(crate) async fn create(
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Editor).await?;
    let (campaign, asked) = parse_body(&body)?;
    let summary = |extra: Vec<(&'static str, String)>| {
        let mut summary = vec![
            ("scenarioId", campaign.scenario_id.to_string()),
            ("audience", campaign.audit_audience()),
        ];
        summary.extend(extra);
        summary
    };
    if let Asked::Test(users) = &asked {
        let key = request
            .headers()
            .contains_key("idempotency-key")
            .then(|| idempotency_key(&request))
            .transpose()?;
        let action = Action {
            via: Via::Api,
            name: "campaign_test_send",
            route: route_of(&request),
            summary: summary(vec![("users", users.len().to_string())]),
            touched: users.iter().map(ToString::to_string).collect(),
        };
        return audited(&state, &actor, action, async {
            let results = state
                .campaigns
                .test_send(key.as_deref(), &campaign, users)
                .await
                .map_err(admin_error)?;
            Ok(HttpResponse::Ok().json(serde_json::json!({
                "test": true,
                "scenarioId": campaign.scenario_id.as_str(),
                "results": results,
            })))
        })
        .await;
    }
    if matches!(asked, Asked::DryRun) {
        let found = state.campaigns.dry_run(&campaign).await.map_err(admin_error)?;
        return Ok(HttpResponse::Ok().json(serde_json::json!({
            "dryRun": true,
            "scenarioId": campaign.scenario_id.as_str(),
            "count": found.count,
            "sample": found.sample,
            "delivery": found.delivery,
            "messages": found.quota.messages,
            "quota": {
                "limit": found.quota.limit,
                "used": found.quota.used,
                "remaining": found.quota.remaining,
            },
            "startsAt": found.starts_at,
        })));
    }
    // Required: a campaign retried without it would be a second campaign.
    if request.headers().get("idempotency-key").is_none() {
        return Err(AdminError::BadRequest(
            "a campaign needs an Idempotency-Key header: a retry with the same key is the same campaign".into(),
        ));
    }
    let key = idempotency_key(&request)?;
    let mut extra = vec![("idempotencyKey", key.clone())];
    if let Some(at) = &campaign.send_at {
        extra.push(("sendAt", at.to_rfc3339()));
    }
    let entry = state.auditor.entry(
        Some(&actor),
        Action {
            via: Via::Api,
            name: campaign.audit_action(),
            route: route_of(&request),
            summary: summary(extra),
            touched: Vec::new(),
        },
    );
    // The entry lands in the campaign's own commit.
    let created = state.campaigns.create(&key, &campaign, Some(&entry)).await;
    let result = created.map_err(admin_error).map(|id| {
        HttpResponse::Accepted()
            .insert_header(("Idempotency-Key", key.as_str()))
            .insert_header(("Location", format!("/admin/campaigns/{id}")))
            .json(serde_json::json!({
                "campaignId": id,
                "idempotencyKey": key,
                "scenarioId": campaign.scenario_id.as_str(),
            }))
    });
    let touched = crate::engine::campaign::campaign_id(&key).map(|id| vec![id]);
    state.auditor.finish(&entry, answered(&result), touched).await;
    result
}

pub(crate) async fn list(request: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    // Read only once the caller is known: a stranger learns nothing of it.
    let query: ListQuery = super::query_of(&request)?;
    let limit = query.limit();
    let campaigns = state.campaigns.list(limit).await?;
    Ok(HttpResponse::Ok().json(serde_json::json!({ "campaigns": campaigns })))
}

/// Campaign ids are 40 hex digits; anything else is no campaign.
fn campaign_id(raw: String) -> Result<String, AdminError> {
    match DocumentHexId::parse(&raw) {
        Some(_) => Ok(raw),
        None => Err(AdminError::UnknownCampaign(raw)),
    }
}

pub(crate) async fn show(
    request: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    require(&request, &state, OperatorRole::Viewer).await?;
    let id = campaign_id(path.into_inner())?;
    let Some(status) = state.campaigns.status(&id).await? else {
        return Err(AdminError::UnknownCampaign(id));
    };
    let results = state
        .campaign_results
        .of(&CampaignRef {
            id: &status.campaign_id,
            scenario: &status.scenario_id,
            planned: status.planned,
            sent: status.sent,
        })
        .await?;
    let mut body = serde_json::to_value(&status).map_err(|error| AdminError::Internal(error.to_string()))?;
    body["results"] = serde_json::to_value(&results).map_err(|error| AdminError::Internal(error.to_string()))?;
    Ok(HttpResponse::Ok().json(body))
}

/// The optional body of a cancel: `{"cancelTimers": true}` also cancels the
/// recipients' reminders, expiries and steps not fired yet.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    cancel_timers: bool,
}

fn parse_cancel(body: &[u8]) -> Result<CancelBody, AdminError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(CancelBody::default());
    }
    serde_json::from_slice(body).map_err(|error| {
        AdminError::BadRequest(format!(
            "the body, when given, must be {{\"cancelTimers\": true|false}}: {error}"
        ))
    })
}

pub(crate) async fn cancel(
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, AdminError> {
    let actor = require(&request, &state, OperatorRole::Editor).await?;
    let id = campaign_id(path.into_inner())?;
    let body = parse_cancel(&body)?;
    let action = Action {
        via: Via::Api,
        name: "campaign_cancel",
        route: route_of(&request),
        summary: vec![("cancelTimers", body.cancel_timers.to_string())],
        touched: vec![id.clone()],
    };
    audited(&state, &actor, action, async {
        let now = state
            .campaigns
            .cancel(&id, body.cancel_timers)
            .await
            .map_err(admin_error)?;
        Ok(HttpResponse::Ok().json(serde_json::json!({ "campaignId": id, "state": now })))
    })
    .await
}
