//! Test double: a scripted [`ModelClient`] for session actors. It runs no model; each call's
//! answer (text and `(tool, arguments)` calls) comes from the test, in one of two modes:
//!
//! - [`ScriptedModel::new`]: a script — each call pops the next answer, then
//!   `"(script ended)"`;
//! - [`ScriptedModel::respond`]: a closure that decides the answer from the request.
//!
//! The text is streamed as one delta per word (with its trailing space). It counts its calls,
//! and can take a fixed time per call ([`ScriptedModel::with_delay`]). It reports 7 prompt
//! tokens per call, or what [`ScriptedModel::with_prompt_tokens`] counts (as a remote
//! provider's tokenizer would).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use stead_actors::session::{ModelClient, ModelError, ModelRequest};
use stead_actors::{ModelOutput, Usage};
use tokio::sync::mpsc::UnboundedSender;

/// One answer: the text and the `(tool, arguments)` calls.
pub type Answer = (String, Vec<(String, Value)>);

type Respond = Box<dyn Fn(&ModelRequest) -> Answer + Send + Sync>;
type Count = Box<dyn Fn(&ModelRequest) -> u64 + Send + Sync>;

enum Source {
    Script(Mutex<VecDeque<Answer>>),
    Respond(Respond),
}

/// The model double.
pub struct ScriptedModel {
    source: Source,
    delay: Duration,
    calls: AtomicUsize,
    count: Option<Count>,
}

impl ScriptedModel {
    /// Answers with `script` in order: `(text, [(tool, arguments)])`.
    pub fn new(script: Vec<(&str, Vec<(&str, Value)>)>) -> Arc<ScriptedModel> {
        let script = script
            .into_iter()
            .map(|(text, calls)| {
                let calls = calls
                    .into_iter()
                    .map(|(name, arguments)| (name.to_string(), arguments))
                    .collect();
                (text.to_string(), calls)
            })
            .collect();
        Arc::new(ScriptedModel::from_source(Source::Script(Mutex::new(
            script,
        ))))
    }

    /// Answers with what `respond` decides from each request.
    pub fn respond(
        respond: impl Fn(&ModelRequest) -> Answer + Send + Sync + 'static,
    ) -> ScriptedModel {
        ScriptedModel::from_source(Source::Respond(Box::new(respond)))
    }

    fn from_source(source: Source) -> ScriptedModel {
        ScriptedModel {
            source,
            delay: Duration::ZERO,
            calls: AtomicUsize::new(0),
            count: None,
        }
    }

    /// Takes `delay` before each answer.
    pub fn with_delay(mut self, delay: Duration) -> ScriptedModel {
        self.delay = delay;
        self
    }

    /// Reports each call's `prompt_tokens` as `count` says.
    pub fn with_prompt_tokens(
        mut self,
        count: impl Fn(&ModelRequest) -> u64 + Send + Sync + 'static,
    ) -> ScriptedModel {
        self.count = Some(Box::new(count));
        self
    }

    /// How many calls it got.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ModelClient for ScriptedModel {
    async fn complete(
        &self,
        request: ModelRequest,
        deltas: UnboundedSender<String>,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ModelOutput, ModelError> {
        assert!(
            !request.transcript.is_empty(),
            "a model call with no transcript"
        );
        self.calls.fetch_add(1, Ordering::SeqCst);
        let prompt_tokens = self.count.as_ref().map_or(7, |count| count(&request));
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let (text, tool_calls) = match &self.source {
            Source::Script(script) => script
                .lock()
                .expect("script")
                .pop_front()
                .unwrap_or_else(|| ("(script ended)".to_string(), vec![])),
            Source::Respond(respond) => respond(&request),
        };
        for word in text.split_inclusive(' ') {
            let _ = deltas.send(word.to_string());
        }
        Ok(ModelOutput {
            text,
            tool_calls,
            usage: Usage {
                prompt_tokens,
                completion_tokens: 3,
            },
            provider: "scripted".into(),
            model: "double".into(),
            latency_ms: 1.0,
            ttft_ms: 0.1,
            cost: 0.0,
            guardrails: Vec::new(),
        })
    }
}
