//! Evaluations over REST (docs/evals.md): a dataset made from a recorded session, a run that
//! answers 202 and finishes in the background with every case graded against its recording,
//! the run's sessions kept out of the session list, a comparison, and bad input refused with
//! its code.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;

async fn finished(app: &App, id: &str) -> Value {
    for _ in 0..200 {
        let (status, run) = app.call("GET", &format!("/v1/evals/{id}"), None).await;
        assert_eq!(status, 200, "{run}");
        if run["status"] != "running" {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the run did not finish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_session_becomes_a_case_and_a_run_grades_it() {
    let model = ScriptedModel::respond(|_| ("Hello there.".to_string(), vec![]));
    let app = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    let (id, _) = app.create("ops").await;
    let (status, _) = app.say(&id, "hi").await;
    assert_eq!(status, 200);

    let (status, created) = app
        .call("POST", "/v1/datasets", Some(json!({"name": "suite"})))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (&created["name"], &created["cases"]),
        (&json!("suite"), &json!(0))
    );
    for (path, body, want, code) in [
        (
            "/v1/datasets",
            json!({"name": "suite"}),
            409,
            "dataset_exists",
        ),
        (
            "/v1/datasets",
            json!({"name": "a b"}),
            422,
            "invalid_request",
        ),
        ("/v1/datasets", json!({"nam": "x"}), 422, "invalid_request"),
        (
            "/v1/datasets/nope/cases",
            json!({"session_id": id}),
            404,
            "dataset_not_found",
        ),
        (
            "/v1/datasets/suite/cases",
            json!({"session_id": "01a24800-0000-7000-8000-000000000000"}),
            422,
            "invalid_request",
        ),
        (
            "/v1/datasets/suite/cases",
            json!({"session_id": id, "at_seq": 999}),
            422,
            "invalid_request",
        ),
        (
            "/v1/datasets/suite/cases",
            json!({"session_id": id, "expect": [{"type": "reply_matches", "regex": "("}]}),
            422,
            "invalid_request",
        ),
        (
            "/v1/evals",
            json!({"dataset": "nope"}),
            404,
            "dataset_not_found",
        ),
        (
            "/v1/evals",
            json!({"dataset": "suite", "route": "nope"}),
            422,
            "invalid_request",
        ),
    ] {
        let (status, answer) = app.call("POST", path, Some(body.clone())).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (want, &json!(code)),
            "{path} {body}: {answer}"
        );
    }
    let (status, added) = app
        .call(
            "POST",
            "/v1/datasets/suite/cases",
            Some(json!({"session_id": id})),
        )
        .await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["dataset"]["cases"], 1);
    let (_, dataset) = app.call("GET", "/v1/datasets/suite", None).await;
    assert_eq!(dataset["items"][0]["turns"][0]["user"], "hi");
    assert_eq!(
        dataset["items"][0]["turns"][0]["recorded"]["reply"],
        "Hello there."
    );

    let (status, started) = app
        .call(
            "POST",
            "/v1/evals",
            Some(json!({"dataset": "suite", "concurrency": 2})),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let run_id = started["id"].as_str().unwrap().to_string();
    let run = finished(&app, &run_id).await;
    assert_eq!(run["status"], "finished", "{run}");
    assert_eq!(
        run["summary"],
        json!({"total": 1, "done": 1, "passed": 1, "failed": 0})
    );
    assert_eq!(
        run["cases"][0]["turns"][0]["outcome"]["reply"],
        "Hello there."
    );
    let (_, runs) = app.call("GET", "/v1/evals?dataset=suite", None).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);
    let (status, compared) = app
        .call("GET", &format!("/v1/evals/{run_id}/compare/{run_id}"), None)
        .await;
    assert_eq!(status, 200, "{compared}");
    assert_eq!(
        (&compared["regressed"], &compared["fixed"]),
        (&json!(0), &json!(0))
    );
    let (status, missing) = app
        .call(
            "GET",
            "/v1/evals/01a24800-0000-7000-8000-000000000000",
            None,
        )
        .await;
    assert_eq!(
        (status, &missing["error"]["code"]),
        (404, &json!("eval_not_found"))
    );

    // The run's session is not among the users' sessions.
    let (_, sessions) = app.call("GET", "/v1/sessions", None).await;
    let ids: Vec<&str> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id.as_str()]);
}

/// The seq of the first event of `kind` in the session's journal.
async fn seq_of(app: &App, id: &str, kind: &str) -> i64 {
    let (_, page) = app
        .call("GET", &format!("/v1/sessions/{id}/events"), None)
        .await;
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {page}"))["seq"]
        .as_i64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rated_reply_becomes_a_case_expecting_its_correction() {
    let model = ScriptedModel::respond(|_| ("Hello there.".to_string(), vec![]));
    let app = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    let (id, token) = app.create("ops").await;
    let (other, other_token) = app.create("ops").await;
    app.say(&id, "hi").await;
    let (user, reply) = (
        seq_of(&app, &id, "user_message").await,
        seq_of(&app, &id, "assistant_message").await,
    );
    let feedback = format!("/v1/sessions/{id}/feedback");

    // The session's own token rates its reply.
    let (status, down) = app
        .call_as(
            "POST",
            &feedback,
            Some(json!({"seq": reply, "rating": "down", "note": "too curt", "correction": "Hello! How can I help you today?"})),
            Some(&token),
        )
        .await;
    assert_eq!(status, 201, "{down}");
    assert_eq!(
        (&down["seq"], &down["rating"], &down["note"]),
        (&json!(reply), &json!("down"), &json!("too curt"))
    );
    assert_eq!(down["created_by"], format!("session_token:{id}"));
    let (status, bare) = app
        .call(
            "POST",
            &feedback,
            Some(json!({"seq": reply, "rating": "down"})),
        )
        .await;
    assert_eq!(status, 201, "{bare}");
    let (status, up) = app
        .call(
            "POST",
            &feedback,
            Some(json!({"seq": reply, "rating": "up"})),
        )
        .await;
    assert_eq!(status, 201, "{up}");

    // Bad input: refused with its code, nothing stored.
    for (body, bearer, want, code) in [
        (
            json!({"seq": user, "rating": "down"}),
            None,
            422,
            "invalid_request",
        ),
        (
            json!({"seq": 999, "rating": "up"}),
            None,
            422,
            "invalid_request",
        ),
        (
            json!({"seq": reply, "rating": "meh"}),
            None,
            422,
            "invalid_request",
        ),
        (
            json!({"seq": reply, "rating": "up", "note": "x".repeat(4001)}),
            None,
            422,
            "invalid_request",
        ),
        (
            json!({"seq": reply, "rating": "up"}),
            Some(other_token.as_str()),
            403,
            "forbidden",
        ),
    ] {
        let (status, answer) = app
            .call_as("POST", &feedback, Some(body.clone()), bearer)
            .await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (want, &json!(code)),
            "{body}: {answer}"
        );
    }
    let (_, listed) = app.call_as("GET", &feedback, None, Some(&token)).await;
    assert_eq!(listed["feedback"].as_array().unwrap().len(), 3, "{listed}");
    let (_, downs) = app.call("GET", "/v1/feedback?rating=down", None).await;
    assert_eq!(downs["feedback"].as_array().unwrap().len(), 2, "{downs}");
    let (status, _) = app.call_as("GET", "/v1/feedback", None, Some(&token)).await;
    assert_eq!(status, 403, "the reviewers' queue is operators'");
    let (_, none) = app
        .call("GET", &format!("/v1/sessions/{other}/feedback"), None)
        .await;
    assert_eq!(none["feedback"], json!([]));

    // Ratings become cases.
    app.call("POST", "/v1/datasets", Some(json!({"name": "rated"})))
        .await;
    let cases = "/v1/datasets/rated/cases";
    for (body, want, code) in [
        (json!({"feedback_id": bare["id"]}), 422, "invalid_request"),
        (
            json!({"feedback_id": "01a24800-0000-7000-8000-000000000000"}),
            422,
            "invalid_request",
        ),
        (
            json!({"feedback_id": down["id"], "session_id": id}),
            422,
            "invalid_request",
        ),
    ] {
        let (status, answer) = app.call("POST", cases, Some(body.clone())).await;
        assert_eq!(
            (status, &answer["error"]["code"]),
            (want, &json!(code)),
            "{body}: {answer}"
        );
    }
    for body in [
        json!({"feedback_id": down["id"]}),
        json!({"feedback_id": bare["id"], "expect": [{"type": "reply_contains", "text": "help"}]}),
        json!({"feedback_id": up["id"]}),
    ] {
        let (status, added) = app.call("POST", cases, Some(body.clone())).await;
        assert_eq!(status, 201, "{body}: {added}");
    }
    let (_, dataset) = app.call("GET", "/v1/datasets/rated", None).await;
    let items = dataset["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for item in items {
        assert_eq!(item["source"], json!({"session_id": id, "at_seq": user}));
        assert_eq!(item["turns"][0]["user"], "hi");
    }
    let expect = &items[0]["turns"][0]["expect"];
    assert_eq!(expect[0]["type"], "judge", "{expect}");
    let rubric = expect[0]["rubric"].as_str().unwrap();
    assert!(
        rubric.contains("\"Hello! How can I help you today?\"") && rubric.contains("too curt"),
        "{rubric}"
    );
    assert_eq!(
        items[1]["turns"][0]["expect"],
        json!([{"type": "reply_contains", "text": "help"}])
    );
    // A good rating keeps the recording as the baseline.
    assert_eq!(items[2]["turns"][0].get("expect"), None);
    assert_eq!(items[2]["turns"][0]["recorded"]["reply"], "Hello there.");
}
