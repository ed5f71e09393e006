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

    /// Who decided, as journaled in `approval_decided`.
    pub fn name(&self) -> String {
        match self {
            Principal::Local => "local".into(),
            Principal::ApiKey(fingerprint) => format!("api_key:{fingerprint}"),
            Principal::Session(id) => format!("session_token:{id}"),
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
        Auth { keys, secret }
    }

    /// No API keys: loopback-only, credentials optional.
    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// The token that grants access to `session` only.
    pub fn session_token(&self, session: Uuid) -> String {
        format!("{}.{}", session.simple(), hex(&self.sign(session)))
    }

    fn sign(&self, session: Uuid) -> [u8; 32] {
        // HMAC accepts keys of any length; `new_from_slice` only fails for fixed-size MACs.
        #[allow(clippy::expect_used)]
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key");
        mac.update(b"stead-session-token:");
        mac.update(session.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Who `credential` is, or `None` when it is neither a key nor a valid session token.
    pub fn identify(&self, credential: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(credential.as_bytes()).into();
        let mut matched = subtle::Choice::from(0u8);
        for key in &self.keys {
            matched |= key.ct_eq(&digest);
        }
        if bool::from(matched) {
            return Some(Principal::ApiKey(hex(&digest[..4])));
        }
        let (id, signature) = credential.split_once('.')?;
        let id = Uuid::try_parse(id).ok()?;
        let signature = decode_hex(signature)?;
        bool::from(self.sign(id).ct_eq(&signature)).then_some(Principal::Session(id))
    }

    /// Authenticates a request's credential (`None` when it has none).
    ///
    /// On an open server (loopback, no API keys), a credential that is not shaped like a session
    /// token is ignored: OpenAI SDKs always send some API key, and there is none to check it
    /// against. A session-shaped token must still verify.
    pub fn authenticate(&self, credential: Option<&str>) -> Result<Principal, ApiError> {
        let credential = credential.filter(|c| !self.is_open() || looks_like_session_token(c));
        match credential {
            Some(credential) => self.identify(credential).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidCredentials,
                    "the API key or session token is not valid",
                )
            }),
            None if self.is_open() => Ok(Principal::Local),
            None => Err(ApiError::new(
                ErrorCode::MissingCredentials,
                "send an API key or a session token as `Authorization: Bearer …`",
            )),
        }
    }
}

/// `{uuid}.{signature}`: a dot after something that parses as a UUID.
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
        state.auth.authenticate(credential.as_deref()).map(Caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let token = auth.session_token(a);
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
