//! Who is calling. API keys from `[server] api_keys` (plaintext or `sha256:<hex>`) are presented
//! as `Authorization: Bearer`; each session has a token (`{session id}.{HMAC}`) that grants
//! access to that session only, presented as a Bearer or as `?token=` (WebSockets). With no API
//! keys configured the server is loopback-only (the configuration refuses anything else) and a
//! request without credentials is allowed; credentials that are presented are always checked.
//! Comparisons are constant-time; keys and tokens are never logged.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

use crate::{ApiError, AppState, ErrorCode};

/// API keys (as SHA-256 digests) and the secret that signs session tokens.
pub struct Auth {
    keys: Vec<[u8; 32]>,
    secret: Vec<u8>,
    /// How long a minted session token is valid (`None`: until rotated).
    token_ttl: Option<std::time::Duration>,
    /// `server.allowed_hosts`: host names an open server answers besides loopback ones.
    allowed_hosts: Vec<String>,
}

/// The caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// No credentials, and none are required (loopback without API keys).
    Local,
    /// An API key, named by the first 8 hex digits of its digest.
    ApiKey(String),
    /// A session token: this session only.
    Session(Uuid),
}

impl Principal {
    /// May use endpoints that span sessions (create, list, approvals inbox, agents).
    pub fn is_operator(&self) -> bool {
        !matches!(self, Principal::Session(_))
    }

    pub fn may_access(&self, session: Uuid) -> bool {
        match self {
            Principal::Session(id) => *id == session,
            _ => true,
        }
    }

    /// The name the model router's per-key limits and budgets know this caller by: the key's
    /// fingerprint, or `local`. A session token has none (its session's calls are charged to
    /// whoever created the session).
    pub fn limits_key(&self) -> Option<String> {
        match self {
            Principal::Local => Some(stead_actors::LOCAL_PRINCIPAL.into()),
            Principal::ApiKey(name) => Some(name.clone()),
            Principal::Session(_) => None,
        }
    }

    /// Who decided, as journaled in `approval_decided`.
    pub fn name(&self) -> String {
        match self {
            Principal::Local => "local".into(),
            Principal::ApiKey(fingerprint) => format!("api_key:{fingerprint}"),
            Principal::Session(id) => format!("{}{id}", stead_actors::SESSION_TOKEN_DECIDER),
        }
    }

    pub fn require_operator(&self) -> Result<(), ApiError> {
        if self.is_operator() {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                "a session token only grants access to its own session",
            ))
        }
    }

    pub fn require_session(&self, session: Uuid) -> Result<(), ApiError> {
        if self.may_access(session) {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                "this session token belongs to another session",
            ))
        }
    }
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
            let allowed = origin
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

/// The host name of a `Host` header value or an origin's authority, lower-cased and without
/// port or IPv6 brackets; `None` when it is not shaped like one.
fn host_name(authority: &str) -> Option<String> {
    let authority = authority.trim().trim_end_matches('/');
    if authority.is_empty() || authority.contains(['/', '@', ' ']) {
        return None;
    }
    let name = if let Some(rest) = authority.strip_prefix('[') {
        let (name, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        name
    } else {
        match authority.rsplit_once(':') {
            Some((name, port)) if is_port(port) && !name.contains(':') => name,
            Some(_) => return None,
            None => authority,
        }
    };
    (!name.is_empty()).then(|| name.to_ascii_lowercase())
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// `localhost`, `*.localhost` (RFC 6761 reserves them for loopback), `127.0.0.0/8` and `::1`.
fn is_loopback_name(name: &str) -> bool {
    name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
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

/// The authenticated caller: the `Authorization: Bearer` header, else a `token` query
/// parameter.
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = match parts.headers.get(axum::http::header::AUTHORIZATION) {
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
            None => None,
        };
        let query = parts.uri.query().and_then(|q| {
            q.split('&')
                .filter_map(|pair| pair.split_once('='))
                .find(|(k, _)| *k == "token")
                .map(|(_, v)| v.to_string())
        });
        let credential = header.or(query);
        let principal = state.auth.authenticate(credential.as_deref())?;
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
        Ok(Caller(principal))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_server_answers_loopback_hosts_and_origins_only() {
        use axum::http::{HeaderMap, HeaderValue};
        let open = Auth::new(&[], vec![7; 32]).allowing_hosts(&["Stead.Internal".into()]);
        let check = |host: Option<&str>, origin: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(host) = host {
                headers.insert("host", HeaderValue::from_str(host).unwrap());
            }
            if let Some(origin) = origin {
                headers.insert("origin", HeaderValue::from_str(origin).unwrap());
            }
            open.check_request_origin(&headers).map_err(|e| e.code)
        };
        for host in [
            "127.0.0.1:8787",
            "127.9.9.9",
            "localhost",
            "LOCALHOST:80",
            "app.localhost:1",
            "[::1]:8787",
            "[::1]",
            "stead.internal:8787",
        ] {
            assert_eq!(check(Some(host), None), Ok(()), "{host}");
        }
        for host in [
            "evil.example:8787",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "10.0.0.1",
            "[::2]:8787",
            "user@127.0.0.1",
            "127.0.0.1:notaport",
            "",
        ] {
            assert_eq!(
                check(Some(host), None),
                Err(ErrorCode::HostNotAllowed),
                "{host}"
            );
        }
        assert_eq!(check(None, None), Ok(()));
        assert_eq!(
            check(Some("127.0.0.1:8787"), Some("http://127.0.0.1:8787")),
            Ok(())
        );
        assert_eq!(
            check(Some("127.0.0.1:8787"), Some("https://stead.internal")),
            Ok(())
        );
        for origin in [
            "https://evil.example",
            "null",
            "file://",
            "http://10.0.0.1:8787",
        ] {
            assert_eq!(
                check(Some("127.0.0.1:8787"), Some(origin)),
                Err(ErrorCode::OriginNotAllowed),
                "{origin}"
            );
        }
        // With API keys the credentials decide; neither header is checked.
        let keyed = Auth::new(&["first-key-0123456789".into()], vec![7; 32]);
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("evil.example"));
        headers.insert("origin", HeaderValue::from_static("https://evil.example"));
        assert!(keyed.check_request_origin(&headers).is_ok());
    }

    #[test]
    fn session_tokens_carry_their_generation_and_expire() {
        let auth =
            Auth::new(&[], vec![7; 32]).with_token_ttl(Some(std::time::Duration::from_secs(60)));
        let id = Uuid::now_v7();
        let (token, expires) = auth.session_token(id, 3);
        let expires = expires.unwrap().timestamp();
        let claim = auth.session_claim(&token).unwrap();
        assert_eq!(
            claim,
            TokenClaim {
                session: id,
                generation: 3,
                expires
            }
        );
        assert_eq!(
            auth.authenticate_at(Some(&token), expires - 1),
            Ok(Principal::Session(id))
        );
        assert_eq!(
            auth.authenticate_at(Some(&token), expires)
                .unwrap_err()
                .code,
            ErrorCode::TokenExpired
        );
        // The generation and the expiry are signed: changing either breaks the token.
        let parts: Vec<&str> = token.split('.').collect();
        let other_generation = format!("{}.4.{}.{}", parts[0], parts[2], parts[3]);
        let later = format!("{}.3.{}.{}", parts[0], expires + 3600, parts[3]);
        let never = format!("{}.3.0.{}", parts[0], parts[3]);
        for forged in [other_generation, later, never] {
            assert_eq!(auth.session_claim(&forged), None, "{forged}");
            assert_eq!(
                auth.authenticate_at(Some(&forged), expires - 1)
                    .unwrap_err()
                    .code,
                ErrorCode::InvalidCredentials
            );
        }
        // A ticket opens the WebSocket only: it is no session token, and a token no ticket.
        let (ticket, _) = auth.ticket(id, 3, std::time::Duration::from_secs(60));
        let now = chrono::Utc::now().timestamp();
        assert_eq!(auth.ticket_claim(&ticket, now).map(|c| c.session), Some(id));
        assert_eq!(auth.session_claim(&ticket), None);
        assert_eq!(auth.ticket_claim(&token, now), None);
        assert_eq!(auth.ticket_claim(&ticket, now + 61), None, "expired");
        // The old `{id}.{signature}` shape is no token.
        let old = format!("{}.{}", parts[0], parts[3]);
        assert_eq!(auth.session_claim(&old), None);
    }

    #[test]
    fn keys_tokens_and_scopes() {
        let hashed = format!("sha256:{}", hex(&Sha256::digest(b"second-key-0123456789")));
        let auth = Auth::new(&["first-key-0123456789".into(), hashed], vec![7; 32]);
        assert!(!auth.is_open());
        assert!(matches!(
            auth.identify("first-key-0123456789"),
            Some(Principal::ApiKey(_))
        ));
        assert!(matches!(
            auth.identify("second-key-0123456789"),
            Some(Principal::ApiKey(_))
        ));
        assert_eq!(auth.identify("first-key-012345678"), None);

        let a = Uuid::now_v7();
        let b = Uuid::now_v7();
        let (token, expires) = auth.session_token(a, 0);
        assert_eq!(expires, None);
        assert_eq!(auth.identify(&token), Some(Principal::Session(a)));
        // Another session's id with this signature, or a tampered signature, is refused.
        let forged = format!("{}.{}", b.simple(), token.split_once('.').unwrap().1);
        assert_eq!(auth.identify(&forged), None);
        let mut tampered = token.clone();
        tampered.pop();
        tampered.push('0');
        assert!(auth.identify(&tampered).is_none() || tampered == token);
        // Tokens from another secret do not verify.
        let other = Auth::new(&[], vec![8; 32]);
        assert_eq!(other.identify(&token), None);

        let session = Principal::Session(a);
        assert!(session.may_access(a) && !session.may_access(b));
        assert!(session.require_operator().is_err());
        assert_eq!(
            auth.authenticate(None).unwrap_err().code,
            "missing_credentials"
        );
        assert_eq!(other.authenticate(None).unwrap(), Principal::Local);
        // An open server ignores API keys (OpenAI SDKs always send one)…
        assert_eq!(
            other.authenticate(Some("sk-anything")).unwrap(),
            Principal::Local
        );
        // …but not a session token that does not verify.
        assert_eq!(
            other.authenticate(Some(&forged)).unwrap_err().code,
            "invalid_credentials"
        );
        // A server with keys refuses an unknown one.
        assert_eq!(
            auth.authenticate(Some("nope")).unwrap_err().code,
            "invalid_credentials"
        );
    }
}
