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
        ("put", "/v1/collections/{name}/documents/{id}") => json!({"text": "words"}),
        ("post", "/v1/collections/{name}/query") => json!({"text": "words"}),
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
    let installation = ["/v1/cluster", "/v1/mcp/servers"];
    if installation.iter().any(|p| path.starts_with(p))
        || (method == "post" && path == "/v1/projects")
        || (method == "patch" && path == "/v1/projects/{project}")
    {
        return Expect::Installation;
    }
    if path.starts_with("/v1/sessions/{id}")
        || path.starts_with("/v1/projects/{project}")
        || path.starts_with("/v1/collections/{name}")
        || path.starts_with("/v1/agents/{agent}/schedules/{key}")
        || path.starts_with("/v1/datasets/{name}")
        || path.starts_with("/v1/evals/{")
        || path.starts_with("/v1/artifacts/{")
    {
        return Expect::NotFound;
    }
    match (method, path) {
        ("get", "/v1/sessions" | "/v1/approvals" | "/v1/feedback" | "/v1/schedules")
        | ("get", "/v1/projects" | "/v1/audit" | "/v1/gateway/logs" | "/v1/collections")
        | ("get", "/v1/agents/{agent}/schedules" | "/v1/datasets" | "/v1/evals") => Expect::List,
        // Figures without ids: checked against the log A sees, after the sweep.
        ("get", "/v1/gateway/stats") => Expect::Nothing,
        ("get", "/healthz" | "/readyz" | "/v1/agents" | "/v1/models" | "/v1/auth/oidc")
        | ("post", "/v1/sessions" | "/v1/auth/oidc/token" | "/v1/collections" | "/v1/artifacts")
        | ("post", "/v1/agents/{agent}/schedules" | "/v1/datasets" | "/v1/evals")
        | ("post", "/v1/chat/completions" | "/v1/embeddings" | "/v1/messages" | "/v1/responses")
        | ("post", "/v1/audio/transcriptions") => Expect::Nothing,
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
    .replace("{agent}", "ops")
    .replace(
        "/schedules/{key}",
        &match (path.starts_with("/v1/agents/"), missing) {
            (true, false) => format!("/schedules/{}", held.agent_schedule),
            (true, true) => "/schedules/no-such-schedule".to_string(),
            (false, _) => "/schedules/later".to_string(),
        },
    )
    .replace(
        "{name}",
        match (path.starts_with("/v1/datasets/"), missing) {
            (_, true) => "no-such-name",
            (true, false) => &held.dataset,
            (false, false) => &held.collection,
        },
    )
    .replace("/v1/evals/{id}", &format!("/v1/evals/{}", pick(&held.run)))
    .replace("{a}", &pick(&held.run))
    .replace("{b}", &pick(&held.run))
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
    let ours = [
        &a_held.parked,
        &a_held.answered,
        &a_held.collection,
        &a_held.agent_schedule,
        &a_held.dataset,
        &a_held.run,
    ];
    let theirs = [
        b_held.parked.as_str(),
        b_held.answered.as_str(),
        b_held.collection.as_str(),
        b_held.agent_schedule.as_str(),
        b_held.dataset.as_str(),
        b_held.run.as_str(),
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

/// The request log as project A's keys read it: A's calls only, and its statistics count the
/// same rows; the installation reads both projects' calls.
pub(super) async fn request_log_is_scoped(
    server: &Stead,
    a: &Project,
    a_held: &Held,
    b_held: &Held,
) {
    let read = |path: &'static str, secret: Option<String>| async move {
        let (status, body) = server.call_as("GET", path, None, secret.as_deref()).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    };
    let sessions = |page: &Value| -> Vec<String> {
        page["logs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|row| row["session_id"].as_str().map(String::from))
            .collect()
    };
    // The log is written in batches: a row of A's may land between the two reads, so they
    // are read again until a pair agrees (a statistic that counted another project's rows
    // never would).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let ours = read("/v1/gateway/logs?limit=1000", Some(a.admin.secret.clone())).await;
        let ours_sessions = sessions(&ours);
        assert!(ours_sessions.contains(&a_held.answered), "{ours}");
        assert!(!ours_sessions.contains(&b_held.answered), "{ours}");
        let stats = read("/v1/gateway/stats", Some(a.viewer.secret.clone())).await;
        let counted: u64 = stats["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["count"].as_u64().unwrap())
            .sum();
        let listed = ours["logs"].as_array().unwrap().len() as u64;
        if counted == listed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A's statistics count {counted} calls, its log lists {listed}: {stats} {ours}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The installation sees both projects' rows (the log is written in batches: a row may
    // land a moment after its answer).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let all = read(
            "/v1/gateway/logs?limit=1000",
            Some(super::ADMIN.to_string()),
        )
        .await;
        let all_sessions = sessions(&all);
        if all_sessions.contains(&a_held.answered) && all_sessions.contains(&b_held.answered) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{all}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Collection names are unique within a project, not across: both projects make `handbook`
/// (each a new collection), and one's deletion leaves the other's.
pub(super) async fn collection_names_are_per_project(server: &Stead, a: &Project, b: &Project) {
    for project in [a, b] {
        let (status, body) = server
            .call_as(
                "POST",
                "/v1/collections",
                Some(json!({"name": "handbook", "embedding_route": "alt"})),
                Some(&project.member.secret),
            )
            .await;
        assert_eq!(status, 201, "{}: {body}", project.name);
    }
    let (status, _) = server
        .call_as(
            "DELETE",
            "/v1/collections/handbook",
            None,
            Some(&a.member.secret),
        )
        .await;
    assert_eq!(status, 204);
    let (status, body) = server
        .call_as(
            "GET",
            "/v1/collections/handbook",
            None,
            Some(&b.viewer.secret),
        )
        .await;
    assert_eq!(
        (status, body["name"].as_str()),
        (200, Some("handbook")),
        "{body}"
    );
    let (status, body) = server
        .call_as(
            "GET",
            "/v1/collections/handbook",
            None,
            Some(&a.viewer.secret),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("collection_not_found")),
        "{body}"
    );
    // A viewer reads, and does not write.
    let (status, _) = server
        .call_as(
            "DELETE",
            "/v1/collections/handbook",
            None,
            Some(&b.viewer.secret),
        )
        .await;
    assert_eq!(status, 403);
}

/// A project's schedule of an installation's agent starts its sessions in that project: A's
/// member schedules `ops` a second from now under a key B also uses; the session it starts is
/// listed to A (made by A's member's key), not to B.
pub(super) async fn an_agent_schedule_starts_sessions_in_its_project(
    server: &Stead,
    a: &Project,
    b: &Project,
) {
    for (project, delay) in [(a, 1), (b, 3600)] {
        let (status, body) = server
            .call_as(
                "POST",
                "/v1/agents/ops/schedules",
                Some(json!({"key": "soon", "delay_secs": delay, "message": {"text": "hello"}})),
                Some(&project.member.secret),
            )
            .await;
        assert_eq!(status, 201, "{}: {body}", project.name);
    }
    let started = |listed: &Value| -> Vec<Value> {
        listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["metadata"]["schedule"]["key"] == "soon")
            .cloned()
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let session = loop {
        let (_, listed) = server
            .call_as("GET", "/v1/sessions?limit=100", None, Some(&a.admin.secret))
            .await;
        if let Some(found) = started(&listed).pop() {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A's schedule started no session in A: {listed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let id = session["id"].as_str().unwrap();
    let journal = server.journal(id).await;
    assert_eq!(
        journal[0]["payload"]["principal"],
        format!("key:{}", a.member.id),
        "{journal:?}"
    );
    let (_, theirs) = server
        .call_as("GET", "/v1/sessions?limit=100", None, Some(&b.admin.secret))
        .await;
    assert!(started(&theirs).is_empty(), "{theirs}");
    let (status, _) = server
        .call_as(
            "GET",
            &format!("/v1/sessions/{id}"),
            None,
            Some(&b.admin.secret),
        )
        .await;
    assert_eq!(status, 404);
}
