//! The official `anthropic` and `openai` Python clients (PyPI, installed by `scripts/test.sh`
//! into the venv named by `OPENAI_PYTHON`) against a keyed `stead serve` with its built-in
//! routes over the real local model: Anthropic's `POST /v1/messages` (`x-api-key` and Bearer,
//! streaming, tools, `tool_choice`, its error envelope — `tests/clients/anthropic_client.py`)
//! and OpenAI's stateless `POST /v1/responses` (`tests/clients/responses_client.py`). Each call
//! is logged like a chat completion: the request log has a record per model call.

use std::process::Command;
use std::time::Duration;

use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::{prepared_data_dir, Stead};

const KEY: &str = "sk-vendor-clients-0123456789";

async fn run(server: &Stead, script: &str, expected: usize) {
    let python = std::env::var("OPENAI_PYTHON")
        .expect("needs OPENAI_PYTHON (scripts/test.sh installs the clients from PyPI)");
    let mut command = Command::new(python);
    command
        .arg(format!(
            "{}/tests/clients/{script}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .arg(&server.base)
        .arg(KEY)
        .env("NO_PROXY", "*");
    external::checks(command, Duration::from_secs(600), expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_and_openai_clients_use_messages_and_responses() {
    let server = Stead::start_in(
        prepared_data_dir(),
        &format!("[server]\napi_keys = [\"{KEY}\"]\n"),
        None,
    );
    run(&server, "anthropic_client.py", 10).await;
    run(&server, "responses_client.py", 6).await;
    // Logged like chat completions: one record per answered call (eleven), on the local
    // provider. The log is written in batches after the answers: the last records may land a
    // moment after the client is done.
    let mut logs = serde_json::Value::Null;
    for _ in 0..100 {
        logs = server
            .call_as(
                "GET",
                "/v1/gateway/logs?limit=200&provider=local",
                None,
                Some(KEY),
            )
            .await
            .1;
        if logs["logs"].as_array().is_some_and(|r| r.len() >= 11) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let records = logs["logs"].as_array().unwrap();
    assert!(records.len() >= 11, "{logs}");
}
