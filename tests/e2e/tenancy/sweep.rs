//! The isolation sweep: every operation of `/openapi.json`, asked as project A's admin key for
//! project B's resources and for ones that exist nowhere.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

use super::{Held, Project};

/// A body the operation accepts, so that its handler (not the body's parser) answers.
fn body_for(method: &str, path: &str) -> Option<Value> {
    let body = match (method, path) {
        ("post", "/v1/sessions") => json!({"agent": "ops"}),
        ("post", "/v1/sessions/{id}/messages") => json!({"text": "hello"}),
        ("post", "/v1/sessions/{id}/approvals/{call_id}") => json!({"approved": true}),
        ("put", "/v1/sessions/{id}/memory") => json!({"text": "remember"}),
        ("post", "/v1/sessions/{id}/feedback") => json!({"seq": 2, "rating": "up"}),
        ("post", "/v1/sessions/{id}/fork") => json!({"at": 1}),
        ("post", "/v1/sessions/{id}/schedules") => {
            json!({"key": "k", "delay_secs": 60, "message": {"text": "x"}})
        }
        ("post", "/v1/projects/{project}/keys") => json!({"name": "k", "role": "member"}),
        ("post", "/v1/chat/completions") => {
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
        }
        ("post", _) | ("put", _) | ("patch", _) => json!({}),
        _ => return None,
    };
    Some(body)
}

/// How an operation must answer project A's admin key asking for project B's things.
#[derive(Debug, PartialEq)]
enum Expect {
    /// It names a resource: exactly what a missing one answers.
    NotFound,
    /// The installation's alone: refused to every project key.
    Installation,
    /// A list: A's rows, none of B's.
    List,
    /// Names no resource and lists none (configuration, health, the gateway's calls).
    Nothing,
}

fn classify(method: &str, path: &str) -> Expect {
    let installation = [
        "/v1/cluster",
        "/v1/collections",
        "/v1/datasets",
        "/v1/evals",
        "/v1/mcp/servers",
    ];
    if installation.iter().any(|p| path.starts_with(p))
        || path.starts_with("/v1/gateway/")
        || (path.starts_with("/v1/agents/{agent}/schedules"))
        || (method == "post" && path == "/v1/projects")
        || (method == "patch" && path == "/v1/projects/{project}")
    {
        return Expect::Installation;
    }
    if path.starts_with("/v1/sessions/{id}") || path.starts_with("/v1/projects/{project}") {
        return Expect::NotFound;
    }
    match (method, path) {
        ("get", "/v1/sessions" | "/v1/approvals" | "/v1/feedback" | "/v1/schedules")
        | ("get", "/v1/projects" | "/v1/audit") => Expect::List,
        ("get", "/healthz" | "/readyz" | "/v1/agents" | "/v1/models" | "/v1/auth/oidc")
        | ("post", "/v1/sessions" | "/v1/auth/oidc/token")
        | ("post", "/v1/chat/completions" | "/v1/embeddings" | "/v1/messages" | "/v1/responses") => {
            Expect::Nothing
        }
        _ => panic!(
            "the isolation sweep does not know `{} {path}`: say in classify() whether it names \
             a resource (and check its project), lists rows (scoped), or is the installation's",
            method.to_uppercase()
        ),
    }
}

/// `path` with B's identifiers (`missing`: ones that exist nowhere).
fn fill(path: &str, b: &Project, held: &Held, missing: bool) -> String {
    let fresh = "0190b7e2-0000-7000-8000-000000000000";
    let pick = |real: &str| {
        if missing {
            fresh.to_string()
        } else {
            real.to_string()
        }
    };
    let project_name = if missing { "no-such-project" } else { &b.name };
    path.replace(
        "/v1/sessions/{id}",
        &format!("/v1/sessions/{}", pick(&held.parked)),
    )
    .replace("{call_id}", &held.call_id)
    .replace("{key}", "later")
    .replace("{project}", project_name)
    .replace("{id}", &pick(&b.member.id))
    .replace(['{', '}'], "")
}

/// The WebSocket upgrade's HTTP status with `secret` as the Bearer.
pub(super) async fn ws_status(server: &Stead, path: &str, secret: &str) -> u16 {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}{path}", server.base.replace("http://", "ws://"));
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {secret}").parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => 101,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("{other}"),
    }
}

pub(super) async fn sweep(server: &Stead, a: &Project, a_held: &Held, b: &Project, b_held: &Held) {
    let (_, doc) = server.call("GET", "/openapi.json", None).await;
    let ours = [&a_held.parked, &a_held.answered];
    let theirs = [
        b_held.parked.as_str(),
        b_held.answered.as_str(),
        b.id.as_str(),
        b.member.id.as_str(),
        b.admin.id.as_str(),
    ];
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let methods = item.as_object().unwrap().keys();
        for method in
            methods.filter(|m| matches!(m.as_str(), "get" | "post" | "put" | "patch" | "delete"))
        {
            let expect = classify(method, path);
            let asked = |missing| fill(path, b, b_held, missing);
            if path.ends_with("/ws") {
                for missing in [false, true] {
                    let status = ws_status(server, &asked(missing), &a.admin.secret).await;
                    assert_eq!(status, 404, "GET {path} (missing: {missing})");
                }
                checked += 1;
                continue;
            }
            let call = |target: String| async move {
                server
                    .call_as(
                        &method.to_uppercase(),
                        &target,
                        body_for(method, path),
                        Some(&a.admin.secret),
                    )
                    .await
            };
            let (status, body) = call(asked(false)).await;
            let context = format!("{} {path} → {status} {body}", method.to_uppercase());
            match expect {
                Expect::NotFound => {
                    assert_eq!(status, 404, "{context}");
                    let (missing_status, missing_body) = call(asked(true)).await;
                    assert_eq!(
                        (status, body["error"]["code"].clone()),
                        (missing_status, missing_body["error"]["code"].clone()),
                        "{context}: B's resource must look missing"
                    );
                }
                Expect::Installation => {
                    assert_eq!(status, 403, "{context}");
                    assert_eq!(body["error"]["code"], "forbidden", "{context}");
                }
                Expect::List => {
                    assert_eq!(status, 200, "{context}");
                    let text = body.to_string();
                    for id in theirs {
                        assert!(!text.contains(id), "{context}: holds B's {id}");
                    }
                    if path != "/v1/projects" {
                        assert!(
                            ours.iter().any(|id| text.contains(id.as_str())),
                            "{context}: A's own rows are missing"
                        );
                    }
                }
                Expect::Nothing => {
                    assert!(status < 500, "{context}");
                    let text = body.to_string();
                    for id in theirs {
                        assert!(!text.contains(id), "{context}: holds B's {id}");
                    }
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 60, "the sweep asked only {checked} operations");
}
