//! Cluster membership on both backends: nodes register and refresh their heartbeat, are alive
//! while it is fresh, count the sessions whose live lease they hold, and leave; running sessions
//! whose lease ran out are the sweep's orphans, and a live lease hides them.

use std::time::Duration;

use stead_persistence::ClusterNode;

use super::*;

stead_testkit::both_backends!(nodes_register_beat_and_count_their_sessions);

fn node(id: &str, starting: bool) -> ClusterNode {
    ClusterNode {
        node_id: id.into(),
        advertise_url: format!("http://{id}.internal:8787"),
        version: "0.1.0".into(),
        starting,
    }
}

async fn nodes_register_beat_and_count_their_sessions(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    store.heartbeat_node(&node("a", true)).await.unwrap();
    store.heartbeat_node(&node("b", true)).await.unwrap();
    let first = store.cluster_nodes(Duration::from_secs(60)).await.unwrap();
    let ids: Vec<&str> = first.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert!(first.iter().all(|n| n.alive && n.sessions == 0));
    assert_eq!(first[0].advertise_url, "http://a.internal:8787");

    // A session running under a's live lease counts for a and is no orphan.
    let running = new_session(store).await;
    store
        .update_status(running, SessionStatus::Running)
        .await
        .unwrap();
    assert_eq!(store.orphaned_sessions(10).await.unwrap(), [running]);
    let lease = store
        .acquire_lease(running, "a", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(store.orphaned_sessions(10).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.heartbeat_node(&node("a", false)).await.unwrap();
    let nodes = store.cluster_nodes(Duration::from_secs(60)).await.unwrap();
    assert_eq!((nodes[0].sessions, nodes[1].sessions), (1, 0));
    // A later beat moves the heartbeat, not the start.
    assert_eq!(nodes[0].started_at, first[0].started_at);
    assert!(nodes[0].heartbeat_at > first[0].heartbeat_at);
    // b's heartbeat is older than 10 ms: with that TTL it is dead, a (just beat) is not.
    let strict = store
        .cluster_nodes(Duration::from_millis(10))
        .await
        .unwrap();
    assert!(strict[0].alive && !strict[1].alive, "{strict:?}");

    // Released (or expired), the running session is the sweep's again; an idle one never is.
    store
        .release_lease(running, "a", lease.epoch)
        .await
        .unwrap();
    let idle = new_session(store).await;
    assert_eq!(store.orphaned_sessions(10).await.unwrap(), [running]);
    assert!(!store.orphaned_sessions(10).await.unwrap().contains(&idle));

    store.leave_cluster("b").await.unwrap();
    let left: Vec<String> = store
        .cluster_nodes(Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert_eq!(left, ["a"]);
}
