//! Knowledge collections through `stead serve` on both backends (docs/knowledge.md): the REST
//! contract (create, put, replace, unchanged, list, read, query exact / ANN / hybrid with
//! filters and vectors, delete), bad input answered with a code and nothing changed,
//! `/v1/embeddings` (floats, base64, cached), and the `knowledge` tool in a turn whose model is
//! scripted. Embeddings come from the upstream double's bag-of-words embedder
//! (`stead_testkit::upstream::bag_of_words`), a test double named as one; the real model is
//! tested in `tests/local_model/knowledge.rs`.

use base64::Engine;
use serde_json::{json, Value};
use stead_testkit::client::Api;
use stead_testkit::db;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{bag_of_words, Reply, Upstream, DOUBLE_DIMENSION};

const TEA: &str = "Green tea is steeped at 80 degrees Celsius for two minutes; black tea takes \
                   boiling water and four minutes.";
const BIKES: &str = "To fix a flat bicycle tyre, remove the wheel, find the puncture, patch the \
                     inner tube and pump it up again.";
const RUST: &str = "Rust's borrow checker makes sure references never outlive the data they \
                    point to.";

/// A model that searches with the user's words, then answers citing what it found.
async fn upstream() -> Upstream {
    Upstream::respond(|request: &Value| {
        let messages = request["messages"].as_array().expect("messages");
        let last = messages.last().expect("a message");
        if last["role"] == "tool" {
            let found: Value = serde_json::from_str(last["content"].as_str().unwrap_or("{}"))
                .unwrap_or(Value::Null);
            let id = found["results"][0]["document_id"]
                .as_str()
                .unwrap_or("none");
            return Reply::text(&format!("Steep it at 80 degrees [{id}]."));
        }
        Reply::tool("search", json!({ "query": last["content"] }))
    })
    .await
}

fn config(up: &Upstream) -> String {
    format!(
        r#"
[knowledge]
embedding_route = "embed"
max_document_bytes = 2000

[gateway.cache]
enabled = true

[[providers]]
name = "up"
kind = "openai"
base_url = "{}"

[[routes]]
name = "default"
targets = [{{ provider = "up", model = "scripted" }}]

[[routes]]
name = "embed"
targets = [{{ provider = "up", model = "double-embed" }}]

[[agents]]
name = "reader"
route = "default"
system_prompt = "Answer from the handbook."

[[agents.tools]]
name = "search"
kind = "knowledge"
collections = ["handbook"]
top_k = 2
# The bag-of-words double counts "the" and "for" as much as "tea": words decide here (the real
# model's ranking with the default, exact, is tested in tests/local_model/knowledge.rs).
search = "hybrid"
"#,
        up.base_url
    )
}

async fn expect_error(
    server: &Stead,
    method: &str,
    path: &str,
    body: Value,
    status: u16,
    code: &str,
) {
    let (got, answer) = server.call(method, path, Some(body.clone())).await;
    assert_eq!(
        (got, answer["error"]["code"].as_str()),
        (status, Some(code)),
        "{method} {path} {body}: {answer}"
    );
}

fn ids(answer: &Value) -> Vec<String> {
    answer["results"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|r| r["document_id"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn contract(postgres: bool) {
    let scratch = if postgres {
        Some(db::scratch_postgres("stead_knowledge").await)
    } else {
        None
    };
    let up = upstream().await;
    let server = Stead::start(&config(&up), scratch.as_ref().map(|s| s.url()));

    // Collections: created, then found; another route is a conflict; bad names and routes.
    let (status, created) = server
        .call(
            "POST",
            "/v1/collections",
            Some(json!({ "name": "handbook" })),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (
            &created["name"],
            &created["embedding_route"],
            &created["model"],
            &created["documents"]
        ),
        (&json!("handbook"), &json!("embed"), &Value::Null, &json!(0))
    );
    let (status, _) = server
        .call(
            "POST",
            "/v1/collections",
            Some(json!({ "name": "handbook" })),
        )
        .await;
    assert_eq!(status, 200);
    expect_error(
        &server,
        "POST",
        "/v1/collections",
        json!({ "name": "handbook", "embedding_route": "default" }),
        409,
        "collection_exists",
    )
    .await;
    expect_error(
        &server,
        "POST",
        "/v1/collections",
        json!({ "name": "no spaces!" }),
        422,
        "invalid_collection",
    )
    .await;
    expect_error(
        &server,
        "POST",
        "/v1/collections",
        json!({ "name": "x", "embedding_route": "nope" }),
        422,
        "invalid_collection",
    )
    .await;

    // Documents: created, unchanged, replaced.
    for (id, text, topic) in [
        ("tea", TEA, "drinks"),
        ("bikes", BIKES, "repair"),
        ("rust", RUST, "code"),
    ] {
        let (status, doc) = server
            .call(
                "PUT",
                &format!("/v1/collections/handbook/documents/{id}"),
                Some(json!({ "text": text, "metadata": { "topic": topic } })),
            )
            .await;
        assert_eq!(
            (status, &doc["outcome"], &doc["chunks"]),
            (201, &json!("created"), &json!(1)),
            "{doc}"
        );
    }
    let embeds_before = up
        .requests()
        .iter()
        .filter(|r| r.get("input").is_some())
        .count();
    let (status, same) = server
        .call(
            "PUT",
            "/v1/collections/handbook/documents/tea",
            Some(json!({ "text": TEA, "metadata": { "topic": "drinks" } })),
        )
        .await;
    assert_eq!((status, &same["outcome"]), (200, &json!("unchanged")));
    assert_eq!(
        up.requests()
            .iter()
            .filter(|r| r.get("input").is_some())
            .count(),
        embeds_before,
        "an unchanged document is not embedded again"
    );
    let longer = format!("{TEA} Oolong sits between them at 90 degrees.");
    let (status, replaced) = server
        .call(
            "PUT",
            "/v1/collections/handbook/documents/tea",
            Some(json!({ "text": longer, "metadata": { "topic": "drinks" } })),
        )
        .await;
    assert_eq!(
        (status, &replaced["outcome"]),
        (200, &json!("replaced")),
        "{replaced}"
    );

    let (_, list) = server.call("GET", "/v1/collections", None).await;
    let row = &list["collections"][0];
    assert_eq!(
        json!([
            row["name"],
            row["model"],
            row["dimension"],
            row["documents"],
            row["chunks"]
        ]),
        json!(["handbook", "double-embed", DOUBLE_DIMENSION, 3, 3])
    );

    // Reading: paged by id, one document with its text and chunks.
    let (_, page) = server
        .call("GET", "/v1/collections/handbook/documents?limit=2", None)
        .await;
    let page_ids: Vec<&str> = page["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        (page_ids, &page["next_after"]),
        (vec!["bikes", "rust"], &json!("rust"))
    );
    let (_, rest) = server
        .call(
            "GET",
            "/v1/collections/handbook/documents?limit=2&after=rust",
            None,
        )
        .await;
    assert_eq!(
        (
            rest["documents"][0]["id"].clone(),
            rest["next_after"].clone()
        ),
        (json!("tea"), Value::Null)
    );
    let (_, tea) = server
        .call("GET", "/v1/collections/handbook/documents/tea", None)
        .await;
    assert_eq!(
        (&tea["text"], &tea["chunk_texts"]),
        (&json!(longer), &json!([longer]))
    );

    // Queries: text (exact, ANN, hybrid), best first; a filter; a vector.
    for mode in ["exact", "ann", "hybrid"] {
        let (status, found) = server
            .call(
                "POST",
                "/v1/collections/handbook/query",
                Some(json!({ "text": "what temperature to steep green tea", "top_k": 2, "mode": mode })),
            )
            .await;
        assert_eq!(status, 200, "{found}");
        assert_eq!(found["mode"], mode);
        assert_eq!(ids(&found)[0], "tea", "{mode}: {found}");
        assert_eq!(ids(&found).len(), 2);
        let scores: Vec<f64> = found["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["score"].as_f64().unwrap())
            .collect();
        assert!(scores[0] >= scores[1], "{scores:?}");
        assert_eq!(
            found["results"][0]["metadata"],
            json!({ "topic": "drinks" })
        );
    }
    let (_, repair) = server
        .call(
            "POST",
            "/v1/collections/handbook/query",
            Some(json!({ "text": "green tea", "top_k": 3, "filter": { "topic": "repair" } })),
        )
        .await;
    assert_eq!(ids(&repair), ["bikes"]);
    let (_, by_vector) = server
        .call(
            "POST",
            "/v1/collections/handbook/query",
            Some(json!({ "vector": bag_of_words("bicycle tyre puncture wheel"), "top_k": 1 })),
        )
        .await;
    assert_eq!(ids(&by_vector), ["bikes"]);

    // Bad input: a code, and nothing changed.
    let (_, before) = server.call("GET", "/v1/collections/handbook", None).await;
    let query = "/v1/collections/handbook/query";
    let doc = "/v1/collections/handbook/documents/new";
    expect_error(
        &server,
        "POST",
        query,
        json!({ "vector": [0.1, 0.2] }),
        422,
        "wrong_dimension",
    )
    .await;
    expect_error(
        &server,
        "POST",
        query,
        json!({ "text": "tea", "filter": { "colour": "green" } }),
        422,
        "unknown_filter_field",
    )
    .await;
    expect_error(
        &server,
        "POST",
        query,
        json!({ "text": "tea", "vector": [1.0] }),
        422,
        "invalid_search",
    )
    .await;
    expect_error(
        &server,
        "POST",
        query,
        json!({ "text": "tea", "top_k": 0 }),
        422,
        "invalid_search",
    )
    .await;
    expect_error(
        &server,
        "POST",
        query,
        json!({ "vector": bag_of_words("x"), "mode": "hybrid" }),
        422,
        "invalid_search",
    )
    .await;
    expect_error(
        &server,
        "POST",
        query,
        json!({ "text": "" }),
        422,
        "invalid_search",
    )
    .await;
    expect_error(
        &server,
        "POST",
        "/v1/collections/nope/query",
        json!({ "text": "tea" }),
        404,
        "collection_not_found",
    )
    .await;
    expect_error(
        &server,
        "PUT",
        doc,
        json!({ "text": "  \n " }),
        422,
        "invalid_document",
    )
    .await;
    expect_error(
        &server,
        "PUT",
        doc,
        json!({ "text": "x".repeat(2001) }),
        413,
        "document_too_large",
    )
    .await;
    expect_error(
        &server,
        "PUT",
        doc,
        json!({ "text": "ok", "metadata": { "a": { "b": 1 } } }),
        422,
        "invalid_document",
    )
    .await;
    expect_error(
        &server,
        "PUT",
        "/v1/collections/nope/documents/a",
        json!({ "text": "ok" }),
        404,
        "collection_not_found",
    )
    .await;
    let (status, _) = server
        .call("GET", "/v1/collections/handbook/documents/new", None)
        .await;
    assert_eq!(status, 404);
    let (_, after) = server.call("GET", "/v1/collections/handbook", None).await;
    assert_eq!(after, before);

    // /v1/embeddings: floats, base64 (what the official clients ask for), and the cache.
    let (status, floats) = server
        .call(
            "POST",
            "/v1/embeddings",
            Some(json!({ "model": "embed", "input": ["green tea", "bicycle"] })),
        )
        .await;
    assert_eq!(status, 200, "{floats}");
    assert_eq!(
        floats["data"][1]["embedding"],
        json!(bag_of_words("bicycle"))
    );
    assert_eq!(floats["usage"]["prompt_tokens"], 3);
    let calls = up.requests().len();
    let (_, encoded) = server
        .call(
            "POST",
            "/v1/embeddings",
            Some(json!({ "model": "embed", "input": ["green tea", "bicycle"], "encoding_format": "base64" })),
        )
        .await;
    assert_eq!(
        up.requests().len(),
        calls,
        "the same inputs are answered from the cache"
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(decoded, bag_of_words("green tea"));
    expect_error(
        &server,
        "POST",
        "/v1/embeddings",
        json!({ "model": "embed", "input": [] }),
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        &server,
        "POST",
        "/v1/embeddings",
        json!({ "model": "embed", "input": [[1, 2]] }),
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        &server,
        "POST",
        "/v1/embeddings",
        json!({ "model": "embed", "input": "x", "dimensions": 3 }),
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        &server,
        "POST",
        "/v1/embeddings",
        json!({ "model": "nope", "input": "x" }),
        404,
        "model_not_found",
    )
    .await;

    // The knowledge tool in a turn: the model searches, reads the chunk, cites its id.
    let (id, _) = server.create("reader").await;
    let (status, _) = server
        .say(&id, "How hot should the water be for green tea?")
        .await;
    assert_eq!(status, 200);
    let journal = server.journal(&id).await;
    let result = journal
        .iter()
        .find(|e| e["kind"] == "tool_call_finished")
        .unwrap_or_else(|| panic!("no tool result: {journal:?}"));
    let results = &result["payload"]["result"]["results"];
    assert_eq!(results[0]["document_id"], "tea", "{result}");
    assert_eq!(results[0]["collection"], "handbook");
    assert_eq!(results.as_array().unwrap().len(), 2, "top_k = 2");
    let reply = journal
        .iter()
        .rev()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(reply["payload"]["text"], "Steep it at 80 degrees [tea].");
    // The tool's query embedding is charged to the session's principal (it was
    // charged to no one, outside every key's budget and rate limit).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let logs = loop {
        let (status, logs) = server
            .call(
                "GET",
                &format!("/v1/gateway/logs?route=embed&session_id={id}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{logs}");
        if logs["logs"].as_array().is_some_and(|l| !l.is_empty())
            || std::time::Instant::now() > deadline
        {
            break logs;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(logs["logs"][0]["api_key"], "local", "{logs}");

    // Deleting: a document, then the collection with the rest.
    let (status, _) = server
        .call("DELETE", "/v1/collections/handbook/documents/bikes", None)
        .await;
    assert_eq!(status, 204);
    let (_, none) = server
        .call(
            "POST",
            query,
            Some(json!({ "text": "tyre", "filter": { "topic": "repair" } })),
        )
        .await;
    assert_eq!(ids(&none), Vec::<String>::new());
    let (status, _) = server
        .call("DELETE", "/v1/collections/handbook", None)
        .await;
    assert_eq!(status, 204);
    expect_error(
        &server,
        "GET",
        "/v1/collections/handbook",
        Value::Null,
        404,
        "collection_not_found",
    )
    .await;
    drop(server);
    if let Some(scratch) = scratch {
        scratch.drop_database().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_collections_over_rest_on_sqlite() {
    contract(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knowledge_collections_over_rest_on_postgres() {
    contract(true).await;
}
