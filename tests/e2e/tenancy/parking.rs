//! Budget exhaustion parks instead of failing (docs/tenancy.md, "Budget approvals"), through
//! the real binary: a session of a key whose budget cannot fit its model call waits on a
//! budget approval that the inbox lists with the amount needed; only the installation or the
//! project's admin may decide it; an approved overspend makes the same model call again and the
//! turn ends as it would have; a rejected one fails the turn with the reason; and the decision
//! check replays the journal without re-deciding.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

use super::Project;

/// The kinds of a journal, in order.
fn kinds(journal: &[Value]) -> Vec<&str> {
    journal.iter().filter_map(|e| e["kind"].as_str()).collect()
}

/// The session's pending approvals (as the installation sees them), once it has parked.
async fn parked(server: &Stead, id: &str) -> Vec<Value> {
    server.wait_for_status(id, "awaiting_approval").await;
    let (status, tree) = server
        .call("GET", &format!("/v1/sessions/{id}/approvals"), None)
        .await;
    assert_eq!(status, 200, "{tree}");
    tree["approvals"].as_array().unwrap().clone()
}

pub(super) async fn a_spent_budget_parks_the_turn(
    server: &Stead,
    a: &Project,
    database_url: Option<&str>,
) {
    // A member key with $1; a call of the writer's route may cost up to $4.096 (4,096 tokens
    // at $1,000 per million).
    let (status, created) = server
        .call(
            "POST",
            &format!("/v1/projects/{}/keys", a.name),
            Some(json!({"name": "tight", "role": "member", "budget_usd": 1.0})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let tight = created["key"].as_str().unwrap().to_string();
    let as_tight = Some(tight.as_str());
    let (status, session) = server
        .call_as(
            "POST",
            "/v1/sessions",
            Some(json!({"agent": "writer"})),
            as_tight,
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_string();
    let token = session["token"].as_str().unwrap().to_string();
    let messages = format!("/v1/sessions/{id}/messages?wait=true");
    let (status, waited) = server
        .call_as(
            "POST",
            &messages,
            Some(json!({"text": "write a haiku"})),
            as_tight,
        )
        .await;
    assert_eq!(status, 200, "{waited}");
    assert_eq!(waited["status"], "awaiting_approval", "{waited}");

    // It waits on the key's budget, with the amount needed, in the inbox of the project's
    // admin (and not in another project's).
    let approvals = parked(server, &id).await;
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    let approval = &approvals[0];
    assert_eq!(approval["kind"], "budget");
    assert_eq!(approval["budget"]["name"], "key `tight`");
    let needed = approval["budget"]["needed_usd"].as_f64().unwrap();
    assert!((needed - 3.096).abs() < 1e-6, "{approval}");
    let call_id = approval["call_id"].as_str().unwrap().to_string();
    let (status, inbox) = server
        .call_as("GET", "/v1/approvals", None, Some(&a.admin.secret))
        .await;
    assert_eq!(status, 200, "{inbox}");
    assert!(
        inbox["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["session_id"] == id.as_str() && p["kind"] == "budget"),
        "{inbox}"
    );

    // Neither the key that spends nor the session's token may grant itself money; a bad
    // amount is refused; none of it is journaled.
    let decide = format!("/v1/sessions/{id}/approvals/{call_id}");
    let before = server.journal(&id).await;
    let approve = json!({"approved": true, "overspend_usd": 5.0});
    for credential in [tight.as_str(), token.as_str()] {
        let (status, refused) = server
            .call_as("POST", &decide, Some(approve.clone()), Some(credential))
            .await;
        assert_eq!(status, 403, "{refused}");
    }
    let (status, refused) = server
        .call_as(
            "POST",
            &decide,
            Some(json!({"approved": true, "overspend_usd": -1})),
            Some(&a.admin.secret),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (422, Some("invalid_request"))
    );
    assert_eq!(server.journal(&id).await, before);

    // The project's admin approves an overspend: the same model call is made again, and the
    // turn ends with the model's reply.
    let (status, decided) = server
        .call_as("POST", &decide, Some(approve), Some(&a.admin.secret))
        .await;
    assert_eq!(status, 200, "{decided}");
    server.wait_for_status(&id, "idle").await;
    let journal = server.journal(&id).await;
    assert_eq!(
        kinds(&journal)[before.len()..],
        [
            "budget_approval_decided",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    let decision = &journal[before.len()]["payload"];
    assert_eq!(
        (
            decision["approved"].clone(),
            decision["overspend_usd"].clone(),
            decision["decided_by"].clone()
        ),
        (
            json!(true),
            json!(5.0),
            json!(format!("project_key:{}", a.admin.id))
        )
    );
    let finished = &journal[before.len() + 1]["payload"];
    assert_eq!(finished["call_id"], call_id.as_str());
    assert_eq!(journal[before.len() + 2]["payload"]["text"], "Hello.");
    // One model call started for both tries.
    let started = kinds(&journal)
        .iter()
        .filter(|k| **k == "model_call_started")
        .count();
    assert_eq!(started, 1);

    // The next turn parks again (the overspend was for that call); the installation rejects
    // it, and the turn fails with the reason.
    let (status, waited) = server
        .call_as(
            "POST",
            &messages,
            Some(json!({"text": "another"})),
            as_tight,
        )
        .await;
    assert_eq!(
        (status, waited["status"].as_str()),
        (200, Some("awaiting_approval"))
    );
    let approvals = parked(server, &id).await;
    let call_id = approvals[0]["call_id"].as_str().unwrap();
    let (status, _) = server
        .call(
            "POST",
            &format!("/v1/sessions/{id}/approvals/{call_id}"),
            Some(json!({"approved": false, "reason": "over plan"})),
        )
        .await;
    assert_eq!(status, 200);
    server.wait_for_status(&id, "idle").await;
    let journal = server.journal(&id).await;
    let failed = journal
        .iter()
        .rev()
        .find(|e| e["kind"] == "model_call_failed")
        .unwrap();
    let error = failed["payload"]["error"].as_str().unwrap();
    assert!(
        error.contains("key `tight`") && error.contains("over plan"),
        "{error}"
    );

    // The project's spend: the approved call is charged to the key, in its session, and the
    // key's budget shows it spent past its amount.
    // (The request log is written in batches: read until the call is in it.)
    let spend = format!("/v1/projects/{}/spend?days=7", a.name);
    let mut report = Value::Null;
    for _ in 0..100 {
        let (status, read) = server
            .call_as("GET", &spend, None, Some(&a.admin.secret))
            .await;
        assert_eq!(status, 200, "{read}");
        report = read;
        let tights = report["by_key"].as_array().unwrap().iter();
        if tights
            .filter(|l| l["name"] == "tight")
            .any(|l| l["requests"] == 1)
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let line = |list: &str, name: &str| {
        report[list]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {list}: {report}"))
    };
    // The project's other keys spent on `alt` too (the budget test's): the key's line is the
    // session's call, and every call is in the total and over time.
    let tight = line("by_key", "tight");
    assert_eq!(tight["requests"], 1);
    let cost = tight["cost"].as_f64().unwrap();
    assert!(cost > 0.0, "{report}");
    let session = line("top_sessions", &id);
    assert_eq!(
        (session["requests"].clone(), session["cost"].as_f64()),
        (json!(1), Some(cost))
    );
    let total = report["total"]["cost"].as_f64().unwrap();
    assert!(total >= cost && line("by_route", "alt")["cost"].as_f64() == Some(total));
    let over_time: f64 = report["over_time"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cost"].as_f64().unwrap())
        .sum();
    assert!((over_time - total).abs() < 1e-9, "{report}");
    let budget = report["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "key `tight`")
        .cloned()
        .unwrap();
    assert_eq!(budget["usd"], 1.0);
    assert!((budget["spent"].as_f64().unwrap() - cost).abs() < 1e-9);
    let (status, _) = server.call_as("GET", &spend, None, as_tight).await;
    assert_eq!(status, 403, "a member does not read the project's spend");
    let (status, refused) = server
        .call(
            "GET",
            &format!("/v1/projects/{}/spend?days=0", a.name),
            None,
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );

    // The default project is the installation's: its spend holds the configured key's calls
    // and none of a project's key.
    let chat =
        json!({"model": "alt", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let (status, _) = server
        .call("POST", "/v1/chat/completions", Some(chat))
        .await;
    assert_eq!(status, 200);
    let mut installation = Value::Null;
    for _ in 0..100 {
        let (status, read) = server
            .call("GET", "/v1/projects/default/spend?days=1", None)
            .await;
        assert_eq!(status, 200, "{read}");
        installation = read;
        if installation["total"]["requests"].as_u64() > Some(0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let keys = installation["by_key"].as_array().unwrap();
    assert!(!keys.is_empty(), "{installation}");
    assert!(
        keys.iter()
            .all(|l| l["name"] != "tight"
                && !l["name"].as_str().unwrap_or_default().starts_with("key:")),
        "{installation}"
    );

    // The decision check re-decides every step from the journal alone.
    let mut check = stead_testkit::stead::command();
    if let Some(url) = database_url {
        check.env("DATABASE_URL", url);
    }
    let output = check
        .current_dir(server.data.path())
        .args(["--config", "stead.toml", "--data-dir"])
        .arg(server.data.path())
        .args(["replay", "check", &id])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 ok, 0 diverged"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
