//! Virtual keys (docs/tenancy.md): a project's keys, made by its admins over the API. The
//! secret is `stk_` and 43 random base62 characters (256 bits), shown once; the store keeps its
//! SHA-256 only (a random 256-bit secret needs no slow hash) and finds it by that digest. Each
//! node caches what a digest resolved to for a few seconds, so a request is authenticated
//! without a database round trip; a revocation or rotation is seen at once on the node that
//! made it and within [`CACHE_TTL`] on the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use sha2::{Digest, Sha256};
use stead_persistence::tenancy::{KeyRole, KeyRow};
use stead_persistence::Tenancy;
use subtle::ConstantTimeEq;
use uuid::Uuid;

use super::{decode_hex, hex, Principal};
use crate::{ApiError, ErrorCode};

/// What every virtual key's secret starts with.
pub const SECRET_PREFIX: &str = "stk_";
/// Random characters after the prefix: 43 base62 characters carry 256 bits.
const SECRET_CHARS: usize = 43;
/// Characters of the secret kept in the clear to name it in lists (`stk_` and 8 more).
const SHOWN_CHARS: usize = 12;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// How long a node trusts what a digest resolved to (a key, or no key).
pub const CACHE_TTL: Duration = Duration::from_secs(5);
/// Entries one cache holds; past this, entries older than the TTL go, and all of them if more
/// than half are fresh.
const CACHE_MAX: usize = 100_000;

/// A project's key as a caller: what requests made with it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectKey {
    pub id: Uuid,
    pub project: Uuid,
    pub role: KeyRole,
    /// The routes it may call: its own list narrowed by its project's (`None`: every route).
    pub routes: Option<Vec<String>>,
    /// The agents its project allows (`None`: every configured agent).
    pub agents: Option<Vec<String>>,
    /// When it stops working (a key it makes may not outlive it).
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Its secret's SHA-256, to look it up again while a WebSocket it opened stays open.
    pub(crate) digest: [u8; 32],
}

/// A freshly made secret: the secret itself (shown once), the part kept in the clear, and the
/// digest the store keeps.
pub struct Minted {
    pub secret: String,
    pub prefix: String,
    pub digest: String,
}

/// Makes a new secret from the operating system's random source (through `rand`'s
/// cryptographically secure thread generator).
pub fn mint() -> Minted {
    let mut rng = rand::rng();
    let mut secret = String::with_capacity(SECRET_PREFIX.len() + SECRET_CHARS);
    secret.push_str(SECRET_PREFIX);
    for _ in 0..SECRET_CHARS {
        secret.push(char::from(BASE62[rng.random_range(0..BASE62.len())]));
    }
    Minted {
        prefix: secret[..SHOWN_CHARS].to_string(),
        digest: hex(&Sha256::digest(secret.as_bytes())),
        secret,
    }
}

/// What this node resolved lately, each for [`CACHE_TTL`].
pub(crate) struct TtlCache<K, V> {
    map: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: std::hash::Hash + Eq, V: Clone> TtlCache<K, V> {
    pub(crate) fn new() -> Self {
        TtlCache {
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, V)>> {
        // A panic while holding the lock leaves a map that is still consistent.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        self.lock()
            .get(key)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, value)| value.clone())
    }

    pub(crate) fn put(&self, key: K, value: V) {
        let mut map = self.lock();
        if map.len() >= CACHE_MAX {
            // Down to half at most, so that a full cache is not scanned on every insert (a
            // flood of unknown secrets keeps it full of fresh "no such key" answers).
            map.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
            if map.len() > CACHE_MAX / 2 {
                map.clear();
            }
        }
        map.insert(key, (Instant::now(), value));
    }

    pub(crate) fn remove(&self, key: &K) {
        self.lock().remove(key);
    }
}

/// The keys (and their projects) this node has resolved lately, in front of the store.
pub struct VirtualKeys {
    pub(crate) store: Arc<dyn Tenancy>,
    by_digest: TtlCache<[u8; 32], Option<Arc<KeyRow>>>,
    pub(crate) by_id: TtlCache<Uuid, Option<Arc<KeyRow>>>,
    pub(crate) projects: TtlCache<Uuid, Arc<stead_persistence::tenancy::ProjectRow>>,
    /// The share of a budget whose spending sends its alert (`None`: no alerts configured).
    pub(crate) alert_share: Option<f64>,
}

impl VirtualKeys {
    pub fn new(store: Arc<dyn Tenancy>) -> Self {
        VirtualKeys {
            store,
            by_digest: TtlCache::new(),
            by_id: TtlCache::new(),
            projects: TtlCache::new(),
            alert_share: None,
        }
    }

    /// Budgets alert at `share` of their amount (`[budget_alerts]`, docs/tenancy.md).
    pub fn alerting_at(mut self, share: Option<f64>) -> Self {
        self.alert_share = share;
        self
    }

    /// The caller a `stk_` secret makes: refused when no key has it, or the key was revoked or
    /// has expired.
    pub async fn authenticate(&self, secret: &str) -> Result<Principal, ApiError> {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let row = self.resolve(digest).await?.ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidCredentials,
                "the API key or session token is not valid",
            )
        })?;
        // The index found the row by this digest; the constant-time comparison is the check.
        let stored = decode_hex(&row.digest).unwrap_or([0; 32]);
        if !bool::from(stored.ct_eq(&digest)) {
            return Err(ApiError::new(
                ErrorCode::InvalidCredentials,
                "the API key or session token is not valid",
            ));
        }
        live(&row)?;
        Ok(Principal::ProjectKey(ProjectKey {
            id: row.id,
            project: row.project_id,
            role: row.role,
            routes: row.routes.clone(),
            agents: None,
            expires_at: row.expires_at,
            digest,
        }))
    }

    /// Why the key a WebSocket was opened with no longer holds (revoked, expired, gone).
    pub async fn no_longer_valid(&self, key: &ProjectKey) -> Option<&'static str> {
        match self.resolve(key.digest).await {
            Ok(Some(row)) => live(&row)
                .err()
                .map(|_| "the API key was revoked or expired"),
            Ok(None) => Some("the API key is gone"),
            // A database that does not answer closes nothing: the next heartbeat asks again.
            Err(_) => None,
        }
    }

    /// Drops what this node cached for a key (after revoking, rotating or changing it here).
    pub fn forget(&self, key: &KeyRow) {
        if let Some(digest) = decode_hex(&key.digest) {
            self.by_digest.remove(&digest);
        }
        self.by_id.remove(&key.id);
    }

    /// Drops what this node cached for a project (after changing its settings here).
    pub fn forget_project(&self, project: Uuid) {
        self.projects.remove(&project);
    }

    async fn resolve(&self, digest: [u8; 32]) -> Result<Option<Arc<KeyRow>>, ApiError> {
        if let Some(row) = self.by_digest.get(&digest) {
            return Ok(row);
        }
        let row = self.store.key_by_digest(&hex(&digest)).await?.map(Arc::new);
        self.by_digest.put(digest, row.clone());
        Ok(row)
    }
}

fn live(row: &KeyRow) -> Result<(), ApiError> {
    if row.revoked_at.is_some() {
        return Err(ApiError::new(
            ErrorCode::InvalidCredentials,
            "this API key was revoked",
        ));
    }
    if !row.live_at(chrono::Utc::now()) {
        return Err(ApiError::new(
            ErrorCode::InvalidCredentials,
            "this API key has expired",
        ));
    }
    Ok(())
}

/// The endpoints of the AI gateway: all that an `inference` key may call.
const GATEWAY_PATHS: [&str; 6] = [
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/audio/transcriptions",
    "/v1/messages",
    "/v1/responses",
    "/v1/models",
];

/// What no project's key may call: what spans projects (the cluster, the metrics, the MCP
/// servers' state, making projects and setting their budgets: docs/tenancy.md). Checked before the request's body is
/// read; each handler checks again.
fn installation_only(method: &axum::http::Method, path: &str) -> bool {
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    // A project's own budget caps what its admins hand out: the installation sets it.
    let project_budget = path
        .strip_prefix("/v1/projects/")
        .is_some_and(|rest| !rest.contains('/'))
        && method == axum::http::Method::PATCH;
    project_budget
        || (path == "/v1/projects" && method == axum::http::Method::POST)
        || ["/metrics", "/v1/cluster", "/v1/mcp/servers"]
            .iter()
            .any(|prefix| under(prefix))
}

impl ProjectKey {
    /// Whether the key's role lets it call `method` on `path` (docs/tenancy.md): `admin`
    /// anything of its project, `member` all but the project's keys, `viewer` reads only (no
    /// WebSocket: it sends messages), `inference` the gateway only; no key what is the
    /// installation's alone. Which rows it then sees is its project's scope.
    pub fn require_role(&self, method: &axum::http::Method, path: &str) -> Result<(), ApiError> {
        require_role(self.role, method, path)
    }
}

/// Whether `role` in a project lets its holder (a key, or a signed-in person) call `method` on
/// `path` (docs/tenancy.md).
pub(crate) fn require_role(
    role: KeyRole,
    method: &axum::http::Method,
    path: &str,
) -> Result<(), ApiError> {
    use axum::http::Method;
    if installation_only(method, path) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "only the installation's keys (the configuration's `server.api_keys`) may call \
             this endpoint",
        ));
    }
    // A project's keys, its budgets and its audit trail.
    let project_admin =
        path == "/v1/projects" || path.starts_with("/v1/projects/") || path == "/v1/audit";
    let allowed = match role {
        KeyRole::Admin => true,
        KeyRole::Member => !project_admin,
        KeyRole::Viewer => {
            matches!(*method, Method::GET | Method::HEAD)
                && !project_admin
                && !path.ends_with("/ws")
        }
        KeyRole::Inference => GATEWAY_PATHS.contains(&path),
    };
    if allowed {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("the `{}` role may not call this endpoint", role.as_str()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn secrets_are_long_random_and_digested() {
        let one = mint();
        let two = mint();
        assert_ne!(one.secret, two.secret);
        assert_eq!(one.secret.len(), SECRET_PREFIX.len() + SECRET_CHARS);
        assert!(one.secret[4..].chars().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(one.prefix, one.secret[..12]);
        assert_eq!(one.digest, hex(&Sha256::digest(one.secret.as_bytes())));
        assert!(!one.digest.contains(&one.secret[4..12]));
    }

    fn key(role: KeyRole) -> ProjectKey {
        ProjectKey {
            id: Uuid::now_v7(),
            project: Uuid::now_v7(),
            role,
            routes: None,
            agents: None,
            expires_at: None,
            digest: [0; 32],
        }
    }

    #[test]
    fn each_role_reaches_its_endpoints_only() {
        let session = "/v1/sessions/0190b7e2-0000-7000-8000-000000000000";
        let ws = format!("{session}/ws");
        let messages = format!("{session}/messages");
        let cases: &[(&str, &str, [bool; 4])] = &[
            // method, path, [admin, member, viewer, inference]
            ("GET", session, [true, true, true, false]),
            ("POST", &messages, [true, true, false, false]),
            ("GET", &ws, [true, true, false, false]),
            ("GET", "/v1/projects/p/keys", [true, false, false, false]),
            ("POST", "/v1/projects/p/keys", [true, false, false, false]),
            ("POST", "/v1/chat/completions", [true, true, false, true]),
            ("GET", "/v1/models", [true, true, true, true]),
            ("POST", "/v1/projects", [false, false, false, false]),
            ("GET", "/v1/collections/docs", [true, true, true, false]),
            (
                "PUT",
                "/v1/collections/docs/documents/a",
                [true, true, false, false],
            ),
            ("GET", "/v1/gateway/logs", [true, true, true, false]),
            ("POST", "/v1/evals", [true, true, false, false]),
            ("GET", "/v1/datasets/d", [true, true, true, false]),
            ("GET", "/metrics", [false, false, false, false]),
            (
                "POST",
                "/v1/agents/ops/schedules",
                [true, true, false, false],
            ),
            ("GET", "/v1/agents", [true, true, true, false]),
            ("PATCH", "/v1/projects/p", [false, false, false, false]),
            (
                "PATCH",
                "/v1/projects/p/keys/k",
                [true, false, false, false],
            ),
            ("GET", "/v1/mcp/servers", [false, false, false, false]),
        ];
        let roles = [
            KeyRole::Admin,
            KeyRole::Member,
            KeyRole::Viewer,
            KeyRole::Inference,
        ];
        for (method, path, allowed) in cases {
            for (role, allowed) in roles.iter().zip(allowed) {
                let method: Method = method.parse().unwrap();
                let answer = key(*role).require_role(&method, path);
                assert_eq!(answer.is_ok(), *allowed, "{role:?} {method} {path}");
            }
        }
    }
}
