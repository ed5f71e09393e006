//! Sessions: listing and filters, unknown ids, the lifecycle, leases that fence an earlier
//! holder, compaction of ended journals, child sessions linked to their parent, and the step
//! counter of a delegation.

use stead_model::Epoch;
use stead_persistence::ParentLink;

use super::*;

stead_testkit::both_backends!(
    list_filters_by_agent_and_status,
    unknown_session_is_a_typed_error,
    session_lifecycle,
    children_name_their_parent_and_are_listed_by_it,
    a_delegations_steps_are_counted_on_its_row_under_concurrency,
    leases_fence_every_write_of_an_earlier_holder,
    compaction_replaces_an_ended_journal_only,
);

async fn list_filters_by_agent_and_status(backend: Backend) {
    let t = db::open(backend).await;
    let mut ops = Vec::new();
    for i in 0..6 {
        let agent = if i % 2 == 0 { "ops" } else { "support" };
        let s = t
            .store
            .create_session(NewSession::for_agent(agent))
            .await
            .unwrap();
        if agent == "ops" {
            ops.push(s.id);
        }
    }
    t.store
        .update_status(ops[1], SessionStatus::Running)
        .await
        .unwrap();
    let page = t
        .store
        .list_sessions(&SessionQuery {
            scope: stead_persistence::Scope::Installation,
            agent: Some("ops".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        page.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        ops.iter().rev().copied().collect::<Vec<_>>()
    );
    assert_eq!(page.next_cursor, None);
    let running = t
        .store
        .list_sessions(&SessionQuery {
            scope: stead_persistence::Scope::Installation,
            agent: Some("ops".into()),
            status: Some(SessionStatus::Running),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(running.sessions.len(), 1);
    assert_eq!(running.sessions[0].id, ops[1]);
    let mut counts = t.store.count_sessions().await.unwrap();
    counts.sort_by_key(|(status, _)| status.as_str());
    assert_eq!(
        counts,
        vec![(SessionStatus::Idle, 5), (SessionStatus::Running, 1)]
    );
    let bad = t
        .store
        .list_sessions(&SessionQuery {
            scope: stead_persistence::Scope::Installation,
            cursor: Some("not-a-cursor".into()),
            ..Default::default()
        })
        .await;
    assert!(matches!(bad, Err(Error::InvalidInput(_))));
    t.finish().await;
}

async fn unknown_session_is_a_typed_error(backend: Backend) {
    let t = db::open(backend).await;
    let ghost = Uuid::now_v7();
    assert!(matches!(
        t.store.append(ghost, 0, vec![event(1)]).await,
        Err(Error::SessionNotFound(id)) if id == ghost
    ));
    assert!(matches!(
        t.store.read(ghost, 0, 10).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.get_session(ghost).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.update_status(ghost, SessionStatus::Running).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.close_session(ghost).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.kv_get(ghost, "k").await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.put_snapshot(ghost, 1, json!({})).await,
        Err(Error::SessionNotFound(_))
    ));
    t.finish().await;
}

async fn session_lifecycle(backend: Backend) {
    let t = db::open(backend).await;
    let created = t
        .store
        .create_session(NewSession {
            project_id: stead_persistence::DEFAULT_PROJECT,
            id: None,
            agent: "ops".into(),
            metadata: json!({ "team": "infra" }),
            parent: None,
        })
        .await
        .unwrap();
    assert_eq!(created.status, SessionStatus::Idle);
    assert_eq!(created.last_seq, 0);
    assert_eq!(t.store.get_session(created.id).await.unwrap(), created);

    for status in [
        SessionStatus::Running,
        SessionStatus::AwaitingApproval,
        SessionStatus::Idle,
    ] {
        let s = t.store.update_status(created.id, status).await.unwrap();
        assert_eq!(s.status, status);
    }
    let closed = t.store.close_session(created.id).await.unwrap();
    assert_eq!(closed.status, SessionStatus::Closed);
    let closed_at = closed.closed_at.expect("closed_at set");
    // Closing twice keeps the first closing time.
    let again = t.store.close_session(created.id).await.unwrap();
    assert_eq!(again.closed_at, Some(closed_at));

    // A caller-chosen id (imports, forks) is kept; reusing it is refused.
    let fixed = Uuid::now_v7();
    let s = t
        .store
        .create_session(NewSession {
            project_id: stead_persistence::DEFAULT_PROJECT,
            id: Some(fixed),
            ..NewSession::for_agent("ops")
        })
        .await
        .unwrap();
    assert_eq!(s.id, fixed);
    assert!(matches!(
        t.store
            .create_session(NewSession {
                project_id: stead_persistence::DEFAULT_PROJECT,
                id: Some(fixed),
                ..NewSession::for_agent("ops")
            })
            .await,
        Err(Error::InvalidInput(_))
    ));
    t.finish().await;
}

async fn children_name_their_parent_and_are_listed_by_it(backend: Backend) {
    let t = db::open(backend).await;
    let parent = new_session(&t.store).await;
    let other = new_session(&t.store).await;
    let mut children = Vec::new();
    for call_id in ["t1", "t2"] {
        let link = ParentLink {
            session_id: parent,
            call_id: call_id.into(),
        };
        let child = t
            .store
            .create_session(NewSession {
                project_id: stead_persistence::DEFAULT_PROJECT,
                parent: Some(link.clone()),
                ..NewSession::for_agent("researcher")
            })
            .await
            .unwrap();
        assert_eq!(child.parent, Some(link.clone()));
        assert_eq!(t.store.get_session(child.id).await.unwrap(), child);
        children.push(child.id);
    }
    let page = t
        .store
        .list_sessions(&SessionQuery {
            scope: stead_persistence::Scope::Installation,
            parent: Some(parent),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        page.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
        [children[1], children[0]]
    );
    assert_eq!(page.sessions[1].parent.as_ref().unwrap().call_id, "t1");
    let none = t
        .store
        .list_sessions(&SessionQuery {
            scope: stead_persistence::Scope::Installation,
            parent: Some(other),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.sessions.is_empty());
    assert_eq!(t.store.get_session(parent).await.unwrap().parent, None);
    // Purging the parent keeps its children, unlinked.
    t.store.purge_session(parent).await.unwrap();
    assert_eq!(t.store.get_session(children[0]).await.unwrap().parent, None);
    t.finish().await;
}

async fn leases_fence_every_write_of_an_earlier_holder(backend: Backend) {
    use std::time::Duration;
    let t = db::open(backend).await;
    let id = new_session(&t.store).await;
    let long = Duration::from_secs(60);
    let a = t.store.acquire_lease(id, "node-a", long).await.unwrap();
    assert_eq!(a.owner, "node-a");
    // Another node cannot take a live lease.
    match t.store.acquire_lease(id, "node-b", long).await {
        Err(Error::LeaseHeld { owner, .. }) => assert_eq!(owner, "node-a"),
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
    // The holder writes at its epoch; a write at another epoch is fenced and writes nothing.
    assert_eq!(
        t.store
            .append_fenced(id, 0, a.epoch, None, vec![event(1)])
            .await
            .unwrap(),
        vec![1]
    );
    assert!(matches!(
        t.store.append_fenced(id, 1, Epoch(a.epoch.0 + 7), None, vec![event(2)]).await,
        Err(Error::Fenced { held, current, .. }) if held == Epoch(a.epoch.0 + 7) && current == a.epoch
    ));
    // Re-acquiring (the same node restarting its actor) moves the epoch on and fences the
    // earlier activation, also when its seq view is current.
    let a2 = t.store.acquire_lease(id, "node-a", long).await.unwrap();
    assert!(a2.epoch > a.epoch);
    assert!(matches!(
        t.store
            .append_fenced(id, 1, a.epoch, None, vec![event(2)])
            .await,
        Err(Error::Fenced { .. })
    ));
    assert!(matches!(
        t.store.renew_lease(id, "node-a", a.epoch, long).await,
        Err(Error::Fenced { .. })
    ));
    t.store
        .renew_lease(id, "node-a", a2.epoch, long)
        .await
        .unwrap();
    // A seq conflict at the right epoch is still a conflict.
    assert!(matches!(
        t.store
            .append_fenced(id, 0, a2.epoch, None, vec![event(2)])
            .await,
        Err(Error::Conflict { actual: 1, .. })
    ));
    // Released, another node takes it at once; an expired lease can be taken too.
    t.store.release_lease(id, "node-a", a2.epoch).await.unwrap();
    let b = t
        .store
        .acquire_lease(id, "node-b", Duration::from_millis(1))
        .await
        .unwrap();
    assert!(b.epoch > a2.epoch);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let c = t.store.acquire_lease(id, "node-c", long).await.unwrap();
    assert!(c.epoch > b.epoch);
    assert!(matches!(
        t.store
            .append_fenced(id, 1, b.epoch, None, vec![event(2)])
            .await,
        Err(Error::Fenced { .. })
    ));
    // Unfenced appends (single-node tools, imports) still work; the journal is gapless.
    assert_eq!(
        t.store
            .append_fenced(id, 1, c.epoch, Some(SessionStatus::Running), vec![event(2)])
            .await
            .unwrap(),
        vec![2]
    );
    assert_eq!(assert_gapless(&t.store, id).await.len(), 2);
    // The status given with an append is written with it; `closed` sets closed_at too.
    assert_eq!(
        t.store.get_session(id).await.unwrap().status,
        SessionStatus::Running
    );
    t.store
        .append_fenced(id, 2, c.epoch, Some(SessionStatus::Closed), vec![event(3)])
        .await
        .unwrap();
    let row = t.store.get_session(id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Closed);
    assert!(row.closed_at.is_some());
    assert!(matches!(
        t.store.acquire_lease(Uuid::now_v7(), "node-a", long).await,
        Err(Error::SessionNotFound(_))
    ));
    t.finish().await;
}

async fn compaction_replaces_an_ended_journal_only(backend: Backend) {
    let t = db::open(backend).await;
    let id = new_session(&t.store).await;
    t.store
        .append(id, 0, (1..=5).map(event).collect())
        .await
        .unwrap();
    let state = json!({ "version": 1, "state": { "last_seq": 5 } });
    let summary = json!({ "events": 5 });
    // Open (idle) and parked sessions are never compacted; nothing changes.
    for status in [SessionStatus::Idle, SessionStatus::AwaitingApproval] {
        t.store.update_status(id, status).await.unwrap();
        let refused = t.store.compact(id, 5, state.clone(), summary.clone()).await;
        assert!(
            matches!(refused, Err(Error::NotCompactable { status: s, .. }) if s == status),
            "{refused:?}"
        );
        assert_eq!(t.store.read(id, 0, 100).await.unwrap().len(), 5);
        assert_eq!(t.store.compaction(id).await.unwrap(), None);
    }
    let far_future = chrono::Utc::now() + chrono::Duration::days(1);
    assert!(t
        .store
        .compaction_candidates(far_future, None, 100)
        .await
        .unwrap()
        .is_empty());
    t.store.close_session(id).await.unwrap();
    let found = t
        .store
        .compaction_candidates(far_future, None, 100)
        .await
        .unwrap();
    assert_eq!(
        found.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![id]
    );
    // Keyset paging steps past a position.
    assert!(t
        .store
        .compaction_candidates(far_future, Some((found[0].1, id)), 100)
        .await
        .unwrap()
        .is_empty());
    let past = chrono::Utc::now() - chrono::Duration::days(1);
    assert!(t
        .store
        .compaction_candidates(past, None, 100)
        .await
        .unwrap()
        .is_empty());
    // A stale `through_seq` is a conflict.
    let stale = t.store.compact(id, 4, state.clone(), summary.clone()).await;
    assert!(
        matches!(stale, Err(Error::Conflict { actual: 5, .. })),
        "{stale:?}"
    );

    let done = t
        .store
        .compact(id, 5, state.clone(), summary.clone())
        .await
        .unwrap();
    assert_eq!(
        (done.through_seq, &done.state, &done.summary),
        (5, &state, &summary)
    );
    assert!(t.store.read(id, 0, 100).await.unwrap().is_empty());
    let stored = t.store.compaction(id).await.unwrap().unwrap();
    assert_eq!(stored, done);
    let snapshot = t.store.latest_snapshot(id).await.unwrap().unwrap();
    assert_eq!((snapshot.seq, snapshot.state), (5, state));
    let session = t.store.get_session(id).await.unwrap();
    assert_eq!(session.last_seq, 5);
    assert!(t
        .store
        .compaction_candidates(far_future, None, 100)
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        t.store.compaction(Uuid::now_v7()).await,
        Err(Error::SessionNotFound(_))
    ));
    t.store.delete_session(id).await.unwrap();
    assert!(matches!(
        t.store.get_session(id).await,
        Err(Error::SessionNotFound(_))
    ));
    assert!(matches!(
        t.store.compaction(id).await,
        Err(Error::SessionNotFound(_))
    ));
}

/// `charge_delegation` counts atomically: 40 concurrent charges of one message end at 40, each
/// answer a distinct count; sessions count apart; a later turn starts again, an earlier one
/// (a straggler) adds to the current counts; an unknown id is `SessionNotFound`.
async fn a_delegations_steps_are_counted_on_its_row_under_concurrency(backend: Backend) {
    let t = db::open(backend).await;
    let root = new_session(&t.store).await;
    let other = new_session(&t.store).await;
    let charges: Vec<_> = (0..40)
        .map(|_| {
            let store = t.store.clone();
            tokio::spawn(async move { store.charge_delegation(root, 7, false).await.unwrap() })
        })
        .collect();
    let mut counts = Vec::new();
    for charge in charges {
        counts.push(charge.await.unwrap().model_calls);
    }
    counts.sort_unstable();
    assert_eq!(counts, (1..=40).collect::<Vec<i64>>());
    let counts = |model_calls, sessions| stead_persistence::DelegationCounts {
        model_calls,
        sessions,
    };
    assert_eq!(
        t.store.charge_delegation(root, 7, true).await.unwrap(),
        counts(40, 1)
    );
    // A straggler of an earlier message adds to the current one's counts.
    assert_eq!(
        t.store.charge_delegation(root, 3, false).await.unwrap(),
        counts(41, 1)
    );
    // The next message starts again.
    assert_eq!(
        t.store.charge_delegation(root, 12, false).await.unwrap(),
        counts(1, 0)
    );
    assert_eq!(
        t.store.charge_delegation(root, 12, true).await.unwrap(),
        counts(1, 1)
    );
    assert_eq!(
        t.store.charge_delegation(other, 0, false).await.unwrap(),
        counts(1, 0)
    );
    let unknown = Uuid::now_v7();
    assert!(matches!(
        t.store.charge_delegation(unknown, 1, false).await,
        Err(stead_persistence::Error::SessionNotFound(id)) if id == unknown
    ));
}
