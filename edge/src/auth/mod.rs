//! Who is calling. API keys from `[server] api_keys` (plaintext or `sha256:<hex>`) are presented
//! as `Authorization: Bearer`; each session has a token (`{session id}.{generation}.{expiry}.
//! {HMAC}`, docs/security.md) that grants access to that session only, presented as a Bearer or
//! as `?token=`; browsers open WebSockets with a one-minute ticket (`?ticket=`, signed under its
//! own HMAC domain and accepted on the upgrade only). With no API keys configured the server is
//! loopback-only (the configuration refuses anything else) and a request without credentials is
//! allowed from loopback hosts and origins; credentials that are presented are always checked.
//! A project's virtual keys (`stk_…`, made over the API: [`keys`]) make callers scoped to their
//! project, limited by their role. Comparisons are constant-time; keys and tokens are never
//! logged.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::{ApiError, AppState, ErrorCode};
use host::{host_name, is_loopback_name};

mod allowed;
pub mod budgets;
mod host;
pub mod keys;
pub mod oidc;
pub mod oidc_config;
mod principal;
#[cfg(test)]
mod tests;

pub use keys::{ProjectKey, VirtualKeys};
pub use principal::Principal;

/// API keys (as SHA-256 digests) and the secret that signs session tokens.
pub struct Auth {
    keys: Vec<[u8; 32]>,
    secret: Vec<u8>,
    /// How long a minted session token is valid (`None`: until rotated).
    token_ttl: Option<std::time::Duration>,
    /// `server.allowed_hosts`: host names an open server answers besides loopback ones.
    allowed_hosts: Vec<String>,
    /// `server.cors_origins`: origins whose pages may call the API (lowercase, no trailing `/`).
    cors_origins: Vec<String>,
}

impl Auth {
    /// `api_keys` as configured (validated by the configuration); `secret` signs session
    /// tokens (at least 32 bytes, kept by the binary).
    pub fn new(api_keys: &[String], secret: Vec<u8>) -> Self {
        let keys = api_keys
            .iter()
            .map(|key| match key.strip_prefix("sha256:") {
                Some(hex) => decode_hex(hex).unwrap_or([0; 32]),
                None => Sha256::digest(key.as_bytes()).into(),
            })
            .collect();
        Auth {
            keys,
            secret,
            token_ttl: None,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
        }
    }

    /// Session tokens minted from now on expire after `ttl` (`sessions.token_ttl_secs`).
    pub fn with_token_ttl(mut self, ttl: Option<std::time::Duration>) -> Self {
        self.token_ttl = ttl;
        self
    }

    /// Host names (without port, compared case-insensitively) that an open server answers
    /// besides loopback names and addresses (`server.allowed_hosts`).
    pub fn allowing_hosts(mut self, hosts: &[String]) -> Self {
        self.allowed_hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        self
    }

    /// Origins whose pages may call the API from a browser (`server.cors_origins`).
    pub fn allowing_origins(mut self, origins: &[String]) -> Self {
        self.cors_origins = origins.iter().map(|o| crate::cors::normalize(o)).collect();
        self
    }

    /// Whether a page of `origin` (an `Origin` header's value) may call the API.
    pub fn cors_allowed(&self, origin: &str) -> bool {
        let origin = crate::cors::normalize(origin);
        self.cors_origins.contains(&origin)
    }

    /// The open server's defence against callers that reach loopback without being local
    /// users' own tools: a `Host` that is not a loopback name or address (DNS rebinding, a
    /// proxy forwarding foreign traffic) and an `Origin` of another site (a web page the
    /// operator visits, including WebSocket upgrades) are refused. A server with API keys
    /// relies on the credentials instead and checks neither. A request without `Host` or
    /// `Origin` (not a browser) passes.
    pub fn check_request_origin(&self, headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
        if !self.is_open() {
            return Ok(());
        }
        if let Some(host) = headers.get(axum::http::header::HOST) {
            let allowed = host
                .to_str()
                .ok()
                .and_then(host_name)
                .is_some_and(|name| self.host_allowed(&name));
            if !allowed {
                return Err(ApiError::new(
                    ErrorCode::HostNotAllowed,
                    "this server has no API keys and answers loopback host names only; \
                     add the name to server.allowed_hosts or configure API keys",
                ));
            }
        }
        if let Some(origin) = headers.get(axum::http::header::ORIGIN) {
            let listed = origin.to_str().is_ok_and(|o| self.cors_allowed(o));
            let allowed = listed
                || origin
                    .to_str()
                    .ok()
                    .and_then(|o| o.split_once("://"))
                    .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
                    .and_then(|(_, rest)| host_name(rest))
                    .is_some_and(|name| self.host_allowed(&name));
            if !allowed {
                return Err(ApiError::new(
                    ErrorCode::OriginNotAllowed,
                    "this server has no API keys and refuses requests from other sites' pages",
                ));
            }
        }
        Ok(())
    }

    fn host_allowed(&self, name: &str) -> bool {
        is_loopback_name(name) || self.allowed_hosts.iter().any(|h| h == name)
    }

    /// No API keys: loopback-only, credentials optional.
    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// A token for `session` at token generation `generation`: `{id}.{generation}.{expires}.{HMAC}`
    /// (`expires` in Unix seconds, 0 for never), and when it expires.
    pub fn session_token(
        &self,
        session: Uuid,
        generation: i64,
    ) -> (String, Option<chrono::DateTime<chrono::Utc>>) {
        self.session_token_valid_for(session, generation, self.token_ttl)
    }

    /// A token for `session` valid for `ttl` (`None`: until rotated).
    pub fn session_token_valid_for(
        &self,
        session: Uuid,
        generation: i64,
        ttl: Option<std::time::Duration>,
    ) -> (String, Option<chrono::DateTime<chrono::Utc>>) {
        let expires = ttl.map(|ttl| {
            chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX)
        });
        let expires_secs = expires.map_or(0, |at| at.timestamp());
        let token = format!(
            "{}.{generation}.{expires_secs}.{}",
            session.simple(),
            hex(&self.sign(session, generation, expires_secs))
        );
        (token, expires)
    }

    fn sign(&self, session: Uuid, generation: i64, expires: i64) -> [u8; 32] {
        self.sign_in(b"stead-session-token:v2:", session, generation, expires)
    }

    /// The HMAC of a token's fields under `domain`: session tokens and WebSocket tickets sign
    /// under different domains, so neither verifies as the other.
    fn sign_in(&self, domain: &[u8], session: Uuid, generation: i64, expires: i64) -> [u8; 32] {
        // HMAC accepts keys of any length; `new_from_slice` only fails for fixed-size MACs.
        #[allow(clippy::expect_used)]
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key");
        mac.update(domain);
        mac.update(session.as_bytes());
        mac.update(&generation.to_be_bytes());
        mac.update(&expires.to_be_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Who `credential` is, or `None` when it is neither a key nor a validly signed session
    /// token. A session token's expiry and generation are checked by [`Auth::authenticate`]
    /// and the extractor.
    pub fn identify(&self, credential: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(credential.as_bytes()).into();
        let mut matched = subtle::Choice::from(0u8);
        for key in &self.keys {
            matched |= key.ct_eq(&digest);
        }
        if bool::from(matched) {
            return Some(Principal::ApiKey(hex(&digest[..4])));
        }
        self.session_claim(credential)
            .map(|claim| Principal::Session(claim.session))
    }

    /// A WebSocket ticket for `session`: valid for `ttl`, and only for opening that session's
    /// WebSocket (`?ticket=`); it is no session token anywhere else.
    pub fn ticket(
        &self,
        session: Uuid,
        generation: i64,
        ttl: std::time::Duration,
    ) -> (String, chrono::DateTime<chrono::Utc>) {
        let expires =
            chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX);
        let secs = expires.timestamp();
        let signature = self.sign_in(TICKET_DOMAIN, session, generation, secs);
        let ticket = format!(
            "{}.{generation}.{secs}.{}",
            session.simple(),
            hex(&signature)
        );
        (ticket, expires)
    }

    /// A ticket's claims when it verifies and has not expired at `now` (Unix seconds).
    pub fn ticket_claim(&self, ticket: &str, now: i64) -> Option<TokenClaim> {
        let mut parts = ticket.split('.');
        let id = Uuid::try_parse(parts.next()?).ok()?;
        let generation: i64 = parts.next()?.parse().ok()?;
        let expires: i64 = parts.next()?.parse().ok()?;
        let signature = decode_hex(parts.next()?)?;
        if parts.next().is_some() || expires <= now {
            return None;
        }
        bool::from(
            self.sign_in(TICKET_DOMAIN, id, generation, expires)
                .ct_eq(&signature),
        )
        .then_some(TokenClaim {
            session: id,
            generation,
            expires,
        })
    }

    /// A session token's claims, when its signature verifies.
    pub fn session_claim(&self, credential: &str) -> Option<TokenClaim> {
        let mut parts = credential.split('.');
        let id = Uuid::try_parse(parts.next()?).ok()?;
        let generation: i64 = parts.next()?.parse().ok()?;
        let expires: i64 = parts.next()?.parse().ok()?;
        let signature = decode_hex(parts.next()?)?;
        if parts.next().is_some() {
            return None;
        }
        bool::from(self.sign(id, generation, expires).ct_eq(&signature)).then_some(TokenClaim {
            session: id,
            generation,
            expires,
        })
    }

    /// Authenticates a request's credential (`None` when it has none).
    ///
    /// On an open server (loopback, no API keys), a credential that is not shaped like a session
    /// token is ignored: OpenAI SDKs always send some API key, and there is none to check it
    /// against. A session-shaped token must still verify.
    pub fn authenticate(&self, credential: Option<&str>) -> Result<Principal, ApiError> {
        self.authenticate_at(credential, chrono::Utc::now().timestamp())
    }

    /// [`Auth::authenticate`] at `now` (Unix seconds).
    pub fn authenticate_at(
        &self,
        credential: Option<&str>,
        now: i64,
    ) -> Result<Principal, ApiError> {
        let credential = credential.filter(|c| !self.is_open() || looks_like_session_token(c));
        match credential {
            Some(credential) => {
                let principal = self.identify(credential).ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidCredentials,
                        "the API key or session token is not valid",
                    )
                })?;
                if let Some(claim) = self.session_claim(credential) {
                    if claim.expires != 0 && claim.expires <= now {
                        return Err(ApiError::new(
                            ErrorCode::TokenExpired,
                            "this session token has expired; get a new one with POST \
                             /v1/sessions/{id}/token (operator credentials)",
                        ));
                    }
                }
                Ok(principal)
            }
            None if self.is_open() => Ok(Principal::Local),
            None => Err(ApiError::new(
                ErrorCode::MissingCredentials,
                "send an API key or a session token as `Authorization: Bearer …`",
            )),
        }
    }
}

/// The HMAC domain of WebSocket tickets.
const TICKET_DOMAIN: &[u8] = b"stead-ws-ticket:v1:";

/// What a valid session token says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenClaim {
    pub session: Uuid,
    /// The session's token generation it was issued for.
    pub generation: i64,
    /// Unix seconds; 0: never.
    pub expires: i64,
}

/// `{uuid}.…`: a dot after something that parses as a UUID.
fn looks_like_session_token(credential: &str) -> bool {
    credential
        .split_once('.')
        .is_some_and(|(id, _)| Uuid::try_parse(id).is_ok())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The credential a request presents: the `Authorization: Bearer` header, else an
/// `x-api-key` header (as Anthropic's clients send it), else a `token` query parameter. An
/// `Authorization` header of another scheme is refused. The WebSocket upgrade keeps exactly
/// this credential to re-check it while the socket is open.
pub fn presented(
    headers: &axum::http::HeaderMap,
    uri: &axum::http::Uri,
) -> Result<Option<String>, ApiError> {
    let header = match headers.get(axum::http::header::AUTHORIZATION) {
        Some(value) => {
            let value = value.to_str().unwrap_or_default();
            match value.strip_prefix("Bearer ") {
                Some(token) => Some(token.trim().to_string()),
                None => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidCredentials,
                        "the Authorization header must be `Bearer <key or token>`",
                    ))
                }
            }
        }
        // Anthropic's clients send their key as `x-api-key`.
        None => headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string()),
    };
    let query = uri.query().and_then(|q| {
        q.split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == "token")
            .map(|(_, v)| v.to_string())
    });
    Ok(header.or(query))
}

/// Who `credential` (what a request [`presented`]) makes the caller of `method` on `path`: a
/// project's key (`stk_…`, whose role must allow the endpoint), or what [`Auth::authenticate`]
/// says of anything else. A session token's generation is the extractor's to check.
pub async fn authenticate_presented(
    state: &AppState,
    credential: Option<&str>,
    method: &axum::http::Method,
    path: &str,
) -> Result<Principal, ApiError> {
    match credential {
        Some(secret) if secret.starts_with(keys::SECRET_PREFIX) => {
            let principal = state.keys.authenticate(secret).await?;
            if let Principal::ProjectKey(key) = &principal {
                key.require_role(method, path)?;
            }
            state.keys.narrowed(principal).await
        }
        // An identity provider's access token (`[server.oidc]`).
        Some(token) if oidc::looks_like_jwt(token) => match &state.oidc {
            Some(oidc) => {
                let user = oidc.authenticate(token).await?;
                if user.project.is_some() {
                    keys::require_role(user.role, method, path)?;
                }
                state.keys.narrowed(Principal::User(user)).await
            }
            None => state.auth.authenticate(credential),
        },
        _ => state.auth.authenticate(credential),
    }
}

/// The authenticated caller, from the credential the request [`presented`].
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let credential = presented(&parts.headers, &parts.uri)?;
        let principal = authenticate_presented(
            state,
            credential.as_deref(),
            &parts.method,
            parts.uri.path(),
        )
        .await?;
        if let (Principal::Session(id), Some(claim)) = (
            &principal,
            credential
                .as_deref()
                .and_then(|c| state.auth.session_claim(c)),
        ) {
            // A rotated token is dead: only the newest generation's token is valid.
            match state.store.get_session(*id).await {
                Ok(session) if session.token_generation != claim.generation => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidCredentials,
                        "this session token was replaced by a newer one",
                    ))
                }
                // A missing session is answered 404 by the handler.
                Ok(_) | Err(stead_persistence::Error::SessionNotFound(_)) => {}
                Err(error) => return Err(error.into()),
            }
        }
        if let Some(slot) = parts.extensions.get::<crate::audit::AuditSlot>() {
            slot.fill(&principal);
        }
        Ok(Caller(principal))
    }
}
