//! Single sign-on through the real binary (docs/tenancy.md, "Single sign-on"), against an
//! identity-provider double (named as one: a discovery document and a JWKS served from the
//! test, with RSA and P-256 test keys, `tests/fixtures/oidc/`): tokens map to the installation
//! or to a project's role by their claims; `iss`, `aud`, `exp` (with a bounded skew), `nbf`
//! and the signature are checked; the algorithm is the configuration's, never the token's
//! (`none` and HS256 made with the public key are refused); keys are fetched again for a
//! rotated key, at most once per `jwks_refetch_secs` however many unknown ids arrive; and what a
//! person does is recorded under their name.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

const ADMIN: &str = "installation-admin-key-0123456789";
const AUDIENCE: &str = "stead-api";

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/oidc")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

fn jwk(name: &str) -> Value {
    serde_json::from_str(&fixture(&format!("{name}.jwk.json"))).unwrap()
}

/// The provider double: its discovery document and its key set (which the test may change),
/// counting the key-set fetches.
struct Provider {
    base: String,
    keys: Arc<Mutex<Vec<Value>>>,
    fetches: Arc<AtomicUsize>,
}

impl Provider {
    async fn start(keys: Vec<Value>) -> Provider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let keys = Arc::new(Mutex::new(keys));
        let fetches = Arc::new(AtomicUsize::new(0));
        let discovery = json!({ "issuer": base, "jwks_uri": format!("{base}/jwks") });
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(move || async move { axum::Json(discovery) }),
            )
            .route(
                "/jwks",
                axum::routing::get({
                    let (keys, fetches) = (keys.clone(), fetches.clone());
                    move || async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let keys = keys.lock().unwrap().clone();
                        axum::Json(json!({ "keys": keys }))
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Provider {
            base,
            keys,
            fetches,
        }
    }

    /// A token for `claims` (merged over valid defaults), signed by the test key `kid`.
    fn token(&self, kid: &str, claims: Value) -> String {
        let now = chrono::Utc::now().timestamp();
        let mut all = json!({
            "iss": self.base, "aud": AUDIENCE, "sub": "alice", "exp": now + 300, "iat": now,
        });
        for (k, v) in claims.as_object().unwrap() {
            all[k] = v.clone();
        }
        let (alg, key) = if kid.starts_with("ec") {
            let pem = fixture(&format!("{kid}.pem"));
            (
                Algorithm::ES256,
                EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
            )
        } else {
            let pem = fixture(&format!("{kid}.pem"));
            (
                Algorithm::RS256,
                EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
            )
        };
        let mut header = Header::new(alg);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, &all, &key).unwrap()
    }
}

fn b64(value: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
}

fn config(provider: &Provider) -> String {
    format!(
        r#"[server]
api_keys = ["{ADMIN}"]

[server.oidc]
issuer = "{issuer}"
audience = "{AUDIENCE}"
leeway_secs = 30
jwks_refetch_secs = 1
map = [
  {{ claim = "groups", value = "stead-admins", installation = true }},
  {{ claim = "groups", value = "team-a", project = "team-a", role = "member" }},
]

[[agents]]
name = "ops"
route = "default"
system_prompt = "You run operations."
"#,
        issuer = provider.base
    )
}

async fn status(server: &Stead, method: &str, path: &str, token: &str) -> (u16, Value) {
    let body = (method == "POST").then(|| json!({"agent": "ops"}));
    server.call_as(method, path, body, Some(token)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_with_the_providers_tokens_and_nothing_else_gets_in() {
    let provider = Provider::start(vec![jwk("rsa1"), jwk("ec1")]).await;
    let mut server = Stead::start(&config(&provider), None);
    server.api_key = Some(ADMIN.into());
    let (created, _) = server
        .call("POST", "/v1/projects", Some(json!({"name": "team-a"})))
        .await;
    assert_eq!(created, 201);
    let now = chrono::Utc::now().timestamp();

    // A member of team-a (RS256): sessions in team-a; the installation's endpoints refused.
    let alice = provider.token("rsa1", json!({"groups": ["team-a"]}));
    let (code, session) = status(&server, "POST", "/v1/sessions", &alice).await;
    assert_eq!(code, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_string();
    assert_eq!(status(&server, "GET", "/v1/cluster", &alice).await.0, 403);
    assert_eq!(
        status(&server, "GET", "/v1/projects/team-a/keys", &alice)
            .await
            .0,
        403
    );
    // An installation admin (ES256).
    let root = provider.token("ec1", json!({"sub": "root", "groups": "stead-admins"}));
    assert_eq!(status(&server, "GET", "/v1/cluster", &root).await.0, 200);

    // Refused: each check, with its reason.
    let refused = |token: String, code: u16, error: &'static str| {
        let server = &server;
        async move {
            let (got, body) = status(server, "GET", "/v1/sessions", &token).await;
            assert_eq!(
                (got, body["error"]["code"].as_str()),
                (code, Some(error)),
                "{body}"
            );
        }
    };
    let member = json!({"groups": ["team-a"]});
    let with = |extra: Value| {
        let mut claims = member.clone();
        for (k, v) in extra.as_object().unwrap() {
            claims[k] = v.clone();
        }
        claims
    };
    refused(
        provider.token("rsa1", with(json!({"aud": "another-api"}))),
        401,
        "invalid_credentials",
    )
    .await;
    refused(
        provider.token("rsa1", with(json!({"iss": "https://evil.example"}))),
        401,
        "invalid_credentials",
    )
    .await;
    refused(
        provider.token("rsa1", with(json!({"exp": now - 120}))),
        401,
        "token_expired",
    )
    .await;
    refused(
        provider.token("rsa1", with(json!({"nbf": now + 600}))),
        401,
        "invalid_credentials",
    )
    .await;
    refused(
        provider.token("rsa1", json!({"groups": ["team-b"]})),
        403,
        "forbidden",
    )
    .await;
    // Within the allowed skew: taken.
    let late = provider.token("rsa1", with(json!({"exp": now - 10, "nbf": now + 10})));
    assert_eq!(status(&server, "GET", "/v1/sessions", &late).await.0, 200);
    // A changed payload under a valid signature.
    let parts: Vec<&str> = alice.split('.').collect();
    let forged_claims = json!({"iss": provider.base, "aud": AUDIENCE, "sub": "alice",
        "exp": now + 300, "groups": ["stead-admins"]});
    refused(
        format!("{}.{}.{}", parts[0], b64(&forged_claims), parts[2]),
        401,
        "invalid_credentials",
    )
    .await;
    // `none`, and HS256 with the provider's public key as the secret: never the token's choice.
    let none = json!({"alg": "none", "kid": "rsa1", "typ": "JWT"});
    refused(
        format!("{}.{}.", b64(&none), b64(&forged_claims)),
        401,
        "invalid_credentials",
    )
    .await;
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("rsa1".into());
    let public = jwk("rsa1")["n"].as_str().unwrap().to_string();
    let confused = jsonwebtoken::encode(
        &hs,
        &forged_claims,
        &EncodingKey::from_secret(public.as_bytes()),
    )
    .unwrap();
    refused(confused, 401, "invalid_credentials").await;
    // An RSA key's id under an ES256 header.
    let pem = fixture("ec1.pem");
    let mut mixed = Header::new(Algorithm::ES256);
    mixed.kid = Some("rsa1".into());
    let mixed = jsonwebtoken::encode(
        &mixed,
        &forged_claims,
        &EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
    )
    .unwrap();
    refused(mixed, 401, "invalid_credentials").await;

    // A rotated key: unknown until the provider publishes it; a burst of tokens naming unknown
    // keys fetches the set once per jwks_refetch_secs, not once each.
    let rotated = provider.token("rsa2", member.clone());
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let before = provider.fetches.load(Ordering::SeqCst);
    for _ in 0..20 {
        refused(rotated.clone(), 401, "invalid_credentials").await;
    }
    let fetched = provider.fetches.load(Ordering::SeqCst) - before;
    assert_eq!(
        fetched, 1,
        "twenty unknown-key tokens fetched the keys {fetched} times"
    );
    provider.keys.lock().unwrap().push(jwk("rsa2"));
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        status(&server, "GET", "/v1/sessions", &rotated).await.0,
        200
    );

    // What a person does is recorded under their name.
    let (_, trail) = server
        .call("GET", "/v1/audit?action=POST%20/v1/sessions", None)
        .await;
    let acts = trail["entries"].as_array().unwrap();
    let made = acts
        .iter()
        .find(|e| e["actor"] == "user:alice" && e["details"]["session_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{trail}"));
    // In alice's project.
    let (_, project) = server.call("GET", "/v1/projects/team-a", None).await;
    assert_eq!(made["project_id"], project["id"]);
    server.signal(libc::SIGTERM);
}
