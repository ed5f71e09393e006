//! Single sign-on (docs/tenancy.md, "Single sign-on"): an OpenID Connect provider's access
//! tokens (JWTs) taken as Bearers. A token is verified against the provider's published keys
//! (its JWKS, cached, fetched again when a token names a key it does not hold — at most once
//! per `jwks_refetch_secs`, so a flood of made-up key ids cannot hammer the provider), with the algorithm pinned
//! by configuration (never the token's own choice), and `iss`, `aud`, `exp` and `sub` required
//! (`nbf` checked when present; a bounded clock skew allowed). Its claims then map, by the
//! first matching rule of `[[server.oidc.map]]`, to one of the installation's admins or to a
//! project and a role; a valid token no rule maps is refused.

use std::time::{Duration, Instant};

use super::oidc_config::OidcConfig;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use stead_persistence::tenancy::KeyRole;
use uuid::Uuid;

use super::keys::TtlCache;
use crate::{ApiError, ErrorCode};

/// How the web UI signs people in with the identity provider (authorization code + PKCE).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct SignIn {
    /// The provider (its discovery document is `{issuer}/.well-known/openid-configuration`).
    pub issuer: String,
    /// The web UI's public client at the provider.
    pub client_id: String,
    /// The audience (resource) the access token must be for.
    pub audience: String,
    /// Where the browser goes to sign in (from the provider's discovery document).
    pub authorization_endpoint: String,
}

/// The code of a finished sign-in, for its access token (`POST /v1/auth/oidc/token`).
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub code: String,
    /// The PKCE verifier the browser kept.
    pub code_verifier: String,
    /// The redirect URI the sign-in was started with.
    pub redirect_uri: String,
}

/// The provider's answer: the access token the web UI sends as its Bearer.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct TokenAnswer {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: Option<u64>,
}

/// A person a token signed in, and what they may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The name the token gives (`name_claim`, `sub` by default).
    pub name: String,
    /// Their project (`None`: one of the installation's admins).
    pub project: Option<Uuid>,
    pub role: KeyRole,
    /// When the token stops being valid (Unix seconds).
    pub expires_at: i64,
    /// The routes and agents their project allows (`None`: all; set when the request is
    /// authenticated, docs/tenancy.md).
    pub routes: Option<Vec<String>>,
    pub agents: Option<Vec<String>>,
}

/// The provider's keys, as last fetched.
struct Keys {
    set: JwkSet,
    fetched: Option<Instant>,
}

/// Why the verifier cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum OidcSetupError {
    #[error("server.oidc.algorithms: {0}")]
    Algorithm(#[source] jsonwebtoken::errors::Error),
    #[error("server.oidc: the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// The verifier of one provider's tokens.
pub struct Oidc {
    config: OidcConfig,
    algorithms: Vec<Algorithm>,
    client: reqwest::Client,
    keys: tokio::sync::Mutex<Keys>,
    projects: TtlCache<String, Option<Uuid>>,
    store: std::sync::Arc<dyn stead_persistence::Tenancy>,
}

fn invalid(why: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidCredentials,
        format!("the bearer token is not valid: {why}"),
    )
}

/// Whether a presented credential is a JWT (three base64url parts, a JSON header).
pub fn looks_like_jwt(credential: &str) -> bool {
    credential.starts_with("eyJ") && credential.split('.').count() == 3
}

impl Oidc {
    /// The verifier `[server.oidc]` asks for, if any.
    pub fn configured(
        config: &Option<OidcConfig>,
        store: &std::sync::Arc<dyn stead_persistence::JournalStore>,
    ) -> Result<Option<std::sync::Arc<Oidc>>, OidcSetupError> {
        let Some(config) = config else {
            return Ok(None);
        };
        let store: std::sync::Arc<dyn stead_persistence::Tenancy> = store.clone();
        Ok(Some(std::sync::Arc::new(Oidc::new(config.clone(), store)?)))
    }

    pub fn new(
        config: OidcConfig,
        store: std::sync::Arc<dyn stead_persistence::Tenancy>,
    ) -> Result<Self, OidcSetupError> {
        let algorithms = config
            .algorithms
            .iter()
            .map(|a| a.parse::<Algorithm>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(OidcSetupError::Algorithm)?;
        Ok(Oidc {
            config,
            algorithms,
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(10))
                .build()?,
            keys: tokio::sync::Mutex::new(Keys {
                set: JwkSet { keys: Vec::new() },
                fetched: None,
            }),
            projects: TtlCache::new(),
            store,
        })
    }

    /// What the web UI needs to sign people in (`client_id` configured), or `None`.
    pub async fn sign_in(&self) -> Result<Option<SignIn>, ApiError> {
        let Some(client_id) = self.config.client_id.clone() else {
            return Ok(None);
        };
        let (authorization_endpoint, _) = self.endpoints().await?;
        Ok(Some(SignIn {
            issuer: self.config.issuer.clone(),
            client_id,
            audience: self.config.audience.clone(),
            authorization_endpoint,
        }))
    }

    /// Exchanges a sign-in's code at the provider's token endpoint, for the web UI (the page
    /// talks to this server only: its content security policy allows no other origin).
    pub async fn exchange(&self, request: TokenRequest) -> Result<TokenAnswer, ApiError> {
        let Some(client_id) = &self.config.client_id else {
            return Err(ApiError::not_found(
                "single sign-on is not configured for the web UI",
            ));
        };
        let (_, token_endpoint) = self.endpoints().await?;
        let form = [
            ("grant_type", "authorization_code"),
            ("code", request.code.as_str()),
            ("code_verifier", request.code_verifier.as_str()),
            ("redirect_uri", request.redirect_uri.as_str()),
            ("client_id", client_id.as_str()),
            ("resource", self.config.audience.as_str()),
        ];
        let answer = self
            .client
            .post(&token_endpoint)
            .form(&form)
            .send()
            .await
            .map_err(|_| ApiError::unavailable("the identity provider cannot be reached"))?;
        let ok = answer.status().is_success();
        let body: Value = answer.json().await.unwrap_or_default();
        match body["access_token"].as_str() {
            Some(token) if ok => Ok(TokenAnswer {
                access_token: token.to_string(),
                token_type: body["token_type"].as_str().unwrap_or("Bearer").to_string(),
                expires_in: body["expires_in"].as_u64(),
            }),
            _ => Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "the identity provider refused the code: {}",
                    body["error"].as_str().unwrap_or("no reason given")
                ),
            )),
        }
    }

    /// The provider's authorization and token endpoints, from its discovery document.
    async fn endpoints(&self) -> Result<(String, String), ApiError> {
        let document = self
            .discovery()
            .await
            .map_err(|_| ApiError::unavailable("the identity provider cannot be reached"))?;
        let field = |name: &str| document[name].as_str().map(str::to_string);
        match (field("authorization_endpoint"), field("token_endpoint")) {
            (Some(authorization), Some(token)) => Ok((authorization, token)),
            _ => Err(ApiError::unavailable(
                "the identity provider's discovery document names no endpoints",
            )),
        }
    }

    /// The person `token` signs in, or why not.
    pub async fn authenticate(&self, token: &str) -> Result<User, ApiError> {
        let claims = self.verify(token).await?;
        let name = claims[&self.config.name_claim]
            .as_str()
            .or_else(|| claims["sub"].as_str())
            .ok_or_else(|| invalid("it names no one"))?
            .to_string();
        let expires_at = claims["exp"].as_i64().unwrap_or_default();
        let rule = self
            .config
            .map
            .iter()
            .find(|rule| matches(&claims[&rule.claim], &rule.value))
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Forbidden,
                    "signed in, but no rule of server.oidc.map grants this person access",
                )
            })?;
        if rule.installation {
            return Ok(User {
                name,
                project: None,
                role: KeyRole::Admin,
                expires_at,
                routes: None,
                agents: None,
            });
        }
        let project_name = rule.project.clone().unwrap_or_default();
        let project = self.project(&project_name).await?.ok_or_else(|| {
            ApiError::new(
                ErrorCode::Forbidden,
                format!("the project `{project_name}` this person maps to does not exist"),
            )
        })?;
        Ok(User {
            name,
            project: Some(project),
            role: rule
                .role
                .as_deref()
                .and_then(KeyRole::parse)
                .unwrap_or(KeyRole::Member),
            expires_at,
            routes: None,
            agents: None,
        })
    }

    /// A project's id by name, through a 5 s cache.
    async fn project(&self, name: &str) -> Result<Option<Uuid>, ApiError> {
        if let Some(found) = self.projects.get(&name.to_string()) {
            return Ok(found);
        }
        let found = match self.store.project_by_name(name).await {
            Ok(row) => Some(row.id),
            Err(stead_persistence::Error::NotFound(_)) => None,
            Err(other) => return Err(other.into()),
        };
        self.projects.put(name.to_string(), found);
        Ok(found)
    }

    /// The token's claims once its signature, algorithm, issuer, audience and times hold.
    async fn verify(&self, token: &str) -> Result<Value, ApiError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| invalid("not a JWT"))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(invalid(format!(
                "{:?} is not an accepted algorithm",
                header.alg
            )));
        }
        let kid = header
            .kid
            .ok_or_else(|| invalid("its header names no key (kid)"))?;
        let key = self.key(&kid, header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = vec![header.alg];
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.config.leeway_secs;
        jsonwebtoken::decode::<Value>(token, &key, &validation)
            .map(|data| data.claims)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                    ApiError::new(ErrorCode::TokenExpired, "the bearer token has expired")
                }
                jsonwebtoken::errors::ErrorKind::InvalidIssuer => invalid("another issuer's"),
                jsonwebtoken::errors::ErrorKind::InvalidAudience => {
                    invalid("made for another audience")
                }
                jsonwebtoken::errors::ErrorKind::ImmatureSignature => invalid("not valid yet"),
                jsonwebtoken::errors::ErrorKind::InvalidSignature => invalid("a bad signature"),
                jsonwebtoken::errors::ErrorKind::MissingRequiredClaim(claim) => {
                    invalid(format!("no `{claim}` claim"))
                }
                _ => invalid("it does not verify"),
            })
    }

    /// The key `kid` for `alg`: from the cached set, else from a fresh fetch (at most once a
    /// minute). A key whose own `alg` is another than the token's is refused.
    async fn key(&self, kid: &str, alg: Algorithm) -> Result<DecodingKey, ApiError> {
        let mut keys = self.keys.lock().await;
        let refetch = Duration::from_secs(self.config.jwks_refetch_secs);
        let stale = keys.fetched.is_none_or(|at| at.elapsed() >= refetch);
        if keys.set.find(kid).is_none() && stale {
            keys.set = self.fetch().await?;
            keys.fetched = Some(Instant::now());
        }
        let jwk = keys
            .set
            .find(kid)
            .ok_or_else(|| invalid(format!("the provider has no key `{kid}`")))?;
        if jwk
            .common
            .key_algorithm
            .is_some_and(|own| own.to_string() != format!("{alg:?}"))
        {
            return Err(invalid("its algorithm is not its key's"));
        }
        DecodingKey::from_jwk(jwk).map_err(|_| invalid("the provider's key cannot be used"))
    }

    /// The provider's keys: from `jwks_url`, or the `jwks_uri` its discovery document names.
    async fn fetch(&self) -> Result<JwkSet, ApiError> {
        let unavailable = |what: &str| {
            tracing::warn!(issuer = %self.config.issuer, what, "the identity provider's keys cannot be read");
            ApiError::unavailable("the identity provider's signing keys cannot be read")
        };
        let url = match &self.config.jwks_url {
            Some(url) => url.clone(),
            None => {
                let document = self
                    .discovery()
                    .await
                    .map_err(|_| unavailable("discovery"))?;
                document["jwks_uri"]
                    .as_str()
                    .ok_or_else(|| unavailable("discovery has no jwks_uri"))?
                    .to_string()
            }
        };
        let set: Value = self.get(&url).await.map_err(|_| unavailable("jwks"))?;
        serde_json::from_value(set).map_err(|_| unavailable("jwks is not a key set"))
    }

    /// The provider's discovery document (`{issuer}/.well-known/openid-configuration`).
    async fn discovery(&self) -> Result<Value, reqwest::Error> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        self.get(&url).await
    }

    async fn get(&self, url: &str) -> Result<Value, reqwest::Error> {
        self.client
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    }
}

/// Whether a claim is `value`, or a list that holds it.
fn matches(claim: &Value, value: &str) -> bool {
    match claim {
        Value::String(s) => s == value,
        Value::Array(items) => items.iter().any(|i| i.as_str() == Some(value)),
        Value::Bool(b) => b.to_string() == value,
        _ => false,
    }
}
