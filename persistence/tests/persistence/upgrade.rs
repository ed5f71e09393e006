//! The projects migration on a database from before it, on both backends: a database migrated
//! only up to the feedback migration gets sessions and feedback written as a node from before
//! wrote them (plain SQL on the old schema: today's store writes `project_id`), a request-log row
//! the same way, and journals, a knowledge collection and a dataset through the store's
//! statements that did not change; opening it again applies the projects migration, and every row is still
//! there, read back the same, in the default project.

use std::borrow::Cow;

use serde_json::json;
use stead_persistence::{
    open, Backend, CollectionKey, DatabaseUrl, JournalStore, NewEvent, SessionQuery, SessionStatus,
    StoreOptions, DEFAULT_PROJECT,
};
use stead_testkit::db;
use uuid::Uuid;

stead_testkit::both_backends!(a_database_from_before_projects_moves_into_the_default_project);

/// The last migration before projects.
const BEFORE: i64 = 20261207000017;

/// `migrator` without the migrations after [`BEFORE`].
fn up_to_before(mut migrator: sqlx::migrate::Migrator) -> sqlx::migrate::Migrator {
    let kept: Vec<_> = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= BEFORE)
        .cloned()
        .collect();
    migrator.migrations = Cow::Owned(kept);
    migrator
}

/// Applies the migrations up to [`BEFORE`] only.
async fn migrate_to_before(url: &DatabaseUrl) {
    match url {
        DatabaseUrl::Sqlite(path) => {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true);
            let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
            let migrator = up_to_before(sqlx::migrate!("../migrations/sqlite"));
            migrator.run(&pool).await.unwrap();
            pool.close().await;
        }
        DatabaseUrl::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            let migrator = up_to_before(sqlx::migrate!("../migrations/postgres"));
            migrator.run(&pool).await.unwrap();
            pool.close().await;
        }
    }
}

/// Runs `statement` as written (one for SQLite, one for PostgreSQL) on the database.
async fn exec(url: &DatabaseUrl, sqlite: &str, postgres: &str) {
    match url {
        DatabaseUrl::Sqlite(path) => {
            let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            sqlx::query(sqlite).execute(&pool).await.unwrap();
            pool.close().await;
        }
        DatabaseUrl::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            sqlx::query(postgres).execute(&pool).await.unwrap();
            pool.close().await;
        }
    }
}

/// A time as SQLite stores it (microseconds) and as a PostgreSQL literal.
fn at(micros: i64) -> (String, String) {
    (
        micros.to_string(),
        format!("TIMESTAMPTZ 'epoch' + {micros} * INTERVAL '1 microsecond'"),
    )
}

async fn store(url: &DatabaseUrl, run_migrations: bool) -> std::sync::Arc<dyn JournalStore> {
    open(StoreOptions {
        run_migrations,
        ..StoreOptions::new(url.clone())
    })
    .await
    .unwrap()
}

/// How many rows of `table` are in the default project, and how many in all.
async fn in_default_project(url: &DatabaseUrl, table: &str) -> (i64, i64) {
    let sql = format!(
        "SELECT (SELECT COUNT(*) FROM {table} WHERE project_id = '00000000-0000-0000-0000-000000000000'), \
                (SELECT COUNT(*) FROM {table})"
    );
    match url {
        DatabaseUrl::Sqlite(path) => {
            let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
                .await
                .unwrap();
            let counts = sqlx::query_as(&sql).fetch_one(&pool).await.unwrap();
            pool.close().await;
            counts
        }
        DatabaseUrl::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.unwrap();
            let counts = sqlx::query_as(&sql).fetch_one(&pool).await.unwrap();
            pool.close().await;
            counts
        }
    }
}

async fn a_database_from_before_projects_moves_into_the_default_project(backend: Backend) {
    let (url, guard) = db::fresh_location(backend).await;
    migrate_to_before(&url).await;
    let old = store(&url, false).await;
    let mut sessions = Vec::new();
    let created = |n: i64| 1_765_000_000_000_000 + n;
    for n in 0..3 {
        let id = Uuid::now_v7();
        let (lite, pg) = at(created(n));
        let insert = |time: &str| {
            format!(
                "INSERT INTO sessions (id, agent, status, metadata, last_seq, created_at, \
                 updated_at) VALUES ('{id}', 'demo', 'idle', '{{}}', 0, {time}, {time})"
            )
        };
        exec(&url, &insert(&lite), &insert(&pg)).await;
        let events = (0..5)
            .map(|i| NewEvent::new("user_message", json!({"text": format!("m{n}.{i}")})))
            .collect();
        old.append(id, 0, events).await.unwrap();
        sessions.push(id);
    }
    // A collection with a document of two chunks, as the knowledge schema before projects
    // held it (its statements now name the project).
    let (lite, pg) = at(created(0));
    let collection = |time: &str| {
        format!(
            "INSERT INTO knowledge_collections (name, embedding_route, model, dimension, \
             documents, chunks, version, created_at, updated_at) \
             VALUES ('handbook', 'embed', 'm', 2, 1, 2, 1, {time}, {time})"
        )
    };
    exec(&url, &collection(&lite), &collection(&pg)).await;
    let document = |time: &str| {
        format!(
            "INSERT INTO knowledge_documents (collection, id, body, metadata, sha256, bytes, \
             chunks, created_at, updated_at) \
             VALUES ('handbook', 'guide', 'one two', '{{\"team\":\"ops\"}}', 'abc', 7, 2, \
             {time}, {time})"
        )
    };
    exec(&url, &document(&lite), &document(&pg)).await;
    for (index, text, hex) in [
        (0, "one", "0000803F00000000"),
        (1, "two", "000000000000803F"),
    ] {
        let chunk = |blob: String| {
            format!(
                "INSERT INTO knowledge_chunks (collection, document_id, chunk_index, body, \
                 embedding) VALUES ('handbook', 'guide', {index}, '{text}', {blob})"
            )
        };
        exec(
            &url,
            &chunk(format!("X'{hex}'")),
            &chunk(format!("decode('{hex}', 'hex')")),
        )
        .await;
    }
    // A dataset with one case, as the evaluation schema before projects held it.
    let suite = |time: &str| {
        format!(
            "INSERT INTO eval_datasets (name, version, cases, created_at, updated_at) \
             VALUES ('suite', 1, 1, {time}, {time})"
        )
    };
    exec(&url, &suite(&lite), &suite(&pg)).await;
    let case_id = Uuid::now_v7();
    let case = |time: &str| {
        format!(
            "INSERT INTO eval_cases (dataset, id, position, body, created_at) \
             VALUES ('suite', '{case_id}', 0, '{{\"name\":\"first\"}}', {time})"
        )
    };
    exec(&url, &case(&lite), &case(&pg)).await;
    let rated = |time: &str| {
        format!(
            "INSERT INTO feedback (id, session_id, seq, rating, note, correction, created_by, \
             created_at) VALUES ('{}', '{}', 2, 'up', '', NULL, 'local', {time})",
            Uuid::now_v7(),
            sessions[0]
        )
    };
    let (lite, pg) = at(created(0));
    exec(&url, &rated(&lite), &rated(&pg)).await;
    // A request-log row as the old schema held it (today's store writes later columns too).
    let logged = |time: &str| {
        format!(
            "INSERT INTO request_log (id, at, session_id, route, status, latency_ms) \
             VALUES ('{}', {time}, '{}', 'default', 'ok', 12.5)",
            Uuid::now_v7(),
            sessions[1]
        )
    };
    let (lite, pg) = at(created(1));
    exec(&url, &logged(&lite), &logged(&pg)).await;
    let mut journals = Vec::new();
    for id in &sessions {
        journals.push(old.read(*id, 0, 100).await.unwrap());
    }
    old.shutdown().await;

    // The new version opens it: the projects migration runs, nothing is lost.
    let new = store(&url, true).await;
    for (n, (id, events)) in sessions.iter().zip(&journals).enumerate() {
        let row = new.get_session(*id).await.unwrap();
        assert_eq!(
            (row.agent.as_str(), row.status, row.last_seq, row.project_id),
            ("demo", SessionStatus::Idle, 5, DEFAULT_PROJECT)
        );
        assert_eq!(row.created_at.timestamp_micros(), created(n as i64));
        assert_eq!(&new.read(*id, 0, 100).await.unwrap(), events);
    }
    let listed = new.list_sessions(&SessionQuery::default()).await.unwrap();
    assert_eq!(listed.sessions.len(), 3);
    let datasets = new.list_datasets(DEFAULT_PROJECT).await.unwrap();
    assert_eq!(
        datasets
            .iter()
            .map(|d| (d.name.as_str(), d.version, d.cases))
            .collect::<Vec<_>>(),
        vec![("suite", 1, 1)]
    );
    let cases = new.dataset_cases(DEFAULT_PROJECT, "suite").await.unwrap();
    assert_eq!(
        cases
            .iter()
            .map(|c| (c.id, c.position, c.body.clone()))
            .collect::<Vec<_>>(),
        vec![(case_id, 0, json!({"name": "first"}))]
    );
    let handbook = CollectionKey::new(DEFAULT_PROJECT, "handbook");
    let row = new.get_collection(&handbook).await.unwrap();
    assert_eq!(
        (row.project_id, row.documents, row.chunks, row.version),
        (DEFAULT_PROJECT, 1, 2, 1)
    );
    let chunks = new.collection_chunks(&handbook).await.unwrap().chunks;
    let read: Vec<(&str, &[f32], serde_json::Value)> = chunks
        .iter()
        .map(|c| (c.text.as_str(), c.embedding.as_slice(), c.metadata.clone()))
        .collect();
    assert_eq!(
        read,
        vec![
            ("one", &[1.0f32, 0.0][..], json!({"team": "ops"})),
            ("two", &[0.0f32, 1.0][..], json!({"team": "ops"})),
        ]
    );
    assert_eq!(
        new.get_document(&handbook, "guide").await.unwrap().1,
        "one two"
    );
    assert_eq!(
        new.list_feedback(stead_persistence::Scope::Installation, None, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // The old request-log row reads back, with the columns added since at their defaults.
    let page = new
        .list_request_log(&stead_persistence::request_log::RequestLogQuery::default())
        .await
        .unwrap();
    assert_eq!(page.entries.len(), 1);
    let row = &page.entries[0];
    assert_eq!(
        (row.route.as_str(), row.session_id, row.latency_ms),
        ("default", Some(sessions[1]), 12.5)
    );
    assert!(row.guardrails.is_empty() && row.bodies.is_null(), "{row:?}");
    new.shutdown().await;
    for (table, rows) in [
        ("sessions", 3),
        ("knowledge_collections", 1),
        ("knowledge_documents", 1),
        ("knowledge_chunks", 2),
        ("eval_datasets", 1),
        ("eval_cases", 1),
        ("feedback", 1),
        ("request_log", 1),
    ] {
        assert_eq!(
            in_default_project(&url, table).await,
            (rows, rows),
            "{table}: every row in the default project"
        );
    }
    guard.cleanup().await;
}
