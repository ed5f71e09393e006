//! Whisper in ONNX (docs/speech.md): the encoder and the decoder graphs `stead setup` converts
//! from Whisper's weights (inference/setup/convert_whisper.py), run with ONNX Runtime. Audio
//! is cut into 30-second windows; each is encoded once (the graph returns every decoder
//! layer's cross-attention keys and values) and decoded greedily with a key/value cache, the
//! way OpenAI's reference decodes at temperature 0 without timestamps: its suppressed tokens,
//! no blank first token, and a window judged silent (the `<|nocaptions|>` probability over
//! 0.6 and a mean log-probability under -1) left out, as is a window with no sample above
//! -60 dBFS (digital silence, which the model otherwise hears as a word).

use std::path::Path;

use ort::session::Session;
use ort::value::{DynValue, Tensor};
use serde::Deserialize;

use super::mel::{MelSpectrogram, HOP, SAMPLE_RATE, WINDOW_FRAMES, WINDOW_SAMPLES};
use crate::engine::{build_session, ExecutionProvider};
use crate::{Error, Result};

/// Tokens one window's text may have (the reference's `sample_len`: half the context).
const MAX_TOKENS: usize = 224;
/// A window whose `<|nocaptions|>` probability is over this, and whose text's mean
/// log-probability is under [`LOGPROB_THRESHOLD`], is silence (the reference's thresholds).
const NO_SPEECH_THRESHOLD: f32 = 0.6;
const LOGPROB_THRESHOLD: f32 = -1.0;
/// A window whose loudest sample is under this (-60 dBFS) is silence, not transcribed.
const SILENCE_PEAK: f32 = 1e-3;

/// `stead_whisper.json`, written by the converter beside the graphs.
#[derive(Debug, Clone, Deserialize)]
pub struct WhisperConfig {
    /// The model's name (`whisper-tiny.en`).
    pub name: String,
    pub dim: usize,
    pub layers: usize,
    pub mels: usize,
    pub vocab: usize,
    /// Whether the model knows English only (an `.en` model: no language or task tokens).
    pub english_only: bool,
    pub eot: u32,
    pub sot: u32,
    pub no_timestamps: u32,
    pub no_speech: u32,
    /// Ids from here on are timestamps (never produced: transcripts are text only).
    pub timestamp_begin: u32,
    /// Never produced (the reference's `suppress_tokens`).
    pub suppress: Vec<u32>,
    /// Not produced as the first token (a blank, end of text).
    pub suppress_begin: Vec<u32>,
}

/// One window's text.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Seconds from the start of the audio.
    pub start: f64,
    pub end: f64,
    pub text: String,
    pub tokens: Vec<u32>,
    /// Mean log-probability of its tokens.
    pub avg_logprob: f32,
    /// Probability that the window holds no speech.
    pub no_speech_prob: f32,
}

/// What the model heard.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    pub text: String,
    /// Seconds of audio.
    pub duration: f64,
    /// ISO 639-1 code of the language transcribed.
    pub language: String,
    pub segments: Vec<Segment>,
}

/// A loaded Whisper model.
pub struct Whisper {
    encoder: Session,
    decoder: Session,
    mel: MelSpectrogram,
    /// Each token's bytes (the GPT-2 byte-level alphabet undone).
    vocab: Vec<Vec<u8>>,
    config: WhisperConfig,
}

impl Whisper {
    /// Loads `dir`: `encoder.onnx`, `decoder.onnx`, `vocabulary.txt`, `stead_whisper.json`.
    pub fn load(env: &ort::environment::Environment, dir: &Path, threads: usize) -> Result<Self> {
        let model_dir_error = |message: String| Error::ModelDir {
            dir: dir.display().to_string(),
            message,
        };
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name)).map_err(|e| {
                model_dir_error(format!("cannot read {name} (run `stead setup`): {e}"))
            })
        };
        let config: WhisperConfig = serde_json::from_str(&read("stead_whisper.json")?)
            .map_err(|e| model_dir_error(format!("stead_whisper.json: {e}")))?;
        let vocab: Vec<Vec<u8>> = read("vocabulary.txt")?.lines().map(token_bytes).collect();
        if vocab.len() != config.vocab {
            return Err(model_dir_error(format!(
                "vocabulary.txt has {} tokens, the model {}",
                vocab.len(),
                config.vocab
            )));
        }
        let (encoder, _) = build_session(
            env,
            &dir.join("encoder.onnx"),
            threads,
            ExecutionProvider::Cpu,
        )?;
        let (decoder, _) = build_session(
            env,
            &dir.join("decoder.onnx"),
            threads,
            ExecutionProvider::Cpu,
        )?;
        Ok(Whisper {
            encoder,
            decoder,
            mel: MelSpectrogram::new(config.mels),
            vocab,
            config,
        })
    }

    pub fn config(&self) -> &WhisperConfig {
        &self.config
    }

    /// Transcribes 16 kHz mono samples in [-1, 1].
    pub fn transcribe(&mut self, samples: &[f32]) -> Result<Transcript> {
        let duration = samples.len() as f64 / SAMPLE_RATE as f64;
        let mel = self.mel.compute(samples);
        let content_frames = samples.len().div_ceil(HOP);
        let mut segments = Vec::new();
        let mut start = 0;
        while start < content_frames.max(1) {
            // A window with nothing above -60 dBFS is silence: Whisper left to it hears words
            // that are not there (often "you").
            let heard = &samples[(start * HOP).min(samples.len())
                ..((start + WINDOW_FRAMES) * HOP).min(samples.len())];
            if heard.iter().all(|s| s.abs() < SILENCE_PEAK) {
                start += WINDOW_FRAMES;
                continue;
            }
            let window: Vec<f32> = mel
                .iter()
                .flat_map(|row| row[start..start + WINDOW_FRAMES].iter().copied())
                .collect();
            let segment = self.window(
                window,
                start as f64 * HOP as f64 / SAMPLE_RATE as f64,
                duration,
            )?;
            if let Some(segment) = segment {
                segments.push(segment);
            }
            start += WINDOW_FRAMES;
        }
        let text = segments
            .iter()
            .map(|s| s.text.trim())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Transcript {
            text,
            duration,
            language: "en".into(),
            segments,
        })
    }

    /// One 30-second window (`[mels × 3000]`, row-major) from `start` seconds; `None` when
    /// it is silence.
    fn window(&mut self, mel: Vec<f32>, start: f64, duration: f64) -> Result<Option<Segment>> {
        let c = &self.config;
        let (layers, dim, mels) = (c.layers, c.dim, c.mels);
        let (sot, no_speech, no_timestamps, eot) = (c.sot, c.no_speech, c.no_timestamps, c.eot);
        let mel = Tensor::<f32>::from_array(([1, mels, WINDOW_FRAMES], mel))?;
        let cross_kv: DynValue = self
            .encoder
            .run(ort::inputs!["mel" => mel])?
            .remove("cross_kv")
            .ok_or_else(|| Error::Inference("the encoder has no cross_kv output".into()))?;
        let mut past: DynValue =
            Tensor::<f32>::from_array(([2 * layers, 1, 0, dim], Vec::<f32>::new()))?.into_dyn();
        // The start of transcript alone first: its next-token distribution says whether the
        // window holds speech.
        let (logits, present) = self.step(&[sot], past, &cross_kv)?;
        past = present;
        let no_speech_prob = softmax_at(&logits, no_speech as usize);
        let mut input = vec![no_timestamps];
        let mut tokens = Vec::new();
        let mut logprob_sum = 0f32;
        for step in 0..MAX_TOKENS {
            let (mut logits, present) = self.step(&input, past, &cross_kv)?;
            past = present;
            self.suppress(&mut logits, step == 0);
            let (token, logprob) = argmax_logprob(&logits);
            if token == eot as usize {
                break;
            }
            logprob_sum += logprob;
            tokens.push(token as u32);
            input = vec![token as u32];
        }
        let avg_logprob = logprob_sum / (tokens.len() + 1) as f32;
        if no_speech_prob > NO_SPEECH_THRESHOLD && avg_logprob < LOGPROB_THRESHOLD {
            return Ok(None);
        }
        let bytes: Vec<u8> = tokens
            .iter()
            .filter(|&&t| t < self.config.eot)
            .flat_map(|&t| self.vocab[t as usize].iter().copied())
            .collect();
        Ok(Some(Segment {
            start,
            end: (start + WINDOW_SAMPLES as f64 / SAMPLE_RATE as f64).min(duration),
            text: String::from_utf8_lossy(&bytes).into_owned(),
            tokens,
            avg_logprob,
            no_speech_prob,
        }))
    }

    /// One decoder run: the last position's logits and the grown cache.
    fn step(
        &mut self,
        tokens: &[u32],
        past: DynValue,
        cross_kv: &DynValue,
    ) -> Result<(Vec<f32>, DynValue)> {
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        let mut outputs = self.decoder.run(ort::inputs![
            "tokens" => Tensor::<i64>::from_array(([1, ids.len()], ids))?,
            "past_kv" => past,
            "cross_kv" => cross_kv,
        ])?;
        let (_, logits) = outputs["logits"].try_extract_tensor::<f32>()?;
        let logits = logits.to_vec();
        let present = outputs
            .remove("present_kv")
            .ok_or_else(|| Error::Inference("the decoder has no present_kv output".into()))?;
        Ok((logits, present))
    }

    /// The reference's logit filters at temperature 0 without timestamps.
    fn suppress(&self, logits: &mut [f32], first: bool) {
        let c = &self.config;
        let mut hide = |id: u32| {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = f32::NEG_INFINITY;
            }
        };
        c.suppress.iter().copied().for_each(&mut hide);
        if first {
            c.suppress_begin.iter().copied().for_each(&mut hide);
        }
        // Special tokens other than the end of text, and every timestamp.
        (c.sot..c.vocab as u32).for_each(hide);
    }
}

/// `softmax(logits)[index]`.
fn softmax_at(logits: &[f32], index: usize) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
    logits.get(index).map_or(0.0, |l| (l - max).exp() / sum)
}

/// The most likely token and its log-probability.
fn argmax_logprob(logits: &[f32]) -> (usize, f32) {
    let (best, &top) = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap_or((0, &0.0));
    let sum: f32 = logits.iter().map(|l| (l - top).exp()).sum();
    (best, -sum.ln())
}

/// A vocabulary entry's bytes: GPT-2's byte-level BPE writes each byte as a printable
/// character (bytes that are printable Latin-1 as themselves, the rest as U+0100 onwards).
fn token_bytes(token: &str) -> Vec<u8> {
    if token.starts_with("<|") && token.ends_with("|>") {
        return Vec::new();
    }
    static TABLE: std::sync::OnceLock<[u8; 324]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let printable = |b: u32| {
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
        };
        let mut table = [0u8; 324];
        let mut shifted = 256;
        for b in 0u32..256 {
            let c = if printable(b) {
                b
            } else {
                shifted += 1;
                shifted - 1
            };
            table[c as usize] = b as u8;
        }
        table
    });
    token
        .chars()
        .map(|c| table.get(c as usize).copied().unwrap_or(b'?'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_tokens_read_back_as_their_bytes() {
        assert_eq!(token_bytes("Hello"), b"Hello");
        // `Ġ` is the space, `Ċ` the newline, `Ã©` the two bytes of é.
        assert_eq!(token_bytes("Ġworld"), b" world");
        assert_eq!(token_bytes("Ċ"), b"\n");
        assert_eq!(String::from_utf8(token_bytes("cafÃ©")).unwrap(), "café");
        assert_eq!(token_bytes("<|endoftext|>"), b"");
    }

    #[test]
    fn the_most_likely_token_and_its_log_probability() {
        let (token, logprob) = argmax_logprob(&[0.0, 2.0f32.ln(), f32::NEG_INFINITY, 0.0]);
        assert_eq!(token, 1);
        assert!((logprob - 0.5f32.ln()).abs() < 1e-6);
        assert!((softmax_at(&[0.0, 0.0], 1) - 0.5).abs() < 1e-6);
    }
}
