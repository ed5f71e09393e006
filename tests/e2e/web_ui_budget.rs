//! Budget approvals in a real browser: `web-ui/e2e/budget.mjs` drives Debian's Chromium against
//! a running `stead serve` with API keys, a priced route and a project whose member key has a
//! budget smaller than one model call may cost. The member's session parks; with the project
//! admin's key, the session page says what it waits for, the inbox shows the budget, the amount
//! needed and an overspend field; approving it lets the turn finish with the model's reply; the
//! audit page shows the decision, and the spend page the call charged to the key.
//! Screenshots go to `{target}/tmp/web-ui-screenshots/` beside the other browser tests'.

use std::path::PathBuf;

use serde_json::json;
use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

const ADMIN: &str = "installation-admin-key-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_ui_decides_a_budget_approval() {
    let up = Upstream::start(vec![], Reply::text("Leaves fall, light and slow.")).await;
    // Up to 4,096 tokens at $1,000 per million: a call may cost $4.096.
    let config = up.config(
        "default",
        r#"model = "m-priced""#,
        &format!(
            "[server]\napi_keys = [\"{ADMIN}\"]\n\n\
             [[agents]]\nname = \"writer\"\nroute = \"default\"\nsystem_prompt = \"You write.\"\n\n\
             [gateway.prices.m-priced]\ninput = 0.0\noutput = 1000.0\n"
        ),
    );
    let mut server = Stead::start(&config, None);
    server.api_key = Some(ADMIN.into());
    let (status, _) = server
        .call("POST", "/v1/projects", Some(json!({"name": "acme"})))
        .await;
    assert_eq!(status, 201);
    // The project may use the agent `writer` only (the spend page says so).
    let (status, granted) = server
        .call(
            "PATCH",
            "/v1/projects/acme",
            Some(json!({"agents": ["writer"]})),
        )
        .await;
    assert_eq!(status, 200, "{granted}");
    let key = |body: serde_json::Value| {
        let server = &server;
        async move {
            let (status, created) = server
                .call("POST", "/v1/projects/acme/keys", Some(body))
                .await;
            assert_eq!(status, 201, "{created}");
            created["key"].as_str().unwrap().to_string()
        }
    };
    let admin = key(json!({"name": "acme admin", "role": "admin"})).await;
    let member = key(json!({"name": "tight", "role": "member", "budget_usd": 1.0})).await;
    let (status, session) = server
        .call_as(
            "POST",
            "/v1/sessions",
            Some(json!({"agent": "writer"})),
            Some(&member),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_string();
    let (status, waited) = server
        .call_as(
            "POST",
            &format!("/v1/sessions/{id}/messages?wait=true"),
            Some(json!({"text": "Write a line about autumn."})),
            Some(&member),
        )
        .await;
    assert_eq!(
        (status, waited["status"].as_str()),
        (200, Some("awaiting_approval"))
    );

    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    let shots = [
        "30-budget-wait",
        "31-budget-inbox",
        "32-budget-approved",
        "33-audit",
        "34-spend",
    ];
    external::browser(
        "budget.mjs",
        &[&server.base, &out.to_string_lossy(), &id],
        &[("STEAD_KEY", &admin)],
        &out,
        &shots,
    )
    .await;
    // What the browser decided is what the journal holds.
    let journal = server.journal(&id).await;
    let decided = journal
        .iter()
        .find(|e| e["kind"] == "budget_approval_decided")
        .expect("decided from the inbox");
    assert_eq!(decided["payload"]["approved"], true);
    assert_eq!(decided["payload"]["overspend_usd"], 3.1);
    assert!(decided["payload"]["decided_by"]
        .as_str()
        .unwrap()
        .starts_with("project_key:"));
    server.signal(libc::SIGTERM);
}
