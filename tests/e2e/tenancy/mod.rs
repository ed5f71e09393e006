//! Projects and virtual keys through the real binary, on both backends (the model is the
//! upstream double, the approved tool a webhook double): the installation's key makes two
//! projects and keys of every role; each role reaches what docs/tenancy.md says and nothing
//! more; and the isolation sweep, generated from `/openapi.json`, asks every operation as
//! project A's admin key for project B's resources — every one that names a resource answers
//! exactly what a missing one answers (404), every list holds A's rows and none of B's, and an
//! operation the sweep cannot classify fails it, so a new endpoint must be placed. Session
//! tokens stay in their session; a decision names the key that made it; revoking or rotating a
//! key ends the old secret at once.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};
use stead_testkit::webhook::Webhook;

mod alerts;
mod allowed;
mod audit_trail;
mod budgets;
mod parking;
mod rates;
mod sweep;

const ADMIN: &str = "installation-admin-key-0123456789";

async fn upstream() -> Upstream {
    Upstream::respond(|request: &Value| {
        let last = request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or_default();
        if last["role"] == "tool" {
            return Reply::text("Done.");
        }
        let text = last["content"].as_str().unwrap_or_default();
        if text.contains("delete") {
            Reply::tool("delete_rows", json!({ "table": "users" }))
        } else {
            Reply::text("Hello.")
        }
    })
    .await
}

fn config(upstream: &Upstream, webhook: &Webhook) -> String {
    upstream.config(
        "default",
        "model = \"m-default\"",
        &format!(
            "[[routes]]\nname = \"alt\"\ntargets = [{{ provider = \"up\", model = \"m-alt\" }}]\n\n\
             [server]\napi_keys = [\"{ADMIN}\"]\n\n\
             [[agents]]\nname = \"ops\"\nroute = \"default\"\nsystem_prompt = \"You run operations.\"\n\n\
             [[agents.tools]]\nname = \"delete_rows\"\nkind = \"webhook\"\nurl = \"{}\"\n\
             description = \"Deletes rows of a table\"\napproval = \"always\"\n\n\
             [[agents]]\nname = \"writer\"\nroute = \"alt\"\nsystem_prompt = \"You write.\"\n\n\
             [gateway.prices.m-alt]\ninput = 0.0\noutput = 1000.0\n\n\
             [budget_alerts]\nurl = \"{}\"\nshare = 0.5\n",
            webhook.url("/delete_rows"),
            webhook.url("/budget-alerts")
        ),
    )
}

/// A project's keys, by role.
struct Project {
    name: String,
    id: String,
    admin: Key,
    member: Key,
    viewer: Key,
    inference: Key,
}

struct Key {
    id: String,
    secret: String,
}

async fn key(server: &Stead, project: &str, role: &str, extra: Value) -> Key {
    let mut body = json!({ "name": format!("{role} of {project}"), "role": role });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (status, created) = server
        .call("POST", &format!("/v1/projects/{project}/keys"), Some(body))
        .await;
    assert_eq!(status, 201, "{created}");
    let secret = created["key"].as_str().unwrap().to_string();
    assert!(secret.starts_with("stk_") && secret.len() == 47, "{secret}");
    assert_eq!(created["prefix"].as_str().unwrap(), &secret[..12]);
    Key {
        id: created["id"].as_str().unwrap().to_string(),
        secret,
    }
}

async fn project(server: &Stead, name: &str) -> Project {
    let (status, created) = server
        .call("POST", "/v1/projects", Some(json!({ "name": name })))
        .await;
    assert_eq!(status, 201, "{created}");
    Project {
        name: name.into(),
        id: created["id"].as_str().unwrap().to_string(),
        admin: key(server, name, "admin", json!({})).await,
        member: key(server, name, "member", json!({})).await,
        viewer: key(server, name, "viewer", json!({})).await,
        inference: key(server, name, "inference", json!({ "routes": ["alt"] })).await,
    }
}

/// What a project holds for the sweep: a session parked on an approval, one that answered
/// (rated, with a schedule), their ids, and a knowledge collection.
struct Held {
    parked: String,
    parked_token: String,
    call_id: String,
    answered: String,
    collection: String,
    /// The key of the project's schedule of agent `ops`.
    agent_schedule: String,
    /// A dataset with a case from the answered session, and a run of it.
    dataset: String,
    run: String,
}

async fn hold(server: &Stead, project: &Project) -> Held {
    let as_member = Some(project.member.secret.as_str());
    let create = || async {
        let (status, created) = server
            .call_as(
                "POST",
                "/v1/sessions",
                Some(json!({"agent": "ops"})),
                as_member,
            )
            .await;
        assert_eq!(status, 201, "{created}");
        (
            created["id"].as_str().unwrap().to_string(),
            created["token"].as_str().unwrap().to_string(),
        )
    };
    let (parked, parked_token) = create().await;
    let (status, body) = server
        .call_as(
            "POST",
            &format!("/v1/sessions/{parked}/messages"),
            Some(json!({"text": "delete the users"})),
            as_member,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    server.wait_for_status(&parked, "awaiting_approval").await;
    let (_, approvals) = server
        .call_as(
            "GET",
            &format!("/v1/sessions/{parked}/approvals"),
            None,
            as_member,
        )
        .await;
    let call_id = approvals["approvals"][0]["call_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{approvals}"))
        .to_string();

    let (answered, _) = create().await;
    server.say(&answered, "hello").await;
    server.wait_for_status(&answered, "idle").await;
    let reply = server
        .journal(&answered)
        .await
        .into_iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    let (status, body) = server
        .call_as(
            "POST",
            &format!("/v1/sessions/{answered}/feedback"),
            Some(json!({"seq": reply["seq"], "rating": "up"})),
            as_member,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = server
        .call_as(
            "POST",
            &format!("/v1/sessions/{answered}/schedules"),
            Some(json!({"key": "later", "delay_secs": 3600, "message": {"text": "ping"}})),
            as_member,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let collection = format!("{}-docs", project.name);
    let (status, body) = server
        .call_as(
            "POST",
            "/v1/collections",
            Some(json!({"name": collection, "embedding_route": "alt"})),
            as_member,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let agent_schedule = format!("{}-nightly", project.name);
    let (status, body) = server
        .call_as(
            "POST",
            "/v1/agents/ops/schedules",
            Some(json!({"key": agent_schedule, "delay_secs": 3600, "message": {"text": "ping"}})),
            as_member,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let dataset = format!("{}-suite", project.name);
    let as_admin = Some(project.admin.secret.as_str());
    for (path, body) in [
        ("/v1/datasets".to_string(), json!({"name": dataset})),
        (
            format!("/v1/datasets/{dataset}/cases"),
            json!({"session_id": answered}),
        ),
    ] {
        let (status, body) = server.call_as("POST", &path, Some(body), as_admin).await;
        assert_eq!(status, 201, "{path}: {body}");
    }
    let (status, started) = server
        .call_as(
            "POST",
            "/v1/evals",
            Some(json!({"dataset": dataset})),
            as_admin,
        )
        .await;
    assert_eq!(status, 202, "{started}");
    Held {
        parked,
        parked_token,
        call_id,
        answered,
        collection,
        agent_schedule,
        dataset,
        run: started["id"].as_str().unwrap().to_string(),
    }
}

async fn status_as(
    server: &Stead,
    key: &Key,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> u16 {
    server
        .call_as(method, path, body, Some(&key.secret))
        .await
        .0
}

/// Each role reaches what it should, and no more.
async fn roles(server: &Stead, a: &Project, a_held: &Held, b: &Project) {
    let session = format!("/v1/sessions/{}", a_held.answered);
    let say = json!({"text": "hello again"});
    let chat =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    // viewer: reads only.
    assert_eq!(
        status_as(server, &a.viewer, "GET", &session, None).await,
        200
    );
    assert_eq!(
        status_as(server, &a.viewer, "GET", "/v1/sessions", None).await,
        200
    );
    let message = format!("{session}/messages");
    assert_eq!(
        status_as(server, &a.viewer, "POST", &message, Some(say.clone())).await,
        403
    );
    assert_eq!(
        sweep::ws_status(server, &format!("{session}/ws"), &a.viewer.secret).await,
        403
    );
    // inference: the gateway only, and only its routes.
    assert_eq!(
        status_as(server, &a.inference, "GET", "/v1/sessions", None).await,
        403
    );
    let completions = "/v1/chat/completions";
    assert_eq!(
        status_as(server, &a.inference, "POST", completions, Some(chat("alt"))).await,
        200
    );
    let (status, refused) = server
        .call_as(
            "POST",
            completions,
            Some(chat("default")),
            Some(&a.inference.secret),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );
    let (_, models) = server
        .call_as("GET", "/v1/models", None, Some(&a.inference.secret))
        .await;
    assert_eq!(models["data"].as_array().unwrap().len(), 1, "{models}");
    assert_eq!(models["data"][0]["id"], "alt");
    // member: sessions and the gateway, not the project's keys.
    assert_eq!(
        status_as(server, &a.member, "POST", &message, Some(say)).await,
        202
    );
    assert_eq!(
        status_as(
            server,
            &a.member,
            "POST",
            completions,
            Some(chat("default"))
        )
        .await,
        200
    );
    let keys = format!("/v1/projects/{}/keys", a.name);
    assert_eq!(status_as(server, &a.member, "GET", &keys, None).await, 403);
    // admin: its project's keys, no other project, and not the installation's endpoints.
    let (status, listed) = server
        .call_as("GET", &keys, None, Some(&a.admin.secret))
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["keys"].as_array().unwrap().len(), 4, "{listed}");
    for secret in [
        &a.admin.secret,
        &a.member.secret,
        &a.viewer.secret,
        &a.inference.secret,
    ] {
        assert!(
            !listed.to_string().contains(secret.as_str()),
            "a secret is listed"
        );
    }
    for k in listed["keys"].as_array().unwrap() {
        assert!(k.get("key").is_none() && k.get("digest").is_none(), "{k}");
    }
    let other = format!("/v1/projects/{}/keys", b.name);
    assert_eq!(status_as(server, &a.admin, "GET", &other, None).await, 404);
    let (_, projects) = server
        .call_as("GET", "/v1/projects", None, Some(&a.admin.secret))
        .await;
    assert_eq!(
        projects["projects"],
        json!([{
            "id": a.id,
            "name": a.name,
            "budget_usd": null,
            "budget_period_secs": null,
            "agents": null,
            "routes": null,
            "created_at": projects["projects"][0]["created_at"],
        }])
    );
    assert_eq!(
        status_as(
            server,
            &a.admin,
            "POST",
            "/v1/projects",
            Some(json!({"name": "c"}))
        )
        .await,
        403
    );
    // The installation sees both projects.
    let (_, all) = server.call("GET", "/v1/projects", None).await;
    let names: Vec<&str> = all["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["default", a.name.as_str(), b.name.as_str()]);
    // A page at a time, by name.
    let (_, first) = server.call("GET", "/v1/projects?limit=2", None).await;
    assert_eq!(first["projects"].as_array().unwrap().len(), 2);
    assert_eq!(first["next_cursor"], a.name.as_str());
    let (_, rest) = server
        .call(
            "GET",
            &format!("/v1/projects?limit=2&cursor={}", a.name),
            None,
        )
        .await;
    assert_eq!(rest["projects"][0]["name"], b.name.as_str());
    assert_eq!(rest["next_cursor"], Value::Null);
}

async fn projects_keep_to_themselves(database_url: Option<&str>) {
    let upstream = upstream().await;
    let webhook = Webhook::start().await;
    let mut server = Stead::start(&config(&upstream, &webhook), database_url);
    server.api_key = Some(ADMIN.into());

    // Projects: names are checked and unique.
    let (status, bad) = server
        .call("POST", "/v1/projects", Some(json!({"name": "a b"})))
        .await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (422, Some("invalid_request"))
    );
    let a = project(&server, "team-a").await;
    let b = project(&server, "team-b").await;
    let (status, dup) = server
        .call("POST", "/v1/projects", Some(json!({"name": "team-a"})))
        .await;
    assert_eq!(
        (status, dup["error"]["code"].as_str()),
        (409, Some("project_exists"))
    );

    let a_held = hold(&server, &a).await;
    let b_held = hold(&server, &b).await;
    sweep::sweep(&server, &a, &a_held, &b, &b_held).await;
    sweep::request_log_is_scoped(&server, &a, &a_held, &b_held).await;
    sweep::collection_names_are_per_project(&server, &a, &b).await;
    sweep::an_agent_schedule_starts_sessions_in_its_project(&server, &a, &b).await;
    roles(&server, &a, &a_held, &b).await;
    let c = allowed::a_project_uses_the_agents_and_routes_it_is_allowed(&server).await;
    rates::a_keys_own_rate_limit_holds(&server, &c).await;

    budgets::budgets(&server, &a).await;
    parking::a_spent_budget_parks_the_turn(&server, &a, database_url).await;
    alerts::a_budget_alerts_once_at_its_share(&server, &a, &webhook).await;

    // A session token stays in its session, whatever project.
    let (status, _) = server
        .call_as(
            "GET",
            &format!("/v1/sessions/{}", b_held.parked),
            None,
            Some(&a_held.parked_token),
        )
        .await;
    assert_eq!(status, 403);

    // A decision names the key that made it.
    let (status, decided) = server
        .call_as(
            "POST",
            &format!(
                "/v1/sessions/{}/approvals/{}",
                a_held.parked, a_held.call_id
            ),
            Some(json!({"approved": true})),
            Some(&a.member.secret),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let journal = server.journal(&a_held.parked).await;
    let decision = journal
        .iter()
        .find(|e| e["kind"] == "approval_decided")
        .unwrap();
    assert_eq!(
        decision["payload"]["decided_by"],
        format!("project_key:{}", a.member.id)
    );

    // Revoked: refused at once; rotated: the old secret refused, the new one works.
    let session = format!("/v1/sessions/{}", a_held.answered);
    let (status, _) = server
        .call_as(
            "DELETE",
            &format!("/v1/projects/{}/keys/{}", a.name, a.viewer.id),
            None,
            Some(&a.admin.secret),
        )
        .await;
    assert_eq!(status, 200);
    let (status, refused) = server
        .call_as("GET", &session, None, Some(&a.viewer.secret))
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (401, Some("invalid_credentials"))
    );
    let (status, rotated) = server
        .call_as(
            "POST",
            &format!("/v1/projects/{}/keys/{}/rotate", a.name, a.member.id),
            None,
            Some(&a.admin.secret),
        )
        .await;
    assert_eq!(status, 201, "{rotated}");
    assert_eq!(rotated["rotated_from"], a.member.id.as_str());
    assert_eq!(rotated["role"], "member");
    assert_eq!(
        status_as(&server, &a.member, "GET", &session, None).await,
        401
    );
    let (status, _) = server
        .call_as("GET", &session, None, rotated["key"].as_str())
        .await;
    assert_eq!(status, 200);
    // A key of another project cannot be revoked through this one.
    let (status, _) = server
        .call_as(
            "DELETE",
            &format!("/v1/projects/{}/keys/{}", a.name, b.member.id),
            None,
            Some(&a.admin.secret),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(
        status_as(
            &server,
            &b.member,
            "GET",
            &format!("/v1/sessions/{}", b_held.answered),
            None
        )
        .await,
        200
    );
    audit_trail::trail(&server, &a, &b).await;
    server.signal(libc::SIGTERM);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_keep_to_themselves_on_sqlite() {
    projects_keep_to_themselves(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_keep_to_themselves_on_postgres() {
    let scratch = stead_testkit::db::scratch_postgres("stead_tenancy").await;
    projects_keep_to_themselves(Some(scratch.url())).await;
}
