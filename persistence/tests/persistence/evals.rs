//! Evaluation datasets, cases, runs and results on both backends: cases keep their order and
//! move the dataset's version, a result counts once in its run, and an evaluation's sessions
//! stay out of session lists unless asked for by run; reviewers' feedback is listed by session
//! and rating and goes with its session's purge.

use chrono::SubsecRound;
use serde_json::json;
use stead_persistence::evals::{EvalResultRow, EvalRunRow, EvalStatus, FeedbackRow, Rating};
use stead_persistence::{Backend, Error, NewSession, SessionQuery};
use stead_testkit::db;
use uuid::Uuid;

stead_testkit::both_backends!(
    datasets_runs_and_results_round_trip,
    one_name_in_two_projects_is_two_datasets,
    feedback_is_listed_by_session_and_rating_and_purged_with_its_session,
);

/// The project the round trip works in.
const P: Uuid = stead_persistence::DEFAULT_PROJECT;

async fn datasets_runs_and_results_round_trip(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let created = store.create_dataset(P, "suite").await.unwrap();
    assert_eq!((created.version, created.cases), (0, 0));
    assert!(matches!(
        store.create_dataset(P, "suite").await,
        Err(Error::Exists(_))
    ));
    assert!(matches!(
        store.get_dataset(P, "nope").await,
        Err(Error::NotFound(_))
    ));
    let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let first = store
        .add_cases(
            P,
            "suite",
            &[(ids[0], json!({"n": 0})), (ids[1], json!({"n": 1}))],
        )
        .await
        .unwrap();
    assert_eq!((first.version, first.cases), (1, 2));
    let second = store
        .add_cases(P, "suite", &[(ids[2], json!({"n": 2, "text": "ünïcode"}))])
        .await
        .unwrap();
    assert_eq!((second.version, second.cases), (2, 3));
    let cases = store.dataset_cases(P, "suite").await.unwrap();
    assert_eq!(
        cases.iter().map(|c| (c.id, c.position)).collect::<Vec<_>>(),
        vec![(ids[0], 0), (ids[1], 1), (ids[2], 2)]
    );
    assert_eq!(cases[2].body, json!({"n": 2, "text": "ünïcode"}));
    assert!(matches!(
        store
            .add_cases(P, "nope", &[(Uuid::now_v7(), json!({}))])
            .await,
        Err(Error::NotFound(_))
    ));

    let run = EvalRunRow {
        id: Uuid::now_v7(),
        project_id: P,
        dataset: "suite".into(),
        dataset_version: second.version,
        settings: json!({"route": "fast"}),
        status: EvalStatus::Running,
        total: 3,
        done: 0,
        passed: 0,
        error: None,
        created_at: chrono::Utc::now(),
        finished_at: None,
    };
    store.create_eval_run(&run).await.unwrap();
    for (i, id) in ids.iter().enumerate() {
        let result = EvalResultRow {
            case_id: *id,
            position: i as i64,
            passed: i != 1,
            body: json!({"case": i}),
        };
        store.put_eval_result(run.id, &result).await.unwrap();
        // A result stored twice counts once.
        store.put_eval_result(run.id, &result).await.unwrap();
    }
    store
        .finish_eval_run(run.id, EvalStatus::Finished, None)
        .await
        .unwrap();
    let read = store.get_eval_run(run.id).await.unwrap();
    assert_eq!(
        (read.status, read.total, read.done, read.passed),
        (EvalStatus::Finished, 3, 3, 2)
    );
    assert_eq!(read.settings, json!({"route": "fast"}));
    assert!(read.finished_at.is_some());
    let results = store.eval_results(run.id).await.unwrap();
    assert_eq!(
        results.iter().map(|r| r.passed).collect::<Vec<_>>(),
        [true, false, true]
    );
    assert_eq!(
        store
            .list_eval_runs(P, Some("suite"), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store
        .list_eval_runs(P, Some("other"), 10)
        .await
        .unwrap()
        .is_empty());

    // An evaluation's session is listed only when its run is asked for.
    let user = store
        .create_session(NewSession::for_agent("a"))
        .await
        .unwrap();
    let eval = store
        .create_session(NewSession::for_agent("a"))
        .await
        .unwrap();
    store.tag_eval_session(eval.id, run.id).await.unwrap();
    // A sub-agent's child session of an evaluation's session belongs to the run too; a user
    // session's child does not.
    let child_of = |parent: Uuid| NewSession {
        project_id: stead_persistence::DEFAULT_PROJECT,
        parent: Some(stead_persistence::ParentLink {
            session_id: parent,
            call_id: "t1".into(),
        }),
        ..NewSession::for_agent("a")
    };
    let eval_child = store.create_session(child_of(eval.id)).await.unwrap();
    let user_child = store.create_session(child_of(user.id)).await.unwrap();
    let listed = |page: stead_persistence::SessionPage| {
        let mut ids = page.sessions.iter().map(|s| s.id).collect::<Vec<_>>();
        ids.sort();
        ids
    };
    let all = store.list_sessions(&SessionQuery::default()).await.unwrap();
    let mut want = vec![user.id, user_child.id];
    want.sort();
    assert_eq!(listed(all), want);
    let of_run = SessionQuery {
        scope: stead_persistence::Scope::Installation,
        eval_run: Some(run.id),
        ..Default::default()
    };
    let mut want = vec![eval.id, eval_child.id];
    want.sort();
    assert_eq!(listed(store.list_sessions(&of_run).await.unwrap()), want);
    assert!(store.delete_dataset(P, "suite").await.unwrap());
    assert!(store.dataset_cases(P, "suite").await.unwrap().is_empty());
    // Runs outlive their dataset.
    assert_eq!(store.eval_results(run.id).await.unwrap().len(), 3);
}

/// Ratings of replies: stored, read back by id, listed newest first by session and rating,
/// and deleted with their session's purge.
async fn feedback_is_listed_by_session_and_rating_and_purged_with_its_session(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let session = store
        .create_session(NewSession::for_agent("demo"))
        .await
        .unwrap()
        .id;
    let other = store
        .create_session(NewSession::for_agent("demo"))
        .await
        .unwrap()
        .id;
    let row = |session_id, seq, rating, correction: Option<&str>| FeedbackRow {
        id: Uuid::now_v7(),
        session_id,
        seq,
        rating,
        note: "wrong sum".into(),
        correction: correction.map(str::to_string),
        created_by: "local".into(),
        created_at: chrono::Utc::now().trunc_subsecs(3),
    };
    let down = row(session, 4, Rating::Down, Some("17 × 23 = 391."));
    let up = row(session, 9, Rating::Up, None);
    let elsewhere = row(other, 4, Rating::Down, None);
    for r in [&down, &up, &elsewhere] {
        store.add_feedback(r).await.unwrap();
        // Distinct times: the list is newest first.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(store.get_feedback(down.id).await.unwrap(), down);
    assert!(matches!(
        store.get_feedback(Uuid::now_v7()).await,
        Err(Error::NotFound(_))
    ));
    let ids = |rows: Vec<FeedbackRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store
            .list_feedback(
                stead_persistence::Scope::Installation,
                Some(session),
                None,
                10
            )
            .await
            .unwrap()),
        [up.id, down.id]
    );
    assert_eq!(
        ids(store
            .list_feedback(
                stead_persistence::Scope::Installation,
                None,
                Some(Rating::Down),
                10
            )
            .await
            .unwrap()),
        [elsewhere.id, down.id]
    );
    assert_eq!(
        ids(store
            .list_feedback(stead_persistence::Scope::Installation, None, None, 1)
            .await
            .unwrap()),
        [elsewhere.id]
    );
    store.purge_session(session).await.unwrap();
    assert_eq!(
        ids(store
            .list_feedback(stead_persistence::Scope::Installation, None, None, 10)
            .await
            .unwrap()),
        [elsewhere.id]
    );
}

/// Dataset names are unique within a project: two projects' `suite` are two datasets with their
/// own cases and versions; each project lists its own runs; deleting one leaves the other.
async fn one_name_in_two_projects_is_two_datasets(backend: Backend) {
    let t = db::open(backend).await;
    let store = &t.store;
    let other = Uuid::now_v7();
    store.create_dataset(P, "suite").await.unwrap();
    store.create_dataset(other, "suite").await.unwrap();
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    store
        .add_cases(P, "suite", &[(a, json!({"n": 0}))])
        .await
        .unwrap();
    let theirs = store
        .add_cases(
            other,
            "suite",
            &[(b, json!({"n": 1})), (c, json!({"n": 2}))],
        )
        .await
        .unwrap();
    assert_eq!((theirs.cases, theirs.version), (2, 1));
    let ids = |rows: Vec<stead_persistence::evals::CaseRow>| {
        rows.into_iter().map(|r| r.id).collect::<Vec<_>>()
    };
    assert_eq!(ids(store.dataset_cases(P, "suite").await.unwrap()), vec![a]);
    assert_eq!(
        ids(store.dataset_cases(other, "suite").await.unwrap()),
        vec![b, c]
    );
    assert_eq!(store.get_dataset(P, "suite").await.unwrap().cases, 1);
    assert_eq!(store.list_datasets(other).await.unwrap().len(), 1);

    let run = EvalRunRow {
        id: Uuid::now_v7(),
        project_id: other,
        dataset: "suite".into(),
        dataset_version: theirs.version,
        settings: json!({}),
        status: EvalStatus::Running,
        total: 2,
        done: 0,
        passed: 0,
        error: None,
        created_at: chrono::Utc::now().trunc_subsecs(6),
        finished_at: None,
    };
    store.create_eval_run(&run).await.unwrap();
    assert_eq!(store.get_eval_run(run.id).await.unwrap().project_id, other);
    let listed = |project| async move {
        store
            .list_eval_runs(project, None, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(other).await, vec![run.id]);
    assert!(listed(P).await.is_empty());

    assert!(store.delete_dataset(other, "suite").await.unwrap());
    assert!(matches!(
        store.get_dataset(other, "suite").await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(ids(store.dataset_cases(P, "suite").await.unwrap()), vec![a]);
}
