//! One ONNX Runtime session over a prepared decoder, and the batched forward passes the
//! batching needs: a prefill of one prompt, and a decode step of many rows at once.
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
use crate::prefix_cache::{KvShape, KvSource, PrefixHit};
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

static ENVIRONMENT: OnceLock<Result<ort::environment::Environment>> = OnceLock::new();

/// `threads`, or the machine's cores when it is 0 (a worker's intra-op threads).
pub(crate) fn threads_or_cores(threads: usize) -> usize {
    if threads == 0 {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        threads
    }
}

/// Loads ONNX Runtime from `library` (once per process; later calls reuse the first).
pub fn init_runtime(library: &Path) -> Result<ort::environment::Environment> {
    ENVIRONMENT
        .get_or_init(|| {
            if !library.is_file() {
                return Err(Error::Runtime(format!(
                    "{} does not exist (run `stead setup` to prepare ONNX Runtime)",
                    library.display()
                )));
            }
            ort::init_from(library)
                .map_err(|e| Error::Runtime(format!("cannot load {}: {e}", library.display())))?
                .with_name("stead")
                .with_telemetry(false)
                .build()
                .map_err(|e| Error::Runtime(e.to_string()))
        })
        .clone()
}

/// Per layer: (key, value).
pub type KvCache = Vec<(DynValue, DynValue)>;

pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// The graph input that asks for the logits of each row's last new position only (an int64
/// scalar with default 0, so other runtimes still get every position's).
const LAST_LOGITS_ONLY: &str = "last_logits_only";

pub struct Engine {
    session: Session,
    pub config: ModelConfig,
    /// Longest piece of one prompt run in a single pass; long prompts are prefilled in chunks
    /// that continue the cache (bounding the activations of one pass).
    pub prefill_chunk: usize,
    /// Whether the graph takes `last_logits_only` (converter 2 and later): prompt passes then
    /// compute the lm_head for each row's last position only, not for every position.
    last_logits_only: bool,
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
        let mut engine = Engine {
            session,
            config: model.config.clone(),
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            on_cuda,
            last_logits_only: false,
        };
        engine.set_last_logits_only(true);
        Ok(engine)
    }

    /// Whether prompt passes compute the logits of each row's last position only.
    pub fn last_logits_only(&self) -> bool {
        self.last_logits_only
    }

    /// Turns the last-position-only logits off (every position's are computed, the last
    /// taken), or back on where the graph has the input; for tests and comparisons.
    pub fn set_last_logits_only(&mut self, on: bool) {
        // An input with a default is an overridable initializer, which ONNX Runtime lists
        // apart from the required inputs.
        self.last_logits_only = on
            && self
                .session
                .overridable_initializers()
                .iter()
                .any(|input| input.name() == LAST_LOGITS_ONLY);
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

    /// The geometry of one token's keys and values (what the prefix cache stores).
    pub fn kv_shape(&self) -> KvShape {
        KvShape {
            layers: self.config.num_layers,
            heads: self.config.num_kv_heads,
            head_dim: self.config.head_dim,
        }
    }

    /// A batch-1 past (`[1, kv_heads, len, head_dim]` per layer) from a cached prefix.
    pub fn past_from(&self, hit: PrefixHit) -> Result<KvCache> {
        let shape = [1, self.config.num_kv_heads, hit.len, self.config.head_dim];
        hit.layers
            .into_iter()
            .map(|(keys, values)| {
                Ok((
                    Tensor::<f32>::from_array((shape, keys))?.into_dyn(),
                    Tensor::<f32>::from_array((shape, values))?.into_dyn(),
                ))
            })
            .collect()
    }

    /// Continues a batch-1 cache of `done` positions with `rest` (one row only: the graph takes
    /// a past plus several new tokens at batch 1), in pieces of at most `prefill_chunk` tokens.
    /// No piece is a single token (unless `rest` is): a one-token pass with a past runs the
    /// decode kernels, which round differently from the prefill's, so a prompt continued from a
    /// cached prefix computes exactly what its full prefill would.
    pub fn prefill_continue(
        &mut self,
        past: KvCache,
        done: usize,
        rest: &[u32],
    ) -> Result<(Vec<Vec<f32>>, KvCache)> {
        let mut cache = past;
        let mut last = Vec::new();
        let mut done = done;
        let chunk = self.prefill_chunk.max(2);
        let mut at = 0;
        while at < rest.len() {
            let mut end = (at + chunk).min(rest.len());
            if rest.len() - end == 1 && end - at > 1 {
                end -= 1;
            }
            let piece = &rest[at..end];
            let ids: Vec<i64> = piece.iter().map(|&t| i64::from(t)).collect();
            let total = done + piece.len();
            let (logits, present) =
                self.run_prompt(ids, 1, piece.len(), vec![1; total], total, cache, |_| {
                    piece.len() - 1
                })?;
            last = logits;
            cache = present;
            done = total;
            at = end;
        }
        Ok((last, cache))
    }

    /// Runs several whole prompts in one pass (right-padded to the longest); returns, per
    /// prompt, the logits of its last position, and their cache (`[n, kv, longest, hd]`, row
    /// `i` valid for `prompts[i].len()` positions).
    pub fn prefill(&mut self, prompts: &[&[u32]]) -> Result<(Vec<Vec<f32>>, KvCache)> {
        if let [prompt] = prompts {
            if prompt.len() > self.prefill_chunk {
                let past = self.empty_cache(1)?;
                return self.prefill_continue(past, 0, prompt);
            }
        }
        let batch = prompts.len();
        let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        let mut ids = vec![0i64; batch * longest];
        let mut mask = vec![0i64; batch * longest];
        for (row, prompt) in prompts.iter().enumerate() {
            for (i, &token) in prompt.iter().enumerate() {
                ids[row * longest + i] = i64::from(token);
                mask[row * longest + i] = 1;
            }
        }
        let past = self.empty_cache(batch)?;
        self.run_prompt(ids, batch, longest, mask, longest, past, |row| {
            prompts[row].len().saturating_sub(1)
        })
    }

    /// Runs `seq` new positions for `batch` rows after `past`; returns the logits at each
    /// row's `last_position(row)` and the cache (`present`).
    #[allow(clippy::too_many_arguments)]
    fn run_prompt(
        &mut self,
        ids: Vec<i64>,
        batch: usize,
        seq: usize,
        mask: Vec<i64>,
        total: usize,
        past: KvCache,
        last_position: impl Fn(usize) -> usize,
    ) -> Result<(Vec<Vec<f32>>, KvCache)> {
        let mut inputs: Vec<(std::borrow::Cow<'_, str>, SessionInputValue<'_>)> = ort::inputs![
            "input_ids" => Tensor::<i64>::from_array(([batch, seq], ids))?,
            "attention_mask" => Tensor::<i64>::from_array(([batch, total], mask))?,
        ];
        if self.last_logits_only {
            inputs.push((
                LAST_LOGITS_ONLY.into(),
                Tensor::<i64>::from_array(((), vec![1i64]))?.into(),
            ));
        }
        for (layer, (key, value)) in past.into_iter().enumerate() {
            inputs.push((format!("past_key_values.{layer}.key").into(), key.into()));
            inputs.push((
                format!("past_key_values.{layer}.value").into(),
                value.into(),
            ));
        }
        let vocab = self.vocab();
        let mut outputs = self.session.run(inputs)?;
        let (shape, logits) = outputs["logits"].try_extract_tensor::<f32>()?;
        // `[rows, 1, vocab]` when the graph kept only the last positions, else `[rows, seq, vocab]`.
        let positions = shape.get(1).map_or(seq, |&n| n as usize);
        let last: Vec<Vec<f32>> = (0..batch)
            .map(|row| {
                let at = if positions == seq {
                    last_position(row)
                } else {
                    0
                };
                let start = (row * positions + at) * vocab;
                logits[start..start + vocab].to_vec()
            })
            .collect();
        let mut present = Vec::with_capacity(self.config.num_layers);
        for layer in 0..self.config.num_layers {
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

pub(crate) fn build_session(
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

/// A running batch's KV cache: per layer a key and a value buffer of shape
/// `[rows, kv_heads, capacity, head_dim]`, bound as both `past_key_values.*` and `present.*`,
/// so GroupQueryAttention writes each step's new position in place (its shared-buffer mode)
/// instead of copying the whole cache into fresh outputs every step.
pub struct SharedCache {
    keys: Vec<Tensor<f32>>,
    values: Vec<Tensor<f32>>,
    /// The cache buffers bound once as inputs and outputs; each step rebinds only the token
    /// ids and the mask (rebinding 120 tensors every step cost ~10% of a step).
    binding: Option<ort::session::IoBinding>,
    pub rows: usize,
    pub capacity: usize,
}

impl SharedCache {
    fn layer(&self, layer: usize, value: bool) -> &Tensor<f32> {
        if value {
            &self.values[layer]
        } else {
            &self.keys[layer]
        }
    }
}

/// Where a row's cache currently lives.
pub enum CacheRef<'a> {
    /// A prefill's own outputs (`[1, kv, len, hd]`).
    Prefill(&'a KvCache),
    /// The running batch.
    Batch(&'a SharedCache),
}

impl<'a> CacheRef<'a> {
    fn data(&self, layer: usize, value: bool) -> Result<(usize, &'a [f32])> {
        let (shape, data) = match *self {
            CacheRef::Prefill(cache) => {
                let (k, v) = &cache[layer];
                if value { v } else { k }.try_extract_tensor::<f32>()?
            }
            CacheRef::Batch(cache) => cache.layer(layer, value).try_extract_tensor::<f32>()?,
        };
        Ok((shape[2] as usize, data))
    }
}

/// One row of a prefill's cache, as the prefix cache reads it.
pub struct KvRows<'a> {
    keys: Vec<&'a [f32]>,
    values: Vec<&'a [f32]>,
    /// Positions the buffers hold (the pass's longest prompt).
    len: usize,
    row: usize,
    heads: usize,
    head_dim: usize,
}

impl<'a> KvRows<'a> {
    /// Row `row` of `cache` (a prefill's `present`, `[rows, kv_heads, len, head_dim]`).
    pub fn new(engine: &Engine, cache: &'a KvCache, row: usize) -> Result<Self> {
        let source = CacheRef::Prefill(cache);
        let mut keys = Vec::with_capacity(cache.len());
        let mut values = Vec::with_capacity(cache.len());
        let mut len = 0;
        for layer in 0..cache.len() {
            let (k_len, k) = source.data(layer, false)?;
            let (_, v) = source.data(layer, true)?;
            len = k_len;
            keys.push(k);
            values.push(v);
        }
        Ok(KvRows {
            keys,
            values,
            len,
            row,
            heads: engine.config.num_kv_heads,
            head_dim: engine.config.head_dim,
        })
    }
}

impl KvSource for KvRows<'_> {
    fn slice(&self, layer: usize, value: bool, head: usize, pos: usize) -> &[f32] {
        let data = if value {
            self.values[layer]
        } else {
            self.keys[layer]
        };
        let at = ((self.row * self.heads + head) * self.len + pos) * self.head_dim;
        &data[at..at + self.head_dim]
    }
}

/// A decode step's logits, in the output tensor ONNX Runtime allocated for them.
pub struct StepLogits(DynValue);

impl StepLogits {
    /// The first `len` values (`rows × vocab`), writable: samplers mask them in place.
    pub fn rows_mut(&mut self, len: usize) -> Result<&mut [f32]> {
        let (_, data) = self.0.try_extract_tensor_mut::<f32>()?;
        data.get_mut(..len)
            .ok_or_else(|| Error::Inference("the step's logits are shorter than its rows".into()))
    }
}

/// One row of a new batch: which cache it comes from, its row there, its valid length.
pub struct RowSource<'a> {
    pub cache: CacheRef<'a>,
    pub row: usize,
    pub valid_len: usize,
}

impl Engine {
    /// One decode step over a shared cache: `tokens[i]` is row `i`'s newest token and
    /// `valid_lens[i]` the positions its cache holds. Returns the step's `rows × vocab` logits
    /// as ONNX Runtime wrote them (read and masked in place, never copied); the cache has each
    /// row's new position written at index `valid_lens[i]`.
    pub fn decode_shared(
        &mut self,
        tokens: &[u32],
        valid_lens: &[usize],
        cache: &mut SharedCache,
    ) -> Result<StepLogits> {
        let batch = tokens.len();
        let total = valid_lens.iter().max().copied().unwrap_or(0) + 1;
        if total > cache.capacity {
            return Err(Error::Inference("the batch cache is full".into()));
        }
        let mut mask = vec![0i64; batch * total];
        for (row, &valid) in valid_lens.iter().enumerate() {
            mask[row * total..row * total + valid + 1].fill(1);
        }
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        let ids = Tensor::<i64>::from_array(([batch, 1], ids))?;
        let mask = Tensor::<i64>::from_array(([batch, total], mask))?;
        let binding = match &mut cache.binding {
            Some(binding) => binding,
            None => {
                let mut binding = self.session.create_binding()?;
                for layer in 0..self.config.num_layers {
                    binding
                        .bind_input(format!("past_key_values.{layer}.key"), &cache.keys[layer])?;
                    binding.bind_input(
                        format!("past_key_values.{layer}.value"),
                        &cache.values[layer],
                    )?;
                    binding.bind_output(format!("present.{layer}.key"), &mut cache.keys[layer])?;
                    binding
                        .bind_output(format!("present.{layer}.value"), &mut cache.values[layer])?;
                }
                binding.bind_output_to_device("logits", &ort::memory::MemoryInfo::default())?;
                cache.binding.insert(binding)
            }
        };
        binding.bind_input("input_ids", &ids)?;
        binding.bind_input("attention_mask", &mask)?;
        let mut outputs = self.session.run_binding(binding)?;
        outputs
            .remove("logits")
            .map(StepLogits)
            .ok_or_else(|| Error::Inference("the model has no logits output".into()))
    }

    /// Builds a batch cache for a new set of rows with room for `capacity` positions each,
    /// copying each row's valid positions. Used only when rows join or leave the batch.
    pub fn regroup(&self, rows: &[RowSource<'_>], capacity: usize) -> Result<SharedCache> {
        let heads = self.config.num_kv_heads;
        let hd = self.config.head_dim;
        let batch = rows.len();
        let allocator = ort::memory::Allocator::default();
        let mut keys = Vec::with_capacity(self.config.num_layers);
        let mut values = Vec::with_capacity(self.config.num_layers);
        for layer in 0..self.config.num_layers {
            for value in [false, true] {
                let mut tensor = Tensor::<f32>::new(&allocator, [batch, heads, capacity, hd])?;
                {
                    let (_, data) = tensor.try_extract_tensor_mut::<f32>()?;
                    // Zeroed, not just overwritten: padded positions must not hold NaN garbage.
                    data.fill(0.0);
                    for (dst_row, source) in rows.iter().enumerate() {
                        let (src_len, src) = source.cache.data(layer, value)?;
                        for head in 0..heads {
                            let from = ((source.row * heads + head) * src_len) * hd;
                            let to = ((dst_row * heads + head) * capacity) * hd;
                            let n = source.valid_len * hd;
                            data[to..to + n].copy_from_slice(&src[from..from + n]);
                        }
                    }
                }
                if value {
                    values.push(tensor);
                } else {
                    keys.push(tensor);
                }
            }
        }
        Ok(SharedCache {
            keys,
            values,
            binding: None,
            rows: batch,
            capacity,
        })
    }
}
