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
