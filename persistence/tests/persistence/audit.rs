//! The audit log on both backends: acts are listed newest first, filtered by actor, action
//! prefix and time, paged by id, and a project's scope sees only its own; retention removes
//! old acts; and the database itself refuses to change one (append-only).

use chrono::{Duration, SubsecRound, Utc};
use serde_json::json;
use stead_persistence::audit::{AuditEntry, AuditQuery};
use stead_persistence::{Backend, DatabaseUrl, Scope, DEFAULT_PROJECT};
use stead_testkit::db;
use uuid::Uuid;

stead_testkit::both_backends!(acts_are_listed_scoped_paged_pruned_and_never_changed);

fn act(project: Uuid, actor: &str, action: &str, ago: Duration) -> AuditEntry {
    AuditEntry {
        id: Uuid::now_v7(),
        at: (Utc::now() - ago).trunc_subsecs(6),
        project_id: project,
        actor: actor.into(),
        action: action.into(),
        target: "/v1/projects/a/keys".into(),
        status: 201,
        source: Some("127.0.0.1".into()),
        details: json!({"key_id": "k1", "approved": true, "overspend_usd": 2.5}),
    }
}

/// An UPDATE of the audit log, as the database answers it.
async fn update(url: &DatabaseUrl) -> Result<u64, sqlx::Error> {
    let statement = "UPDATE audit_log SET actor = 'someone else'";
    match url {
        DatabaseUrl::Sqlite(path) => {
            let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            let done = sqlx::query(statement).execute(&pool).await;
            pool.close().await;
            done.map(|d| d.rows_affected())
        }
        DatabaseUrl::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            let done = sqlx::query(statement).execute(&pool).await;
            pool.close().await;
            done.map(|d| d.rows_affected())
        }
    }
}

async fn acts_are_listed_scoped_paged_pruned_and_never_changed(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let a = Uuid::now_v7();
    let old = act(
        a,
        "project_key:1",
        "DELETE /v1/projects/{project}/keys/{id}",
        Duration::days(500),
    );
    store.append_audit(&old).await.unwrap();
    let mut written = vec![old];
    for (i, (project, actor, action)) in [
        (a, "project_key:1", "POST /v1/projects/{project}/keys"),
        (DEFAULT_PROJECT, "api_key:abcd1234", "POST /v1/projects"),
        (
            a,
            "project_key:1",
            "POST /v1/sessions/{id}/approvals/{call_id}",
        ),
        (a, "api_key:abcd1234", "PATCH /v1/projects/{project}"),
    ]
    .into_iter()
    .enumerate()
    {
        let entry = act(project, actor, action, Duration::minutes(10 - i as i64));
        store.append_audit(&entry).await.unwrap();
        written.push(entry);
    }
    let list = |query: AuditQuery| async move { store.list_audit(&query).await.unwrap() };
    let all = list(AuditQuery {
        limit: 100,
        ..Default::default()
    })
    .await;
    // Newest first, read back as written.
    let mut newest_first = written.clone();
    newest_first.reverse();
    assert_eq!(all, newest_first);

    let ids = |entries: Vec<AuditEntry>| entries.into_iter().map(|e| e.id).collect::<Vec<_>>();
    let of_a = list(AuditQuery {
        scope: Scope::Project(a),
        limit: 100,
        ..Default::default()
    })
    .await;
    assert_eq!(of_a.len(), 4);
    assert!(of_a.iter().all(|e| e.project_id == a));
    let by_actor = list(AuditQuery {
        actor: Some("api_key:abcd1234".into()),
        limit: 100,
        ..Default::default()
    })
    .await;
    assert_eq!(ids(by_actor), [written[4].id, written[2].id]);
    let keys = list(AuditQuery {
        action: Some("POST /v1/projects/".into()),
        limit: 100,
        ..Default::default()
    })
    .await;
    assert_eq!(ids(keys), [written[1].id]);
    let recent = list(AuditQuery {
        since: Some(Utc::now() - Duration::seconds(510)),
        limit: 100,
        ..Default::default()
    })
    .await;
    assert_eq!(ids(recent), [written[4].id, written[3].id]);
    // Pages of two, by the last id.
    let first = list(AuditQuery {
        limit: 2,
        ..Default::default()
    })
    .await;
    let second = list(AuditQuery {
        limit: 2,
        before: first.last().map(|e| e.id),
        ..Default::default()
    })
    .await;
    assert_eq!(ids(first), [written[4].id, written[3].id]);
    assert_eq!(ids(second), [written[2].id, written[1].id]);

    // The database refuses to change an act.
    let refused = update(&t.url).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("append-only")),
        "{refused:?}"
    );
    // Retention removes what is older than its cutoff, and nothing else.
    let removed = store
        .prune_audit(Utc::now() - Duration::days(400))
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(
        list(AuditQuery {
            limit: 100,
            ..Default::default()
        })
        .await
        .len(),
        4
    );
    t.finish().await;
}
