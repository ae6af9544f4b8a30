//! LINE Login (OAuth 2.1 with OpenID Connect), as a source link uses it: the
//! authorize URL a visitor is sent to, the exchange of the code LINE sends
//! back, and the verification of the ID token that names the user.
//!
//! The Login channel must belong to the same provider as the Messaging API
//! channel: only then is the ID token's `sub` the user id the webhook sees.

use super::client::http_client;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use std::time::Duration;

/// The issuer LINE writes into its ID tokens.
pub(crate) const ID_TOKEN_ISSUER: &str = "https://access.line.me";

/// A Login channel's settings.
#[derive(Clone)]
pub(crate) struct LoginChannel {
    pub(crate) channel_id: String,
    pub(crate) channel_secret: String,
    /// Where LINE's authorize page is (`LINE_LOGIN_BASE_URL`).
    pub(crate) authorize_base_url: String,
    /// Where LINE's token endpoint is (`LINE_LOGIN_API_BASE_URL`).
    pub(crate) api_base_url: String,
}

/// The authorize URL for one visit: LINE asks the user to log in (and, with
/// `bot_prompt=aggressive`, to add the account as a friend), then sends the
/// browser to `redirect_uri` with a code and the `state`.
pub(crate) fn authorize_url(channel: &LoginChannel, redirect_uri: &str, state: &str, nonce: &str) -> String {
    let query = serde_urlencoded::to_string([
        ("response_type", "code"),
        ("client_id", channel.channel_id.as_str()),
        ("redirect_uri", redirect_uri),
        ("state", state),
        ("scope", "openid"),
        ("nonce", nonce),
        ("bot_prompt", "aggressive"),
    ])
    .unwrap_or_default();
    format!(
        "{}/oauth2/v2.1/authorize?{query}",
        channel.authorize_base_url.trim_end_matches('/')
    )
}

/// Why a login could not be completed. Nothing here holds a token or a code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoginError {
    #[error("LINE refused the code ({0})")]
    CodeRefused(String),
    #[error("LINE Login did not answer: {0}")]
    Unreachable(String),
    #[error("LINE Login's answer could not be read: {0}")]
    Unreadable(String),
    #[error("the ID token is not valid: {0}")]
    BadIdToken(String),
}

#[derive(Deserialize)]
struct TokenResponse {
    id_token: Option<String>,
}

#[derive(Deserialize)]
struct TokenRefusal {
    #[serde(default)]
    error: String,
}

/// What a verified ID token says.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct IdClaims {
    /// The user id (`U` + 32 hex with a same-provider channel).
    pub(crate) sub: String,
    pub(crate) exp: i64,
    #[serde(default)]
    pub(crate) nonce: Option<String>,
}

/// The token endpoint's client.
#[derive(Clone)]
pub(crate) struct LoginClient {
    channel: LoginChannel,
    http: reqwest::Client,
}

impl LoginClient {
    pub(crate) fn new(channel: LoginChannel, timeout: Duration) -> anyhow::Result<Self> {
        Ok(Self {
            channel,
            http: http_client(timeout)?,
        })
    }

    pub(crate) fn channel(&self) -> &LoginChannel {
        &self.channel
    }

    /// Exchanges `code` (issued for `redirect_uri`) for the ID token, and
    /// verifies it at `now_ms` against the visit's `nonce`.
    pub(crate) async fn log_in(
        &self,
        code: &str,
        redirect_uri: &str,
        nonce: &str,
        now_ms: i64,
    ) -> Result<IdClaims, LoginError> {
        let url = format!("{}/oauth2/v2.1/token", self.channel.api_base_url.trim_end_matches('/'));
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("client_id", self.channel.channel_id.as_str()),
            ("client_secret", self.channel.channel_secret.as_str()),
        ];
        let body = serde_urlencoded::to_string(form).map_err(|error| LoginError::Unreadable(error.to_string()))?;
        let response = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|error| LoginError::Unreachable(error.without_url().to_string()))?;
        let status = response.status();
        if status.is_client_error() {
            let refusal = response.json::<TokenRefusal>().await.map(|refusal| refusal.error);
            let reason = refusal.ok().filter(|error| !error.is_empty());
            return Err(LoginError::CodeRefused(
                reason.unwrap_or_else(|| format!("HTTP {}", status.as_u16())),
            ));
        }
        if !status.is_success() {
            return Err(LoginError::Unreachable(format!("HTTP {}", status.as_u16())));
        }
        let tokens: TokenResponse = response
            .json()
            .await
            .map_err(|error| LoginError::Unreadable(error.without_url().to_string()))?;
        let id_token = tokens
            .id_token
            .ok_or_else(|| LoginError::Unreadable("no id_token (was the openid scope granted?)".into()))?;
        verify_id_token(&id_token, &self.channel, nonce, now_ms)
    }
}

/// Checks an ID token as LINE's docs say: HS256 signed with the channel
/// secret, issued by LINE for this channel, not expired at `now_ms` (the
/// service's clock, so tests can move it), with the visit's nonce.
pub(crate) fn verify_id_token(
    token: &str,
    channel: &LoginChannel,
    nonce: &str,
    now_ms: i64,
) -> Result<IdClaims, LoginError> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.set_issuer(&[ID_TOKEN_ISSUER]);
    validation.set_audience(&[channel.channel_id.as_str()]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    // Expiry against the service's clock, below.
    validation.validate_exp = false;
    let key = DecodingKey::from_secret(channel.channel_secret.as_bytes())
        .map_err(|error| LoginError::BadIdToken(format!("the channel secret cannot verify: {error}")))?;
    let data = jsonwebtoken::decode::<IdClaims>(token.as_bytes(), &key, &validation)
        .map_err(|error| LoginError::BadIdToken(error.to_string()))?;
    let claims = data.claims;
    if claims.exp.saturating_mul(1000) <= now_ms {
        return Err(LoginError::BadIdToken("it has expired".into()));
    }
    if claims.nonce.as_deref() != Some(nonce) {
        return Err(LoginError::BadIdToken("the nonce is not this visit's".into()));
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};

    fn channel() -> LoginChannel {
        LoginChannel {
            channel_id: "1650000000".into(),
            channel_secret: "login-secret".into(),
            authorize_base_url: "https://access.line.me".into(),
            api_base_url: "https://api.line.me".into(),
        }
    }

    fn token(claims: serde_json::Value, secret: &str, algorithm: Algorithm) -> String {
        jsonwebtoken::encode(
            &Header::new(algorithm),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()).expect("a key"),
        )
        .expect("the test token encodes")
    }

    #[test]
    fn the_authorize_url_asks_for_openid_and_the_friend_prompt() {
        let url = authorize_url(&channel(), "https://bot.example/r/callback", "st.ate", "n1");
        assert_eq!(
            url,
            "https://access.line.me/oauth2/v2.1/authorize?response_type=code&client_id=1650000000\
             &redirect_uri=https%3A%2F%2Fbot.example%2Fr%2Fcallback&state=st.ate&scope=openid&nonce=n1\
             &bot_prompt=aggressive"
        );
    }

    #[test]
    fn id_tokens_are_checked_every_way() {
        let now_s = 1_800_000_000_i64;
        let user = "U0123456789abcdef0123456789abcdef";
        let good = serde_json::json!({
            "iss": ID_TOKEN_ISSUER, "sub": user, "aud": "1650000000",
            "exp": now_s + 3600, "iat": now_s, "nonce": "n1",
        });
        let with = |key: &str, value: serde_json::Value| {
            let mut claims = good.clone();
            claims[key] = value;
            claims
        };
        let without = |key: &str| {
            let mut claims = good.clone();
            claims.as_object_mut().expect("an object").remove(key);
            claims
        };
        let ok = token(good.clone(), "login-secret", Algorithm::HS256);
        let claims = verify_id_token(&ok, &channel(), "n1", now_s * 1000).expect("valid");
        assert_eq!(claims.sub, user);
        let cases = [
            ("wrong secret", token(good.clone(), "other", Algorithm::HS256), "n1"),
            ("HS512", token(good.clone(), "login-secret", Algorithm::HS512), "n1"),
            (
                "wrong audience",
                token(with("aud", "999".into()), "login-secret", Algorithm::HS256),
                "n1",
            ),
            (
                "wrong issuer",
                token(
                    with("iss", "https://evil.example".into()),
                    "login-secret",
                    Algorithm::HS256,
                ),
                "n1",
            ),
            (
                "expired",
                token(with("exp", now_s.into()), "login-secret", Algorithm::HS256),
                "n1",
            ),
            ("wrong nonce", ok.clone(), "n2"),
            (
                "no nonce",
                token(without("nonce"), "login-secret", Algorithm::HS256),
                "n1",
            ),
            ("no sub", token(without("sub"), "login-secret", Algorithm::HS256), "n1"),
            ("not a token", "abc.def.ghi".to_owned(), "n1"),
        ];
        for (name, token, nonce) in cases {
            let refused = verify_id_token(&token, &channel(), nonce, now_s * 1000);
            assert!(matches!(refused, Err(LoginError::BadIdToken(_))), "{name}: {refused:?}");
        }
    }
}
