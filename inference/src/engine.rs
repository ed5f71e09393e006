//! One ONNX Runtime session over a prepared decoder, and the batched forward passes the
//! scheduler needs: a prefill of one prompt, and a decode step of many rows at once.
//!
//! KV cache layout (onnxruntime-genai): per layer a key and a value tensor of shape
//! `[batch, kv_heads, len, head_dim]`. Rows of different lengths share one buffer, right-padded:
//! row `i` holds `valid_len[i]` positions and its attention mask is `valid_len[i] + 1` ones (the
//! past plus the new token) followed by zeros; the graph derives each row's length from the
//! mask and writes the new position right after the row's valid ones.

use std::path::Path;
use std::sync::OnceLock;

use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor};

use crate::model_dir::{ModelConfig, ModelDir};
use crate::{Error, Result};

/// Which hardware runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutionProvider {
    #[default]
    Cpu,
    /// CUDA, or fail at start.
    Cuda,
    /// CUDA when it works, else CPU with a warning.
    Auto,
}

static ENVIRONMENT: OnceLock<std::result::Result<ort::environment::Environment, String>> =
    OnceLock::new();

/// Loads ONNX Runtime from `library` (once per process; later calls reuse the first).
pub fn init_runtime(library: &Path) -> Result<ort::environment::Environment> {
    ENVIRONMENT
        .get_or_init(|| {
            if !library.is_file() {
                return Err(format!(
                    "{} does not exist (run `stead setup` to prepare ONNX Runtime)",
                    library.display()
                ));
            }
            ort::init_from(library)
                .map_err(|e| format!("cannot load {}: {e}", library.display()))?
                .with_name("stead")
                .with_telemetry(false)
                .build()
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(Error::Runtime)
}

/// Per layer: (key, value).
pub type KvCache = Vec<(DynValue, DynValue)>;

pub struct Engine {
    session: Session,
    pub config: ModelConfig,
    /// Whether the session runs on CUDA.
    pub on_cuda: bool,
}

impl Engine {
    pub fn load(
        env: &ort::environment::Environment,
        model: &ModelDir,
        intra_threads: usize,
        provider: ExecutionProvider,
    ) -> Result<Self> {
        let (session, on_cuda) = build_session(env, &model.onnx_path(), intra_threads, provider)?;
        Ok(Engine {
            session,
            config: model.config.clone(),
            on_cuda,
        })
    }

    fn vocab(&self) -> usize {
        self.config.vocab_size
    }

    /// An empty cache for `batch` rows.
    pub fn empty_cache(&self, batch: usize) -> Result<KvCache> {
        let shape = [batch, self.config.num_kv_heads, 0, self.config.head_dim];
        (0..self.config.num_layers)
            .map(|_| {
                Ok((
                    Tensor::<f32>::from_array((shape, Vec::<f32>::new()))?.into_dyn(),
                    Tensor::<f32>::from_array((shape, Vec::<f32>::new()))?.into_dyn(),
                ))
            })
            .collect()
    }

    /// Runs the whole prompt of one sequence; returns the logits of its last position and its
    /// cache (`[1, kv, prompt_len, hd]`).
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<(Vec<f32>, KvCache)> {
        let len = prompt.len();
        let ids: Vec<i64> = prompt.iter().map(|&t| i64::from(t)).collect();
        let past = self.empty_cache(1)?;
        self.forward(ids, 1, len, vec![1; len], len, past)
    }

    /// One decode step for every row: `tokens[i]` is row `i`'s newest token, `valid_lens[i]`
    /// how many positions of `cache` row `i` holds. Returns `rows × vocab` logits.
    pub fn decode(
        &mut self,
        tokens: &[u32],
        valid_lens: &[usize],
        cache: KvCache,
    ) -> Result<(Vec<f32>, KvCache)> {
        let batch = tokens.len();
        let buffer = cache_len(&cache)?;
        let total = buffer + 1;
        let mut mask = vec![0i64; batch * total];
        for (row, &valid) in valid_lens.iter().enumerate() {
            mask[row * total..row * total + valid + 1].fill(1);
        }
        let ids = tokens.iter().map(|&t| i64::from(t)).collect();
        self.forward(ids, batch, 1, mask, total, cache)
    }

    fn forward(
        &mut self,
        ids: Vec<i64>,
        batch: usize,
        seq: usize,
        mask: Vec<i64>,
        total: usize,
        past: KvCache,
    ) -> Result<(Vec<f32>, KvCache)> {
        let mut inputs: Vec<(std::borrow::Cow<'_, str>, SessionInputValue<'_>)> = ort::inputs![
            "input_ids" => Tensor::<i64>::from_array(([batch, seq], ids))?,
            "attention_mask" => Tensor::<i64>::from_array(([batch, total], mask))?,
        ];
        for (layer, (key, value)) in past.into_iter().enumerate() {
            inputs.push((format!("past_key_values.{layer}.key").into(), key.into()));
            inputs.push((
                format!("past_key_values.{layer}.value").into(),
                value.into(),
            ));
        }
        let vocab = self.vocab();
        let layers = self.config.num_layers;
        let mut outputs = self.session.run(inputs)?;
        let (shape, logits) = outputs["logits"].try_extract_tensor::<f32>()?;
        let rows_seq = shape[1] as usize;
        let mut last = Vec::with_capacity(batch * vocab);
        for row in 0..batch {
            let start = (row * rows_seq + rows_seq - 1) * vocab;
            last.extend_from_slice(&logits[start..start + vocab]);
        }
        let mut present = Vec::with_capacity(layers);
        for layer in 0..layers {
            let key = outputs.remove(format!("present.{layer}.key"));
            let value = outputs.remove(format!("present.{layer}.value"));
            match (key, value) {
                (Some(k), Some(v)) => present.push((k, v)),
                _ => {
                    return Err(Error::Inference(format!(
                        "the model has no present.{layer} output"
                    )))
                }
            }
        }
        Ok((last, present))
    }
}

fn build_session(
    env: &ort::environment::Environment,
    path: &Path,
    intra_threads: usize,
    provider: ExecutionProvider,
) -> Result<(Session, bool)> {
    let builder = Session::builder(env)
        .and_then(|b| {
            b.with_optimization_level(GraphOptimizationLevel::All)
                .map_err(ort::Error::from)
        })
        .and_then(|b| {
            b.with_intra_threads(intra_threads.max(1))
                .map_err(ort::Error::from)
        })
        .and_then(|b| b.with_inter_threads(1).map_err(ort::Error::from))
        .map_err(|e| Error::Runtime(e.to_string()))?;
    let (mut builder, on_cuda) = match provider {
        ExecutionProvider::Cpu => (builder, false),
        ExecutionProvider::Cuda | ExecutionProvider::Auto => cuda(builder, provider)?,
    };
    let session = builder
        .commit_from_file(path)
        .map_err(|e| Error::ModelDir {
            dir: path.display().to_string(),
            message: format!("cannot load the model: {e}"),
        })?;
    Ok((session, on_cuda))
}

#[cfg(feature = "cuda")]
fn cuda(
    builder: ort::session::builder::SessionBuilder,
    provider: ExecutionProvider,
) -> Result<(ort::session::builder::SessionBuilder, bool)> {
    match builder.with_execution_providers([ort::ep::CUDA::default().build().error_on_failure()]) {
        Ok(builder) => Ok((builder, true)),
        Err(error) if provider == ExecutionProvider::Auto => {
            tracing::warn!(%error, "CUDA is unavailable; running on CPU");
            Ok((error.recover(), false))
        }
        Err(error) => Err(Error::ExecutionProvider(format!(
            "CUDA was requested but cannot be used: {error}"
        ))),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(
    builder: ort::session::builder::SessionBuilder,
    provider: ExecutionProvider,
) -> Result<(ort::session::builder::SessionBuilder, bool)> {
    if provider == ExecutionProvider::Auto {
        tracing::warn!("this Stead was built without the `cuda` feature; running on CPU");
        return Ok((builder, false));
    }
    Err(Error::ExecutionProvider(
        "execution_provider = \"cuda\" needs a Stead built with `--features cuda`".into(),
    ))
}

/// Positions held by a cache's buffer.
pub fn cache_len(cache: &KvCache) -> Result<usize> {
    let (key, _) = cache
        .first()
        .ok_or_else(|| Error::Inference("empty KV cache".into()))?;
    Ok(key.shape()[2] as usize)
}

/// One row of a new batch: which cache it comes from, its row there, its valid length.
pub struct RowSource<'a> {
    pub cache: &'a KvCache,
    pub row: usize,
    pub valid_len: usize,
}

/// Builds a cache for a new set of rows, copying each row's valid positions into a buffer
/// exactly as long as the longest row. Used only when rows join or leave the batch; between
/// those, each step's `present` is fed back as `past` without a copy.
pub fn regroup(config: &ModelConfig, rows: &[RowSource<'_>]) -> Result<KvCache> {
    let heads = config.num_kv_heads;
    let hd = config.head_dim;
    let len = rows.iter().map(|r| r.valid_len).max().unwrap_or(0);
    let batch = rows.len();
    let mut cache = Vec::with_capacity(config.num_layers);
    for layer in 0..config.num_layers {
        let mut pair = Vec::with_capacity(2);
        for kind in 0..2 {
            let mut data = vec![0f32; batch * heads * len * hd];
            for (dst_row, source) in rows.iter().enumerate() {
                let (k, v) = &source.cache[layer];
                let value = if kind == 0 { k } else { v };
                let (shape, src) = value.try_extract_tensor::<f32>()?;
                let src_len = shape[2] as usize;
                for head in 0..heads {
                    let from = ((source.row * heads + head) * src_len) * hd;
                    let to = ((dst_row * heads + head) * len) * hd;
                    let n = source.valid_len * hd;
                    data[to..to + n].copy_from_slice(&src[from..from + n]);
                }
            }
            pair.push(Tensor::<f32>::from_array(([batch, heads, len, hd], data))?.into_dyn());
        }
        let value = pair.pop().expect("two tensors");
        let key = pair.pop().expect("two tensors");
        cache.push((key, value));
    }
    Ok(cache)
}
