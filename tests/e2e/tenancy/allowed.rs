//! Agents and routes allowed per project (docs/tenancy.md, "Agents and routes"): the
//! installation narrows project C to the agent `writer` and the route `alt`; C's keys then see
//! and reach only those (another agent reads as unknown, another route as missing, for its
//! sessions, agents' schedules and gateway calls), a key's own route list is narrowed to its
//! project's, lists left out of a patch stay, `null` allows everything again, unknown names
//! and project keys are refused, and the audit trail holds the change.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

use super::{key, project, Project};

/// Leaves project C (`routes: ["alt"]`, every agent) for the tests after it.
pub(super) async fn a_project_uses_the_agents_and_routes_it_is_allowed(server: &Stead) -> Project {
    let c = project(server, "team-c").await;
    let patch = |body: Value| async move {
        server
            .call("PATCH", "/v1/projects/team-c", Some(body))
            .await
    };
    let (status, narrowed) = patch(json!({"agents": ["writer"], "routes": ["alt"]})).await;
    assert_eq!(status, 200, "{narrowed}");
    assert_eq!(
        (
            &narrowed["agents"],
            &narrowed["routes"],
            &narrowed["budget_usd"]
        ),
        (&json!(["writer"]), &json!(["alt"]), &Value::Null)
    );
    let member = Some(c.member.secret.as_str());
    let as_member = |method: &'static str, path: &'static str, body: Option<Value>| async move {
        server.call_as(method, path, body, member).await
    };

    let (_, agents) = as_member("GET", "/v1/agents", None).await;
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["writer"]);
    let (status, refused) = as_member("POST", "/v1/sessions", Some(json!({"agent": "ops"}))).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (422, Some("unknown_agent")),
        "{refused}"
    );
    let (status, _) = as_member("POST", "/v1/sessions", Some(json!({"agent": "writer"}))).await;
    assert_eq!(status, 201);
    let (status, refused) = as_member(
        "POST",
        "/v1/agents/ops/schedules",
        Some(json!({"key": "k", "delay_secs": 60, "message": {"text": "x"}})),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (422, Some("unknown_agent"))
    );

    let (_, models) = as_member("GET", "/v1/models", None).await;
    assert_eq!(models["data"].as_array().unwrap().len(), 1, "{models}");
    assert_eq!(models["data"][0]["id"], "alt");
    let chat =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let (status, refused) = as_member("POST", "/v1/chat/completions", Some(chat("default"))).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (404, Some("model_not_found")),
        "{refused}"
    );
    // A key of its own limited to `default` keeps nothing its project allows.
    let limited = key(server, "team-c", "member", json!({"routes": ["default"]})).await;
    let (_, models) = server
        .call_as("GET", "/v1/models", None, Some(&limited.secret))
        .await;
    assert_eq!(models["data"], json!([]), "{models}");

    // A patch leaves out what it does not name; `null` allows every agent again.
    let (status, patched) = patch(json!({"agents": null})).await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(
        (&patched["agents"], &patched["routes"]),
        (&Value::Null, &json!(["alt"]))
    );
    // Project caches hold a row up to 5 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let (status, _) = as_member("POST", "/v1/sessions", Some(json!({"agent": "ops"}))).await;
        if status == 201 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "ops still refused: {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // Unknown names, and a project's own admin, are refused; nothing changes.
    let (status, bad) = patch(json!({"routes": ["nope"]})).await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (422, Some("invalid_request"))
    );
    let (status, _) = server
        .call_as(
            "PATCH",
            "/v1/projects/team-c",
            Some(json!({"routes": null})),
            Some(&c.admin.secret),
        )
        .await;
    assert_eq!(status, 403);
    let (_, now) = server.call("GET", "/v1/projects/team-c", None).await;
    assert_eq!(
        (&now["agents"], &now["routes"]),
        (&Value::Null, &json!(["alt"]))
    );

    let (_, trail) = server
        .call(
            "GET",
            "/v1/audit?action=PATCH%20/v1/projects/%7Bproject%7D&limit=10",
            None,
        )
        .await;
    let changes: Vec<&Value> = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["target"] == "/v1/projects/team-c")
        .collect();
    assert_eq!(changes.len(), 2, "{trail}");
    assert!(
        changes
            .iter()
            .any(|e| e["details"] == json!({"agents": ["writer"], "routes": ["alt"]})),
        "{trail}"
    );
    c
}
