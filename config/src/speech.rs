//! `[speech]`: speech to text with the local Whisper model (docs/speech.md).

use serde::{Deserialize, Serialize};

/// Speech to text (`[speech]`, docs/speech.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpeechConfig {
    /// Whether `POST /v1/audio/transcriptions` answers with the local model.
    pub enabled: bool,
    /// The model directory; absent: `{data_dir}/models/whisper-tiny.en`, which `stead setup`
    /// prepares.
    pub model_dir: Option<std::path::PathBuf>,
    /// Longest audio transcribed, in seconds.
    pub max_seconds: u64,
    /// Intra-op threads of the model (0: the machine's cores).
    pub threads: usize,
}

impl SpeechConfig {
    /// The first bad value, as `(key, problem)`.
    pub(crate) fn problem(&self) -> Option<(&'static str, &'static str)> {
        (self.max_seconds == 0).then_some(("speech.max_seconds", "must be at least 1"))
    }
}

impl Default for SpeechConfig {
    fn default() -> Self {
        SpeechConfig {
            enabled: true,
            model_dir: None,
            max_seconds: 600,
            threads: 0,
        }
    }
}
