//! Artifacts' rows on both backends (docs/artifacts.md): recorded, read back by id and by
//! session, refused for a session that does not exist; a session's purge deletes its rows in
//! its transaction and names exactly the blobs no other row still names.

use chrono::Utc;
use stead_persistence::{Artifact, Backend, Error, NewSession, DEFAULT_PROJECT};
use stead_testkit::db;
use uuid::Uuid;

stead_testkit::both_backends!(artifacts_belong_to_sessions_and_go_with_them);

fn artifact(session: Option<Uuid>, sha: char, size: i64) -> Artifact {
    let now = chrono::DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap();
    Artifact {
        id: Uuid::now_v7(),
        sha256: sha.to_string().repeat(64),
        size,
        content_type: "image/png".into(),
        session_id: session,
        project_id: DEFAULT_PROJECT,
        created_by: "local".into(),
        created_at: now,
    }
}

async fn artifacts_belong_to_sessions_and_go_with_them(backend: Backend) {
    let t = db::open(backend).await;
    let new = || NewSession::for_agent("demo");
    let gone = t.store.create_session(new()).await.unwrap().id;
    let kept = t.store.create_session(new()).await.unwrap().id;

    // `a`: only the purged session's (twice); `b`: shared with the kept session; `c`: the
    // project's, no session.
    let rows = [
        artifact(Some(gone), 'a', 10),
        artifact(Some(gone), 'a', 10),
        artifact(Some(gone), 'b', 20),
        artifact(Some(kept), 'b', 20),
        artifact(None, 'c', 30),
    ];
    for row in &rows {
        t.store.insert_artifact(row).await.unwrap();
    }
    assert_eq!(t.store.get_artifact(rows[2].id).await.unwrap(), rows[2]);
    assert_eq!(
        t.store.session_artifacts(gone).await.unwrap(),
        rows[..3].to_vec()
    );
    assert!(matches!(
        t.store.get_artifact(Uuid::now_v7()).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        t.store
            .insert_artifact(&artifact(Some(Uuid::now_v7()), 'd', 1))
            .await,
        Err(Error::SessionNotFound(_))
    ));

    let purged = t.store.purge_session(gone).await.unwrap();
    assert_eq!(purged.artifacts, 3);
    assert_eq!(purged.orphaned_blobs, vec!["a".repeat(64)]);
    assert!(t.store.session_artifacts(gone).await.unwrap().is_empty());
    assert!(matches!(
        t.store.get_artifact(rows[0].id).await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(t.store.get_artifact(rows[3].id).await.unwrap(), rows[3]);
    assert_eq!(t.store.get_artifact(rows[4].id).await.unwrap(), rows[4]);
    let asked = ["a", "b", "c"].map(|c| c.repeat(64)).to_vec();
    assert_eq!(
        t.store.unreferenced_blobs(&asked).await.unwrap(),
        vec!["a".repeat(64)]
    );
    t.finish().await;
}
