//! A strict budget is the cluster's, not each node's: sixty calls at once spread over three
//! nodes against a budget for ten get ten answers (one node alone would answer ten, three
//! nodes with ledgers of their own up to thirty), and the request log every node reads agrees.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use stead_testkit::client::Api;

use super::{Cluster, LEASE_TTL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_calls_over_three_nodes_against_a_budget_for_ten_get_ten_answers() {
    // Each call reserves and costs exactly 10 completion tokens at 1000 USD per million.
    let cluster = Cluster::start_configured(
        3,
        LEASE_TTL,
        "",
        r#"
[gateway.limits]
budget_usd = 0.1
budget_window_secs = 3600

[gateway.prices.double]
input = 0.0
output = 1000.0
"#,
    )
    .await;
    let calls = (0..60).map(|i| {
        let base = cluster.node(i).base.clone();
        tokio::spawn(async move {
            let response = reqwest::Client::new()
                .post(format!("{base}/v1/chat/completions"))
                .json(&json!({
                    "model": "default",
                    "max_tokens": 10,
                    "messages": [{ "role": "user", "content": format!("metered {i}") }],
                }))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (i % 3, status, body)
        })
    });
    let results: Vec<(usize, u16, Value)> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let served: Vec<usize> = results
        .iter()
        .filter(|(_, status, _)| *status == 200)
        .map(|(node, _, _)| *node)
        .collect();
    assert_eq!(served.len(), 10, "{results:?}");
    for (_, status, body) in results.iter().filter(|(_, s, _)| *s != 200) {
        assert_eq!(*status, 429, "{body}");
        assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
    }
    eprintln!("budgets: answers per node {served:?}");

    // Once the calls settled, no node has anything left to spend.
    for i in 0..3 {
        let (status, body) = cluster
            .node(i)
            .call(
                "POST",
                "/v1/chat/completions",
                Some(json!({
                    "model": "default",
                    "max_tokens": 10,
                    "messages": [{ "role": "user", "content": "metered again" }],
                })),
            )
            .await;
        assert_eq!(status, 429, "node {i}: {body}");
        assert_eq!(body["error"]["code"], "budget_exceeded");
    }

    // Every node's stats read the one request log: ten answered calls, 0.1 USD in all.
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0..3 {
        loop {
            let (status, stats) = cluster
                .node(i)
                .call("GET", "/v1/gateway/stats?group_by=route", None)
                .await;
            assert_eq!(status, 200, "{stats}");
            let group = &stats["groups"][0];
            let ok = group["count"].as_i64().unwrap_or(0) - group["errors"].as_i64().unwrap_or(0);
            if ok == 10 {
                let cost = group["cost"].as_f64().unwrap();
                assert!((cost - 0.1).abs() < 1e-9, "node {i}: {stats}");
                break;
            }
            assert!(Instant::now() < deadline, "node {i}: {stats}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A project's keys' budgets are the cluster's too: fifty calls at once through two nodes with
/// a key whose budget fits ten get ten answers, the rest 429 `budget_exceeded` naming the key;
/// then the project's budget (set through the other node) holds for another key of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_and_its_projects_budgets_hold_across_two_nodes() {
    const ADMIN: &str = "cluster-installation-key-0123456789";
    let cluster = Cluster::start_configured(
        2,
        LEASE_TTL,
        &format!("api_keys = [\"{ADMIN}\"]"),
        r#"
[gateway.prices.double]
input = 0.0
output = 1000.0
"#,
    )
    .await;
    let admin = |i: usize, method: &'static str, path: String, body: Value| {
        let base = cluster.node(i).base.clone();
        async move {
            let response = reqwest::Client::new()
                .request(method.parse().unwrap(), format!("{base}{path}"))
                .bearer_auth(ADMIN)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, _) = admin(0, "POST", "/v1/projects".into(), json!({"name": "metered"})).await;
    assert_eq!(status, 201);
    let key = |name: &'static str, budget: Option<f64>| {
        let admin = &admin;
        async move {
            let mut body = json!({"name": name, "role": "inference"});
            if let Some(usd) = budget {
                body["budget_usd"] = json!(usd);
                body["budget_period"] = json!("1h");
            }
            let (status, created) =
                admin(1, "POST", "/v1/projects/metered/keys".into(), body).await;
            assert_eq!(status, 201, "{created}");
            assert_eq!(created["budget_period_secs"], json!(budget.map(|_| 3600)));
            created["key"].as_str().unwrap().to_string()
        }
    };
    let burst = |secret: String| {
        let bases: Vec<String> = (0..2).map(|i| cluster.node(i).base.clone()).collect();
        async move {
            let calls = (0..50).map(|i| {
                let base = bases[i % 2].clone();
                let secret = secret.clone();
                tokio::spawn(async move {
                    let response = reqwest::Client::new()
                        .post(format!("{base}/v1/chat/completions"))
                        .bearer_auth(secret)
                        .json(&json!({
                            "model": "default",
                            "max_tokens": 10,
                            "messages": [{ "role": "user", "content": format!("metered {i}") }],
                        }))
                        .send()
                        .await
                        .unwrap();
                    let status = response.status().as_u16();
                    (i % 2, status, response.json::<Value>().await.unwrap())
                })
            });
            futures_util::future::join_all(calls)
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<(usize, u16, Value)>>()
        }
    };
    let check = |results: &[(usize, u16, Value)], served: usize, named: &str| {
        let answered: Vec<usize> = results
            .iter()
            .filter(|(_, status, _)| *status == 200)
            .map(|(node, _, _)| *node)
            .collect();
        assert_eq!(answered.len(), served, "{results:?}");
        for (_, status, body) in results.iter().filter(|(_, s, _)| *s != 200) {
            assert_eq!(*status, 429, "{body}");
            assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains(named), "{message}");
        }
        eprintln!("budgets: answers per node {answered:?}");
    };

    // The key's own budget: $0.10, ten calls of $0.01.
    let first = key("first", Some(0.1)).await;
    check(&burst(first).await, 10, "key `first`");

    // The project's budget, set through the other node: $0.05 for every key of it.
    let (status, project) = admin(
        1,
        "PATCH",
        "/v1/projects/metered".into(),
        json!({"budget_usd": 0.05, "budget_period": "1d"}),
    )
    .await;
    assert_eq!(status, 200, "{project}");
    assert_eq!(project["budget_period_secs"], 86_400);
    let second = key("second", None).await;
    // Node 0 cached the project without a budget for up to five seconds.
    tokio::time::sleep(Duration::from_secs(6)).await;
    check(&burst(second).await, 5, "project `metered`");
}
