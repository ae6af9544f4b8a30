//! Friend-add source links: `GET /r/{source}` sends the visitor to LINE Login
//! and `GET /r/callback` takes them back, records the source once and sends
//! them on to the add-friend page (`FRIEND_URL`) or a thanks page. Every
//! failure is a short page that says what happened and records nothing.
//! Redirects go only to LINE Login's authorize page or `FRIEND_URL`, both
//! from the settings: nothing in a request chooses where.
//!
//! The visitor's pages are in Japanese: they are the account's friends.

use super::AppState;
use crate::metrics::series;
use crate::pipeline::sources::{Callback, Landing, LinkError};
use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use actix_web::http::StatusCode;
use actix_web::http::header::{CACHE_CONTROL, LOCATION};
use actix_web::{HttpRequest, HttpResponse, web};
use maud::{DOCTYPE, Markup, html};

/// Binds a visit to the browser that started it, when the browser keeps it
/// (an in-app browser that hands over to the LINE app does not).
const NONCE_COOKIE: &str = "lsv_link";

/// `GET /r/{source}`.
pub(crate) async fn link(state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let Some(links) = &state.source_links else {
        return page(
            StatusCode::NOT_FOUND,
            "ページが見つかりません",
            "このリンクは使われていません。",
        );
    };
    let source = path.into_inner();
    match links.begin(&source) {
        Ok(begun) => {
            series::source_link_visit(&source);
            let cookie = Cookie::build(NONCE_COOKIE, begun.nonce)
                .path("/r")
                .http_only(true)
                .same_site(SameSite::Lax)
                .secure(!links.plain_http())
                .max_age(CookieDuration::minutes(15))
                .finish();
            HttpResponse::Found()
                .insert_header((LOCATION, begun.authorize_url))
                .insert_header((CACHE_CONTROL, "no-store"))
                .cookie(cookie)
                .finish()
        }
        Err(_) => page(
            StatusCode::NOT_FOUND,
            "ページが見つかりません",
            "このリンクは使われていません。URLをご確認ください。",
        ),
    }
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    friendship_status_changed: Option<String>,
}

/// `GET /r/callback`: LINE Login's redirect back.
pub(crate) async fn callback(
    request: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<CallbackQuery>,
) -> HttpResponse {
    let Some(links) = &state.source_links else {
        return page(
            StatusCode::NOT_FOUND,
            "ページが見つかりません",
            "このリンクは使われていません。",
        );
    };
    let cookie = request.cookie(NONCE_COOKIE);
    let outcome = links
        .complete(Callback {
            code: query.code.as_deref(),
            state: query.state.as_deref(),
            error: query.error.as_deref(),
            friendship_changed: query.friendship_status_changed.as_deref().map(|value| value == "true"),
            cookie_nonce: cookie.as_ref().map(Cookie::value),
        })
        .await;
    let mut response = match outcome {
        Ok(landing) => {
            series::source_login("recorded");
            match landing {
                Landing::AddFriend(url) => HttpResponse::Found()
                    .insert_header((LOCATION, url))
                    .insert_header((CACHE_CONTROL, "no-store"))
                    .finish(),
                Landing::AlreadyFriend => page(
                    StatusCode::OK,
                    "ありがとうございます",
                    "すでに友だち追加されています。LINEのトーク画面に戻ってください。",
                ),
            }
        }
        Err(error) => refused(&error),
    };
    // The visit is over either way: its cookie is not needed again.
    let mut gone = Cookie::build(NONCE_COOKIE, "").path("/r").finish();
    gone.make_removal();
    let _ = response.add_removal_cookie(&gone);
    response
}

/// The page for a failed callback, logged by kind (never the code, the state
/// or a token).
fn refused(error: &LinkError) -> HttpResponse {
    let (status, outcome, title, text) = match error {
        LinkError::Cancelled => (
            StatusCode::OK,
            "cancelled",
            "ログインがキャンセルされました",
            "もう一度お試しいただく場合は、最初のリンクから開いてください。",
        ),
        LinkError::UnknownSource | LinkError::Incomplete | LinkError::State(_) | LinkError::OtherBrowser => (
            StatusCode::BAD_REQUEST,
            "bad_state",
            "リンクの有効期限が切れたか、正しくありません",
            "お手数ですが、最初のリンク（QRコード）からもう一度開いてください。",
        ),
        LinkError::Replayed => (
            StatusCode::BAD_REQUEST,
            "replayed",
            "このログインはすでに使われています",
            "お手数ですが、最初のリンク（QRコード）からもう一度開いてください。",
        ),
        LinkError::Login(crate::line::login::LoginError::Unreachable(_)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "failed",
            "ただいま混み合っています",
            "少し時間をおいて、最初のリンクからもう一度お試しください。",
        ),
        LinkError::Login(_) | LinkError::NotALineUser => (
            StatusCode::BAD_REQUEST,
            "login_refused",
            "LINEログインを確認できませんでした",
            "お手数ですが、最初のリンク（QRコード）からもう一度開いてください。",
        ),
        LinkError::Pipeline(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "failed",
            "ただいま混み合っています",
            "少し時間をおいて、最初のリンクからもう一度お試しください。",
        ),
    };
    series::source_login(outcome);
    // Ours or LINE's failure is a warning; a visitor's bad request is not.
    if status == StatusCode::SERVICE_UNAVAILABLE {
        tracing::warn!(error = %error, outcome, "a source link's login failed");
    } else {
        tracing::info!(error = %error, outcome, "a source link's login refused");
    }
    page(status, title, text)
}

fn page(status: StatusCode, title: &str, text: &str) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header((CACHE_CONTROL, "no-store"))
        .body(markup(title, text).into_string())
}

fn markup(title: &str, text: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="ja" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="robots" content="noindex";
                title { (title) }
                style { "body{font-family:system-ui,'Hiragino Sans','Noto Sans CJK JP',sans-serif;margin:2rem auto;max-width:30rem;padding:0 1rem;line-height:1.6;color:#1b1b1b}h1{font-size:1.2rem}" }
            }
            body {
                h1 id="title" { (title) }
                p id="message" { (text) }
            }
        }
    }
}
