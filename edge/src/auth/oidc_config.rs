//! The settings of single sign-on (`[server.oidc]`, docs/tenancy.md, "Single sign-on"): the
//! OpenID Connect provider whose access tokens (JWTs) the API takes as Bearers, and how their
//! claims map to the installation or to a project and a role. The configuration crate reads
//! them into `server.oidc`.

use serde::{Deserialize, Serialize};

/// The provider, and the mapping of its people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer: a token's `iss` must be exactly this.
    pub issuer: String,
    /// The audience the API's tokens are made for: a token's `aud` must hold it.
    pub audience: String,
    /// Where the provider's signing keys are (default: the `jwks_uri` of
    /// `{issuer}/.well-known/openid-configuration`).
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// The signing algorithms taken (default `RS256` and `ES256`; never a token's own choice).
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// The clock skew allowed on `exp` and `nbf`, in seconds (at most 300).
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// How soon a token naming a key the cached set lacks makes it fetch the keys again, in
    /// seconds (1 to 3,600): a rotated key is found by then, and made-up key ids cannot make
    /// the server hammer the provider.
    #[serde(default = "default_refetch")]
    pub jwks_refetch_secs: u64,
    /// The claim that names the person in the audit trail and on decisions (default `sub`).
    #[serde(default = "default_name_claim")]
    pub name_claim: String,
    /// Who gets in, and as what: the first entry whose claim matches decides; a token no entry
    /// matches is refused.
    #[serde(default)]
    pub map: Vec<OidcMapping>,
    /// The web UI's public client at the provider (authorization code with PKCE, the redirect
    /// URI being the web UI's own address, `…/`); without it the web UI offers no sign-in.
    #[serde(default)]
    pub client_id: Option<String>,
}

/// One rule of the mapping: when the claim `claim` is `value` (or, for a list, holds it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcMapping {
    pub claim: String,
    pub value: String,
    /// The project the person acts in (its name); with `installation`, none.
    #[serde(default)]
    pub project: Option<String>,
    /// The role in that project: `admin`, `member`, `viewer` or `inference` (default
    /// `member`).
    #[serde(default)]
    pub role: Option<String>,
    /// The person is one of the installation's admins (like a configured API key).
    #[serde(default)]
    pub installation: bool,
}

fn default_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into()]
}

fn default_refetch() -> u64 {
    60
}

fn default_leeway() -> u64 {
    30
}

fn default_name_claim() -> String {
    "sub".into()
}

/// The algorithms a provider may sign with (asymmetric only: a shared secret has no place in
/// a token anyone can read).
pub const ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// What is wrong with `[server.oidc]`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OidcConfigError(String);

impl OidcConfig {
    /// What is wrong with it, if anything.
    pub fn check(&self) -> Result<(), OidcConfigError> {
        self.problem().map_or(Ok(()), |p| Err(OidcConfigError(p)))
    }

    fn problem(&self) -> Option<String> {
        let url = |u: &str| u.starts_with("https://") || u.starts_with("http://");
        if !url(&self.issuer) {
            return Some(format!("issuer `{}` is not an http(s) URL", self.issuer));
        }
        if self.jwks_url.as_deref().is_some_and(|u| !url(u)) {
            return Some("jwks_url is not an http(s) URL".into());
        }
        if self.audience.is_empty() {
            return Some("audience is empty".into());
        }
        if self.algorithms.is_empty() {
            return Some("algorithms is empty".into());
        }
        if let Some(alg) = self
            .algorithms
            .iter()
            .find(|a| !ALGORITHMS.contains(&a.as_str()))
        {
            return Some(format!(
                "algorithm `{alg}` is not one of {}",
                ALGORITHMS.join(", ")
            ));
        }
        if !(1..=3600).contains(&self.jwks_refetch_secs) {
            return Some("jwks_refetch_secs is not 1 to 3600".into());
        }
        if self.leeway_secs > 300 {
            return Some("leeway_secs is over 300".into());
        }
        if self.map.is_empty() {
            return Some("map is empty: no one could sign in".into());
        }
        for (i, rule) in self.map.iter().enumerate() {
            let role_ok = rule
                .role
                .as_deref()
                .is_none_or(|r| matches!(r, "admin" | "member" | "viewer" | "inference"));
            if !role_ok {
                return Some(format!(
                    "map[{i}].role is not admin, member, viewer or inference"
                ));
            }
            if rule.installation == rule.project.is_some() {
                return Some(format!(
                    "map[{i}]: name a project, or set installation = true"
                ));
            }
        }
        None
    }
}
