//! Test databases on either backend: a temporary SQLite file, or a scratch database on the
//! PostgreSQL server that `DATABASE_URL` names (scripts/test.sh starts one), and
//! [`both_backends!`](crate::both_backends) to run one test body on each.

use std::sync::Arc;

use stead_persistence::scratch::ScratchDatabase;
pub use stead_persistence::Backend;
use stead_persistence::{DatabaseUrl, JournalStore, NewSession, StoreOptions};
use uuid::Uuid;

/// An open store on a fresh database; [`TestStore::finish`] removes it.
pub struct TestStore {
    pub store: Arc<dyn JournalStore>,
    pub url: DatabaseUrl,
    guard: Guard,
}

enum Guard {
    /// Held for its drop, which removes the directory.
    Sqlite {
        _dir: tempfile::TempDir,
    },
    Postgres(Box<ScratchDatabase>),
}

/// The PostgreSQL server for tests. Missing is a failure, not a skip: a suite that silently
/// runs on one backend would hide regressions on the other.
pub fn postgres_admin_url() -> String {
    match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => url,
        _ => panic!(
            "PostgreSQL tests need DATABASE_URL=postgres://…; scripts/test.sh starts a throwaway server"
        ),
    }
}

/// A fresh, empty database `{prefix}_{random}` on the test server; the caller drops it.
pub async fn scratch_postgres(prefix: &str) -> ScratchDatabase {
    ScratchDatabase::create(&postgres_admin_url(), prefix)
        .await
        .expect("create scratch database")
}

/// A location for a fresh, empty database (not yet opened).
pub async fn fresh_location(backend: Backend) -> (DatabaseUrl, TestGuard) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = DatabaseUrl::Sqlite(dir.path().join("stead.db"));
            (url, TestGuard(Guard::Sqlite { _dir: dir }))
        }
        Backend::Postgres => {
            let scratch = scratch_postgres("stead_test").await;
            let url = DatabaseUrl::Postgres(scratch.url().to_string());
            (url, TestGuard(Guard::Postgres(Box::new(scratch))))
        }
    }
}

/// Keeps a fresh location alive; [`TestGuard::cleanup`] removes it.
pub struct TestGuard(Guard);

impl TestGuard {
    pub async fn cleanup(self) {
        if let Guard::Postgres(scratch) = self.0 {
            scratch
                .drop_database()
                .await
                .expect("drop scratch database");
        }
    }
}

/// Opens a store on a fresh database, with `tune` applied to its options.
pub async fn open_with(backend: Backend, tune: impl FnOnce(&mut StoreOptions)) -> TestStore {
    let (url, TestGuard(guard)) = fresh_location(backend).await;
    let mut options = StoreOptions::new(url.clone());
    tune(&mut options);
    let store = stead_persistence::open(options).await.expect("open store");
    TestStore { store, url, guard }
}

/// Opens a store on a fresh database.
pub async fn open(backend: Backend) -> TestStore {
    open_with(backend, |_| {}).await
}

/// Opens a store at `url` with default options.
pub async fn open_url(url: &DatabaseUrl) -> Arc<dyn JournalStore> {
    stead_persistence::open(StoreOptions::new(url.clone()))
        .await
        .expect("open store")
}

/// Creates `count` sessions of `agent` in the database at `url` (closed again afterwards).
pub async fn create_sessions(url: &DatabaseUrl, agent: &str, count: usize) -> Vec<Uuid> {
    let store = open_url(url).await;
    let mut ids = Vec::new();
    for _ in 0..count {
        let session = store
            .create_session(NewSession::for_agent(agent))
            .await
            .expect("create session");
        ids.push(session.id);
    }
    store.shutdown().await;
    ids
}

impl TestStore {
    /// Shuts the store down and removes its database.
    pub async fn finish(self) {
        self.store.shutdown().await;
        TestGuard(self.guard).cleanup().await;
    }
}

/// The URL form of a database location (what a child process is told to open).
pub fn url_string(url: &DatabaseUrl) -> String {
    match url {
        DatabaseUrl::Sqlite(path) => format!("sqlite://{}", path.display()),
        DatabaseUrl::Postgres(url) => url.clone(),
    }
}

/// Runs async test bodies `async fn name(backend: Backend)` of the calling module against both
/// backends, as `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::db::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::db::Backend::Postgres).await;
                }
            )*
        }
    };
}
