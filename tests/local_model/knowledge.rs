//! Knowledge on the real local models (docs/knowledge.md): `stead serve` with its built-in
//! providers (the chat model and all-MiniLM-L6-v2 behind the `embed` route) and a `librarian`
//! agent whose `search` tool reads the `handbook` collection. The Knowledge page in a real
//! browser (`web-ui/e2e/knowledge.mjs`: create the collection, add three documents, query it;
//! screenshot `12-knowledge`), then the same ranking over REST in every mode, then a turn in
//! which the model decides by itself to search and gets the right passage back.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::{prepared_data_dir, Stead};

const CONFIG: &str = r#"
[[agents]]
name = "librarian"
route = "default"
system_prompt = "You answer questions about the team handbook. Always call the search tool with the question first, then answer in one sentence and cite the document id in brackets."
max_steps = 4

[[agents.tools]]
name = "search"
kind = "knowledge"
description = "Search the team handbook for passages that answer a question"
collections = ["handbook"]
top_k = 2
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_knowledge_page_rest_and_tool_work_on_the_real_models() {
    let web_ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    assert!(
        web_ui.join("../node_modules/playwright-core").is_dir(),
        "needs `npm ci` at the repository root (scripts/build-web-ui.sh runs it)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let server = Stead::start_in(prepared_data_dir(), CONFIG, None);

    // The page: collection, documents, a query whose first result is the tea document.
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-screenshots");
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/knowledge.mjs")
        .arg(&server.base)
        .arg(&out)
        .env("CHROMIUM", &chromium);
    let stdout = external::run(command, Duration::from_secs(300), "the browser run failed")
        .await
        .stdout;
    assert!(stdout.contains(r#"{"done":true}"#), "{stdout}");
    assert!(
        out.join("12-knowledge.png").is_file(),
        "screenshot 12-knowledge"
    );

    // What the page wrote is in the collection, embedded by the real model.
    let (status, collection) = server.call("GET", "/v1/collections/handbook", None).await;
    assert_eq!(status, 200, "{collection}");
    assert_eq!(
        json!([
            collection["model"],
            collection["dimension"],
            collection["documents"]
        ]),
        json!(["all-minilm-l6-v2", 384, 3])
    );
    for (question, expected) in [
        ("How hot should the water be for green tea?", "tea"),
        ("My bike has a puncture, what do I do?", "bikes"),
        ("Why can't a reference outlive its data?", "rust"),
    ] {
        for mode in ["exact", "ann", "hybrid"] {
            let (status, found) = server
                .call(
                    "POST",
                    "/v1/collections/handbook/query",
                    Some(json!({ "text": question, "top_k": 3, "mode": mode })),
                )
                .await;
            assert_eq!(status, 200, "{found}");
            assert_eq!(
                found["results"][0]["document_id"], expected,
                "{mode} {question}: {found}"
            );
        }
    }

    // A turn: the model searches by itself and is given the tea passage.
    let (id, _) = server.create("librarian").await;
    let (status, _) = server
        .say(
            &id,
            "Search the handbook: how hot should the water be for green tea?",
        )
        .await;
    assert_eq!(status, 200);
    let journal = server.journal(&id).await;
    let requested: Vec<&Value> = journal
        .iter()
        .filter(|e| e["kind"] == "tool_call_requested")
        .collect();
    assert!(
        requested
            .first()
            .is_some_and(|e| e["payload"]["tool"] == "search"),
        "the model did not search: {journal:#?}"
    );
    let finished = journal
        .iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap_or_else(|| panic!("the search did not finish: {journal:#?}"));
    assert_eq!(
        finished["payload"]["result"]["results"][0]["document_id"], "tea",
        "{finished}"
    );
    assert!(
        journal.iter().any(|e| e["kind"] == "assistant_message"),
        "no answer: {journal:#?}"
    );
}
