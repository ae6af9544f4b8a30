//! A local stand-in for LINE Login (OAuth 2.1 / OpenID Connect), as source
//! links use it:
//!
//! - `GET /oauth2/v2.1/authorize`: checks what LINE checks (`response_type`
//!   `code`, the channel id, `scope` with `openid`, a `state`, a
//!   `redirect_uri`), then "logs in" the user the test named (the `as` query
//!   parameter a test appends, else the default) and redirects back to
//!   `redirect_uri` with a single-use code, the state and
//!   `friendship_status_changed`; in [`LoginMode::Cancel`] with
//!   `error=access_denied` instead, as LINE does when the user cancels.
//! - `POST /oauth2/v2.1/token`: form-encoded; the code must be one it issued,
//!   unused, for the same `redirect_uri` and client, with the channel secret;
//!   otherwise 400 `{"error": "invalid_grant"}`. It answers an ID token signed
//!   HS256 with the channel secret (`iss`, `sub`, `aud`, `exp`, `iat`,
//!   `nonce`), or a broken one in the failure modes.

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

pub const LOGIN_CHANNEL_ID: &str = "1650000001";
pub const LOGIN_CHANNEL_SECRET: &str = "test-login-channel-secret";

/// What the stand-in does wrong on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginMode {
    Normal,
    /// The user cancels at LINE: the redirect carries `error=access_denied`.
    Cancel,
    /// The token endpoint refuses every code (400 `invalid_grant`).
    RefuseCode,
    /// Codes may be exchanged again (so only the service's own single-use
    /// state stops a replayed callback).
    ReuseCodes,
    /// ID tokens name another channel as their audience.
    WrongAudience,
    /// ID tokens carry another nonce.
    WrongNonce,
    /// ID tokens are signed with another secret.
    WrongSignature,
    /// ID tokens expired an hour ago.
    Expired,
    /// ID tokens from another issuer.
    WrongIssuer,
}

struct Issued {
    user: String,
    nonce: String,
    redirect_uri: String,
    used: bool,
}

struct State {
    mode: LoginMode,
    default_user: String,
    friendship_changed: bool,
    codes: HashMap<String, Issued>,
    next_code: u64,
    token_calls: usize,
    refused_tokens: usize,
}

pub struct LoginStandIn {
    server: MockServer,
    state: Arc<Mutex<State>>,
}

impl LoginStandIn {
    pub async fn start() -> Self {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State {
            mode: LoginMode::Normal,
            default_user: "U00000000000000000000000000000001".to_owned(),
            friendship_changed: true,
            codes: HashMap::new(),
            next_code: 1,
            token_calls: 0,
            refused_tokens: 0,
        }));
        Mock::given(method("GET"))
            .and(path("/oauth2/v2.1/authorize"))
            .respond_with(Authorize { state: state.clone() })
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/oauth2/v2.1/token"))
            .respond_with(Token { state: state.clone() })
            .mount(&server)
            .await;
        // LINE's add-friend page, for a test's `FRIEND_URL` a browser can reach.
        Mock::given(method("GET"))
            .and(path_regex("^/R/ti/p/"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(
                "<!doctype html><title>add friend</title><h1 id=add-friend>友だち追加</h1>",
                "text/html; charset=utf-8",
            ))
            .mount(&server)
            .await;
        Self { server, state }
    }

    /// An add-friend URL the stand-in serves (as `FRIEND_URL`).
    pub fn friend_url(&self) -> String {
        format!("{}/R/ti/p/@line-survey-test", self.uri())
    }

    pub fn uri(&self) -> String {
        self.server.uri()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_mode(&self, mode: LoginMode) {
        self.state().mode = mode;
    }

    /// What the redirect says of the friendship (`friendship_status_changed`).
    pub fn set_friendship_changed(&self, changed: bool) {
        self.state().friendship_changed = changed;
    }

    /// Calls of the token endpoint, and how many it refused.
    pub fn token_calls(&self) -> (usize, usize) {
        let state = self.state();
        (state.token_calls, state.refused_tokens)
    }
}

fn query_of(request: &Request) -> HashMap<String, String> {
    request.url.query_pairs().into_owned().collect()
}

struct Authorize {
    state: Arc<Mutex<State>>,
}

impl Respond for Authorize {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let query = query_of(request);
        let get = |key: &str| query.get(key).cloned().unwrap_or_default();
        if get("response_type") != "code"
            || get("client_id") != LOGIN_CHANNEL_ID
            || !get("scope").split(' ').any(|scope| scope == "openid")
            || get("state").is_empty()
            || get("redirect_uri").is_empty()
        {
            return ResponseTemplate::new(400).set_body_string("invalid authorize request");
        }
        let redirect_uri = get("redirect_uri");
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut back = reqwest::Url::parse(&redirect_uri).expect("a redirect URI");
        if state.mode == LoginMode::Cancel {
            back.query_pairs_mut()
                .append_pair("error", "access_denied")
                .append_pair("error_description", "The resource owner denied the request.")
                .append_pair("state", &get("state"));
        } else {
            let code = format!("code-{}", state.next_code);
            state.next_code += 1;
            let user = query.get("as").cloned().unwrap_or_else(|| state.default_user.clone());
            state.codes.insert(
                code.clone(),
                Issued {
                    user,
                    nonce: get("nonce"),
                    redirect_uri: redirect_uri.clone(),
                    used: false,
                },
            );
            back.query_pairs_mut()
                .append_pair("code", &code)
                .append_pair("state", &get("state"))
                .append_pair("friendship_status_changed", &state.friendship_changed.to_string());
        }
        ResponseTemplate::new(302).insert_header("location", back.as_str())
    }
}

struct Token {
    state: Arc<Mutex<State>>,
}

impl Respond for Token {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let form: HashMap<String, String> = serde_urlencoded::from_bytes(&request.body).unwrap_or_default();
        let get = |key: &str| form.get(key).cloned().unwrap_or_default();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.token_calls += 1;
        let mode = state.mode;
        let refusal = || {
            ResponseTemplate::new(400).set_body_json(
                serde_json::json!({"error": "invalid_grant", "error_description": "invalid authorization code"}),
            )
        };
        if mode == LoginMode::RefuseCode
            || get("grant_type") != "authorization_code"
            || get("client_id") != LOGIN_CHANNEL_ID
            || get("client_secret") != LOGIN_CHANNEL_SECRET
        {
            state.refused_tokens += 1;
            return refusal();
        }
        let redirect_uri = get("redirect_uri");
        let Some(issued) = state.codes.get_mut(&get("code")) else {
            state.refused_tokens += 1;
            return refusal();
        };
        if (issued.used && mode != LoginMode::ReuseCodes) || issued.redirect_uri != redirect_uri {
            state.refused_tokens += 1;
            return refusal();
        }
        issued.used = true;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs() as i64;
        let mut claims = serde_json::json!({
            "iss": "https://access.line.me",
            "sub": issued.user,
            "aud": LOGIN_CHANNEL_ID,
            "exp": now + 3600,
            "iat": now,
            "nonce": issued.nonce,
            "amr": ["linesso"],
        });
        let mut secret = LOGIN_CHANNEL_SECRET;
        match mode {
            LoginMode::WrongAudience => claims["aud"] = "1999999999".into(),
            LoginMode::WrongNonce => claims["nonce"] = "another-nonce".into(),
            LoginMode::WrongSignature => secret = "not-the-channel-secret",
            LoginMode::Expired => {
                claims["exp"] = (now - 3600).into();
                claims["iat"] = (now - 7200).into();
            }
            LoginMode::WrongIssuer => claims["iss"] = "https://evil.example".into(),
            LoginMode::Normal | LoginMode::Cancel | LoginMode::RefuseCode | LoginMode::ReuseCodes => {}
        }
        let id_token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()).expect("a key"),
        )
        .expect("the stand-in's token encodes");
        ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "access_token": "stand-in-access-token",
            "expires_in": 2592000,
            "id_token": id_token,
            "refresh_token": "stand-in-refresh-token",
            "scope": "openid",
            "token_type": "Bearer",
        }))
    }
}
