//! Fencing: an actor whose view of the journal is stale stops instead of acting on it, on one
//! node or across two sharing a database.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_actor_is_fenced_out_and_reactivates_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let model = ScriptedModel::new(vec![("first", vec![]), ("second", vec![])]);
    let registry = SessionRegistry::new(store.clone(), model, vec![agent(&url)]);
    let id = new_session(&store).await;
    let state = registry.state(id).await.unwrap();
    // Another writer (another node, say) appends behind the actor's back.
    let (kind, payload) = SessionEvent::UserMessage {
        text: "from elsewhere".into(),
        client_id: None,
        mode: None,
        schedule: None,
        attachments: Vec::new(),
    }
    .to_parts();
    store
        .append(
            id,
            state.last_seq,
            vec![stead_persistence::NewEvent::new(kind, payload)],
        )
        .await
        .unwrap();
    // The actor's next append conflicts: it refuses and stops instead of acting on stale state.
    let refused = registry
        .send(
            id,
            Input::UserMessage {
                text: "mine".into(),
                client_id: None,
                mode: None,
                attachments: Vec::new(),
            },
        )
        .await;
    assert!(refused.is_err());
    // The next access re-activates from the journal, which now includes the other message.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let state = registry.state(id).await.unwrap();
    assert!(state.transcript.iter().any(
        |e| matches!(e, stead_actors::TranscriptEntry::User { text, .. } if text == "from elsewhere")
    ));
    registry.stop_all();
    store.shutdown().await;
}

/// Two nodes (two registries with distinct lease owner names) on one database: a live lease
/// keeps the session on its node; a takeover fences every later write of the earlier holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_a_session_on_one_node_and_fence_a_stale_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let model = ScriptedModel::new(vec![("from b", vec![])]);
    let node_a =
        SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]).with_node("node-a");
    let node_b =
        SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]).with_node("node-b");
    let id = new_session(&store).await;
    node_a.state(id).await.unwrap();
    assert_eq!(
        node_b.state(id).await.unwrap_err(),
        stead_actors::session::SessionError::HeldElsewhere("node-a".into())
    );

    // Node A's lease goes away behind its back (as if it had stalled past its TTL); B takes
    // the session over and works in it.
    let lease = store
        .acquire_lease(id, "node-a", Duration::from_secs(60))
        .await
        .unwrap();
    store
        .release_lease(id, "node-a", lease.epoch)
        .await
        .unwrap();
    let mut frames = node_b.subscribe(id).await.unwrap();
    say(&node_b, id, "hello from b").await;
    wait_for(&mut frames, "turn_finished").await;
    let journal = store.read(id, 0, 100).await.unwrap();

    // A's stale actor still answers; its next write is fenced, and nothing is written.
    let refused = node_a
        .send(
            id,
            Input::UserMessage {
                text: "from a".into(),
                client_id: None,
                mode: None,
                attachments: Vec::new(),
            },
        )
        .await;
    assert!(
        matches!(refused, Err(stead_actors::session::SessionError::Journal(ref m)) if m.contains("taken over")),
        "{refused:?}"
    );
    assert_eq!(store.read(id, 0, 100).await.unwrap(), journal);
    assert!(
        eventually(|| !node_a.is_live(id)).await,
        "the stale actor stopped"
    );

    // When B stops (its lease is released), A can activate it again at once.
    node_b.stop_all();
    let mut back = false;
    for _ in 0..100 {
        if node_a.state(id).await.is_ok() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(back, "A takes the session back after B released it");
    node_a.stop_all();
    store.shutdown().await;
}
