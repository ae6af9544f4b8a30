//! `POST /webhook`: signature first, then the envelope, then the dispatcher.

use super::{AppState, error_body};
use crate::line::signature::{self, SignatureError};
use crate::line::webhook::Envelope;
use crate::pipeline::ingest::RetryLater;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};

#[derive(Debug, thiserror::Error)]
pub(crate) enum WebhookError {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("the body is not a LINE webhook request: {0}")]
    Malformed(String),
    #[error(transparent)]
    RetryLater(#[from] RetryLater),
}

impl ResponseError for WebhookError {
    fn status_code(&self) -> StatusCode {
        match self {
            WebhookError::Signature(_) => StatusCode::UNAUTHORIZED,
            WebhookError::Malformed(_) => StatusCode::BAD_REQUEST,
            // Also when an event's plan cannot be encoded: a defect, logged as
            // one where it happens, but a 200 would drop an event never stored,
            // while LINE's redelivery after the fix is stored.
            WebhookError::RetryLater(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(error_body(self))
    }
}

pub(crate) async fn webhook(
    request: HttpRequest,
    body: web::Bytes,
    state: web::Data<AppState>,
) -> Result<HttpResponse, WebhookError> {
    let header = request
        .headers()
        .get("x-line-signature")
        .map(actix_web::http::header::HeaderValue::as_bytes);
    if let Err(error) = signature::verify(state.channel_secret.as_bytes(), &body, header) {
        tracing::warn!(reason = %error, body.bytes = body.len(), outcome = "rejected", "webhook signature check failed");
        return Err(error.into());
    }
    let envelope: Envelope = serde_json::from_slice(&body).map_err(|error| {
        let reason = crate::line::webhook::describe_error(&error);
        tracing::warn!(reason, outcome = "rejected", "webhook body is not an envelope");
        WebhookError::Malformed(reason)
    })?;
    if envelope.events.is_empty() {
        tracing::info!(outcome = "verified", "webhook verify request");
        return Ok(HttpResponse::Ok().finish());
    }
    state.ingest.handle(&envelope).await?;
    Ok(HttpResponse::Ok().finish())
}

#[cfg(test)]
mod tests {
    use super::WebhookError;
    use crate::line::signature::SignatureError;
    use crate::pipeline::ingest::RetryLater;
    use actix_web::ResponseError;
    use actix_web::http::StatusCode;

    #[test]
    fn only_events_not_stored_ask_line_to_redeliver() {
        let cases = [
            (
                WebhookError::Signature(SignatureError::Mismatch),
                StatusCode::UNAUTHORIZED,
            ),
            (WebhookError::Malformed("no events".into()), StatusCode::BAD_REQUEST),
            (
                WebhookError::RetryLater(RetryLater { failed: 1 }),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
        ];
        for (error, status) in cases {
            assert_eq!(error.status_code(), status, "{error}");
        }
    }
}
