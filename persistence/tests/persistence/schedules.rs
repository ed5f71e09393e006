//! The schedules' due index on both backends: upsert by owner and key, the due query in due
//! order, the earliest due time, filters, the compare-and-set that claims an agent schedule's
//! occurrence once, and the cascade when a session is purged.

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::json;
use stead_persistence::{Backend, NewSession, ScheduleOwner, ScheduleQuery, ScheduleRow};
use stead_testkit::db;

stead_testkit::both_backends!(
    the_due_index_orders_filters_and_replaces,
    an_agent_schedule_occurrence_is_claimed_once,
);

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_900_000_000 + secs, 0).unwrap()
}

fn row(owner: ScheduleOwner, key: &str, due: DateTime<Utc>) -> ScheduleRow {
    ScheduleRow {
        owner,
        key: key.into(),
        agent: "a".into(),
        definition: json!({"kind": "delay", "delay_secs": 5, "message": {"text": key}}),
        next_due_at: due,
        updated_at: due,
    }
}

async fn the_due_index_orders_filters_and_replaces(backend: Backend) {
    let t = db::open(backend).await;
    let s1 = t
        .store
        .create_session(NewSession::for_agent("a"))
        .await
        .unwrap()
        .id;
    let s2 = t
        .store
        .create_session(NewSession::for_agent("a"))
        .await
        .unwrap()
        .id;
    assert_eq!(t.store.next_schedule_due().await.unwrap(), None);
    t.store
        .put_schedules(&[
            row(ScheduleOwner::Session(s1), "late", at(30)),
            row(ScheduleOwner::Session(s1), "soon", at(10)),
            row(ScheduleOwner::Session(s2), "mid", at(20)),
            row(ScheduleOwner::installation_agent("a"), "nightly", at(40)),
        ])
        .await
        .unwrap();
    assert_eq!(t.store.next_schedule_due().await.unwrap(), Some(at(10)));

    let due = t.store.due_schedules(at(20), 100).await.unwrap();
    let keys: Vec<&str> = due.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["soon", "mid"]);
    assert_eq!(due[0].owner, ScheduleOwner::Session(s1));
    assert_eq!(due[0].definition["message"], json!({"text": "soon"}));
    assert_eq!(t.store.due_schedules(at(100), 1).await.unwrap().len(), 1);

    // The same owner and key replaces the row.
    t.store
        .put_schedules(&[row(ScheduleOwner::Session(s1), "soon", at(50))])
        .await
        .unwrap();
    assert_eq!(t.store.next_schedule_due().await.unwrap(), Some(at(20)));

    let of_s1 = t
        .store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            session_id: Some(s1),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    let keys: Vec<&str> = of_s1.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["late", "soon"]);
    let agents = t
        .store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            agent: Some("a".into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0].owner, ScheduleOwner::installation_agent("a"));
    let due_by_35 = t
        .store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            due_before: Some(at(35)),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(due_by_35.len(), 2);

    assert!(t
        .store
        .delete_schedule(&ScheduleOwner::Session(s2), "mid")
        .await
        .unwrap());
    assert!(!t
        .store
        .delete_schedule(&ScheduleOwner::Session(s2), "mid")
        .await
        .unwrap());

    // A purged session takes its rows with it.
    t.store.purge_session(s1).await.unwrap();
    let left = t
        .store
        .list_schedules(&ScheduleQuery {
            scope: stead_persistence::Scope::Installation,
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key, "nightly");
}

async fn an_agent_schedule_occurrence_is_claimed_once(backend: Backend) {
    let t = db::open(backend).await;
    let owner = ScheduleOwner::installation_agent("a");
    t.store
        .put_schedules(&[row(owner.clone(), "hourly", at(0))])
        .await
        .unwrap();
    let next = at(0) + Duration::hours(1);
    assert!(t
        .store
        .advance_schedule(&owner, "hourly", at(0), Some(next))
        .await
        .unwrap());
    // A second claim of the same occurrence (another node) loses.
    assert!(!t
        .store
        .advance_schedule(&owner, "hourly", at(0), Some(next))
        .await
        .unwrap());
    assert_eq!(t.store.next_schedule_due().await.unwrap(), Some(next));
    // The last occurrence removes the row.
    assert!(t
        .store
        .advance_schedule(&owner, "hourly", next, None)
        .await
        .unwrap());
    assert_eq!(t.store.next_schedule_due().await.unwrap(), None);
}
