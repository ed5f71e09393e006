//! Crash durability: a child process appends and acknowledges events and is killed with SIGKILL
//! at random moments; after reopening, every acknowledged event must be there, in order,
//! gapless. The child is this test binary itself, re-run with `crash_child` selected. Beside
//! it: a full SQLite disk, and PostgreSQL dropping the journal committer's connection.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use rand::Rng;
use serde_json::json;
use sqlx::Connection;
use stead_persistence::{Backend, DatabaseUrl, Error, NewEvent, NewSession};
use stead_testkit::crash::{child_process, child_runtime, join_list, sigkill, split_list};
use stead_testkit::db::{self, open_url as open};
use uuid::Uuid;

const TRIALS: usize = 50;
const SESSIONS: usize = 6;
/// Variables that turn this binary into the crashing child.
const CHILD_URL: &str = "CRASH_CHILD_DATABASE_URL";
const CHILD_SESSIONS: &str = "CRASH_CHILD_SESSIONS";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_every_acknowledged_event_across_sigkill() {
    crash_trials(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_every_acknowledged_event_across_sigkill() {
    crash_trials(Backend::Postgres).await;
}

/// The journal's committer holds a PostgreSQL connection of its own. When the server drops
/// every connection while the journal is quiet (a restart, terminated backends), the next
/// append must go through on a fresh connection, not fail once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_appends_go_on_after_the_server_drops_every_connection() {
    let t = db::open(Backend::Postgres).await;
    let DatabaseUrl::Postgres(url) = &t.url else {
        panic!("not a PostgreSQL URL")
    };
    let id = t
        .store
        .create_session(NewSession::for_agent("test"))
        .await
        .unwrap()
        .id;
    let event = |n: i64| NewEvent::new("user_message", json!({ "n": n }));
    assert_eq!(
        t.store.append(id, 0, vec![event(1)]).await.unwrap(),
        vec![1]
    );
    let mut admin = sqlx::PgConnection::connect(url).await.unwrap();
    let dropped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()) AS t",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert!(dropped >= 1, "the store's connections were not found");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(
        t.store.append(id, 1, vec![event(2)]).await.unwrap(),
        vec![2]
    );
    let seqs: Vec<i64> = t
        .store
        .read(id, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, vec![1, 2]);
    let _ = admin.close().await;
    t.finish().await;
}

async fn crash_trials(backend: Backend) {
    let (url, guard) = db::fresh_location(backend).await;
    let sessions = db::create_sessions(&url, "crash", SESSIONS).await;
    let ids = join_list(&sessions);
    let mut acked: HashMap<Uuid, i64> = HashMap::new();
    let mut trials_with_acks = 0;
    let mut rng = rand::rng();
    for trial in 0..TRIALS {
        let mut child = child_process(module_path!(), "crash_child")
            .env(CHILD_URL, db::url_string(&url))
            .env(CHILD_SESSIONS, &ids)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().unwrap();
        // Read acknowledgements on a thread; the kill closes the pipe and ends it.
        let reader = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("ack ") {
                    let (id, seq) = rest.split_once(' ').expect("ack line");
                    acks.push((Uuid::parse_str(id).unwrap(), seq.parse::<i64>().unwrap()));
                }
            }
            acks
        });
        // Kill at a random moment after start: sometimes before the first commit, mostly
        // in the middle of a stream of group commits.
        let delay = Duration::from_millis(rng.random_range(20..400));
        tokio::time::sleep(delay).await;
        let status = sigkill(&mut child);
        assert!(!status.success(), "the child runs until killed");
        let acks = reader.join().unwrap();
        if !acks.is_empty() {
            trials_with_acks += 1;
        }
        for (id, seq) in acks {
            let best = acked.entry(id).or_default();
            *best = (*best).max(seq);
        }

        stead_persistence::scratch::wait_for_other_connections(&url, Duration::from_secs(30))
            .await
            .expect("the killed child's connections go away");
        let store = open(&url).await;
        for id in &sessions {
            let events = store.read(*id, 0, 1_000_000).await.unwrap();
            for (i, e) in events.iter().enumerate() {
                assert_eq!(e.seq, i as i64 + 1, "trial {trial}: gap in {id}");
                assert_eq!(e.payload["n"], json!(e.seq), "trial {trial}: order in {id}");
            }
            let have = events.len() as i64;
            let need = acked.get(id).copied().unwrap_or(0);
            assert!(
                have >= need,
                "trial {trial}: session {id} acknowledged seq {need} but the journal ends at {have}"
            );
            assert_eq!(store.get_session(*id).await.unwrap().last_seq, have);
        }
        store.shutdown().await;
    }
    eprintln!(
        "{backend}: {TRIALS} kills, {trials_with_acks} with acknowledged appends, {} events acknowledged in all",
        acked.values().sum::<i64>()
    );
    assert!(
        trials_with_acks >= TRIALS / 2,
        "only {trials_with_acks} of {TRIALS} trials acknowledged anything: the test is not testing"
    );
    guard.cleanup().await;
}

/// The child: appends forever from several concurrent writers and prints `ack ID SEQ` after
/// each append returns. Selected explicitly by the parent; does nothing in a normal run.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn crash_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let sessions: Vec<Uuid> = split_list(&std::env::var(CHILD_SESSIONS).unwrap());
    child_runtime().block_on(async move {
        let store = open(&DatabaseUrl::parse(&url).unwrap()).await;
        println!("ready");
        let mut tasks = Vec::new();
        for id in sessions {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut last = store.get_session(id).await.unwrap().last_seq;
                let mut size = 1;
                loop {
                    let events: Vec<NewEvent> = (1..=size)
                        .map(|i| {
                            NewEvent::new("step", json!({ "n": last + i, "pad": "p".repeat(100) }))
                        })
                        .collect();
                    match store.append(id, last, events).await {
                        Ok(seqs) => {
                            last = *seqs.last().unwrap();
                            use std::io::Write;
                            let mut out = std::io::stdout().lock();
                            writeln!(out, "ack {id} {last}").unwrap();
                            out.flush().unwrap();
                        }
                        Err(Error::Conflict { actual, .. }) => {
                            panic!("single writer conflicted at {actual}")
                        }
                        Err(e) => panic!("append failed: {e}"),
                    }
                    size = size % 3 + 1;
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
}

/// A full database (SQLite's `max_page_count` standing in for a full disk): appends fail with
/// an error that says a retry may work, and every append the store acknowledged — before,
/// between and after the failures — is in the file, read by a fresh connection. (A full
/// *disk* fails later, at the commit's WAL write; `tests/e2e/chaos.rs` fills a real tmpfs for
/// that, the case that lost acknowledged appends before the writer's connections were closed
/// after a failed transaction.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sqlite_database_refuses_appends_and_keeps_every_acknowledged_one() {
    let (url, _guard) = db::fresh_location(Backend::Sqlite).await;
    let id = db::create_sessions(&url, "full", 1).await[0];
    let pages = {
        let store = open(&url).await;
        let DatabaseUrl::Sqlite(path) = &url else {
            unreachable!()
        };
        let size = std::fs::metadata(path).unwrap().len();
        store.shutdown().await;
        (size / 4096) as u32
    };
    let mut options = stead_persistence::StoreOptions::new(url.clone());
    options.sqlite_max_pages = Some(pages + 24);
    let store = stead_persistence::open(options).await.unwrap();
    let (mut last, mut acked, mut refused) = (0i64, Vec::new(), 0);
    for i in 0..200 {
        // Big events fill the file; small ones may still fit between the failures.
        let text = "x".repeat(if i % 3 == 0 { 100 } else { 9_000 });
        match store
            .append(
                id,
                last,
                vec![NewEvent::new("e", json!({ "i": i, "text": text }))],
            )
            .await
        {
            Ok(seqs) => {
                last = *seqs.last().unwrap();
                acked.push((last, i));
            }
            Err(error) => {
                assert!(!error.is_permanent(), "a full disk may clear: {error}");
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "the database never filled up");
    assert!(
        acked.len() > 3,
        "only {} appends were acknowledged",
        acked.len()
    );
    store.shutdown().await;
    let fresh = open(&url).await;
    let journal = fresh.read(id, 0, 1000).await.unwrap();
    let found: Vec<(i64, i64)> = journal
        .iter()
        .map(|e| (e.seq, e.payload["i"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        found, acked,
        "acknowledged appends must be in the file, and only they"
    );
    fresh.shutdown().await;
}
