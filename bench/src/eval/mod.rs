//! `stead eval`: how well the local model serves the built-in `demo` agent, measured through a
//! `stead serve` child process on the data directory's prepared models — `tools` scores the
//! first model call of forty one-message sessions (`tools.rs`), `agent` grades whole turns and
//! conversations against the dataset file `evals/datasets/demo-agent.jsonl` through the
//! evaluation engine (`agent.rs`).

pub mod agent;
mod tools;

pub use tools::tools;

use anyhow::Context;

use crate::ServeProcess;
use stead_config::prepare_data_dir;
use stead_config::Config;

/// A `stead serve` child in a scratch directory beside the data directory's prepared models
/// (linked, not copied), with the built-in configuration — the `demo` agent — on the default
/// local model, or on `model` (a prepared model's directory name) when given. Returns the
/// scratch directory (removed when dropped), the server and the model's name.
pub(crate) fn scratch_server(
    config: &Config,
    model: Option<&str>,
) -> anyhow::Result<(tempfile::TempDir, ServeProcess, String)> {
    let (scratch, config_text, model) = scratch_dir(config, model)?;
    let server = ServeProcess::start(scratch.path(), &config_text)?;
    Ok((scratch, server, model))
}

/// The scratch directory of [`scratch_server`] with its `stead.toml` written, without a
/// server: the configuration's text and the model's name with it.
pub(crate) fn scratch_dir(
    config: &Config,
    model: Option<&str>,
) -> anyhow::Result<(tempfile::TempDir, String, String)> {
    let data = std::path::absolute(&config.server.data_dir)?;
    prepare_data_dir(&data)?;
    let scratch = tempfile::Builder::new()
        .prefix("eval-")
        .tempdir_in(&data)
        .context("cannot create the evaluation's scratch directory")?;
    for part in ["models", "runtime"] {
        let target = data.join(part);
        anyhow::ensure!(
            target.is_dir(),
            "{} is missing: run `stead setup` first",
            target.display()
        );
        std::os::unix::fs::symlink(&target, scratch.path().join(part))?;
    }
    let (config_text, model) = match model {
        None => (
            String::new(),
            config
                .routes
                .first()
                .and_then(|r| r.targets.first())
                .map(|t| t.model.clone())
                .unwrap_or_default(),
        ),
        Some(name) => {
            let dir = scratch.path().join("models").join(name);
            anyhow::ensure!(
                dir.is_dir(),
                "no prepared model `{name}`: run `stead setup --model {name}` first"
            );
            // The built-in agents and provider, with the local provider on this model.
            let text = format!(
                "[[providers]]\nname = \"local\"\nkind = \"onnx\"\nmodel_dir = {dir:?}\n\n\
                 [[routes]]\nname = \"default\"\n[[routes.targets]]\nprovider = \"local\"\n\
                 model = {name:?}\ntimeout_secs = 120.0\n",
                dir = dir.display().to_string(),
            );
            (text, name.to_string())
        }
    };
    std::fs::write(scratch.path().join("stead.toml"), &config_text)?;
    Ok((scratch, config_text, model))
}

/// `GET url` as JSON (an error status is an error).
pub(crate) async fn get_json(
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<serde_json::Value> {
    Ok(http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// `POST url` with a JSON body, answered as JSON (an error status is an error).
pub(crate) async fn post_json(
    http: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    Ok(http
        .post(url)
        .json(body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}
