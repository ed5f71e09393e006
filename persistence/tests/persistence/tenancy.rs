//! Projects and virtual keys on both backends: project names are unique, the default project
//! exists from the migration, a key is found by its digest (revoked and expired ones too, so the
//! caller can say why it is refused), a project lists only its own keys, revoking or rotating
//! another project's key finds nothing, and a rotation revokes the old key and names it.

use chrono::{Duration, SubsecRound, Utc};
use stead_persistence::tenancy::{KeyRole, KeyRow, DEFAULT_PROJECT};
use stead_persistence::{Backend, Error};
use stead_testkit::db;
use uuid::Uuid;

stead_testkit::both_backends!(
    projects_own_their_keys_found_by_digest,
    a_project_scope_sees_only_its_own_rows
);

fn key(project: Uuid, name: &str, role: KeyRole) -> KeyRow {
    KeyRow {
        id: Uuid::now_v7(),
        project_id: project,
        name: name.into(),
        role,
        prefix: format!("stk_{}", &name[..name.len().min(4)]),
        digest: format!("{:064x}", rand_digest()),
        routes: None,
        budget_usd: None,
        budget_period_secs: None,
        rpm: None,
        tpm: None,
        expires_at: None,
        revoked_at: None,
        rotated_from: None,
        created_at: Utc::now().trunc_subsecs(6),
    }
}

/// A distinct 64-hex-digit value per call.
fn rand_digest() -> u128 {
    Uuid::now_v7().as_u128()
}

async fn projects_own_their_keys_found_by_digest(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let default = store.project_by_name("default").await.unwrap();
    assert_eq!(default.id, DEFAULT_PROJECT);
    let a = store.create_project("team-a").await.unwrap();
    let b = store.create_project("team-b").await.unwrap();
    assert!(matches!(
        store.create_project("team-a").await,
        Err(Error::Exists(_))
    ));
    assert!(matches!(
        store.project_by_name("nope").await,
        Err(Error::NotFound(_))
    ));
    let names = |after: Option<&'static str>, limit| async move {
        store
            .list_projects(after, limit)
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect::<Vec<String>>()
    };
    assert_eq!(names(None, 10).await, ["default", "team-a", "team-b"]);
    assert_eq!(names(None, 2).await, ["default", "team-a"]);
    assert_eq!(names(Some("team-a"), 2).await, ["team-b"]);

    let full = KeyRow {
        routes: Some(vec!["default".into(), "fast".into()]),
        budget_usd: Some(12.5),
        budget_period_secs: Some(86_400),
        rpm: Some(60),
        tpm: Some(100_000),
        expires_at: Some((Utc::now() + Duration::days(30)).trunc_subsecs(6)),
        ..key(a.id, "ci-runner", KeyRole::Inference)
    };
    store.create_key(&full).await.unwrap();
    let member = key(a.id, "alice", KeyRole::Member);
    store.create_key(&member).await.unwrap();
    let other = key(b.id, "bob", KeyRole::Admin);
    store.create_key(&other).await.unwrap();
    // The same secret twice is refused.
    assert!(matches!(
        store
            .create_key(&KeyRow {
                id: Uuid::now_v7(),
                ..member.clone()
            })
            .await,
        Err(Error::Exists(_))
    ));

    assert_eq!(
        store.key_by_digest(&full.digest).await.unwrap(),
        Some(full.clone())
    );
    assert_eq!(store.key_by_digest(&"0".repeat(64)).await.unwrap(), None);
    let ids = |keys: Vec<KeyRow>| keys.into_iter().map(|k| k.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_keys(a.id).await.unwrap()),
        [member.id, full.id]
    );
    assert_eq!(ids(store.list_keys(b.id).await.unwrap()), [other.id]);

    // Another project's key is not found: nothing changes.
    assert!(!store.revoke_key(a.id, other.id).await.unwrap());
    assert!(matches!(
        store
            .rotate_key(a.id, other.id, &key(a.id, "x", KeyRole::Admin))
            .await,
        Err(Error::NotFound(_))
    ));
    assert!(store
        .key_by_digest(&other.digest)
        .await
        .unwrap()
        .unwrap()
        .live_at(Utc::now()));

    // Rotation: the old key is revoked, the new one names it.
    let fresh = key(b.id, "bob-2", KeyRole::Admin);
    let rotated = store.rotate_key(b.id, other.id, &fresh).await.unwrap();
    assert_eq!(rotated.rotated_from, Some(other.id));
    let old = store.key_by_digest(&other.digest).await.unwrap().unwrap();
    assert!(old.revoked_at.is_some() && !old.live_at(Utc::now()));
    assert_eq!(
        store.key_by_digest(&fresh.digest).await.unwrap(),
        Some(rotated)
    );
    assert!(store.revoke_key(a.id, member.id).await.unwrap());
    assert!(!store.revoke_key(a.id, member.id).await.unwrap(), "once");
    // Expiry is the key's own: live until then.
    let row = store.key_by_digest(&full.digest).await.unwrap().unwrap();
    assert!(row.live_at(Utc::now()));
    assert!(!row.live_at(Utc::now() + Duration::days(31)));
}

/// Sessions, their children, ratings and schedules belong to one project: a project's scope
/// lists only its own, the installation's lists all, and a child session is in its parent's
/// project whatever its creator asked.
async fn a_project_scope_sees_only_its_own_rows(backend: Backend) {
    use stead_persistence::evals::{FeedbackRow, Rating};
    use stead_persistence::{
        NewSession, ParentLink, ScheduleOwner, ScheduleQuery, ScheduleRow, Scope, SessionQuery,
    };
    let t = db::open(backend).await;
    let store = &t.store;
    let a = store.create_project("team-a").await.unwrap().id;
    let new = |project, parent: Option<Uuid>| NewSession {
        project_id: project,
        parent: parent.map(|session_id| ParentLink {
            session_id,
            call_id: "call-1".into(),
        }),
        ..NewSession::for_agent("helper")
    };
    let in_a = store.create_session(new(a, None)).await.unwrap();
    let in_default = store
        .create_session(new(DEFAULT_PROJECT, None))
        .await
        .unwrap();
    assert_eq!(in_a.project_id, a);
    assert_eq!(store.get_session(in_a.id).await.unwrap().project_id, a);
    // A child asked for the default project still lands in its parent's.
    let child = store
        .create_session(new(DEFAULT_PROJECT, Some(in_a.id)))
        .await
        .unwrap();
    assert_eq!(child.project_id, a);
    assert_eq!(store.get_session(child.id).await.unwrap().project_id, a);

    let listed = |scope| async move {
        let mut ids: Vec<Uuid> = store
            .list_sessions(&SessionQuery {
                scope,
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap()
            .sessions
            .into_iter()
            .map(|s| s.id)
            .collect();
        ids.sort();
        ids
    };
    let mut only_a = vec![in_a.id, child.id];
    only_a.sort();
    assert_eq!(listed(Scope::Project(a)).await, only_a);
    assert_eq!(
        listed(Scope::Project(DEFAULT_PROJECT)).await,
        vec![in_default.id]
    );
    assert_eq!(listed(Scope::Installation).await.len(), 3);
    assert!(listed(Scope::Project(Uuid::now_v7())).await.is_empty());

    for session in [in_a.id, in_default.id] {
        store
            .add_feedback(&FeedbackRow {
                id: Uuid::now_v7(),
                session_id: session,
                seq: 2,
                rating: Rating::Up,
                note: String::new(),
                correction: None,
                created_by: "local".into(),
                created_at: Utc::now().trunc_subsecs(3),
            })
            .await
            .unwrap();
    }
    let rated = |scope| async move {
        store
            .list_feedback(scope, None, None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.session_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(rated(Scope::Project(a)).await, vec![in_a.id]);
    assert_eq!(
        rated(Scope::Project(DEFAULT_PROJECT)).await,
        vec![in_default.id]
    );
    assert_eq!(rated(Scope::Installation).await.len(), 2);

    let due = Utc::now().trunc_subsecs(6);
    let schedule = |owner| ScheduleRow {
        owner,
        key: "daily".into(),
        agent: "helper".into(),
        definition: serde_json::json!({"kind": "delay", "delay_secs": 5}),
        next_due_at: due,
        updated_at: due,
    };
    store
        .put_schedules(&[
            schedule(ScheduleOwner::Session(child.id)),
            schedule(ScheduleOwner::Session(in_default.id)),
            schedule(ScheduleOwner::installation_agent("helper")),
            // The same agent and key in project A: a schedule of its own.
            schedule(ScheduleOwner::Agent {
                project: a,
                name: "helper".into(),
            }),
        ])
        .await
        .unwrap();
    let scheduled = |scope| async move {
        store
            .list_schedules(&ScheduleQuery {
                scope,
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.owner)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        scheduled(Scope::Project(a)).await,
        vec![
            ScheduleOwner::Session(child.id),
            ScheduleOwner::Agent {
                project: a,
                name: "helper".into()
            }
        ]
    );
    assert_eq!(
        scheduled(Scope::Project(DEFAULT_PROJECT)).await,
        vec![
            ScheduleOwner::Session(in_default.id),
            ScheduleOwner::installation_agent("helper")
        ]
    );
    assert_eq!(scheduled(Scope::Installation).await.len(), 4);
    // Deleting one project's schedule leaves the other's.
    assert!(store
        .delete_schedule(
            &ScheduleOwner::Agent {
                project: a,
                name: "helper".into()
            },
            "daily"
        )
        .await
        .unwrap());
    assert_eq!(scheduled(Scope::Installation).await.len(), 3);
}
