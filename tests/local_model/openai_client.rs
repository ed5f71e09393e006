//! The official `openai` Python client (PyPI, installed by `scripts/test.sh` into a venv named
//! by `OPENAI_PYTHON`) against a running `stead serve` with its built-in configuration: the
//! model router's OpenAI-compatible API over the real local model, streamed and not, with and
//! without tools, embeddings through the `embed` route, and a transcription with the local
//! Whisper model (`tests/clients/openai_client.py`).

use std::process::Command;
use std::time::Duration;

use stead_testkit::external;
use stead_testkit::stead::{prepared_data_dir, Stead};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_talks_to_the_local_model_through_the_router() {
    let python = std::env::var("OPENAI_PYTHON")
        .expect("needs OPENAI_PYTHON (scripts/test.sh installs the openai client from PyPI)");
    let server = Stead::start_in(prepared_data_dir(), "", None);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_client.py"
    );
    let mut command = Command::new(python);
    command.arg(script).arg(&server.base).env("NO_PROXY", "*");
    // Every check ran and passed.
    external::checks(command, Duration::from_secs(300), 11).await;
}
