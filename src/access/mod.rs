//! Who may use the console and the admin API, and as what role: logins (an
//! operator's email and password, or the `ADMIN_TOKEN` as an owner), server-side
//! sessions (`console_sessions`), and personal API tokens (`lsv_...`). A floor
//! beside the pipeline: it reads and writes only its own records through the
//! store; the routes above it decide what a role may do.
//!
//! Every request reads its session and the operator's record, so a logout, a
//! disabled operator or a changed role holds on the next request on every
//! instance.

pub(crate) mod audit;
pub(crate) mod rules;
mod slowdown;

use crate::clock::Clock;
use crate::store::{ApiTokenDoc, ConsoleSessionDoc, SessionVia, Store, StoreError, normalise_email};
use crate::values::OperatorRole;
use rules::{OpenedBy, OperatorNow, SessionCheck, SessionFacts};
use sha2::{Digest, Sha256};
use slowdown::Slowdown;
use std::sync::OnceLock;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The longest email a login considers (RFC 5321's path limit).
const MAX_EMAIL_BYTES: usize = 254;
/// Password checks (Argon2id) running at once, at most.
const CONCURRENT_HASHES: usize = 4;
/// How long a login waits for a free password check before it is told to
/// come back (a flood of guesses delays real logins; it does not refuse them
/// at once).
const HASHING_WAIT: Duration = Duration::from_secs(10);
/// Personal API tokens per operator, revoked ones included.
const MAX_TOKENS: usize = crate::store::MAX_API_TOKENS as usize;

/// What starts a personal API token.
pub(crate) const API_TOKEN_PREFIX: &str = "lsv_";
/// How long a session's record stays after it ends, for Firestore's TTL.
const SESSION_RECORD_KEPT: Duration = Duration::from_secs(24 * 3600);

/// Who makes a request, and as what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Actor {
    /// The `ADMIN_TOKEN`: an owner without a name.
    AdminToken,
    /// An operator signed in to the console.
    Operator {
        id: String,
        email: String,
        role: OperatorRole,
    },
    /// An operator's personal API token.
    ApiToken {
        operator_id: String,
        email: String,
        role: OperatorRole,
        /// The token's first characters (`lsv_1a2b3c4d`).
        prefix: String,
    },
}

impl Actor {
    pub(crate) fn role(&self) -> OperatorRole {
        match self {
            Actor::AdminToken => OperatorRole::Owner,
            Actor::Operator { role, .. } | Actor::ApiToken { role, .. } => *role,
        }
    }

    /// How the console's header names whoever is signed in.
    pub(crate) fn name(&self) -> &str {
        match self {
            Actor::AdminToken => "ADMIN_TOKEN",
            Actor::Operator { email, .. } | Actor::ApiToken { email, .. } => email,
        }
    }
}

/// A session just opened: the cookie's value and how long it lasts.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) cookie: String,
    pub(crate) lifetime: Duration,
}

/// How a password login ended. A refusal never says whether the email or the
/// password was wrong.
#[derive(Debug)]
pub(crate) enum PasswordLogin {
    Opened(Opened),
    Refused,
}

/// A personal API token just made: shown once, stored only as a digest.
#[derive(Debug)]
pub(crate) struct NewApiToken {
    pub(crate) token: String,
    pub(crate) id: String,
}

/// A personal API token as its owner sees it listed.
#[derive(Debug, Clone)]
pub(crate) struct ListedApiToken {
    pub(crate) id: String,
    pub(crate) doc: ApiTokenDoc,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AccessError {
    #[error("only an operator signed in with an email can have personal API tokens")]
    NoOperator,
    #[error("a token cannot have a role above its operator's ({0})")]
    RoleAboveOperator(&'static str),
    #[error("a token's label must be 1 to 60 characters without control characters")]
    BadLabel,
    #[error("no such token of yours")]
    UnknownToken,
    #[error("you have {MAX_TOKENS} tokens already: revoke one you no longer use")]
    TooManyTokens,
    #[error("too many logins at once; try again in a moment")]
    Busy,
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub(crate) struct Access {
    store: Store,
    clock: Clock,
    /// A digest of `ADMIN_TOKEN`, compared in constant time.
    admin_digest: Option<[u8; 32]>,
    idle: Duration,
    lifetime: Duration,
    slowdown: Slowdown,
    hashing: tokio::sync::Semaphore,
}

fn admin_digest(token: &str) -> [u8; 32] {
    let mut digest = Sha256::new();
    digest.update(b"line-survey admin token\0");
    digest.update(token.as_bytes());
    digest.finalize().into()
}

/// The record id of a secret (a session cookie, an API token): its digest.
fn record_id(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// 64 hex digits from 244 random bits (two v4 UUIDs, the system's generator).
fn random_secret() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// Whether `value` has the shape of [`random_secret`]: anything else is
/// refused without a read.
fn is_secret_shaped(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A hash no password matches, verified for an unknown email so the answer
/// takes as long as for a known one.
fn decoy_hash() -> &'static str {
    static DECOY: OnceLock<String> = OnceLock::new();
    DECOY.get_or_init(|| crate::password::hash(&random_secret()).unwrap_or_default())
}

impl Access {
    pub(crate) fn new(
        store: Store,
        clock: Clock,
        admin_token: Option<&str>,
        idle: Duration,
        lifetime: Duration,
    ) -> Self {
        Self {
            slowdown: Slowdown::new(clock.clone()),
            store,
            clock,
            admin_digest: admin_token.map(admin_digest),
            idle,
            lifetime,
            hashing: tokio::sync::Semaphore::new(CONCURRENT_HASHES),
        }
    }

    /// Makes the hash an unknown email is checked against now, so the first
    /// such login does not take longer than the others.
    pub(crate) async fn warm_up(&self) {
        let _ = tokio::task::spawn_blocking(decoy_hash).await;
    }

    /// Whether `presented` is the `ADMIN_TOKEN`, compared as digests in
    /// constant time (neither content nor length shows).
    pub(crate) fn is_admin_token(&self, presented: &str) -> bool {
        self.admin_digest
            .is_some_and(|expected| bool::from(expected.ct_eq(&admin_digest(presented))))
    }

    /// A console login with an email and password. Recent failures for the
    /// same email make it wait first (see [`rules::login_delay`]).
    pub(crate) async fn log_in_with_password(&self, email: &str, password: &str) -> Result<PasswordLogin, AccessError> {
        let email = normalise_email(email);
        // No email is that long (RFC 5321); refused like a wrong one, without
        // growing the slowdown's memory or hashing a huge password.
        if email.is_empty() || email.len() > MAX_EMAIL_BYTES || password.len() > crate::password::MAX_LENGTH * 4 {
            return Ok(PasswordLogin::Refused);
        }
        let wait = self.slowdown.attempt(&email);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let found = self.store.operator(&email).await?;
        let (stored_hash, operator) = match &found {
            Some(found) if !found.doc.disabled => (found.doc.password_hash.clone(), Some(found)),
            _ => (decoy_hash().to_owned(), None),
        };
        // Argon2id takes 19 MiB and a core for a moment: a few at a time; a
        // login waits a while for its turn, and a flood beyond that is told
        // to come back.
        let Ok(Ok(_permit)) = tokio::time::timeout(HASHING_WAIT, self.hashing.acquire()).await else {
            return Err(AccessError::Busy);
        };
        let password = password.to_owned();
        let matches = tokio::task::spawn_blocking(move || crate::password::verify(&password, &stored_hash))
            .await
            .unwrap_or(false);
        let Some(operator) = operator.filter(|_| matches) else {
            return Ok(PasswordLogin::Refused);
        };
        self.slowdown.succeeded(&email);
        let opened = self.open(SessionVia::Password, Some(operator.id.clone()), None).await?;
        Ok(PasswordLogin::Opened(opened))
    }

    /// A console session for the admin token, once the caller has checked it
    /// with [`Access::is_admin_token`].
    pub(crate) async fn log_in_with_admin_token(&self) -> Result<Opened, StoreError> {
        let digest = self.admin_digest.map(hex::encode);
        self.open(SessionVia::AdminToken, None, digest).await
    }

    async fn open(
        &self,
        via: SessionVia,
        operator_id: Option<String>,
        token_digest: Option<String>,
    ) -> Result<Opened, StoreError> {
        let cookie = random_secret();
        let now = self.clock.now_ms();
        let expires_ms = now.saturating_add(millis(self.lifetime));
        let doc = ConsoleSessionDoc {
            via,
            operator_id,
            token_digest,
            created_ms: now,
            expires_ms,
            last_seen_ms: now,
            expire_at: crate::store::firestore_now(&self.clock)
                .saturating_add(self.lifetime + SESSION_RECORD_KEPT)
                .unwrap_or(firestore::FirestoreInstant::MAX),
        };
        self.store.create_console_session(&record_id(&cookie), &doc).await?;
        Ok(Opened {
            cookie,
            lifetime: self.lifetime,
        })
    }

    /// Whoever a session cookie belongs to, if it still holds.
    pub(crate) async fn session(&self, cookie: &str) -> Result<Option<Actor>, StoreError> {
        if !is_secret_shaped(cookie) {
            return Ok(None);
        }
        let Some(session) = self.store.console_session(&record_id(cookie)).await? else {
            return Ok(None);
        };
        let (opened_by, operator) = match session.doc.via {
            SessionVia::AdminToken => {
                let still_the_token = match (&session.doc.token_digest, self.admin_digest) {
                    (Some(stored), Some(current)) => {
                        bool::from(stored.as_bytes().ct_eq(hex::encode(current).as_bytes()))
                    }
                    _ => false,
                };
                (OpenedBy::AdminToken { still_the_token }, None)
            }
            SessionVia::Password => {
                let operator = match &session.doc.operator_id {
                    Some(id) => self.store.operator_by_id(id).await?.map(|doc| (id.clone(), doc)),
                    None => None,
                };
                let now = operator.as_ref().map(|(_, doc)| OperatorNow {
                    role: doc.role,
                    disabled: doc.disabled,
                    password_changed_ms: doc.password_changed_ms,
                });
                (OpenedBy::Operator(now), operator)
            }
        };
        let facts = SessionFacts {
            created_ms: session.doc.created_ms,
            expires_ms: session.doc.expires_ms,
            last_seen_ms: session.doc.last_seen_ms,
            opened_by,
        };
        let now = self.clock.now_ms();
        match rules::check_session(facts, now, millis(self.idle), millis(self.lifetime)) {
            SessionCheck::Ended(because) => {
                tracing::info!(
                    outcome = "session_ended",
                    reason = because.as_str(),
                    "console session refused"
                );
                Ok(None)
            }
            SessionCheck::Valid { role, touch } => {
                if touch && let Err(error) = self.store.touch_console_session(&session, now).await {
                    // The session holds; only its idle clock was not moved on.
                    tracing::warn!(error = %error, outcome = "touch_failed", "console session not refreshed");
                }
                Ok(Some(match operator {
                    Some((id, doc)) => Actor::Operator {
                        id,
                        email: doc.email,
                        role,
                    },
                    None => Actor::AdminToken,
                }))
            }
        }
    }

    /// Ends the session of `cookie` (nothing to do for one that is not ours).
    pub(crate) async fn log_out(&self, cookie: &str) -> Result<(), StoreError> {
        if !is_secret_shaped(cookie) {
            return Ok(());
        }
        self.store.delete_console_session(&record_id(cookie)).await
    }

    /// Whoever a bearer token belongs to: the admin token (an owner) or an
    /// operator's personal token, bounded by the operator's current role.
    pub(crate) async fn bearer(&self, token: &str) -> Result<Option<Actor>, StoreError> {
        if let Some(secret) = token.strip_prefix(API_TOKEN_PREFIX) {
            if !is_secret_shaped(secret) {
                return Ok(None);
            }
            let Some(stored) = self.store.api_token(&record_id(token)).await? else {
                return Ok(None);
            };
            if stored.doc.revoked {
                return Ok(None);
            }
            let Some(operator) = self.store.operator_by_id(&stored.doc.operator_id).await? else {
                return Ok(None);
            };
            if operator.disabled {
                return Ok(None);
            }
            return Ok(Some(Actor::ApiToken {
                role: stored.doc.role.min(operator.role),
                operator_id: stored.doc.operator_id,
                email: operator.email,
                prefix: stored.doc.prefix,
            }));
        }
        Ok(self.is_admin_token(token).then_some(Actor::AdminToken))
    }

    /// A new personal API token for the signed-in operator, with `role` at
    /// most theirs.
    pub(crate) async fn create_api_token(
        &self,
        actor: &Actor,
        label: &str,
        role: OperatorRole,
    ) -> Result<NewApiToken, AccessError> {
        let Actor::Operator {
            id,
            email,
            role: own_role,
        } = actor
        else {
            return Err(AccessError::NoOperator);
        };
        if !own_role.allows(role) {
            return Err(AccessError::RoleAboveOperator(own_role.as_str()));
        }
        if self.store.api_tokens_of(id).await?.len() >= MAX_TOKENS {
            return Err(AccessError::TooManyTokens);
        }
        let label = label.trim();
        if label.is_empty() || label.chars().count() > 60 || label.chars().any(char::is_control) {
            return Err(AccessError::BadLabel);
        }
        let token = format!("{API_TOKEN_PREFIX}{}", random_secret());
        let prefix: String = token.chars().take(API_TOKEN_PREFIX.len() + 8).collect();
        let record = record_id(&token);
        let doc = ApiTokenDoc {
            operator_id: id.clone(),
            email: email.clone(),
            role,
            label: label.to_owned(),
            prefix,
            created_ms: self.clock.now_ms(),
            revoked: false,
        };
        self.store.create_api_token(&record, &doc).await?;
        Ok(NewApiToken { token, id: record })
    }

    /// The signed-in operator's tokens, newest first.
    pub(crate) async fn api_tokens(&self, actor: &Actor) -> Result<Vec<ListedApiToken>, AccessError> {
        let Actor::Operator { id, .. } = actor else {
            return Err(AccessError::NoOperator);
        };
        let mut tokens: Vec<ListedApiToken> = self
            .store
            .api_tokens_of(id)
            .await?
            .into_iter()
            .map(|stored| ListedApiToken {
                id: stored.id,
                doc: stored.doc,
            })
            .collect();
        tokens.sort_by_key(|token| std::cmp::Reverse(token.doc.created_ms));
        Ok(tokens)
    }

    /// Revokes one of the signed-in operator's tokens by its record id.
    pub(crate) async fn revoke_api_token(&self, actor: &Actor, id: &str) -> Result<(), AccessError> {
        let Actor::Operator { id: operator, .. } = actor else {
            return Err(AccessError::NoOperator);
        };
        if !is_secret_shaped(id) {
            return Err(AccessError::UnknownToken);
        }
        match self.store.api_token(id).await? {
            Some(stored) if &stored.doc.operator_id == operator => {
                self.store.revoke_api_token(&stored).await?;
                Ok(())
            }
            _ => Err(AccessError::UnknownToken),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_64_hex_digits_and_records_hold_only_their_digest() {
        let secret = random_secret();
        assert!(is_secret_shaped(&secret), "{secret}");
        assert_ne!(random_secret(), secret);
        let record = record_id(&secret);
        assert!(is_secret_shaped(&record));
        assert_ne!(record, secret);
        for shape in ["", "abc", &"A".repeat(64), &"g".repeat(64), &"a".repeat(65), "../x"] {
            assert!(!is_secret_shaped(shape), "{shape:?}");
        }
    }

    #[test]
    fn actors_name_their_role() {
        let operator = Actor::Operator {
            id: "x".into(),
            email: "a@shop.example".into(),
            role: OperatorRole::Viewer,
        };
        assert_eq!(Actor::AdminToken.role(), OperatorRole::Owner);
        assert_eq!(operator.role(), OperatorRole::Viewer);
        assert_eq!(operator.name(), "a@shop.example");
        assert_eq!(Actor::AdminToken.name(), "ADMIN_TOKEN");
    }
}
