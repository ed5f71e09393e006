//! Opens a fresh store per test on either backend: a temporary SQLite file, or a scratch
//! database on the PostgreSQL server that `DATABASE_URL` names (scripts/test.sh starts one).

#![allow(dead_code)]

use std::sync::Arc;

use stead_persistence::scratch::ScratchDatabase;
use stead_persistence::{Backend, DatabaseUrl, JournalStore, StoreOptions};

pub struct TestStore {
    pub store: Arc<dyn JournalStore>,
    pub url: DatabaseUrl,
    guard: Guard,
}

enum Guard {
    Sqlite(tempfile::TempDir),
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

/// A location for a fresh, empty database (not yet opened).
pub async fn fresh_location(backend: Backend) -> (DatabaseUrl, TestGuard) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = DatabaseUrl::Sqlite(dir.path().join("stead.db"));
            (url, TestGuard(Guard::Sqlite(dir)))
        }
        Backend::Postgres => {
            let scratch = ScratchDatabase::create(&postgres_admin_url(), "stead_test")
                .await
                .expect("create scratch database");
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

pub async fn open_with(backend: Backend, tune: impl FnOnce(&mut StoreOptions)) -> TestStore {
    let (url, TestGuard(guard)) = fresh_location(backend).await;
    let mut options = StoreOptions::new(url.clone());
    tune(&mut options);
    let store = stead_persistence::open(options).await.expect("open store");
    TestStore { store, url, guard }
}

pub async fn open(backend: Backend) -> TestStore {
    open_with(backend, |_| {}).await
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

/// This test binary re-run with only the ignored test `name` selected: the crash tests'
/// child process, which the parent kills with SIGKILL.
pub fn child_process(name: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// Runs one async test body against both backends, as `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(stead_persistence::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(stead_persistence::Backend::Postgres).await;
                }
            )*
        }
    };
}
