//! Budgets through the real binary: a key's own and its project's, refusals that name them,
//! who may set them, keys made by keys; and the short run of `stead bench tenancy`.

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

use super::Project;

/// A key whose budget is spent is refused naming it; raising the budget lets it call; a project
/// whose budget is spent refuses every key of it, naming the project.
pub(super) async fn budgets(server: &Stead, a: &Project) {
    let chat =
        json!({"model": "alt", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let (status, created) = server
        .call(
            "POST",
            &format!("/v1/projects/{}/keys", a.name),
            Some(json!({"name": "broke", "role": "inference", "budget_usd": 0.0})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (id, broke) = (
        created["id"].as_str().unwrap(),
        created["key"].as_str().unwrap(),
    );
    let completions = "/v1/chat/completions";
    let (status, refused) = server
        .call_as("POST", completions, Some(chat.clone()), Some(broke))
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (429, Some("budget_exceeded"))
    );
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("key `broke`"), "{message}");
    let budget = format!("/v1/projects/{}/keys/{id}", a.name);
    let (status, bad) = server
        .call_as(
            "PATCH",
            &budget,
            Some(json!({"budget_usd": -1})),
            Some(&a.admin.secret),
        )
        .await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (422, Some("invalid_request"))
    );
    let (status, raised) = server
        .call_as(
            "PATCH",
            &budget,
            Some(json!({"budget_usd": 1.0, "budget_period": "30d"})),
            Some(&a.admin.secret),
        )
        .await;
    assert_eq!(status, 200, "{raised}");
    assert_eq!(
        (
            raised["budget_usd"].as_f64(),
            raised["budget_period_secs"].as_i64()
        ),
        (Some(1.0), Some(2_592_000))
    );
    let (status, body) = server
        .call_as("POST", completions, Some(chat.clone()), Some(broke))
        .await;
    assert_eq!(status, 200, "{body}");
    // The project's budget caps what its admins hand out: the installation sets it, and it
    // holds for every key of the project.
    let project = format!("/v1/projects/{}", a.name);
    let zero = json!({"budget_usd": 0.0});
    let (status, _) = server
        .call_as("PATCH", &project, Some(zero.clone()), Some(&a.admin.secret))
        .await;
    assert_eq!(status, 403);
    let (status, set) = server.call("PATCH", &project, Some(zero)).await;
    assert_eq!((status, set["budget_usd"].as_f64()), (200, Some(0.0)));
    let (status, refused) = server
        .call_as("POST", completions, Some(chat), Some(broke))
        .await;
    assert_eq!(status, 429, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("project `{}`", a.name)),
        "{message}"
    );
    let (status, _) = server
        .call("PATCH", &project, Some(json!({"budget_usd": null})))
        .await;
    assert_eq!(status, 200);

    // A key an admin key makes reaches no further than the admin's: a route-limited admin's
    // key gets its routes, and may not ask for others.
    let (status, limited) = server
        .call(
            "POST",
            &format!("/v1/projects/{}/keys", a.name),
            Some(json!({"name": "limited admin", "role": "admin", "routes": ["alt"]})),
        )
        .await;
    assert_eq!(status, 201, "{limited}");
    let limited = limited["key"].as_str().unwrap();
    let keys = format!("/v1/projects/{}/keys", a.name);
    let (status, made) = server
        .call_as(
            "POST",
            &keys,
            Some(json!({"name": "child", "role": "member"})),
            Some(limited),
        )
        .await;
    assert_eq!((status, made["routes"].clone()), (201, json!(["alt"])));
    let wider = json!({"name": "wider", "role": "member", "routes": ["default"]});
    let (status, _) = server
        .call_as("POST", &keys, Some(wider), Some(limited))
        .await;
    assert_eq!(status, 422);
}

/// The short run of `stead bench tenancy` (the full one's figures are in docs/benchmarks.md):
/// it authenticates every key it made, reads each key's two budgets, and reports every figure
/// at both scales.
#[test]
fn the_tenancy_bench_runs_short() {
    let data = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(stead_testkit::stead::binary())
        .args(["bench", "tenancy", "--keys", "200", "--projects", "20"])
        .args(["--samples", "300", "--json", "--data-dir"])
        .arg(data.path())
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["full"]["keys"], 200);
    assert_eq!(report["small"]["projects"], 1);
    for scale in ["small", "full"] {
        for figure in [
            "config_key_auth",
            "virtual_key_auth_cached",
            "virtual_key_auth_cache_miss",
            "budgets_of_a_key_cached",
            "ledger_reserve_and_settle",
            "list_projects",
            "list_keys_of_a_project",
        ] {
            let p99 = report[scale][figure]["p99_us"].as_f64();
            assert!(p99.is_some_and(|v| v > 0.0), "{scale}.{figure}: {report}");
        }
    }
}
