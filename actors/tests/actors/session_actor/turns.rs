//! Turns: streaming and journaling, a parked approval across reactivation, one actor per
//! session, passivation, and an approval that expires.

use stead_actors::session::Lifecycle;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_deltas_and_journals_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let model = ScriptedModel::new(vec![
        ("", vec![("clock", json!({}))]),
        ("It is noon now.", vec![]),
    ]);
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]);
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(&registry, id, "time?").await;
    let seen = wait_for(&mut frames, "turn_finished").await;
    let deltas: String = seen
        .iter()
        .filter_map(|f| match f {
            Frame::Delta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "It is noon now.");
    let kinds: Vec<String> = store
        .read(id, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message",
            "model_call_started",
            "model_call_finished",
            "tool_call_requested",
            "tool_call_started",
            "tool_call_finished",
            "model_call_started",
            "model_call_finished",
            "assistant_message",
            "turn_finished"
        ]
    );
    assert_eq!(model.calls(), 2);
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_approval_survives_reactivation_and_the_webhook_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, hits) = ops::webhook().await;
    let model = ScriptedModel::new(vec![
        ("", vec![("delete_records", json!({"table": "users"}))]),
        ("Deleted.", vec![]),
    ]);
    let id = new_session(&store).await;
    {
        let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]);
        let mut frames = registry.subscribe(id).await.unwrap();
        say(&registry, id, "clean users").await;
        wait_for(&mut frames, "approval_requested").await;
        assert_eq!(
            registry.state(id).await.unwrap().status(),
            "awaiting_approval"
        );
        // The process "stops": every actor goes away while parked.
        registry.stop_all();
    }
    assert!(hits.keys().is_empty(), "nothing ran before the decision");

    // A new registry activates the session from the journal; it is still parked.
    let registry = SessionRegistry::new(store.clone(), model.clone(), vec![agent(&url)]);
    assert_eq!(
        registry.state(id).await.unwrap().status(),
        "awaiting_approval"
    );
    let mut frames = registry.subscribe(id).await.unwrap();
    let decision = approve("t1");
    registry.send(id, decision.clone()).await.unwrap();
    wait_for(&mut frames, "turn_finished").await;
    assert_eq!(
        hits.keys(),
        vec![format!("{id}:t1")],
        "exactly one webhook call"
    );
    // The same decision again is a typed refusal, and the journal is unchanged.
    let before = store.get_session(id).await.unwrap().last_seq;
    assert!(registry.send(id, decision).await.is_err());
    assert_eq!(store.get_session(id).await.unwrap().last_seq, before);
    let journal = store.read(id, 0, 100).await.unwrap();
    let decided = journal
        .iter()
        .find(|e| e.kind == "approval_decided")
        .unwrap();
    assert_eq!(decided.payload["decided_by"], "ada");
    assert!(matches!(
        SessionEvent::from_parts(
            &journal.last().unwrap().kind,
            &journal.last().unwrap().payload
        ),
        Some(SessionEvent::TurnFinished { .. })
    ));
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_live_actor_per_session_under_concurrent_activation() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let registry = Arc::new(SessionRegistry::new(
        store.clone(),
        ScriptedModel::new(vec![]),
        vec![agent(&url)],
    ));
    let id = new_session(&store).await;
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let registry = registry.clone();
        tasks.push(tokio::spawn(async move {
            registry.session(id).await.unwrap().get_id()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every caller got the same actor");
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_passivate_and_come_back_from_snapshot_and_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let model = ScriptedModel::new(vec![("", vec![("clock", json!({}))]), ("Noon.", vec![])]);
    let lifecycle = Lifecycle {
        snapshot_every: 4,
        passivate_after: Duration::from_millis(60),
        ..Lifecycle::default()
    };
    let registry =
        SessionRegistry::new(store.clone(), model, vec![agent(&url)]).with_lifecycle(lifecycle);
    let id = new_session(&store).await;
    {
        let mut frames = registry.subscribe(id).await.unwrap();
        say(&registry, id, "time?").await;
        wait_for(&mut frames, "turn_finished").await;
    } // the subscriber goes away
    let before = registry.state(id).await.unwrap();
    // Snapshots are written off the actor's task: wait for one.
    let mut snapshot = None;
    for _ in 0..300 {
        snapshot = store.latest_snapshot(id).await.unwrap();
        if snapshot.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let snapshot = snapshot.expect("a snapshot was written");
    assert!(snapshot.seq >= 4 && snapshot.seq <= before.last_seq);

    assert!(
        eventually(|| !registry.is_live(id)).await,
        "an idle session with no subscribers passivates"
    );

    // Re-activation (snapshot + journal after it) equals the state before and a full replay.
    let after = registry.state(id).await.unwrap();
    assert_eq!(after, before);
    assert_eq!(after, fold_all(&store.read(id, 0, 1000).await.unwrap()));
    registry.stop_all();
    store.shutdown().await;
}

/// A turn parked on an approval passivates after `passivate_parked_after` (an idle session
/// without a parked turn waits for the longer `passivate_after`), and the decision wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_session_passivates_sooner_and_its_decision_wakes_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, hits) = ops::webhook().await;
    let model = ScriptedModel::new(vec![
        ("", vec![("delete_records", json!({"table": "users"}))]),
        ("Deleted.", vec![]),
    ]);
    let lifecycle = Lifecycle {
        passivate_after: Duration::from_secs(3600),
        passivate_parked_after: Duration::from_millis(100),
        ..Lifecycle::default()
    };
    let registry =
        SessionRegistry::new(store.clone(), model, vec![agent(&url)]).with_lifecycle(lifecycle);
    let parked = new_session(&store).await;
    let idle = new_session(&store).await;
    registry.state(idle).await.unwrap();
    {
        let mut frames = registry.subscribe(parked).await.unwrap();
        say(&registry, parked, "clean users").await;
        wait_for(&mut frames, "approval_requested").await;
        // A subscriber keeps it live.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            registry.is_live(parked),
            "a watched parked session stays live"
        );
    } // the subscriber goes away
    assert!(
        eventually(|| !registry.is_live(parked)).await,
        "a parked session with no subscribers passivates after passivate_parked_after"
    );
    assert!(
        registry.is_live(idle),
        "an idle session without a parked turn waits for passivate_after"
    );
    assert!(hits.keys().is_empty(), "nothing ran before the decision");

    let mut frames = registry.subscribe(parked).await.unwrap();
    let decision = approve("t1");
    registry.send(parked, decision).await.unwrap();
    wait_for(&mut frames, "turn_finished").await;
    assert_eq!(hits.keys(), vec![format!("{parked}:t1")]);
    assert_eq!(
        registry.state(parked).await.unwrap(),
        fold_all(&store.read(parked, 0, 1000).await.unwrap())
    );
    registry.stop_all();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecided_approval_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, hits) = ops::webhook().await;
    let mut ops = agent(&url);
    ops.rules.approval_timeout = Some(Duration::from_millis(100));
    let model = ScriptedModel::new(vec![
        ("", vec![("delete_records", json!({"table": "users"}))]),
        ("Nobody approved it.", vec![]),
    ]);
    let registry = SessionRegistry::new(store.clone(), model, vec![ops]);
    // Expiries are rows of the due index: the scheduler fires them.
    let scheduler = stead_actors::session::Scheduler::new(
        registry.clone(),
        stead_actors::session::SchedulerOptions {
            poll: Duration::from_millis(50),
            ..Default::default()
        },
    )
    .spawn();
    let id = new_session(&store).await;
    let mut frames = registry.subscribe(id).await.unwrap();
    say(&registry, id, "clean").await;
    wait_for(&mut frames, "turn_finished").await;
    scheduler.abort();
    let journal = store.read(id, 0, 100).await.unwrap();
    let decided = journal
        .iter()
        .find(|e| e.kind == "approval_decided")
        .unwrap();
    assert_eq!(decided.payload["approved"], false);
    assert_eq!(decided.payload["reason"], "expired");
    assert!(hits.keys().is_empty(), "an expired call never runs");
    registry.stop_all();
    store.shutdown().await;
}

/// Stream text is keyed by the run that produced it: another activation of the session (after a
/// restart, which re-issues an unfinished call) streams under a higher `attempt`, so clients
/// replace a partial text instead of splicing the new run onto it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_activation_streams_under_a_higher_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let (url, _) = ops::webhook().await;
    let attempts = |frames: &[Frame]| -> Vec<i64> {
        frames
            .iter()
            .filter_map(|f| match f {
                Frame::Delta { attempt, .. } => Some(*attempt),
                _ => None,
            })
            .collect()
    };
    let id = new_session(&store).await;
    let mut seen = Vec::new();
    for round in 0..2 {
        let model = ScriptedModel::new(vec![("Three short words.", vec![])]);
        let registry = SessionRegistry::new(store.clone(), model, vec![agent(&url)]);
        let mut frames = registry.subscribe(id).await.unwrap();
        say(&registry, id, &format!("round {round}")).await;
        let got = attempts(&wait_for(&mut frames, "turn_finished").await);
        assert!(
            !got.is_empty() && got.iter().all(|a| *a == got[0]),
            "{got:?}"
        );
        seen.push(got[0]);
        registry.stop_all();
        // Let the stopped actor release its lease.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(seen[1] > seen[0], "{seen:?}");
    store.shutdown().await;
}
