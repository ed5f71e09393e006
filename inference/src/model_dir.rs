//! A prepared model directory, as `stead setup` writes it:
//!
//! | file | holds |
//! |---|---|
//! | `model.onnx` | the decoder with KV cache (onnxruntime-genai layout) |
//! | `tokenizer.json` | the Hugging Face tokenizer |
//! | `chat_template.jinja` | the model's own chat template |
//! | `stead_model.json` | shapes and special tokens ([`ModelConfig`]) |

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{Error, Result};

/// `stead_model.json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelConfig {
    pub format: u32,
    pub architecture: String,
    pub name: String,
    #[serde(default)]
    pub precision: String,
    pub vocab_size: usize,
    pub context_length: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
}

pub const SUPPORTED_FORMAT: u32 = 1;

#[derive(Debug, Clone)]
pub struct ModelDir {
    pub path: PathBuf,
    pub config: ModelConfig,
    pub chat_template: String,
}

impl ModelDir {
    pub fn open(path: &Path) -> Result<Self> {
        let problem = |message: String| Error::ModelDir {
            dir: path.display().to_string(),
            message,
        };
        for file in [
            "model.onnx",
            "tokenizer.json",
            "chat_template.jinja",
            "stead_model.json",
        ] {
            if !path.join(file).is_file() {
                return Err(problem(format!(
                    "{file} is missing (run `stead setup` to prepare the model)"
                )));
            }
        }
        let config: ModelConfig = serde_json::from_slice(
            &std::fs::read(path.join("stead_model.json")).map_err(|e| problem(e.to_string()))?,
        )
        .map_err(|e| problem(format!("stead_model.json: {e}")))?;
        if config.format != SUPPORTED_FORMAT {
            return Err(problem(format!(
                "stead_model.json has format {}, this Stead reads format {SUPPORTED_FORMAT}; run `stead setup` again",
                config.format
            )));
        }
        if config
            .eos_token_ids
            .iter()
            .any(|&id| id as usize >= config.vocab_size)
        {
            return Err(problem(
                "stead_model.json has an EOS id outside the vocabulary".into(),
            ));
        }
        if config.eos_token_ids.is_empty() || config.num_layers == 0 || config.num_kv_heads == 0 {
            return Err(problem("stead_model.json lacks EOS ids or shapes".into()));
        }
        let template = path.join("chat_template.jinja");
        if !template.is_file() {
            return Err(problem(
                "it has no chat_template.jinja: the GGUF carries no chat template (a base \
                 model, not an instruct one), so it cannot serve chat"
                    .into(),
            ));
        }
        let chat_template =
            std::fs::read_to_string(&template).map_err(|e| problem(e.to_string()))?;
        Ok(ModelDir {
            path: path.to_path_buf(),
            config,
            chat_template,
        })
    }

    pub fn onnx_path(&self) -> PathBuf {
        self.path.join("model.onnx")
    }

    pub fn tokenizer_path(&self) -> PathBuf {
        self.path.join("tokenizer.json")
    }
}
