//! Strict budgets shared by the nodes of a cluster, on both backends: concurrent reservations
//! from two nodes never exceed the budget, settling books the real cost and frees the rest, a
//! dead node's reservations (and those of a node that started again) are booked as spent in
//! full, and the window starts again once it has run out. A node outside a cluster names its
//! reservations by a fresh id each run: the reservations of its earlier runs are booked in
//! full, its own run's are not. A budget's alert is marked once per window, whoever asks.

use std::time::Duration;

use stead_persistence::{BudgetDecision, BudgetRequest, ClusterNode};

use super::*;

stead_testkit::both_backends!(
    reservations_from_two_nodes_never_exceed_the_budget,
    a_dead_or_restarted_nodes_reservations_are_booked_in_full,
    a_lone_nodes_earlier_runs_reservations_are_booked_in_full,
    a_windows_alert_is_marked_once_and_again_in_the_next_window,
);

fn request(node: &str, amount: f64, window: Duration, node_ttl: Duration) -> BudgetRequest {
    BudgetRequest {
        key: "api_key:0badf00d".into(),
        node_id: node.into(),
        amount,
        budget: 1.0,
        window,
        node_ttl: Some(node_ttl),
    }
}

const HOUR: Duration = Duration::from_secs(3600);

fn reserved(decision: &BudgetDecision) -> Option<Uuid> {
    match decision {
        BudgetDecision::Reserved(id) => Some(*id),
        BudgetDecision::Refused { .. } => None,
    }
}

async fn reservations_from_two_nodes_never_exceed_the_budget(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    assert!(store.heartbeat_node(&node("a", true), HOUR).await.unwrap());
    assert!(store.heartbeat_node(&node("b", true), HOUR).await.unwrap());
    // 40 reservations of a tenth at once, half from each node, against a budget of one.
    let attempts: Vec<_> = (0..40)
        .map(|i| {
            let store = store.clone();
            let node = if i % 2 == 0 { "a" } else { "b" };
            tokio::spawn(async move {
                store
                    .reserve_budget(&request(node, 0.1, HOUR, HOUR))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut decisions = Vec::new();
    for attempt in attempts {
        decisions.push(attempt.await.unwrap());
    }
    let held: Vec<Uuid> = decisions.iter().filter_map(reserved).collect();
    assert_eq!(held.len(), 10, "{decisions:?}");
    for refused in decisions.iter().filter(|d| reserved(d).is_none()) {
        let BudgetDecision::Refused {
            spent, reserved, ..
        } = refused
        else {
            unreachable!()
        };
        assert_eq!(*spent, 0.0);
        assert!((reserved - 1.0).abs() < 1e-9, "{reserved}");
    }
    // Settled at half the reservation, each call frees the other half.
    for id in &held {
        assert!(store.settle_budget(*id, 0.05).await.unwrap());
    }
    // Settling again finds nothing (and books nothing).
    assert!(!store.settle_budget(held[0], 0.05).await.unwrap());
    let mut again = Vec::new();
    for _ in 0..10 {
        let decision = store
            .reserve_budget(&request("b", 0.05, HOUR, HOUR))
            .await
            .unwrap();
        again.push(reserved(&decision).expect("fits in what is left"));
    }
    match store
        .reserve_budget(&request("a", 0.05, HOUR, HOUR))
        .await
        .unwrap()
    {
        BudgetDecision::Refused {
            spent, reserved, ..
        } => {
            assert!((spent - 0.5).abs() < 1e-9, "{spent}");
            assert!((reserved - 0.5).abs() < 1e-9, "{reserved}");
        }
        other => panic!("over the budget: {other:?}"),
    }
    // Another key has a budget of its own.
    let other = BudgetRequest {
        key: "session:other".into(),
        ..request("a", 1.0, HOUR, HOUR)
    };
    assert!(reserved(&store.reserve_budget(&other).await.unwrap()).is_some());

    // A window that has run out starts again: what was spent no longer counts.
    for id in again {
        store.settle_budget(id, 0.05).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    let fresh = store
        .reserve_budget(&request("a", 1.0, Duration::from_millis(50), HOUR))
        .await
        .unwrap();
    assert!(reserved(&fresh).is_some(), "{fresh:?}");
}

async fn a_dead_or_restarted_nodes_reservations_are_booked_in_full(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    assert!(store.heartbeat_node(&node("a", true), HOUR).await.unwrap());
    assert!(store
        .heartbeat_node(&node("dead", true), HOUR)
        .await
        .unwrap());
    let lost = store
        .reserve_budget(&request("dead", 0.3, HOUR, HOUR))
        .await
        .unwrap();
    let lost = reserved(&lost).unwrap();
    // "dead" stops beating; "a" beats on. With a TTL shorter than dead's silence, a's next
    // reservation books dead's 0.3 as spent.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(store.heartbeat_node(&node("a", false), HOUR).await.unwrap());
    let ttl = Duration::from_millis(1500);
    let mine = store
        .reserve_budget(&request("a", 0.2, HOUR, ttl))
        .await
        .unwrap();
    let mine = reserved(&mine).unwrap();
    match store
        .reserve_budget(&request("a", 0.6, HOUR, ttl))
        .await
        .unwrap()
    {
        BudgetDecision::Refused {
            spent, reserved, ..
        } => {
            assert!((spent - 0.3).abs() < 1e-9, "{spent}");
            assert!((reserved - 0.2).abs() < 1e-9, "{reserved}");
        }
        other => panic!("0.3 spent + 0.2 reserved + 0.6 is over one: {other:?}"),
    }
    // The dead node's late settle books nothing more.
    assert!(!store.settle_budget(lost, 0.01).await.unwrap());
    assert!(store.settle_budget(mine, 0.2).await.unwrap());

    // A node that starts again under the same id: what it reserved before is booked in full.
    let before = store
        .reserve_budget(&request("a", 0.4, HOUR, HOUR))
        .await
        .unwrap();
    let before = reserved(&before).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let restarted = ClusterNode {
        instance: Uuid::new_v4(),
        ..node("a", true)
    };
    assert!(store.heartbeat_node(&restarted, HOUR).await.unwrap());
    match store
        .reserve_budget(&request("a", 0.2, HOUR, HOUR))
        .await
        .unwrap()
    {
        BudgetDecision::Refused {
            spent, reserved, ..
        } => {
            assert!((spent - 0.9).abs() < 1e-9, "{spent}");
            assert_eq!(reserved, 0.0);
        }
        other => panic!("0.3 + 0.2 + 0.4 spent, 0.2 more is over one: {other:?}"),
    }
    assert!(!store.settle_budget(before, 0.0).await.unwrap());
}

async fn a_lone_nodes_earlier_runs_reservations_are_booked_in_full(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let alone = |run: &str, amount: f64| BudgetRequest {
        key: "budget:key:lone".into(),
        node_id: run.into(),
        amount,
        budget: 1.0,
        window: HOUR,
        node_ttl: None,
    };
    // This run holds 0.6 and may take 0.3 more, not 0.5: its own reservations stand.
    let held = reserved(&store.reserve_budget(&alone("run-1", 0.6)).await.unwrap()).unwrap();
    assert!(reserved(&store.reserve_budget(&alone("run-1", 0.5)).await.unwrap()).is_none());
    assert!(reserved(&store.reserve_budget(&alone("run-1", 0.3)).await.unwrap()).is_some());
    // The next run finds the earlier run's 0.9 booked as spent: 0.1 is left.
    match store.reserve_budget(&alone("run-2", 0.2)).await.unwrap() {
        BudgetDecision::Refused {
            spent, reserved, ..
        } => {
            assert!((spent - 0.9).abs() < 1e-9, "{spent}");
            assert_eq!(reserved, 0.0);
        }
        other => panic!("{other:?}"),
    }
    // The earlier run's settlement finds its reservation gone.
    assert!(!store.settle_budget(held, 0.1).await.unwrap());
    assert!(reserved(&store.reserve_budget(&alone("run-2", 0.1)).await.unwrap()).is_some());
}

async fn a_windows_alert_is_marked_once_and_again_in_the_next_window(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let key = "budget:key:alerted";
    let lone = |window| BudgetRequest {
        key: key.into(),
        node_ttl: None,
        ..request("n", 0.3, window, HOUR)
    };
    // Nothing spent yet: no alert, however many ask.
    assert_eq!(store.alert_budget(key, 0.5).await.unwrap(), None);
    for _ in 0..2 {
        let id = reserved(&store.reserve_budget(&lone(HOUR)).await.unwrap()).unwrap();
        store.settle_budget(id, 0.3).await.unwrap();
    }
    // 0.6 spent of 1.0, alert at 0.5: eight callers at once, one gets it.
    let asks: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.alert_budget(key, 0.5).await })
        })
        .collect();
    let mut marked = Vec::new();
    for ask in asks {
        marked.extend(ask.await.unwrap().unwrap());
    }
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert!((marked[0].0 - 0.6).abs() < 1e-9);
    assert_eq!(store.alert_budget(key, 0.5).await.unwrap(), None);
    // A window that ran out starts again, and alerts again when it crosses the share.
    let short = Duration::from_secs(1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..2 {
        let id = reserved(&store.reserve_budget(&lone(short)).await.unwrap()).unwrap();
        store.settle_budget(id, 0.3).await.unwrap();
    }
    let again = store.alert_budget(key, 0.5).await.unwrap();
    assert!(again.is_some_and(|(spent, start)| (spent - 0.6).abs() < 1e-9 && start > marked[0].1));
    t.finish().await;
}
