//! `GET /healthz`: the process is up and serving. It deliberately does not touch
//! Firestore: a Firestore outage is answered per request (5xx to LINE), and
//! restarting the container would not fix it.

use actix_web::HttpResponse;

pub(crate) async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "status": "ok" }))
}
