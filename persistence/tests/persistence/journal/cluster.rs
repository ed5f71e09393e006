//! Cluster membership on both backends: nodes register and refresh their heartbeat, are alive
//! while it is fresh, count the sessions whose live lease they hold, and leave; running sessions
//! whose lease ran out are the sweep's orphans, and a live lease hides them.

use std::time::Duration;

use stead_persistence::ClusterNode;

use super::*;

stead_testkit::both_backends!(
    nodes_register_beat_and_count_their_sessions,
    a_second_live_process_cannot_take_a_node_id,
);

const TTL: Duration = Duration::from_secs(60);

async fn nodes_register_beat_and_count_their_sessions(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    assert!(store.heartbeat_node(&node("a", true), TTL).await.unwrap());
    assert!(store.heartbeat_node(&node("b", true), TTL).await.unwrap());
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
    // Two seconds later a beats again and b does not.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(store.heartbeat_node(&node("a", false), TTL).await.unwrap());
    let nodes = store.cluster_nodes(Duration::from_secs(60)).await.unwrap();
    assert_eq!((nodes[0].sessions, nodes[1].sessions), (1, 0));
    // A later beat moves the heartbeat, not the start.
    assert_eq!(nodes[0].started_at, first[0].started_at);
    assert!(nodes[0].heartbeat_at > first[0].heartbeat_at);
    // b's heartbeat is two seconds old: with a TTL of 1.5 s it is dead, a (just beat) is not
    // (a loaded machine may take some time between the beat and the question).
    let strict = store
        .cluster_nodes(Duration::from_millis(1500))
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

    store.leave_cluster(&node("b", false)).await.unwrap();
    let left: Vec<String> = store
        .cluster_nodes(Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert_eq!(left, ["a"]);
}

/// A node id belongs to one live process: another process starting under it at another
/// address is refused while the holder beats, takes it once the holder is dead, and the old
/// process's beats (and its leave) are refused from then on; a process starting at the same
/// address is the node's successor and takes it at once.
async fn a_second_live_process_cannot_take_a_node_id(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let first = node("a", true);
    assert!(store.heartbeat_node(&first, TTL).await.unwrap());
    let elsewhere = ClusterNode {
        advertise_url: "http://a-copy.internal:8787".into(),
        instance: Uuid::new_v4(),
        ..first.clone()
    };
    assert!(!store.heartbeat_node(&elsewhere, TTL).await.unwrap());
    let beat = ClusterNode {
        starting: false,
        ..first.clone()
    };
    assert!(store.heartbeat_node(&beat, TTL).await.unwrap());
    // The first process's heartbeat lapses (a TTL of 10 ms, 30 ms later): the other takes the id.
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(store
        .heartbeat_node(&elsewhere, Duration::from_millis(10))
        .await
        .unwrap());
    assert!(!store.heartbeat_node(&beat, TTL).await.unwrap());
    store.leave_cluster(&first).await.unwrap();
    let nodes = store.cluster_nodes(TTL).await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].advertise_url, "http://a-copy.internal:8787");
    // A successor at the same address (a restart after a crash) takes over at once.
    let successor = ClusterNode {
        instance: Uuid::new_v4(),
        ..elsewhere.clone()
    };
    assert!(store.heartbeat_node(&successor, TTL).await.unwrap());
    let old = ClusterNode {
        starting: false,
        ..elsewhere
    };
    assert!(!store.heartbeat_node(&old, TTL).await.unwrap());
}
