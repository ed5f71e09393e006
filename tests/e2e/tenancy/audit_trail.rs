//! The audit trail of everything the tenancy test did (docs/audit.md): the installation sees
//! every act — projects and keys made, sessions created, decisions (a budget's overspend too),
//! revocations and rotations — each with who, what, where from and the facts its handler
//! added; a project's admin sees its project's acts only; no one else sees any; filters work;
//! and no secret is in it.

use serde_json::Value;
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

use super::{Project, ADMIN};

fn entries(page: &Value) -> Vec<Value> {
    page["entries"].as_array().unwrap().clone()
}

/// The first act of `action` whose details say `name = value`.
fn find<'a>(all: &'a [Value], action: &str, name: &str, value: &str) -> &'a Value {
    all.iter()
        .find(|e| e["action"] == action && e["details"][name] == value)
        .unwrap_or_else(|| panic!("no `{action}` with {name} = {value} in {all:#?}"))
}

pub(super) async fn trail(server: &Stead, a: &Project, b: &Project) {
    let (status, page) = server.call("GET", "/v1/audit?limit=500", None).await;
    assert_eq!(status, 200, "{page}");
    let all = entries(&page);
    let text = page.to_string();
    for secret in [
        ADMIN,
        &a.admin.secret,
        &a.member.secret,
        &b.admin.secret,
        &b.member.secret,
    ] {
        assert!(!text.contains(secret), "a secret in the audit trail");
    }
    assert!(!text.contains("stk_"), "a key's secret in the audit trail");
    assert!(all.iter().all(|e| e["source"] == "127.0.0.1"), "{all:#?}");

    let made = find(&all, "POST /v1/projects", "name", "team-a");
    assert_eq!(made["project_id"], a.id.as_str());
    assert!(made["actor"].as_str().unwrap().starts_with("api_key:"));
    let key = find(
        &all,
        "POST /v1/projects/{project}/keys",
        "key_id",
        &a.admin.id,
    );
    assert_eq!(
        (key["target"].as_str(), key["details"]["role"].as_str()),
        (Some("/v1/projects/team-a/keys"), Some("admin"))
    );
    assert_eq!(key["project_id"], a.id.as_str());
    let revoked = find(
        &all,
        "DELETE /v1/projects/{project}/keys/{id}",
        "key_id",
        &a.viewer.id,
    );
    assert_eq!(revoked["actor"], format!("project_key:{}", a.admin.id));
    let rotated = find(
        &all,
        "POST /v1/projects/{project}/keys/{id}/rotate",
        "replaced",
        &a.member.id,
    );
    assert_eq!(rotated["status"], 201);
    let decisions: Vec<&Value> = all
        .iter()
        .filter(|e| e["action"] == "POST /v1/sessions/{id}/approvals/{call_id}")
        .collect();
    assert!(
        decisions
            .iter()
            .any(|e| e["actor"] == format!("project_key:{}", a.member.id)
                && e["details"]["approved"] == true),
        "{decisions:#?}"
    );
    let overspend = decisions
        .iter()
        .find(|e| e["details"]["overspend_usd"] == 5.0)
        .expect("the budget decision");
    assert_eq!(overspend["actor"], format!("project_key:{}", a.admin.id));
    assert_eq!(overspend["project_id"], a.id.as_str());
    // Refused requests are not acts.
    assert!(all.iter().all(|e| e["status"].as_u64().unwrap() < 300));

    // A's admin sees A's acts only; a member sees none.
    let (status, page) = server
        .call_as("GET", "/v1/audit?limit=500", None, Some(&a.admin.secret))
        .await;
    assert_eq!(status, 200, "{page}");
    let of_a = entries(&page);
    assert!(!of_a.is_empty());
    assert!(of_a.iter().all(|e| e["project_id"] == a.id.as_str()));
    assert!(of_a.len() < all.len());
    let (status, _) = server
        .call_as("GET", "/v1/audit", None, Some(&b.member.secret))
        .await;
    assert_eq!(status, 403);
    // Filters: one actor's acts, a page at a time.
    let actor = format!("project_key:{}", a.admin.id);
    let (status, page) = server
        .call("GET", &format!("/v1/audit?actor={actor}&limit=2"), None)
        .await;
    assert_eq!(status, 200, "{page}");
    let first = entries(&page);
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|e| e["actor"] == actor.as_str()));
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let (_, next) = server
        .call(
            "GET",
            &format!("/v1/audit?actor={actor}&limit=2&before={cursor}"),
            None,
        )
        .await;
    let second = entries(&next);
    assert!(!second.is_empty());
    assert!(second
        .iter()
        .all(|e| e["id"] != first[0]["id"] && e["id"] != first[1]["id"]));
}
