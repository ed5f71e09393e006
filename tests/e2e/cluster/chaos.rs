//! 30 SIGKILLs of the node holding busy sessions (the cluster of `super`, two nodes, a 1 s
//! lease): nothing acknowledged is lost, nothing is journaled twice, every session settles.

use std::time::{Duration, Instant};

use serde_json::json;
use stead_testkit::client::Api;
use stead_testkit::stead::Stead;

use super::{Cluster, SECRET, SECRET_ENV};

/// Kills of the node that owns busy sessions, 30 in CI: two nodes, three sessions messaged
/// through either node (some turns slow enough to be cut mid-model-call); at random moments
/// the node holding the most sessions is killed with SIGKILL and started again. Afterwards
/// every session settles on a live node, every acknowledged message is in its journal once,
/// the journals have no gaps, and no model call has two outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_kills_of_a_sessions_owner_lose_and_repeat_nothing() {
    use rand::Rng;

    const KILLS: usize = 30;
    let mut cluster = Cluster::start_with(2, 1).await;
    let mut sessions = Vec::new();
    for i in 0..3 {
        sessions.push(cluster.node(i).create("ops").await.0);
    }
    let mut acknowledged: Vec<(String, String)> = Vec::new();
    let mut rng = rand::rng();
    let mut killed_busy = 0;
    for kill in 0..KILLS {
        for (i, session) in sessions.iter().enumerate() {
            let text = if (kill + i) % 3 == 0 {
                format!("slow {kill}")
            } else {
                format!("hello {kill}")
            };
            let node = cluster.node(rng.random_range(0..2));
            let (status, body) = node
                .call(
                    "POST",
                    &format!("/v1/sessions/{session}/messages"),
                    Some(json!({ "text": text })),
                )
                .await;
            // 202: journaled. 409/503 while a session moves: not acknowledged, not counted.
            if status == 202 {
                acknowledged.push((session.clone(), text));
            } else {
                assert!(
                    matches!(status, 409 | 429 | 503),
                    "unexpected answer {status}: {body}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..400))).await;
        // The node holding the most sessions (either when none does).
        let (_, view) = cluster.node(0).call("GET", "/v1/cluster", None).await;
        let nodes = view["nodes"].as_array().cloned().unwrap_or_default();
        let busiest = nodes
            .iter()
            .filter(|n| n["alive"] == true)
            .max_by_key(|n| n["sessions"].as_i64().unwrap_or(0))
            .and_then(|n| {
                n["node_id"].as_str()?["node-".len()..]
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(kill % 2);
        if nodes
            .iter()
            .any(|n| n["sessions"].as_i64().unwrap_or(0) > 0)
        {
            killed_busy += 1;
        }
        let node = cluster.nodes[busiest].take().unwrap();
        let data = node.kill();
        let (config, port) = &cluster.configs[busiest];
        cluster.nodes[busiest] = Some(Stead::start_listening(
            data,
            config,
            Some(&cluster.url),
            &[(SECRET_ENV, SECRET)],
            &format!("127.0.0.1:{port}"),
        ));
    }
    // Every session settles (the sweep takes over what was mid-turn).
    for session in &sessions {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, view) = cluster
                .node(0)
                .call("GET", &format!("/v1/sessions/{session}"), None)
                .await;
            if view["status"] == "idle" && view["queued_messages"] == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "{session} never settled: {view}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut checked = 0;
    for session in &sessions {
        let journal = cluster.node(1).journal(session).await;
        let seqs: Vec<i64> = journal.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "{session}: gaps"
        );
        let texts: Vec<&str> = journal
            .iter()
            .filter(|e| e["kind"] == "user_message")
            .filter_map(|e| e["payload"]["text"].as_str())
            .collect();
        for (_, text) in acknowledged.iter().filter(|(s, _)| s == session) {
            let copies = texts.iter().filter(|t| *t == text).count();
            assert_eq!(
                copies, 1,
                "{session}: `{text}` acknowledged, journaled {copies} times"
            );
            checked += 1;
        }
        let mut outcomes = std::collections::HashSet::new();
        for event in &journal {
            if event["kind"] == "model_call_finished" || event["kind"] == "model_call_failed" {
                let call = event["payload"]["call_id"].as_str().unwrap().to_string();
                assert!(
                    outcomes.insert(call.clone()),
                    "{session}: {call} answered twice"
                );
            }
        }
    }
    eprintln!(
        "cluster chaos: {KILLS} kills ({killed_busy} of a node holding sessions), {checked} acknowledged messages each journaled once"
    );
    assert!(killed_busy > KILLS / 2, "the kills hit busy nodes");
}
