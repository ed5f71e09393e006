//! A streamed chat over the WebSocket with the real local model: `stead serve` with its
//! built-in configuration (the demo agent on Qwen2.5-Coder-0.5B-Instruct, prepared by `stead setup`
//! into `$STEAD_DATA_DIR`; the test links the prepared model and runtime into its own data
//! directory).

use serde_json::json;
use stead_testkit::client::Api;
use stead_testkit::stead::{events, prepared_data_dir, streamed_text, Stead};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_chat_with_the_real_model() {
    let server = Stead::start_in(prepared_data_dir(), "", None);
    let (id, token) = server.create("demo").await;
    let mut ws = server.ws(&id, &token, "").await;
    assert_eq!(ws.next().await.unwrap()["type"], "hello");
    ws.send(json!({ "type": "user_message", "text": "What is the capital of France? Answer in one sentence." }))
        .await;
    let frames = ws.until_event("turn_finished").await;
    let journal = server.journal(&id).await;
    let finished = journal
        .iter()
        .find(|e| e["kind"] == "model_call_finished")
        .expect("the model answered");
    let text = finished["payload"]["text"].as_str().unwrap();
    assert!(text.contains("Paris"), "{text}");
    assert_eq!(streamed_text(&frames), text, "the deltas are the answer");
    assert!(
        frames.iter().filter(|f| f["type"] == "delta").count() > 1,
        "streamed"
    );
    assert_eq!(finished["payload"]["provider"], "local");
    assert!(
        finished["payload"]["usage"]["completion_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(events(&frames), journal[1..].to_vec());

    // The second turn's prompt starts with the first one's: the engine prefills only the rest.
    ws.send(json!({ "type": "user_message", "text": "And of Italy?" }))
        .await;
    ws.until_event("turn_finished").await;
    let metrics = server.metrics().await;
    let figure = |name: &str| -> f64 {
        let prefix = format!("{name}{{provider=\"local\",model=\"qwen2.5-coder-0.5b-instruct\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{metrics}"))
            .parse()
            .unwrap()
    };
    assert!(figure("stead_inference_prefix_cache_hits_total") >= 1.0);
    assert!(figure("stead_inference_prefix_cache_hit_tokens_total") >= 32.0);
    let bytes = figure("stead_inference_prefix_cache_bytes");
    assert!(bytes > 0.0 && bytes <= figure("stead_inference_prefix_cache_capacity_bytes"));
    for series in ["misses_total", "evictions_total", "evicted_tokens_total"] {
        figure(&format!("stead_inference_prefix_cache_{series}"));
    }
}
