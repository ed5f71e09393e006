//! The pinned memory block over REST (docs/sessions.md, "Memory block"; docs/api.md): read by
//! the session's token or an operator, replaced by an operator and journaled as
//! `memory_updated`; a text over the limit or a session token's edit is refused with a code and
//! nothing journaled; the next model call shows the block after the system prompt.

use std::sync::{Arc, Mutex};

use serde_json::json;
use stead_testkit::app::{ops_agent, App};
use stead_testkit::client::Api;
use stead_testkit::model::ScriptedModel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_reads_and_replaces_the_memory_block() {
    let prompts: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = prompts.clone();
    let model = ScriptedModel::respond(move |request| {
        seen.lock().unwrap().push(request.system_prompt.clone());
        ("Noted.".to_string(), vec![])
    });
    let app = App::start(vec![ops_agent()], Arc::new(model), &[]).await;
    let (id, token) = app.create("ops").await;
    let path = format!("/v1/sessions/{id}/memory");

    let (status, empty) = app.call_as("GET", &path, None, Some(&token)).await;
    assert_eq!(status, 200, "{empty}");
    assert_eq!(
        empty,
        json!({ "session_id": id, "text": "", "max_chars": 2000 })
    );

    // A session token may read it, not replace it.
    let before = app.journal(&id).await.len();
    let (status, refused) = app
        .call_as("PUT", &path, Some(json!({"text": "x"})), Some(&token))
        .await;
    assert_eq!(status, 403, "{refused}");
    // Too long, or not the shape: a code, nothing journaled.
    for (body, code) in [
        (json!({"text": "x".repeat(2001)}), "invalid_request"),
        (json!({"text": 7}), "invalid_request"),
        (json!({"txt": "a"}), "invalid_request"),
    ] {
        let (status, answer) = app.call("PUT", &path, Some(body)).await;
        assert_eq!(
            (status / 100, &answer["error"]["code"]),
            (4, &json!(code)),
            "{answer}"
        );
    }
    assert_eq!(app.journal(&id).await.len(), before);

    let (status, set) = app
        .call("PUT", &path, Some(json!({"text": "Code word: HERON"})))
        .await;
    assert_eq!(status, 200, "{set}");
    let (_, read) = app.call_as("GET", &path, None, Some(&token)).await;
    assert_eq!(read["text"], "Code word: HERON");
    let journal = app.journal(&id).await;
    let updated = journal.last().unwrap();
    assert_eq!(updated["kind"], "memory_updated");
    assert_eq!(updated["payload"]["text"], "Code word: HERON");
    assert!(updated["payload"]["by"]
        .as_str()
        .unwrap()
        .starts_with("operator:"));
    assert_eq!(updated["seq"], set["seq"]);

    // The next model call shows it after the system prompt.
    let (status, _) = app.say(&id, "What is the code word?").await;
    assert_eq!(status, 200);
    let last = prompts.lock().unwrap().last().cloned().unwrap();
    assert!(
        last.ends_with("Memory (facts to keep):\nCode word: HERON"),
        "{last}"
    );
}
