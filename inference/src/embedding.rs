//! Sentence embeddings on the local engine (docs/inference.md): a BERT-style encoder
//! ONNX model (all-MiniLM-L6-v2, prepared by `stead setup` into `models/all-minilm-l6-v2/`)
//! with its HuggingFace `tokenizer.json`. A batch of texts is tokenized (truncated to
//! [`MAX_TOKENS`]), padded to its longest, run once, mean-pooled over each text's tokens and
//! L2-normalised — what sentence-transformers does for this model — so that the dot product of
//! two embeddings is their cosine similarity.

use std::path::{Path, PathBuf};

use ort::session::Session;
use ort::value::Tensor;

use crate::engine::{build_session, ExecutionProvider};
use crate::{Error, Result};

/// The model `stead setup` prepares, by its directory name under `models/`.
pub const DEFAULT_EMBEDDING_MODEL: &str = "all-minilm-l6-v2";
/// Tokens per text beyond which the text is cut (the model's `max_seq_length`).
pub const MAX_TOKENS: usize = 256;

/// A loaded embedding model.
pub struct Embedder {
    session: Session,
    tokenizer: tokenizers::Tokenizer,
    dimension: usize,
    /// Whether the graph takes `token_type_ids` (BERT exports do).
    token_types: bool,
}

/// The files of an embedding model directory.
pub fn model_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("model.onnx"), dir.join("tokenizer.json"))
}

impl Embedder {
    /// Loads `dir` (its `model.onnx` and `tokenizer.json`) on ONNX Runtime's CPU provider.
    pub fn load(
        env: &ort::environment::Environment,
        dir: &Path,
        intra_threads: usize,
    ) -> Result<Embedder> {
        let (onnx, tokenizer_path) = model_files(dir);
        let model_dir_error = |message: String| Error::ModelDir {
            dir: dir.display().to_string(),
            message,
        };
        if !onnx.is_file() || !tokenizer_path.is_file() {
            return Err(model_dir_error(
                "needs model.onnx and tokenizer.json (run `stead setup`)".into(),
            ));
        }
        let mut tokenizer = tokenizers::Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| model_dir_error(format!("cannot read tokenizer.json: {e}")))?;
        // The packaged file pads every text to 128 tokens and cuts there: pad per batch
        // instead, and cut at the model's own limit.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| model_dir_error(format!("tokenizer truncation: {e}")))?;
        let (session, _) = build_session(env, &onnx, intra_threads, ExecutionProvider::Cpu)?;
        let token_types = session
            .inputs()
            .iter()
            .any(|input| input.name() == "token_type_ids");
        let mut embedder = Embedder {
            session,
            tokenizer,
            dimension: 0,
            token_types,
        };
        // The dimension, from the model itself.
        embedder.dimension = embedder.embed(&["dimension"])?.first().map_or(0, Vec::len);
        Ok(embedder)
    }

    /// Floats per embedding.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// Tokens `text` has after tokenization (before the cut at [`MAX_TOKENS`]).
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        let mut tokenizer = self.tokenizer.clone();
        tokenizer.with_truncation(None).ok();
        let encoding = tokenizer
            .encode(text, true)
            .map_err(|e| Error::Inference(format!("tokenization: {e}")))?;
        Ok(encoding.len())
    }

    /// The token ids the model is given for each text (cut at [`MAX_TOKENS`]): what a peer
    /// runtime is fed to compare like with like.
    pub fn token_ids(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::Inference(format!("tokenization: {e}")))?;
        Ok(encodings.iter().map(|e| e.get_ids().to_vec()).collect())
    }

    /// One unit-length embedding per text, in order, from one run of the model.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(self.embed_counted(texts)?.0)
    }

    /// [`Embedder::embed`], and the tokens the model was given for each text (after the
    /// cut).
    pub fn embed_counted(&mut self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, Vec<usize>)> {
        let encodings = self.encode(texts)?;
        let tokens: Vec<usize> = encodings.iter().map(|e| e.len()).collect();
        let encodings: Vec<&tokenizers::Encoding> = encodings.iter().collect();
        Ok((self.run(&encodings)?, tokens))
    }

    /// `texts` as the model takes them: tokenized, cut at [`MAX_TOKENS`].
    pub fn encode(&self, texts: &[&str]) -> Result<Vec<tokenizers::Encoding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| Error::Inference(format!("tokenization: {e}")))
    }

    /// One run of the model over `encodings`, padded to the longest: one unit-length
    /// embedding each, in order.
    pub fn run(&mut self, encodings: &[&tokenizers::Encoding]) -> Result<Vec<Vec<f32>>> {
        if encodings.is_empty() {
            return Ok(Vec::new());
        }
        let batch = encodings.len();
        let seq = encodings.iter().map(|e| e.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0i64; batch * seq];
        let mut mask = vec![0i64; batch * seq];
        for (row, encoding) in encodings.iter().enumerate() {
            for (i, (&id, &m)) in encoding
                .get_ids()
                .iter()
                .zip(encoding.get_attention_mask())
                .enumerate()
            {
                ids[row * seq + i] = i64::from(id);
                mask[row * seq + i] = i64::from(m);
            }
        }
        let mut inputs = ort::inputs![
            "input_ids" => Tensor::<i64>::from_array(([batch, seq], ids))?,
            "attention_mask" => Tensor::<i64>::from_array(([batch, seq], mask.clone()))?,
        ];
        if self.token_types {
            inputs.push((
                "token_type_ids".into(),
                Tensor::<i64>::from_array(([batch, seq], vec![0i64; batch * seq]))?.into(),
            ));
        }
        let outputs = self.session.run(inputs)?;
        let (shape, hidden) = outputs[0].try_extract_tensor::<f32>()?;
        let dim = match shape.as_ref() {
            [b, s, d] if *b as usize == batch && *s as usize == seq => *d as usize,
            other => {
                return Err(Error::Inference(format!(
                    "the embedding model answered shape {other:?} for [{batch}, {seq}, _]"
                )))
            }
        };
        let vectors = (0..batch)
            .map(|row| {
                let mut pooled = vec![0f32; dim];
                let mut count = 0f32;
                for position in 0..seq {
                    if mask[row * seq + position] == 0 {
                        continue;
                    }
                    count += 1.0;
                    let start = (row * seq + position) * dim;
                    for (sum, value) in pooled.iter_mut().zip(&hidden[start..start + dim]) {
                        *sum += value;
                    }
                }
                let count = count.max(1.0);
                pooled.iter_mut().for_each(|v| *v /= count);
                let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                pooled.iter_mut().for_each(|v| *v /= norm);
                pooled
            })
            .collect();
        Ok(vectors)
    }
}
