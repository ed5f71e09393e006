//! A streamed chat over the WebSocket with the real local model: `stead serve` with its
//! built-in configuration (the demo agent on SmolLM2-135M-Instruct, prepared by `stead setup`
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
}
