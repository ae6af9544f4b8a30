//! `/console`: the operators' web pages, server-rendered (see [`pages`]). Off
//! unless `ADMIN_TOKEN` is set, like the admin API. An operator signs in with
//! an email and password (or the admin token, as an owner) and gets a cookie
//! naming a session kept on the server (`HttpOnly`, `SameSite=Strict`,
//! `Secure` unless the host is this machine); every POST carries the
//! session's CSRF token. Every route checks the session and the role it
//! needs on each request: pages redirect to the login without a session,
//! and answer 403 when the role is too small.

/// The value of a check that passed, or the answer it gave instead (the
/// login, a 403, a 503): every handler starts with one or more.
macro_rules! or_answer {
    ($check:expr) => {
        match $check {
            Ok(value) => value,
            Err(response) => return response,
        }
    };
}

mod campaign_form;
pub(crate) mod pages;
mod session;
mod words;

use super::AppState;
use super::admin::export::csv_response;
use crate::access::audit::{Action, Via};
use crate::access::{AccessError, Actor, PasswordLogin};
use crate::ids::{LineUserId, ScenarioId};
use crate::pipeline::form_receipts::FormReceipts;
use crate::pipeline::hand_edits::HandEdited;
use crate::pipeline::manual_send::{ManualSendError, UserSend};
use crate::pipeline::replay::{ReplayError, Replayed};
use crate::reports::export::ExportError;
use crate::reports::results::{Results, ResultsError};
use crate::store::Settlement;
use crate::values::{ConsoleLang, OperatorRole};
use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieAge};
use actix_web::http::StatusCode;
use actix_web::http::header::{CACHE_CONTROL, LOCATION};
use actix_web::{HttpRequest, HttpResponse, web};
use maud::Markup;
use pages::Nav;
use serde::Deserialize;
use session::{Keys, LOGIN_COOKIE, SESSION_COOKIE, Session};

/// Answers per page of a scenario's answers.
const ANSWERS_PER_PAGE: u32 = 50;
/// Dead letters and campaigns listed, at most.
const LISTED: u32 = 100;
/// Entries of a user's timeline shown.
const TIMELINE_ENTRIES: usize = 200;
/// How long a login form may be filled in.
const LOGIN_FORM_SECONDS: i64 = 3600;

/// The routes, mounted by start-up when `ADMIN_TOKEN` is set.
pub(crate) fn routes(config: &mut web::ServiceConfig) {
    config
        .route("/console/login", web::get().to(login_form))
        .route("/console/login", web::post().to(login))
        .route("/console/logout", web::post().to(logout))
        .route("/console", web::get().to(scenarios))
        .route("/console/scenarios/{id}", web::get().to(answers))
        .route("/console/scenarios/{id}/answers.csv", web::get().to(answers_csv))
        .route("/console/scenarios/{id}/crosstab", web::get().to(cross_tab))
        .route("/console/scenarios/{id}/graph", web::get().to(scenario_graph))
        .route("/console/dead-letters", web::get().to(dead_letters))
        .route("/console/dead-letters/{id}/replay", web::get().to(replay_form))
        .route("/console/dead-letters/{id}/replay", web::post().to(replay))
        .route("/console/users", web::get().to(users))
        .route("/console/campaigns", web::get().to(campaigns))
        // Before `{id}`, which would take `new` for an id.
        .route("/console/campaigns/new", web::get().to(campaign_builder))
        .route("/console/campaigns/new", web::post().to(campaign_confirmed))
        .route("/console/campaigns/{id}", web::get().to(campaign))
        .route("/console/sources", web::get().to(sources))
        .route("/console/sources/{id}/qr.png", web::get().to(source_qr))
        .route("/console/audit", web::get().to(audit))
        .route("/console/users/send", web::get().to(send_form))
        .route("/console/users/send", web::post().to(send_confirmed))
        .route("/console/users/edit", web::post().to(edit_user))
        .route("/console/users/timers/{id}/cancel", web::post().to(cancel_timer))
        .route("/console/users/data", web::get().to(user_data))
        .route("/console/users/erase", web::get().to(erase_form))
        .route("/console/users/erase", web::post().to(erase_confirmed))
        .route("/console/campaigns/{id}/cancel", web::get().to(cancel_form))
        .route("/console/campaigns/{id}/cancel", web::post().to(cancel_confirmed))
        .route("/console/tokens", web::get().to(api_tokens))
        .route("/console/tokens", web::post().to(create_api_token))
        .route("/console/tokens/{id}/revoke", web::post().to(revoke_api_token));
}

/// Now in seconds, as the service's clock sees it: sessions and login forms
/// expire by it.
fn now(state: &AppState) -> i64 {
    state.clock.now().timestamp()
}

fn keys(state: &AppState) -> Keys {
    // The routes are mounted only with a token; an empty key would sign nothing
    // a client could produce without it either.
    Keys::new(state.admin_token.as_deref().unwrap_or_default())
}

/// Whether the request reached this machine by a local name: only then may the
/// cookie go without `Secure` (a browser would drop it over plain HTTP).
fn is_local(request: &HttpRequest) -> bool {
    let info = request.connection_info();
    let host = info.host();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

fn cookie(request: &HttpRequest, name: &'static str, value: String, age: CookieAge) -> Cookie<'static> {
    Cookie::build(name, value)
        .path("/console")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(!is_local(request))
        .max_age(age)
        .finish()
}

/// A page: never cached, never framed, nothing loaded from elsewhere.
fn html(status: StatusCode, markup: Markup) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("text/html; charset=utf-8")
        .insert_header((CACHE_CONTROL, "no-store"))
        .insert_header((
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'",
        ))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Referrer-Policy", "same-origin"))
        .body(markup.into_string())
}

fn see_other(location: &str) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((LOCATION, location)).finish()
}

/// A request whose session holds, with the role a route asked for.
pub(crate) struct Signed {
    /// The CSRF token of the session's forms.
    pub(crate) csrf: String,
    pub(crate) actor: Actor,
    pub(crate) lang: ConsoleLang,
}

impl Signed {
    fn nav(&self) -> Nav<'_> {
        Nav {
            csrf: &self.csrf,
            who: self.actor.name(),
            role: self.actor.role(),
            lang: self.lang,
        }
    }
}

fn session_cookie_value(request: &HttpRequest) -> Option<String> {
    request.cookie(SESSION_COOKIE).map(|cookie| cookie.value().to_owned())
}

/// Whoever the request's session belongs to, if it holds; otherwise the
/// answer to give (the login, or 503 when Firestore did not say).
async fn session_of(request: &HttpRequest, state: &AppState) -> Result<Option<Signed>, HttpResponse> {
    let Some(cookie) = session_cookie_value(request) else {
        return Ok(None);
    };
    match state.access.session(&cookie).await {
        Ok(Some(actor)) => Ok(Some(Signed {
            csrf: keys(state).csrf(&Session::of_cookie(&cookie)),
            actor,
            lang: state.console_lang,
        })),
        Ok(None) => Ok(None),
        Err(error) => Err(unavailable(state, error)),
    }
}

/// A page's check: a session whose role allows `needed`. Without a session
/// the answer is the login; with too small a role, 403.
async fn signed_in(request: &HttpRequest, state: &AppState, needed: OperatorRole) -> Result<Signed, HttpResponse> {
    let Some(signed) = session_of(request, state).await? else {
        return Err(to_login());
    };
    if !signed.actor.role().allows(needed) {
        return Err(forbidden(&signed, needed));
    }
    Ok(signed)
}

fn forbidden(signed: &Signed, needed: OperatorRole) -> HttpResponse {
    tracing::warn!(
        outcome = "forbidden",
        role = signed.actor.role().as_str(),
        needed = needed.as_str(),
        "console request beyond the operator's role"
    );
    html(
        StatusCode::FORBIDDEN,
        pages::refused(
            signed.lang,
            &match signed.lang {
                ConsoleLang::Ja => format!(
                    "この操作には{}の権限が必要です。今の権限は{}です。",
                    pages::role_name(signed.lang, needed),
                    pages::role_name(signed.lang, signed.actor.role())
                ),
                ConsoleLang::En => format!(
                    "This needs the {} role; you are signed in as {}.",
                    needed.as_str(),
                    signed.actor.role().as_str()
                ),
            },
        ),
    )
}

/// Writes the audit entry of a console action before it runs; the answer to
/// give instead when it cannot be written (the action does not run).
async fn begin_audit(
    state: &AppState,
    me: &Signed,
    request: &HttpRequest,
    name: &'static str,
    summary: Vec<(&'static str, String)>,
    touched: Vec<String>,
) -> Result<crate::store::AuditEntry, HttpResponse> {
    let entry = state.auditor.entry(
        Some(&me.actor),
        Action {
            via: Via::Console,
            name,
            route: crate::http::admin::route_of(request),
            summary,
            touched,
        },
    );
    match state.auditor.begin(&entry).await {
        Ok(()) => Ok(entry),
        Err(error) => Err(unavailable(state, error)),
    }
}

fn to_login() -> HttpResponse {
    see_other("/console/login")
}

/// A form's fields. A body that is not a form counts as one without a token.
#[derive(Debug, Default, Deserialize)]
struct Form {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    /// `true` from a dead letter's "Replay anyway" button, shown after the
    /// console named the risk.
    #[serde(default)]
    force: Option<String>,
    /// With `force`: when the letter was parked as the operator saw it (ms);
    /// a letter parked again since is not forced on an old page's word.
    #[serde(default)]
    seen: String,
    /// A manual send's user, scenario and the form's own key.
    #[serde(default)]
    user: String,
    #[serde(default)]
    scenario: String,
    #[serde(default)]
    key: String,
    /// A campaign cancel's "also cancel the timers" box.
    #[serde(default)]
    timers: Option<String>,
    /// A change of the user's tags or fields by hand.
    #[serde(default)]
    op: String,
    #[serde(default)]
    tag: String,
    #[serde(default)]
    field: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    kind: String,
    /// `yes` from a confirmation page: the action it describes runs.
    #[serde(default)]
    confirm: String,
    /// A personal API token's label and role (`/console/tokens`).
    #[serde(default)]
    label: String,
    #[serde(default)]
    role: String,
}

/// A new key for one confirmation form (`console-<32 hex>`): the same form
/// sent twice carries it twice, a new page a new one.
fn new_form_key() -> String {
    format!("console-{}", uuid::Uuid::new_v4().simple())
}

fn form(body: &[u8]) -> Form {
    serde_urlencoded::from_bytes(body).unwrap_or_default()
}

/// A POST's check: a session with its CSRF token, whose role allows
/// `needed`. Without them the answer is [`refused_post`]; with too small a
/// role, 403.
async fn signed_post(
    request: &HttpRequest,
    state: &AppState,
    form: &Form,
    needed: OperatorRole,
) -> Result<Signed, HttpResponse> {
    let signed = session_of(request, state).await?;
    let Some(signed) = signed.filter(|signed| session::same_token(&signed.csrf, &form.csrf)) else {
        tracing::warn!(
            outcome = "refused",
            "console POST without a valid session and CSRF token"
        );
        return Err(refused_post(state));
    };
    if !signed.actor.role().allows(needed) {
        return Err(forbidden(&signed, needed));
    }
    Ok(signed)
}

fn refused_post(state: &AppState) -> HttpResponse {
    refusal(
        state,
        StatusCode::FORBIDDEN,
        "このフォームは期限切れか、コンソールから送られたものではありません。ページを再読み込みして、もう一度お試しください。",
        "This form has expired or did not come from the console. Reload the page and try again.",
    )
}

/// A refusal page in the console's language.
fn refusal(state: &AppState, status: StatusCode, ja: &'static str, en: &'static str) -> HttpResponse {
    html(status, pages::refused(state.console_lang, state.console_lang.t(ja, en)))
}

fn login_page(
    request: &HttpRequest,
    state: &AppState,
    now: i64,
    status: StatusCode,
    error: Option<&str>,
) -> HttpResponse {
    let (nonce, token) = keys(state).new_login(now.saturating_add(LOGIN_FORM_SECONDS));
    let mut response = html(status, pages::login(state.console_lang, &token, error));
    let login = cookie(request, LOGIN_COOKIE, nonce, CookieAge::seconds(LOGIN_FORM_SECONDS));
    if response.add_cookie(&login).is_err() {
        tracing::warn!("the login cookie could not be set");
    }
    response
}

async fn login_form(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    match session_of(&request, &state).await {
        Ok(Some(_)) => see_other("/console"),
        Ok(None) => login_page(&request, &state, now(&state), StatusCode::OK, None),
        Err(response) => response,
    }
}

/// Counts a wrong login against the client's address (see `http::guesses`).
fn count_failure(state: &AppState, client: &str) {
    if let Some(blocked) = state.guesses.failed(client) {
        tracing::warn!(
            client.address = %client,
            blocked_secs = blocked.retry_after.as_secs(),
            outcome = "blocked",
            "too many wrong console logins from one address: it gets 429 for a while"
        );
    }
}

/// `POST /console/login`: an email and password, or (with `token`) the admin
/// token as an owner.
async fn login(request: HttpRequest, state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    let keys = keys(&state);
    let now = now(&state);
    let client = crate::http::guesses::Guesses::client(&request);
    if let Some(blocked) = state.guesses.blocked(&client) {
        let mut response = login_page(
            &request,
            &state,
            now,
            StatusCode::TOO_MANY_REQUESTS,
            Some(state.console_lang.t(
                "このアドレスからのログイン失敗が多すぎます。しばらく待ってからお試しください。",
                "Too many wrong logins from this address. Please wait and try again.",
            )),
        );
        if let Ok(value) = actix_web::http::header::HeaderValue::from_str(
            &crate::http::guesses::retry_after_secs(blocked.retry_after).to_string(),
        ) {
            response
                .headers_mut()
                .insert(actix_web::http::header::RETRY_AFTER, value);
        }
        return response;
    }
    let form = form(&body);
    let paired = request
        .cookie(LOGIN_COOKIE)
        .is_some_and(|cookie| keys.login_matches(cookie.value(), &form.csrf, now));
    if !paired {
        tracing::warn!(outcome = "refused", "console login without its form's token");
        return login_page(
            &request,
            &state,
            now,
            StatusCode::FORBIDDEN,
            Some(state.console_lang.t(
                "ログインフォームの期限が切れました。もう一度お試しください。",
                "The login form expired. Please try again.",
            )),
        );
    }
    let wrong = if form.token.is_empty() {
        state
            .console_lang
            .t("メールアドレスかパスワードが違います。", "Wrong email or password.")
    } else {
        state
            .console_lang
            .t("管理者トークンが違います。", "That token is not the admin token.")
    };
    let opened = if form.token.is_empty() {
        match state.access.log_in_with_password(&form.email, &form.password).await {
            Ok(PasswordLogin::Opened(opened)) => Some(Ok(opened)),
            Ok(PasswordLogin::Refused) => None,
            Err(AccessError::Store(error)) => Some(Err(error)),
            Err(error) => {
                tracing::warn!(error = %error, outcome = "busy", "console login turned away");
                return login_page(
                    &request,
                    &state,
                    now,
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some(&error.to_string()),
                );
            }
        }
    } else if state.access.is_admin_token(&form.token) {
        Some(state.access.log_in_with_admin_token().await)
    } else {
        None
    };
    let Some(opened) = opened else {
        // Never which of the email and the password was wrong.
        tracing::warn!(
            outcome = "rejected",
            via = if form.token.is_empty() {
                "password"
            } else {
                "admin_token"
            },
            "console login refused"
        );
        count_failure(&state, &client);
        return login_page(&request, &state, now, StatusCode::UNAUTHORIZED, Some(wrong));
    };
    let opened = match opened {
        Ok(opened) => opened,
        Err(error) => return unavailable(&state, error),
    };
    let age = CookieAge::seconds(i64::try_from(opened.lifetime.as_secs()).unwrap_or(i64::MAX));
    let session = cookie(&request, SESSION_COOKIE, opened.cookie, age);
    let mut response = see_other("/console");
    let mut spent = cookie(&request, LOGIN_COOKIE, String::new(), CookieAge::ZERO);
    spent.make_removal();
    if response.add_cookie(&session).is_err() || response.add_cookie(&spent).is_err() {
        return refusal(
            &state,
            StatusCode::INTERNAL_SERVER_ERROR,
            "ログインを始められませんでした。",
            "The session could not be started.",
        );
    }
    tracing::info!(
        outcome = "logged_in",
        via = if form.token.is_empty() {
            "password"
        } else {
            "admin_token"
        },
        "console login"
    );
    response
}

async fn logout(request: HttpRequest, state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    // Without a session there is nothing to end: back to the login.
    let signed = match session_of(&request, &state).await {
        Ok(Some(signed)) => signed,
        Ok(None) => return to_login(),
        Err(response) => return response,
    };
    if !session::same_token(&signed.csrf, &form(&body).csrf) {
        return refused_post(&state);
    }
    if let Some(cookie) = session_cookie_value(&request)
        && let Err(error) = state.access.log_out(&cookie).await
    {
        // The session record stays: say so rather than pretend it ended.
        return unavailable(&state, error);
    }
    let mut ended = cookie(&request, SESSION_COOKIE, String::new(), CookieAge::ZERO);
    ended.make_removal();
    let mut response = see_other("/console/login");
    if response.add_cookie(&ended).is_err() {
        tracing::warn!("the session cookie could not be removed");
    }
    tracing::info!(outcome = "logged_out", "console logout");
    response
}

fn unavailable(state: &AppState, error: impl std::fmt::Display) -> HttpResponse {
    tracing::warn!(error = %error, outcome = "unavailable", "console page failed");
    refusal(
        state,
        StatusCode::SERVICE_UNAVAILABLE,
        "データベース（Firestore）が応答しませんでした。少し待ってからページを再読み込みしてください。",
        "Firestore did not answer. Reload the page in a moment.",
    )
}

fn not_found(state: &AppState, ja: &'static str, en: &'static str) -> HttpResponse {
    refusal(state, StatusCode::NOT_FOUND, ja, en)
}

/// The home page's range: `?days=7|30|90|365|all`, 30 when absent.
#[derive(Debug, Deserialize)]
struct RangeQuery {
    days: Option<String>,
}

/// The ranges the home page offers, in days (`None`: all time).
pub(crate) const HOME_RANGES: [Option<u32>; 5] = [Some(7), Some(30), Some(90), Some(365), None];
const HOME_DEFAULT_DAYS: u32 = 30;

/// `None` for a value the page does not offer.
fn home_range(days: Option<&str>) -> Option<Option<u32>> {
    match days {
        None => Some(Some(HOME_DEFAULT_DAYS)),
        Some("all") => Some(None),
        Some(days) => days
            .parse::<u32>()
            .ok()
            .filter(|days| HOME_RANGES.contains(&Some(*days)))
            .map(Some),
    }
}

async fn scenarios(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let Some(query) = query_of::<RangeQuery>(&request) else {
        return unreadable_query(&state);
    };
    let Some(days) = home_range(query.days.as_deref()) else {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "その期間は選べません。7・30・90・365日間か全期間を選んでください。",
            "That range is not offered: choose 7, 30, 90 or 365 days, or all.",
        );
    };
    match state.results.all(days, state.clock.now()).await {
        Ok(all) => html(StatusCode::OK, pages::scenarios(&me.nav(), &all, days)),
        // Every scenario listed is loaded, so only Firestore can fail here.
        Err(error) => unavailable(&state, error),
    }
}

/// A page's query, read only once the login is checked: nobody learns
/// anything of a console page, not even that its query is malformed,
/// before logging in.
fn query_of<T: serde::de::DeserializeOwned>(request: &HttpRequest) -> Option<T> {
    web::Query::<T>::from_query(request.query_string())
        .map(web::Query::into_inner)
        .ok()
}

fn unreadable_query(state: &AppState) -> HttpResponse {
    refusal(
        state,
        StatusCode::BAD_REQUEST,
        "このリンクは正しくありません（クエリを読めません）。",
        "That link is not valid: its query could not be read.",
    )
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    after: Option<String>,
    /// `answer`: the answers one per row as the CSV has them; otherwise one
    /// row per user and run.
    by: Option<String>,
    from: Option<String>,
    to: Option<String>,
    tag: Option<String>,
}

async fn answers(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let Some(query) = query_of::<PageQuery>(&request) else {
        return unreadable_query(&state);
    };
    let scenario = path.into_inner();
    let after = query.after.as_deref().filter(|after| !after.is_empty());
    if query.by.as_deref() != Some("answer") {
        return answer_runs(&state, &me, &scenario, &query).await;
    }
    if after.is_some_and(|after| !is_answer_id(after)) {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "このページのリンクは正しくありません。最初のページから開いてください。",
            "That page link is not valid: start from the first page.",
        );
    }
    match state.exporter.page(&scenario, after, ANSWERS_PER_PAGE).await {
        Ok(rows) => html(StatusCode::OK, pages::answers(&me.nav(), &scenario, &rows, after)),
        Err(ExportError::UnknownScenario(_)) => not_found(
            &state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        ),
        Err(error) => unavailable(&state, error),
    }
}

/// A query's value as typed, `None` when it is absent or blank.
fn filled(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|value| !value.is_empty())
}

/// The answers page one row per user and run, filtered by days and a tag.
async fn answer_runs(state: &AppState, me: &Signed, scenario: &str, query: &PageQuery) -> HttpResponse {
    use crate::reports::answer_runs::{AnswerRunsError, RunsQuery};
    let asked = RunsQuery {
        from: filled(&query.from),
        to: filled(&query.to),
        tag: filled(&query.tag),
        after: filled(&query.after),
    };
    if asked.tag.is_some_and(|tag| tag.chars().count() > SEARCH_CHARS) {
        return refusal(
            state,
            StatusCode::BAD_REQUEST,
            "タグが長すぎます。",
            "That tag is too long.",
        );
    }
    let filters = pages::AnswerFilters {
        from: asked.from.unwrap_or_default(),
        to: asked.to.unwrap_or_default(),
        tag: asked.tag.unwrap_or_default(),
    };
    match state.answer_runs.page(scenario, &asked).await {
        Ok(page) => html(
            StatusCode::OK,
            pages::answer_runs(&me.nav(), scenario, &filters, Ok(&page), asked.after.is_some()),
        ),
        Err(AnswerRunsError::UnknownScenario(_)) => not_found(
            state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        ),
        Err(AnswerRunsError::BadRange(problem)) => html(
            StatusCode::BAD_REQUEST,
            pages::answer_runs(
                &me.nav(),
                scenario,
                &filters,
                Err(&words::range(me.lang, &problem)),
                false,
            ),
        ),
        Err(AnswerRunsError::BadCursor) => refusal(
            state,
            StatusCode::BAD_REQUEST,
            "このページのリンクは正しくありません。最初のページから開いてください。",
            "That page link is not valid: start from the first page.",
        ),
        Err(AnswerRunsError::Store(error)) => unavailable(state, error),
    }
}

#[derive(Debug, Deserialize)]
struct CrossTabQuery {
    by: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

/// `GET /console/scenarios/{id}/graph`: the scenario's nodes and arrows,
/// its version, and what `check` says of its file now (viewers).
async fn scenario_graph(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let Ok(id) = ScenarioId::parse(path.into_inner()) else {
        return not_found(
            &state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        );
    };
    match state.scenario_graphs.of(&id, me.lang).await {
        Some(graph) => html(StatusCode::OK, pages::scenario_graph(&me.nav(), &graph)),
        None => not_found(
            &state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        ),
    }
}

/// A scenario's answers cross-tabulated: `?by=source` (the default),
/// `variant`, `tag:{tag}` or `field:{name}`, over `from`..`to` when given.
async fn cross_tab(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let Some(query) = query_of::<CrossTabQuery>(&request) else {
        return unreadable_query(&state);
    };
    let scenario = path.into_inner();
    let by = query.by.as_deref().filter(|by| !by.is_empty()).unwrap_or("source");
    let nav = me.nav();
    let asked = pages::CrossTabAsked {
        scenario: &scenario,
        by,
        from: query.from.as_deref().unwrap_or_default(),
        to: query.to.as_deref().unwrap_or_default(),
    };
    let (from, to) = (query.from.as_deref(), query.to.as_deref());
    match state.results.cross_tab(&scenario, by, from, to).await {
        Ok(tab) => html(StatusCode::OK, pages::cross_tab(&nav, &asked, Ok(&tab))),
        Err(ResultsError::UnknownScenario(_)) => not_found(
            &state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        ),
        Err(ResultsError::BadBy(problem)) => html(
            StatusCode::BAD_REQUEST,
            pages::cross_tab(&nav, &asked, Err(&words::cross_by(me.lang, &problem))),
        ),
        Err(ResultsError::BadRange(problem)) => html(
            StatusCode::BAD_REQUEST,
            pages::cross_tab(&nav, &asked, Err(&words::range(me.lang, &problem))),
        ),
        Err(ResultsError::Store(error)) => unavailable(&state, error),
    }
}

/// Whether `id` can be an answer's document id (a hash, or a legacy random id):
/// anything else would be refused by Firestore as a cursor.
fn is_answer_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && !id.starts_with("__")
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_'))
}

/// `?campaign=ID`: one campaign's answers.
#[derive(Debug, Deserialize)]
struct CsvQuery {
    campaign: Option<String>,
    /// The answers page's filters: days (`YYYY-MM-DD`, both included) and a
    /// tag the user has now.
    from: Option<String>,
    to: Option<String>,
    tag: Option<String>,
}

async fn answers_csv(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    // Exports are the owners' (the answers leave the service).
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Owner).await);
    let Some(query) = query_of::<CsvQuery>(&request) else {
        return unreadable_query(&state);
    };
    let scenario = path.into_inner();
    let campaign = query.campaign.as_deref();
    if campaign.is_some_and(|id| crate::ids::DocumentHexId::parse(id).is_none()) {
        return not_found(&state, "そのIDの一斉配信はありません。", "No campaign with that id.");
    }
    let (from, to, tag) = (filled(&query.from), filled(&query.to), filled(&query.tag));
    if tag.is_some_and(|tag| tag.chars().count() > SEARCH_CHARS) {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "タグが長すぎます。",
            "That tag is too long.",
        );
    }
    let mut summary = vec![("scenarioId", scenario.clone())];
    for (name, value) in [("campaign", campaign), ("from", from), ("to", to), ("tag", tag)] {
        if let Some(value) = value {
            summary.push((name, value.to_owned()));
        }
    }
    let entry = or_answer!(begin_audit(&state, &me, &request, "export", summary, Vec::new()).await);
    // Always defused: the console's download is for opening in a spreadsheet.
    let asked = crate::reports::export::ExportFilters {
        from,
        to,
        campaign,
        tag,
    };
    let response = match state
        .exporter
        .start(&scenario, &asked, crate::reports::export::Cells::Safe)
        .await
    {
        Ok(export) => {
            tracing::info!(scenario.id = %scenario, outcome = "started", "answers export started from the console");
            csv_response(export)
        }
        Err(ExportError::UnknownScenario(_)) => not_found(
            &state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        ),
        Err(ExportError::BadRange(problem)) => html(
            StatusCode::BAD_REQUEST,
            pages::refused(me.lang, &words::range(me.lang, &problem)),
        ),
        Err(error) => unavailable(&state, error),
    };
    state.auditor.finish(&entry, response.status().as_u16(), None).await;
    response
}

/// The result of a replay, shown after the redirect; `sig` proves the
/// console wrote it.
#[derive(Debug, Deserialize)]
struct ReplayedQuery {
    ok: Option<String>,
    message: Option<String>,
    sig: Option<String>,
    /// The letter whose replay needs a confirmation: its row offers "Replay
    /// anyway" (the POST still needs the session's CSRF token).
    confirm: Option<String>,
}

async fn dead_letters(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let Some(query) = query_of::<ReplayedQuery>(&request) else {
        return unreadable_query(&state);
    };
    let letters = match state.store.dead_letters(LISTED).await {
        Ok(letters) => letters,
        Err(error) => return unavailable(&state, error),
    };
    let letters: Vec<_> = letters.into_iter().map(|letter| (letter.id, letter.doc)).collect();
    let keys = keys(&state);
    let ok = query.ok.as_deref() == Some("true");
    let confirm = query.confirm.as_deref();
    let result = match (query.message.as_deref(), query.sig.as_deref()) {
        (Some(message), Some(sig)) if keys.message_matches(ok, &signed_result(message, confirm), sig) => {
            Some((ok, message))
        }
        _ => None,
    };
    // Offered only as the console wrote it: the letter is signed with the message.
    let confirm = confirm.filter(|_| result.is_some());
    html(
        StatusCode::OK,
        pages::dead_letters(&me.nav(), &letters, result, confirm),
    )
}

/// What a replay's result link signs: the message and the letter it offers to
/// replay anyway, so a link cannot be edited to offer it for another.
fn signed_result(message: &str, confirm: Option<&str>) -> String {
    match confirm {
        Some(id) => format!("{message}\u{1f}confirm:{id}"),
        None => message.to_owned(),
    }
}

/// A message built with values, in the console's language (both are
/// built: they are short).
fn pick(lang: ConsoleLang, ja: String, en: String) -> String {
    match lang {
        ConsoleLang::Ja => ja,
        ConsoleLang::En => en,
    }
}

/// What another part of the service said went wrong (its own words), led
/// by the console's in Japanese.
fn detail(lang: ConsoleLang, error: &impl std::fmt::Display) -> String {
    pick(lang, format!("できませんでした: {error}"), error.to_string())
}

/// Firestore's failure, and that the same form may be sent again.
fn try_again(lang: ConsoleLang, error: &impl std::fmt::Display) -> String {
    pick(
        lang,
        format!("データベース（Firestore）が応答しませんでした（{error}）。もう一度お試しください。"),
        format!("Firestore did not answer ({error}); try again."),
    )
}

/// The risk a forced replay takes, in the console's words.
fn confirmation(lang: ConsoleLang, risk: crate::pipeline::replay::ReplayRisk) -> &'static str {
    match risk {
        crate::pipeline::replay::ReplayRisk::RetryKeyExpired => lang.t(
            "最初の送信から23時間以上たっているため、すでにユーザーに届いているかもしれず、LINEも二通目を止められません。\
             ユーザーに届いていないと確かな場合だけ「それでも再送」を押してください",
            "it was first sent over 23 hours ago, so it may have reached the user already, and LINE no longer \
             remembers it to stop a second copy. Replay anyway only if you are sure the user did not get it",
        ),
        crate::pipeline::replay::ReplayRisk::ReplyOutcomeUnknown => lang.t(
            "この返信が届いたかどうかLINEから返事がなかったため、ユーザーはすでに受け取っているかもしれません。\
             再送するとプッシュでもう一度送られます。届いていないと確かな場合だけ「それでも再送」を押してください",
            "LINE never said whether this reply arrived, so the user may have it already, and a replay sends it again \
             as a push. Replay anyway only if you are sure the user did not get it",
        ),
    }
}

/// The status the API would answer a replay with, for its audit entry.
fn replay_status(result: &Result<Replayed, ReplayError>) -> u16 {
    match result {
        Ok(Replayed::Outbound(Settlement::Failed(_) | Settlement::Uncertain(_))) => 502,
        Ok(_) => 200,
        Err(ReplayError::UnknownLetter(_)) => 404,
        Err(ReplayError::NotParked(_) | ReplayError::NotReplayable(_) | ReplayError::NeedsForce(_)) => 409,
        Err(ReplayError::FailedAgain(_)) => 502,
        Err(ReplayError::Pipeline(crate::pipeline::PipelineError::Store(_))) => 503,
        Err(ReplayError::Pipeline(crate::pipeline::PipelineError::Contention(_))) => 409,
        Err(ReplayError::Pipeline(crate::pipeline::PipelineError::InvalidInput(_))) => 400,
        Err(ReplayError::Pipeline(_)) => 500,
    }
}

/// What a replay did, in words, and whether it worked.
fn replay_outcome(lang: ConsoleLang, id: &str, result: Result<Replayed, ReplayError>) -> (bool, String) {
    match result {
        Ok(Replayed::Outbound(Settlement::Failed(reason) | Settlement::Uncertain(reason))) => (
            false,
            pick(
                lang,
                format!("{id} を再送しましたが、LINEが受け付けなかったため、もう一度保留しました（{reason}）。"),
                format!("Replayed {id}: LINE did not take the message; it was parked again ({reason})."),
            ),
        ),
        Ok(replayed) => {
            let result = match &replayed {
                Replayed::Event(processed) => processed.as_str(),
                Replayed::Outbound(settlement) => settlement.as_str(),
            };
            (
                true,
                pick(
                    lang,
                    format!("{id} を再送しました（{result}）。"),
                    format!("Replayed {id}: {result}."),
                ),
            )
        }
        Err(ReplayError::UnknownLetter(_)) => (
            false,
            pick(
                lang,
                format!("配信失敗 {id} はありません。すでに再送されています。"),
                format!("No dead letter {id}: it was replayed already."),
            ),
        ),
        Err(ReplayError::NotParked(state)) => (
            false,
            pick(
                lang,
                format!("{id} はもう保留されていません（{state}）。"),
                format!("{id} is no longer parked: it is {state}."),
            ),
        ),
        Err(ReplayError::NotReplayable(message)) => (false, format!("{id}: {message}")),
        Err(ReplayError::NeedsForce(risk)) => (
            false,
            pick(
                lang,
                format!("{id} は再送しませんでした。{}。", confirmation(lang, risk)),
                format!("{id} was not replayed: {}.", confirmation(lang, risk)),
            ),
        ),
        Err(ReplayError::FailedAgain(reason)) => (
            false,
            pick(
                lang,
                format!("{id} はまた失敗したため、もう一度保留しました: {reason}"),
                format!("{id} failed again and was parked again: {reason}"),
            ),
        ),
        Err(ReplayError::Pipeline(crate::pipeline::PipelineError::Store(error))) => (
            false,
            pick(
                lang,
                format!("{id}: データベース（Firestore）が応答しませんでした（{error}）。もう一度お試しください。"),
                format!("{id}: Firestore did not answer ({error}); try again."),
            ),
        ),
        Err(ReplayError::Pipeline(error)) => (
            false,
            pick(
                lang,
                format!("{id} は再送しませんでした: {error}"),
                format!("{id} was not replayed: {error}"),
            ),
        ),
    }
}

/// `GET /console/dead-letters/{id}/replay`: what a replay of the letter
/// does (and, for a message that may reach the user twice, why), with the
/// button that replays it; nothing is replayed before it is pressed.
async fn replay_form(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Editor).await);
    let id = path.into_inner();
    match state.replayer.look(&id).await {
        Ok(Some(look)) => html(
            StatusCode::OK,
            pages::replay_confirm(
                &me.nav(),
                &id,
                &look.letter,
                look.risk.map(|risk| confirmation(state.console_lang, risk)),
                &new_form_key(),
            ),
        ),
        Ok(None) => not_found(
            &state,
            "そのIDの配信失敗はありません。すでに再送されたのかもしれません。",
            "No dead letter with that id: it may have been replayed already.",
        ),
        Err(error) => unavailable(&state, error),
    }
}

async fn replay(
    request: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Editor).await);
    let id = path.into_inner();
    let force = form.force.as_deref() == Some("true");
    if force {
        // The risk was read on a page: it holds only for the letter as parked then.
        let parked_then = match state.replayer.look(&id).await {
            Ok(Some(look)) => Some(look.letter.parked_at.as_millisecond().to_string()),
            Ok(None) => None,
            Err(error) => return unavailable(&state, error),
        };
        if parked_then.is_some_and(|parked| parked != form.seen) {
            let message = pick(
                state.console_lang,
                format!(
                    "{id} は再送しませんでした。そのページを表示した後に、もう一度保留されています。再送する前にもう一度確認してください。"
                ),
                format!(
                    "{id} was not replayed: it was parked again after that page was shown. Look at it again before replaying it."
                ),
            );
            return see_other(&replay_result_location(&state, false, message, None));
        }
    }
    let entry = or_answer!(
        begin_audit(
            &state,
            &me,
            &request,
            "replay",
            vec![("force", force.to_string())],
            vec![id.clone()],
        )
        .await
    );
    // The confirmation's receipt: the same form sent again (a double click,
    // a reload) finds its replay done and replays nothing again.
    let receipt = (is_form_key(&form.key) && crate::pipeline::replay::is_letter_id(&id))
        .then(|| FormReceipts::id("replay", &form.key, &[&id]));
    if form_repeated(&state, &entry, receipt.as_deref()).await {
        let message = pick(
            state.console_lang,
            format!("{id} は、このフォームですでに再送しています。"),
            format!("This form replayed {id} already."),
        );
        return see_other(&replay_result_location(&state, true, message, None));
    }
    let result = state.replayer.replay(&id, force).await;
    let status = replay_status(&result);
    // Only a replay that went through: a letter LINE refused again is parked
    // again under the same id, and the same form may try it once more.
    if let (200, Some(receipt)) = (status, &receipt) {
        state.form_receipts.record("replay", receipt).await;
    }
    state.auditor.finish(&entry, status, None).await;
    let confirm = matches!(result, Err(ReplayError::NeedsForce(_)));
    let (ok, message) = replay_outcome(state.console_lang, &id, result);
    tracing::info!(dead_letter.id = %id, outcome = if ok { "replayed" } else { "not_replayed" }, "dead letter replayed from the console");
    see_other(&replay_result_location(&state, ok, message, confirm.then_some(id)))
}

/// The dead letters page showing a replay's result, signed, and offering
/// "Replay anyway" for `confirm`.
fn replay_result_location(state: &AppState, ok: bool, message: String, confirm: Option<String>) -> String {
    let sig = keys(state).sign_message(ok, &signed_result(&message, confirm.as_deref()));
    let mut query = vec![("ok", ok.to_string()), ("message", message), ("sig", sig)];
    if let Some(id) = confirm {
        query.push(("confirm", id));
    }
    format!(
        "/console/dead-letters?{}",
        serde_urlencoded::to_string(query).unwrap_or_default()
    )
}

#[derive(Debug, Deserialize)]
struct UserQuery {
    id: Option<String>,
    /// A search by display name (prefix) or tag: `by` is `name` or `tag`.
    q: Option<String>,
    by: Option<String>,
}

/// Characters a search's text may hold (a tag's limit).
const SEARCH_CHARS: usize = 100;

async fn users(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let Some(query) = query_of::<UserQuery>(&request) else {
        return unreadable_query(&state);
    };
    let nav = me.nav();
    if let Some(text) = query.q.as_deref().map(str::trim).filter(|text| !text.is_empty()) {
        let by = query.by.as_deref().unwrap_or("name");
        let refuse = |ja: &'static str, en: &'static str| {
            html(
                StatusCode::BAD_REQUEST,
                pages::user_search(&nav, text, by, None, Some(state.console_lang.t(ja, en))),
            )
        };
        let search = match by {
            _ if text.chars().count() > SEARCH_CHARS || text.contains('\0') => {
                return refuse("検索する言葉が長すぎます。", "That is too long to search for.");
            }
            "name" => crate::store::UserSearch::NamePrefix(text.to_owned()),
            "tag" => crate::store::UserSearch::Tag(text.to_owned()),
            _ => return refuse("名前かタグで検索してください。", "Search by name or by tag."),
        };
        return match state.user_profiles.find(&search).await {
            Ok(found) => html(StatusCode::OK, pages::user_search(&nav, text, by, Some(&found), None)),
            Err(error) => unavailable(&state, error),
        };
    }
    let asked = query.id.as_deref().map(str::trim).unwrap_or_default();
    if asked.is_empty() {
        return html(StatusCode::OK, pages::user(&nav, "", None, None));
    }
    let user = match LineUserId::parse_line_shaped(asked) {
        Ok(user) => user,
        Err(shape) => {
            let problem = me
                .lang
                .t("LINEのユーザーIDではありません（U のあとに16進数32文字）。", shape);
            return html(StatusCode::BAD_REQUEST, pages::user(&nav, asked, None, Some(problem)));
        }
    };
    let (timeline, profile) = tokio::join!(
        state.timelines.user(&user, TIMELINE_ENTRIES),
        state.user_profiles.user(&user)
    );
    let (timeline, profile) = match (timeline, profile) {
        (Ok(timeline), Ok(profile)) => (timeline, profile),
        (Err(error), _) | (_, Err(error)) => return unavailable(&state, error),
    };
    match (serde_json::to_value(&timeline), serde_json::to_value(&profile)) {
        (Ok(mut story), Ok(profile)) => {
            // The scenarios answered and started come from the user's record.
            story["answered"] = profile["answered"].clone();
            story["started"] = profile["started"].clone();
            story["fields"] = profile["fields"].clone();
            story["known"] =
                serde_json::Value::Bool(profile["firstSeenAt"].is_string() || profile["following"].is_boolean());
            // This page's key: each of its forms changes the user once.
            story["formKey"] = serde_json::Value::String(new_form_key());
            if let Some(entries) = story["entries"].as_array_mut() {
                for entry in entries.iter_mut() {
                    describe_entry(&state.results, entry);
                }
            }
            html(StatusCode::OK, pages::user(&nav, asked, Some(&story), None))
        }
        (Err(error), _) | (_, Err(error)) => unavailable(&state, error),
    }
}

/// What a timeline entry's sentence needs from the loaded scenario, added to
/// the entry: the scenario's title and time zone, the question an answer,
/// a message or a timer is about in the scenario's words (never the user's),
/// an answered choice's label, and whether a message starts a run (it asks
/// a question a run asks first and answers nothing).
fn describe_entry(results: &Results, entry: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(scenario) = entry["scenarioId"].as_str().map(str::to_owned) else {
        return;
    };
    if let Some(zone) = results.zone_name(&scenario) {
        entry["zone"] = Value::String(zone.to_owned());
    }
    if let Some(title) = results.title(&scenario) {
        entry["scenarioTitle"] = Value::String(title);
    }
    let node = match entry["type"].as_str() {
        Some("message") => entry["asks"].as_str(),
        Some("answer" | "timer") => entry["nodeId"].as_str(),
        _ => None,
    }
    .map(str::to_owned);
    let Some(question) = node.and_then(|node| results.question(&scenario, &node)) else {
        return;
    };
    if entry["type"] == "message" {
        // A run's first question, asked by no answer: a keyword, a follow,
        // a manual send or a campaign started the run. (An expiry's chain
        // that leads back to such a question reads as a start too.)
        let first = results.entry_questions(&scenario).contains(&question.node);
        if first && entry["answerId"].is_null() {
            entry["startsRun"] = Value::Bool(true);
        }
        entry["asksText"] = Value::String(question.text);
        return;
    }
    if entry["type"] == "answer"
        && let Some(value) = entry["value"].as_str()
        && let Some((_, label)) = question.choices.iter().find(|(choice, _)| choice == value)
    {
        entry["choiceLabel"] = Value::String(label.clone());
    }
    entry["questionText"] = Value::String(question.text);
}

async fn sources(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let nav = me.nav();
    let Some(report) = &state.sources_report else {
        return html(StatusCode::OK, pages::sources(&nav, None));
    };
    let rows = match report.list(None, None).await {
        Ok(rows) => rows,
        Err(error) => return unavailable(&state, error),
    };
    let mut users = Vec::with_capacity(rows.len());
    for row in &rows {
        match report.recent_users(&row.id).await {
            Ok(list) => users.push(list),
            Err(error) => return unavailable(&state, error),
        }
    }
    let cards: Vec<pages::SourceCard<'_>> = rows
        .iter()
        .zip(&users)
        .map(|(row, users)| pages::SourceCard { row, users })
        .collect();
    html(StatusCode::OK, pages::sources(&nav, Some(&cards)))
}

async fn source_qr(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    if let Err(response) = signed_in(&request, &state, OperatorRole::Viewer).await {
        return response;
    }
    let Some(report) = &state.sources_report else {
        return not_found(&state, "流入経路リンクは使われていません。", "Source links are off.");
    };
    match report.qr_png(&path) {
        Ok(png) => HttpResponse::Ok()
            .content_type("image/png")
            .insert_header(("Cache-Control", "no-store"))
            .body(png),
        Err(crate::reports::sources::SourcesError::UnknownSource(_)) => {
            not_found(&state, "そのIDの流入経路はありません。", "No source with that id.")
        }
        Err(error) => unavailable(&state, error),
    }
}

async fn campaigns(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    match state.campaigns.list(LISTED).await {
        Ok(all) => html(StatusCode::OK, pages::campaigns(&me.nav(), &all)),
        Err(error) => unavailable(&state, error),
    }
}

async fn campaign(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Viewer).await);
    let id = path.into_inner();
    if crate::ids::DocumentHexId::parse(&id).is_none() {
        return not_found(&state, "そのIDの一斉配信はありません。", "No campaign with that id.");
    }
    let status = match state.campaigns.status(&id).await {
        Ok(Some(status)) => status,
        Ok(None) => return not_found(&state, "そのIDの一斉配信はありません。", "No campaign with that id."),
        Err(error) => return unavailable(&state, error),
    };
    let counted = state
        .campaign_results
        .of(&crate::reports::campaign_results::CampaignRef {
            id: &status.campaign_id,
            scenario: &status.scenario_id,
            planned: status.planned,
            sent: status.sent,
        })
        .await;
    // `?created=1`: the builder's confirmed form landed here.
    let created = request.query_string().split('&').any(|pair| pair == "created=1");
    match counted {
        Ok(results) => html(StatusCode::OK, pages::campaign(&me.nav(), &status, &results, created)),
        Err(error) => unavailable(&state, error),
    }
}

#[derive(Debug, Default, Deserialize)]
struct BuilderStep {
    /// Present on the builder's "Preview" (the dry run).
    #[serde(default)]
    preview: Option<String>,
}

/// `GET /console/campaigns/new`: the campaign builder (editors); with
/// `preview`, the dry run of what its fields ask for (count, sample, quota,
/// start) and the confirm form, which carries the form's own key.
async fn campaign_builder(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Editor).await);
    let (Some(asked), Some(step)) = (
        query_of::<campaign_form::CampaignForm>(&request),
        query_of::<BuilderStep>(&request),
    ) else {
        return unreadable_query(&state);
    };
    let scenarios = state.manual_sender.sendable();
    let builder = |status: StatusCode, problem: Option<&str>| {
        html(status, pages::campaign_builder(&me.nav(), &scenarios, &asked, problem))
    };
    if step.preview.is_none() {
        return builder(StatusCode::OK, None);
    }
    let campaign = match asked.request() {
        Ok(campaign) => campaign,
        Err(problem) => return builder(StatusCode::BAD_REQUEST, Some(&problem.in_lang(me.lang))),
    };
    match state.campaigns.dry_run(&campaign).await {
        Ok(found) => {
            // This form's own key: a double click or a reload creates one campaign.
            let key = new_form_key();
            let again = serde_urlencoded::to_string(&asked).unwrap_or_default();
            html(
                StatusCode::OK,
                pages::campaign_preview(&me.nav(), &campaign, &asked, &found, &key, &again),
            )
        }
        Err(error) => {
            let (status, message) = campaign_refusal(me.lang, error);
            builder(status, Some(&message))
        }
    }
}

/// A campaign the pipeline refused, as the console answers it.
fn campaign_refusal(lang: ConsoleLang, error: crate::pipeline::campaigns::CampaignError) -> (StatusCode, String) {
    use crate::pipeline::campaigns::{CampaignError, CampaignStartError};
    match error {
        CampaignError::Scenario(CampaignStartError::Broken(..)) => {
            tracing::error!(error = %error, outcome = "defect", "a campaign's scenario does not render");
            (StatusCode::INTERNAL_SERVER_ERROR, detail(lang, &error))
        }
        CampaignError::Audience(problem) => (StatusCode::BAD_REQUEST, words::audience(lang, &problem)),
        CampaignError::SendAt(problem) => (StatusCode::BAD_REQUEST, words::send_at(lang, &problem)),
        CampaignError::Scenario(_) | CampaignError::BadRate(_) | CampaignError::BadKey => {
            (StatusCode::BAD_REQUEST, detail(lang, &error))
        }
        CampaignError::KeyReused => (
            StatusCode::UNPROCESSABLE_ENTITY,
            lang.t(
                "このフォームは別の一斉配信に使われました。作成画面からやり直してください。",
                "This form was used for another campaign: start again from the builder.",
            )
            .to_owned(),
        ),
        CampaignError::OverQuota(figures) => (
            StatusCode::CONFLICT,
            pick(
                lang,
                format!(
                    "この一斉配信は{}通を送りますが、今月の上限まで残り{}通です。対象を絞るか、「今月の上限を超えても送る」にチェックを入れてください。",
                    figures.messages,
                    figures.remaining.unwrap_or(0)
                ),
                format!(
                    "The campaign would send {} messages and the month's quota has {} left. Choose fewer users, or tick \"Send even beyond the month's quota\".",
                    figures.messages,
                    figures.remaining.unwrap_or(0)
                ),
            ),
        ),
        CampaignError::QuotaUnknown(_) => (StatusCode::BAD_GATEWAY, detail(lang, &error)),
        CampaignError::UnknownCampaign(_) | CampaignError::Finished(_) => (StatusCode::CONFLICT, detail(lang, &error)),
        CampaignError::Pipeline(crate::pipeline::PipelineError::Store(error)) => {
            (StatusCode::SERVICE_UNAVAILABLE, try_again(lang, &error))
        }
        CampaignError::Pipeline(crate::pipeline::PipelineError::Contention(message)) => (
            StatusCode::CONFLICT,
            pick(
                lang,
                format!("{message}。もう一度お試しください。"),
                format!("{message}; try again."),
            ),
        ),
        CampaignError::Pipeline(crate::pipeline::PipelineError::InvalidInput(message)) => {
            (StatusCode::BAD_REQUEST, message)
        }
        CampaignError::Pipeline(error) => {
            tracing::error!(error = %error, outcome = "defect", "a campaign could not be created");
            (StatusCode::INTERNAL_SERVER_ERROR, detail(lang, &error))
        }
    }
}

/// `POST /console/campaigns/new`: the confirmed campaign, created once per
/// form (its key is the campaign's `Idempotency-Key`), audited in the
/// campaign's own commit; then its page, where progress shows.
async fn campaign_confirmed(request: HttpRequest, state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Editor).await);
    let invalid = || {
        refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "このフォームは正しくありません。一斉配信の作成画面からやり直してください。",
            "That form is not valid: start again from the campaign builder.",
        )
    };
    let Ok(asked) = serde_urlencoded::from_bytes::<campaign_form::CampaignForm>(&body) else {
        return invalid();
    };
    let Ok(campaign) = asked.request() else {
        return invalid();
    };
    if !is_form_key(&form.key) {
        return invalid();
    }
    let mut summary = vec![
        ("scenarioId", campaign.scenario_id.to_string()),
        ("audience", campaign.audit_audience()),
        ("idempotencyKey", form.key.clone()),
    ];
    if let Some(at) = &campaign.send_at {
        summary.push(("sendAt", at.to_rfc3339()));
    }
    let entry = state.auditor.entry(
        Some(&me.actor),
        Action {
            via: Via::Console,
            name: campaign.audit_action(),
            route: crate::http::admin::route_of(&request),
            summary,
            touched: Vec::new(),
        },
    );
    // The entry lands in the campaign's own commit.
    let created = state.campaigns.create(&form.key, &campaign, Some(&entry)).await;
    let (status, response) = match created {
        Ok(id) => (303, see_other(&format!("/console/campaigns/{id}?created=1"))),
        Err(error) => {
            let (status, message) = campaign_refusal(me.lang, error);
            // Firestore or LINE did not answer, or the commit met contention:
            // the campaign may exist. The same form (the same key) tries
            // again and finds it; a new preview would be a new key.
            let retry = matches!(
                status,
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY | StatusCode::CONFLICT
            )
            .then_some((&asked, form.key.as_str()));
            let again = serde_urlencoded::to_string(&asked).unwrap_or_default();
            (
                status.as_u16(),
                html(status, pages::campaign_refused(&me.nav(), &message, &again, retry)),
            )
        }
    };
    let touched = crate::engine::campaign::campaign_id(&form.key).map(|id| vec![id]);
    state.auditor.finish(&entry, status, touched).await;
    tracing::info!(scenario.id = %campaign.scenario_id, status, "campaign from the console");
    response
}

/// The tokens page for `me`, with a token just made or a message.
async fn tokens_page(
    state: &AppState,
    me: &Signed,
    status: StatusCode,
    created: Option<&str>,
    message: Option<(bool, &str)>,
) -> HttpResponse {
    match state.access.api_tokens(&me.actor).await {
        Ok(tokens) => html(status, pages::api_tokens(&me.nav(), Some(&tokens), created, message)),
        Err(AccessError::NoOperator) => html(status, pages::api_tokens(&me.nav(), None, None, message)),
        Err(error) => unavailable(state, error),
    }
}

#[derive(Debug, Deserialize)]
struct SendQuery {
    id: Option<String>,
    scenario: Option<String>,
}

/// `GET /console/users/send?id=U...[&scenario=ID]`: the scenarios to choose
/// from, then what the chosen one will send the user, with the confirm form.
async fn send_form(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Editor).await);
    let Some(query) = query_of::<SendQuery>(&request) else {
        return unreadable_query(&state);
    };
    let Ok(user) = LineUserId::parse_line_shaped(query.id.as_deref().unwrap_or_default().trim()) else {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "LINEのユーザーIDではありません。",
            "That is not a LINE user id.",
        );
    };
    let Some(scenario) = query.scenario.filter(|scenario| !scenario.is_empty()) else {
        let scenarios = state.manual_sender.sendable();
        return html(StatusCode::OK, pages::send_choice(&me.nav(), user.as_str(), &scenarios));
    };
    let Ok(scenario) = ScenarioId::parse(scenario) else {
        return not_found(
            &state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        );
    };
    match state.manual_sender.preview(&scenario, &user).await {
        Ok(messages) => {
            // This form's own key: a double click or a reload sends once.
            let key = new_form_key();
            html(
                StatusCode::OK,
                pages::send_preview(&me.nav(), user.as_str(), scenario.as_str(), &messages, &key),
            )
        }
        Err(ManualSendError::UnknownScenario(_)) => not_found(
            &state,
            "そのIDのシナリオは読み込まれていません。",
            "No scenario with that id is loaded.",
        ),
        Err(ManualSendError::Pipeline(error)) => unavailable(&state, error),
        Err(error) => html(StatusCode::CONFLICT, pages::refused(me.lang, &detail(me.lang, &error))),
    }
}

/// A console send's key: made by [`send_form`], so anything else is refused.
fn is_form_key(key: &str) -> bool {
    key.strip_prefix("console-")
        .is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|byte| byte.is_ascii_hexdigit()))
}

/// `POST /console/users/send`: the confirmed send, once per form.
async fn send_confirmed(request: HttpRequest, state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Editor).await);
    let (Ok(user), Ok(scenario)) = (
        LineUserId::parse_line_shaped(form.user.trim()),
        ScenarioId::parse(form.scenario.clone()),
    ) else {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "このフォームは正しくありません。ユーザーのページからやり直してください。",
            "That form is not valid: start again from the user's page.",
        );
    };
    if !is_form_key(&form.key) {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "このフォームは正しくありません。ユーザーのページからやり直してください。",
            "That form is not valid: start again from the user's page.",
        );
    }
    let entry = state.auditor.entry(
        Some(&me.actor),
        Action {
            via: Via::Console,
            name: "manual_send",
            route: crate::http::admin::route_of(&request),
            summary: vec![
                ("scenarioId", scenario.to_string()),
                ("users", "1".to_owned()),
                ("idempotencyKey", form.key.clone()),
            ],
            touched: vec![user.to_string()],
        },
    );
    // The entry lands with the request's record (see `ManualSender::send`).
    let sent = state
        .manual_sender
        .send(&form.key, &scenario, std::slice::from_ref(&user), Some(&entry))
        .await;
    let (status, ok, message) = match &sent {
        Ok(results) => match results.first().map(|(_, outcome)| outcome) {
            Some(UserSend::Sent | UserSend::Logged) => (
                200,
                true,
                pick(
                    me.lang,
                    format!("{scenario} を {user} に送りました。"),
                    format!("Sent {scenario} to {user}."),
                ),
            ),
            Some(UserSend::AlreadySent) => (
                200,
                true,
                pick(
                    me.lang,
                    format!("{scenario} はこのフォームですでに {user} に送っています。もう一度は送りませんでした。"),
                    format!("{scenario} was sent to {user} already by this form: nothing was sent again."),
                ),
            ),
            // Recorded, and retried by the service until LINE takes it: a new
            // send would be a second message.
            Some(UserSend::RetryLater(_)) => (
                202,
                true,
                pick(
                    me.lang,
                    format!(
                        "{scenario} を {user} あてに記録しました。LINEが受け付けしだい送られます。もう一度送らないでください。"
                    ),
                    format!(
                        "{scenario} is recorded for {user} and will be sent as soon as LINE takes it: do not send it again."
                    ),
                ),
            ),
            Some(outcome) => (
                502,
                false,
                pick(
                    me.lang,
                    format!(
                        "{scenario} は送れませんでした: {}",
                        outcome.error().unwrap_or("LINEが受け付けませんでした")
                    ),
                    format!(
                        "{scenario} did not go out: {}",
                        outcome.error().unwrap_or("LINE did not take it")
                    ),
                ),
            ),
            None => (
                500,
                false,
                state
                    .console_lang
                    .t("何も送信されませんでした。", "Nothing was sent.")
                    .to_owned(),
            ),
        },
        Err(ManualSendError::UnknownScenario(_)) => (
            404,
            false,
            state
                .console_lang
                .t(
                    "そのIDのシナリオは読み込まれていません。",
                    "No scenario with that id is loaded.",
                )
                .to_owned(),
        ),
        Err(ManualSendError::KeyReused) => (
            422,
            false,
            state
                .console_lang
                .t(
                    "このフォームは別の送信に使われました。ユーザーのページからやり直してください。",
                    "This form was used for another send: start again from the user's page.",
                )
                .to_owned(),
        ),
        Err(ManualSendError::Pipeline(error)) => (
            503,
            false,
            pick(
                me.lang,
                format!(
                    "データベース（Firestore）が応答しませんでした（{error}）。このページからもう一度送ってください。"
                ),
                format!("Firestore did not answer ({error}); send again from this page."),
            ),
        ),
        Err(error) => (409, false, detail(me.lang, &error)),
    };
    state.auditor.finish(&entry, status, None).await;
    tracing::info!(scenario.id = %scenario, user.id = %crate::log_ids::logged(user.as_str()), status, "manual send from the console");
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    html(code, pages::send_result(&me.nav(), user.as_str(), (ok, &message)))
}

/// `POST /console/users/edit`: a tag added or removed, a field set or
/// removed, by hand (editors); back to the user's page when done.
async fn edit_user(request: HttpRequest, state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Editor).await);
    let Ok(user) = LineUserId::parse_line_shaped(form.user.trim()) else {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "LINEのユーザーIDではありません。",
            "That is not a LINE user id.",
        );
    };
    // A browser sends a hidden field's line breaks as CRLF: one value either way.
    let value = form.value.replace("\r\n", "\n");
    let asked = crate::engine::hand_edit::HandEditForm {
        op: &form.op,
        tag: &form.tag,
        field: &form.field,
        value: &value,
        kind: &form.kind,
    };
    let edit = match crate::engine::hand_edit::HandEdit::parse(&asked) {
        Ok(edit) => edit,
        Err(problem) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::refused(me.lang, &words::hand_edit(me.lang, &problem)),
            );
        }
    };
    if form.confirm != "yes" {
        // First what will happen; the change runs from the confirmation.
        return html(
            StatusCode::OK,
            pages::hand_edit_confirm(&me.nav(), (user.as_str(), &form.key), &asked, &edit),
        );
    }
    let (kind, name) = edit.subject();
    // The entry lands in the change's own commit (not before it).
    let entry = state.auditor.entry(
        Some(&me.actor),
        Action {
            via: Via::Console,
            name: edit.action(),
            route: crate::http::admin::route_of(&request),
            summary: vec![(kind, name.to_owned())],
            touched: vec![user.to_string()],
        },
    );
    // A form of the page's (its key and what it asks) lands once: a reload
    // or a double click finds its receipt and changes nothing again.
    // What the form asks, as JSON: a part of an id holds no NUL, whatever
    // was typed into a box the operation does not use.
    let asked = serde_json::json!([form.op, form.tag, form.field, value, form.kind]).to_string();
    let receipt = is_form_key(&form.key).then(|| FormReceipts::id("hand_edit", &form.key, &[user.as_str(), &asked]));
    let result = state.user_edits.apply(&user, &edit, &entry, receipt.as_deref()).await;
    let (status, response) = match result {
        Ok(HandEdited::Done) => (303, see_other(&format!("/console/users?id={}", user.as_str()))),
        // 208 in its audit entry: a resent form that changed nothing.
        Ok(HandEdited::Repeat) => (208, see_other(&format!("/console/users?id={}", user.as_str()))),
        Ok(HandEdited::UnknownUser) => (
            404,
            not_found(
                &state,
                "そのユーザーの記録はありません。",
                "The service has no record of that user.",
            ),
        ),
        Ok(HandEdited::Refused(problem)) => (
            409,
            html(
                StatusCode::CONFLICT,
                pages::refused(me.lang, &words::hand_edit(me.lang, &problem)),
            ),
        ),
        Err(crate::pipeline::PipelineError::Store(error)) => (503, unavailable(&state, error)),
        Err(error) => (
            409,
            html(StatusCode::CONFLICT, pages::refused(me.lang, &detail(me.lang, &error))),
        ),
    };
    state.auditor.finish(&entry, status, None).await;
    tracing::info!(user.id = %crate::log_ids::logged(user.as_str()), action = edit.action(), status, "user changed by hand from the console");
    response
}

/// `POST /console/users/timers/{id}/cancel` (form: `user`): a pending
/// reminder, expiry or step of the user's cancelled from their timeline
/// (editors; audited as `timer_cancel`, as through the API). A timer that
/// fired or was cancelled meanwhile is left as it is and the page says so.
async fn cancel_timer(
    request: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    use crate::pipeline::timer_cancel::TimerCancelError;
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Editor).await);
    let Ok(user) = LineUserId::parse_line_shaped(form.user.trim()) else {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "LINEのユーザーIDではありません。",
            "That is not a LINE user id.",
        );
    };
    let Some(timer) = crate::ids::DocumentHexId::parse(&path) else {
        return not_found(&state, "その予定はありません。", "The user has no such timer.");
    };
    let entry = or_answer!(
        begin_audit(
            &state,
            &me,
            &request,
            "timer_cancel",
            Vec::new(),
            vec![user.to_string(), timer.as_str().to_owned()],
        )
        .await
    );
    let (status, ok, message) = match state.timer_cancels.cancel(&user, &timer).await {
        Ok(()) => (
            200,
            true,
            me.lang
                .t("予定を取り消しました。", "The timer is cancelled.")
                .to_owned(),
        ),
        Err(TimerCancelError::NotFound(_)) => (
            404,
            false,
            me.lang
                .t("その予定はありません。", "The user has no such timer.")
                .to_owned(),
        ),
        Err(TimerCancelError::NotPending(now)) => (
            409,
            false,
            pick(
                me.lang,
                format!("この予定はもう取り消せません（{}）。", pages::timer_state(me.lang, now)),
                format!("The timer is no longer pending: it is {now}."),
            ),
        ),
        Err(TimerCancelError::Pipeline(crate::pipeline::PipelineError::Store(error))) => {
            (503, false, try_again(me.lang, &error))
        }
        Err(error) => (409, false, detail(me.lang, &error)),
    };
    state.auditor.finish(&entry, status, None).await;
    tracing::info!(timer.id = %timer.as_str(), user.id = %crate::log_ids::logged(user.as_str()), status, "timer cancelled from the console");
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    html(code, pages::timer_cancelled(&me.nav(), user.as_str(), (ok, &message)))
}

/// `GET /console/campaigns/{id}/cancel`: what a cancel stops, and its form.
async fn cancel_form(request: HttpRequest, state: web::Data<AppState>, path: web::Path<String>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Editor).await);
    let id = path.into_inner();
    if crate::ids::DocumentHexId::parse(&id).is_none() {
        return not_found(&state, "そのIDの一斉配信はありません。", "No campaign with that id.");
    }
    match state.campaigns.status(&id).await {
        Ok(Some(status)) => {
            // This form's own key: a double click or a reload cancels once.
            let key = new_form_key();
            html(StatusCode::OK, pages::campaign_cancel(&me.nav(), &status, &key))
        }
        Ok(None) => not_found(&state, "そのIDの一斉配信はありません。", "No campaign with that id."),
        Err(error) => unavailable(&state, error),
    }
}

/// Whether a confirmation form's action landed already (its receipt is
/// recorded): then its audit entry is completed as a repeat (208) and the
/// caller answers that it was done.
async fn form_repeated(state: &AppState, entry: &crate::store::AuditEntry, receipt: Option<&str>) -> bool {
    let Some(receipt) = receipt else {
        return false;
    };
    let done = state.form_receipts.landed(receipt).await;
    if done {
        state.auditor.finish(entry, 208, None).await;
    }
    done
}

/// `POST /console/campaigns/{id}/cancel`: the confirmed cancel (audited).
async fn cancel_confirmed(
    request: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Editor).await);
    let id = path.into_inner();
    if crate::ids::DocumentHexId::parse(&id).is_none() {
        return not_found(&state, "そのIDの一斉配信はありません。", "No campaign with that id.");
    }
    let timers = form.timers.as_deref() == Some("true");
    let entry = or_answer!(
        begin_audit(
            &state,
            &me,
            &request,
            "campaign_cancel",
            vec![("cancelTimers", timers.to_string())],
            vec![id.clone()],
        )
        .await
    );
    // The form's receipt: a form sent again (a double click, a reload) finds
    // its cancel done and cancels nothing again.
    let receipt =
        is_form_key(&form.key).then(|| FormReceipts::id("campaign_cancel", &form.key, &[&id, &timers.to_string()]));
    let done_by_this_form = || {
        (
            208,
            true,
            me.lang
                .t(
                    "この一斉配信は、このフォームですでに取り消しています。",
                    "This form cancelled the campaign already.",
                )
                .to_owned(),
        )
    };
    // A receipt that cannot be read counts as absent: a cancel is safe to repeat.
    let seen = match &receipt {
        Some(receipt) => state.form_receipts.landed(receipt).await,
        None => false,
    };
    let cancelled = if seen {
        None
    } else {
        Some(state.campaigns.cancel(&id, timers).await)
    };
    if let (Some(Ok(_)), Some(receipt)) = (&cancelled, &receipt) {
        // When this fails, a resend of this form cancels (harmlessly) again.
        state.form_receipts.record("campaign_cancel", receipt).await;
    }
    let (status, ok, message) = match cancelled {
        // 208 in its audit entry: a resent form that changed nothing.
        None => done_by_this_form(),
        Some(Ok(now)) => (
            200,
            true,
            pick(
                me.lang,
                format!("一斉配信を取り消しました（{}）。", pages::campaign_state(me.lang, now)),
                format!("The campaign is {now}."),
            ),
        ),
        Some(Err(crate::pipeline::campaigns::CampaignError::UnknownCampaign(_))) => (
            404,
            false,
            state
                .console_lang
                .t("そのIDの一斉配信はありません。", "No campaign with that id.")
                .to_owned(),
        ),
        Some(Err(crate::pipeline::campaigns::CampaignError::Finished(state))) => (
            409,
            false,
            pick(
                me.lang,
                format!(
                    "この一斉配信は{}のため、取り消すものはもうありません。",
                    pages::campaign_state(me.lang, state)
                ),
                format!("The campaign is {state}: there is nothing left to cancel."),
            ),
        ),
        Some(Err(crate::pipeline::campaigns::CampaignError::Pipeline(crate::pipeline::PipelineError::Store(
            error,
        )))) => (503, false, try_again(me.lang, &error)),
        Some(Err(error)) => (409, false, detail(me.lang, &error)),
    };
    state.auditor.finish(&entry, status, None).await;
    // A repeat is recorded as one (208); the page answers as any success.
    let code = StatusCode::from_u16(if status == 208 { 200 } else { status }).unwrap_or(StatusCode::OK);
    html(code, pages::campaign_cancelled(&me.nav(), &id, (ok, &message)))
}

/// The user a page's `?id=` names, or the answer to give instead (boxed:
/// a response is large beside a user id).
fn user_of_query(request: &HttpRequest, state: &AppState) -> Result<LineUserId, Box<HttpResponse>> {
    let Some(query) = query_of::<UserQuery>(request) else {
        return Err(Box::new(unreadable_query(state)));
    };
    LineUserId::parse_line_shaped(query.id.as_deref().unwrap_or_default().trim()).map_err(|_| {
        Box::new(refusal(
            state,
            StatusCode::BAD_REQUEST,
            "LINEのユーザーIDではありません。",
            "That is not a LINE user id.",
        ))
    })
}

/// `GET /console/users/data?id=U...`: everything stored of one user, as a
/// JSON download (owners; audited).
async fn user_data(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Owner).await);
    let user = match user_of_query(&request, &state) {
        Ok(user) => user,
        Err(response) => return *response,
    };
    let entry = or_answer!(
        begin_audit(
            &state,
            &me,
            &request,
            "user_data_export",
            Vec::new(),
            vec![user.to_string()],
        )
        .await
    );
    let gathered = async {
        let (profile, timeline, answers, name) = tokio::join!(
            state.user_profiles.user(&user),
            state.timelines.user(&user, TIMELINE_ENTRIES),
            state.user_data.answers(&user),
            state.user_data.display_name(&user),
        );
        Ok::<_, crate::store::StoreError>((profile?, timeline?, answers?, name?))
    };
    let response = match gathered.await {
        Ok((None, _, (answers, _), _)) if answers.is_empty() => not_found(
            &state,
            "そのユーザーの記録はありません。",
            "The service has no record of that user.",
        ),
        Ok((profile, timeline, (answers, capped), name)) => {
            let body = serde_json::json!({
                "userId": user.as_str(),
                "exportedAt": crate::reports::audit::tokyo(state.clock.now_ms()),
                "displayName": name,
                "profile": profile,
                "answers": answers,
                "answersCapped": capped,
                "timeline": timeline,
            });
            HttpResponse::Ok()
                .content_type("application/json; charset=utf-8")
                .insert_header((CACHE_CONTROL, "no-store"))
                .insert_header(("X-Content-Type-Options", "nosniff"))
                .insert_header((
                    "Content-Disposition",
                    format!("attachment; filename=\"user-{}.json\"", user.as_str()),
                ))
                .body(body.to_string())
        }
        Err(error) => unavailable(&state, error),
    };
    state.auditor.finish(&entry, response.status().as_u16(), None).await;
    response
}

/// `GET /console/users/erase?id=U...`: what an erasure removes and keeps, and
/// its form (owners).
async fn erase_form(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Owner).await);
    match user_of_query(&request, &state) {
        Ok(user) => html(
            StatusCode::OK,
            pages::erase_confirm(&me.nav(), user.as_str(), &new_form_key()),
        ),
        Err(response) => *response,
    }
}

/// `POST /console/users/erase`: the confirmed erasure (owners; audited).
async fn erase_confirmed(request: HttpRequest, state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Owner).await);
    let Ok(user) = LineUserId::parse_line_shaped(form.user.trim()) else {
        return refusal(
            &state,
            StatusCode::BAD_REQUEST,
            "LINEのユーザーIDではありません。",
            "That is not a LINE user id.",
        );
    };
    let entry = or_answer!(
        begin_audit(
            &state,
            &me,
            &request,
            "user_data_erase",
            Vec::new(),
            vec![user.to_string()],
        )
        .await
    );
    // The confirmation's receipt: the same form sent again (a double click,
    // a reload) erases nothing again and says it was done.
    let receipt = is_form_key(&form.key).then(|| FormReceipts::id("user_data_erase", &form.key, &[user.as_str()]));
    if form_repeated(&state, &entry, receipt.as_deref()).await {
        let message = pick(
            me.lang,
            format!("{user} のデータは、このフォームですでに消去しています。"),
            format!("This form erased the data of {user} already."),
        );
        return html(
            StatusCode::OK,
            pages::send_result(&me.nav(), user.as_str(), (true, &message)),
        );
    }
    let erased = state.user_erasure.erase(&user).await;
    if let (Ok(_), Some(receipt)) = (&erased, &receipt) {
        state.form_receipts.record("user_data_erase", receipt).await;
    }
    let (status, result) = match erased {
        Ok(redacted) => (
            200,
            (
                true,
                pick(
                    me.lang,
                    format!("{user} の回答 {redacted} 件の内容、項目、名前、回答待ちの質問を消去しました。"),
                    format!(
                        "Erased: {redacted} answers' values, the fields, the name and the open question of {user}."
                    ),
                ),
            ),
        ),
        Err(crate::pipeline::PipelineError::Store(error)) => (
            503,
            (
                false,
                pick(
                    me.lang,
                    format!(
                        "データベース（Firestore）が応答しませんでした（{error}）。もう一度消去してください（済んだ分はそのままです）。"
                    ),
                    format!("Firestore did not answer ({error}); erase again: what was done stays done."),
                ),
            ),
        ),
        Err(error) => (500, (false, detail(me.lang, &error))),
    };
    state.auditor.finish(&entry, status, None).await;
    tracing::info!(user.id = %crate::log_ids::logged(user.as_str()), status, "user data erased from the console");
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    html(
        code,
        pages::send_result(&me.nav(), user.as_str(), (result.0, &result.1)),
    )
}

/// `GET /console/audit`: the audit log, for owners.
async fn audit(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let me = or_answer!(signed_in(&request, &state, OperatorRole::Owner).await);
    let Some(query) = query_of::<crate::reports::audit::AuditQuery>(&request) else {
        return unreadable_query(&state);
    };
    match state.audit_report.list(&query).await {
        Ok(rows) => html(StatusCode::OK, pages::audit(&me.nav(), &query, Ok(&rows))),
        Err(crate::reports::audit::AuditError::Store(error)) => unavailable(&state, error),
        Err(error) => html(
            StatusCode::BAD_REQUEST,
            pages::audit(&me.nav(), &query, Err(&detail(me.lang, &error))),
        ),
    }
}

/// A token change refused: the tokens page saying why (503 for Firestore).
async fn tokens_refusal(state: &AppState, me: &Signed, status: StatusCode, error: AccessError) -> HttpResponse {
    match error {
        AccessError::Store(error) => unavailable(state, error),
        error => tokens_page(state, me, status, None, Some((false, &words::access(me.lang, &error)))).await,
    }
}

/// `GET /console/tokens`: the operator's personal API tokens.
async fn api_tokens(request: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    match signed_in(&request, &state, OperatorRole::Viewer).await {
        Ok(me) => tokens_page(&state, &me, StatusCode::OK, None, None).await,
        Err(response) => response,
    }
}

/// `POST /console/tokens`: a new token (`label`, `role` up to the
/// operator's), shown once on the page this answers with.
async fn create_api_token(request: HttpRequest, state: web::Data<AppState>, body: web::Bytes) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Viewer).await);
    let Ok(role) = form.role.parse::<OperatorRole>() else {
        return tokens_page(
            &state,
            &me,
            StatusCode::BAD_REQUEST,
            None,
            Some((
                false,
                state.console_lang.t(
                    "権限を選んでください（閲覧者・編集者・オーナー）。",
                    "Choose a role: viewer, editor or owner.",
                ),
            )),
        )
        .await;
    };
    let entry = or_answer!(
        begin_audit(
            &state,
            &me,
            &request,
            "api_token_create",
            vec![("role", role.as_str().to_owned())],
            Vec::new(),
        )
        .await
    );
    let response = match state.access.create_api_token(&me.actor, &form.label, role).await {
        Ok(created) => {
            state.auditor.finish(&entry, 200, Some(vec![created.id.clone()])).await;
            tracing::info!(api_token.id = %created.id, role = role.as_str(), outcome = "created", "personal API token created");
            return tokens_page(&state, &me, StatusCode::OK, Some(&created.token), None).await;
        }
        Err(error) => tokens_refusal(&state, &me, StatusCode::BAD_REQUEST, error).await,
    };
    state.auditor.finish(&entry, response.status().as_u16(), None).await;
    response
}

/// `POST /console/tokens/{id}/revoke`: one of the operator's own tokens.
async fn revoke_api_token(
    request: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    let form = form(&body);
    let me = or_answer!(signed_post(&request, &state, &form, OperatorRole::Viewer).await);
    let entry = or_answer!(
        begin_audit(
            &state,
            &me,
            &request,
            "api_token_revoke",
            Vec::new(),
            vec![path.clone()],
        )
        .await
    );
    let response = match state.access.revoke_api_token(&me.actor, &path).await {
        Ok(()) => {
            tracing::info!(api_token.id = %path, outcome = "revoked", "personal API token revoked");
            tokens_page(
                &state,
                &me,
                StatusCode::OK,
                None,
                Some((
                    true,
                    state
                        .console_lang
                        .t("トークンを無効にしました。", "The token is revoked."),
                )),
            )
            .await
        }
        Err(error) => tokens_refusal(&state, &me, StatusCode::NOT_FOUND, error).await,
    };
    state.auditor.finish(&entry, response.status().as_u16(), None).await;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_hand_edit_reads_in_japanese_and_in_english_as_before() {
        use crate::engine::hand_edit::HandEditError;
        let problems = [
            (
                HandEditError::BadTag,
                "a tag must be 1 to 100 characters, without control characters",
            ),
            (
                HandEditError::BadFieldName,
                "a field name must look like [a-z][a-z0-9_]{0,39}",
            ),
            (
                HandEditError::BadText,
                "a text field holds at most 500 characters, without control characters",
            ),
            (HandEditError::BadNumber("三十".into()), "\"三十\" is not a number"),
            (HandEditError::BadYesNo, "a yes/no field is yes or no"),
            (
                HandEditError::TooManyFields,
                "the user has 50 fields already: remove one first",
            ),
            (HandEditError::UnknownOp("drop".into()), "unknown change \"drop\""),
        ];
        for (problem, english) in problems {
            assert_eq!(words::hand_edit(ConsoleLang::En, &problem), english);
            let ja = words::hand_edit(ConsoleLang::Ja, &problem);
            assert!(ja.ends_with('。') && ja != problem.to_string(), "{ja}");
        }
    }
    use actix_web::test::TestRequest;

    #[test]
    fn a_result_link_signs_the_letter_it_offers_to_replay_anyway() {
        let keys = Keys::new("an-admin-token-0123456789abcdef-0123");
        let message = "outbound-1 was not replayed: it may send twice.";
        let offered = keys.sign_message(false, &signed_result(message, Some("outbound-1")));
        // The same message and signature offer nothing else: not another letter,
        // and not the letter on a link that was signed without it.
        assert!(keys.message_matches(false, &signed_result(message, Some("outbound-1")), &offered));
        assert!(!keys.message_matches(false, &signed_result(message, Some("outbound-2")), &offered));
        assert!(!keys.message_matches(false, &signed_result(message, None), &offered));
        let plain = keys.sign_message(true, &signed_result(message, None));
        assert!(!keys.message_matches(true, &signed_result(message, Some("outbound-1")), &plain));
    }

    #[test]
    fn the_home_range_is_thirty_days_unless_an_offered_one_is_chosen() {
        let cases = [
            (None, Some(Some(30))),
            (Some("7"), Some(Some(7))),
            (Some("365"), Some(Some(365))),
            (Some("all"), Some(None)),
            (Some("31"), None),
            (Some("0"), None),
            (Some("-7"), None),
            (Some("ALL"), None),
            (Some(""), None),
        ];
        for (days, expected) in cases {
            assert_eq!(home_range(days), expected, "{days:?}");
        }
    }

    #[test]
    fn only_local_host_names_go_without_secure() {
        let cases = [
            ("localhost:8080", true),
            ("127.0.0.1:8080", true),
            ("127.0.0.1", true),
            ("[::1]:8080", true),
            ("survey.example.jp", false),
            ("localhost.example.jp", false),
            ("10.0.0.5:8080", false),
        ];
        for (host, local) in cases {
            let request = TestRequest::default().insert_header(("Host", host)).to_http_request();
            assert_eq!(is_local(&request), local, "{host}");
        }
    }

    #[test]
    fn page_cursors_are_document_ids_firestore_accepts() {
        let cases = [
            ("3f2a9c0d1e2b3a4c5d6e7f8091a2b3c4d5e6f708", true),
            ("AbCdEfGhIjKlMnOpQrSt", true),
            ("", false),
            ("a/b", false),
            ("__name__", false),
            ("..", false),
            ("日本", false),
            ("x y", false),
        ];
        for (id, valid) in cases {
            assert_eq!(is_answer_id(id), valid, "{id:?}");
        }
        assert!(!is_answer_id(&"a".repeat(65)));
    }

    #[test]
    fn a_body_that_is_not_a_form_has_no_token() {
        for body in [&b""[..], b"\xff\xfe", b"csrf", b"token=a&csrf="] {
            assert_eq!(form(body).csrf, "", "{body:?}");
        }
        assert_eq!(form(b"csrf=abc&token=%E7%A7%98").token, "秘");
    }
}
