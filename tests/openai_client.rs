//! The official `openai` Python client (PyPI, installed by `scripts/test.sh` into a venv named
//! by `OPENAI_PYTHON`) against a running `stead serve` with its built-in configuration: the
//! model router's OpenAI-compatible API over the real local model, streamed and not, with and
//! without tools (`tests/clients/openai_client.py`).

#[path = "support/stead.rs"]
mod stead;

use stead::Stead;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_talks_to_the_local_model_through_the_router() {
    let python = std::env::var("OPENAI_PYTHON")
        .expect("needs OPENAI_PYTHON (scripts/test.sh installs the openai client from PyPI)");
    let prepared = std::path::PathBuf::from(
        std::env::var_os("STEAD_DATA_DIR").expect("needs STEAD_DATA_DIR prepared by `stead setup`"),
    );
    let data = tempfile::tempdir().unwrap();
    for part in ["models", "runtime"] {
        std::os::unix::fs::symlink(prepared.join(part), data.path().join(part)).unwrap();
    }
    let server = Stead::start_in(data, "", None);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_client.py"
    );
    let output = tokio::task::spawn_blocking({
        let base = server.base.clone();
        move || {
            std::process::Command::new(python)
                .arg(script)
                .arg(base)
                .env("NO_PROXY", "*")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the client failed:\n{stdout}\n{stderr}"
    );
    // Every check ran and passed.
    let checks: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(checks.len(), 7, "{stdout}");
    assert!(checks.iter().all(|c| c["ok"] == true), "{stdout}");
}
