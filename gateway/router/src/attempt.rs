//! One attempt at one target, under its total and time-to-first-token deadlines.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::{self, UnboundedSender};

use crate::failover::Repeat;
use crate::provider::RouterRequest;
use crate::provider::{Chunk, FailureKind, Provider, ProviderCall, ProviderError, ProviderReply};
use crate::route::Target;
use crate::Router;

impl Router {
    /// One attempt at one target, under its deadlines. Streamed text goes to the caller as it
    /// arrives (without what repeats `produced`), and is appended to `produced`; the call's
    /// time to its first token is set in `first_token` if it is not yet.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn attempt(
        &self,
        target: &Target,
        provider: &dyn Provider,
        request: &RouterRequest,
        produced: &mut String,
        deltas: Option<&UnboundedSender<String>>,
        first_token: &mut Option<Duration>,
        call_started: Instant,
    ) -> Result<ProviderReply, ProviderError> {
        let config = &target.config;
        let timeout = Duration::from_secs_f64(config.timeout_secs);
        let max_tokens = request.params.max_tokens.or(config.max_tokens);
        let earlier = produced.clone();
        let (chunks, mut receiver) = match deltas {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let call = provider.chat(ProviderCall {
            model: &target.model,
            request,
            max_tokens,
            continue_from: &earlier,
            chunks,
        });
        tokio::pin!(call);
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let ttft = config
            .ttft_timeout_secs
            .filter(|_| deltas.is_some())
            .map(Duration::from_secs_f64);
        // A second timer only for streamed attempts with a TTFT deadline.
        let mut first_deadline = ttft.map(|t| Box::pin(tokio::time::sleep(t)));
        let mut first = false;
        let mut open = receiver.is_some();
        let mut repeat = Repeat::new(&earlier);
        let mut forward = |chunk: Chunk, first: &mut bool, produced: &mut String| {
            if !*first {
                *first = true;
                if first_token.is_none() {
                    *first_token = Some(call_started.elapsed());
                }
            }
            if let Chunk::Text(text) = chunk {
                let new = repeat.push(&text);
                if !new.is_empty() {
                    produced.push_str(&new);
                    if let Some(deltas) = deltas {
                        let _ = deltas.send(new);
                    }
                }
            }
        };
        let result = loop {
            tokio::select! {
                biased;
                chunk = async {
                    match receiver.as_mut() {
                        Some(r) => r.recv().await,
                        None => std::future::pending().await,
                    }
                }, if open => match chunk {
                    Some(chunk) => forward(chunk, &mut first, produced),
                    None => open = false,
                },
                result = &mut call => break result,
                _ = &mut deadline => {
                    break Err(ProviderError::new(
                        FailureKind::Timeout,
                        format!("{} did not finish within {timeout:?}", target.provider_name),
                    ))
                }
                _ = async {
                    match first_deadline.as_mut() {
                        Some(sleep) => sleep.await,
                        None => std::future::pending().await,
                    }
                }, if first_deadline.is_some() && !first => {
                    break Err(ProviderError::new(
                        FailureKind::TtftTimeout,
                        format!(
                            "{} sent no token within {:?}",
                            target.provider_name,
                            ttft.unwrap_or_default()
                        ),
                    ))
                }
            }
        };
        // What the provider sent before it returned.
        if let Some(receiver) = receiver.as_mut() {
            while let Ok(chunk) = receiver.try_recv() {
                forward(chunk, &mut first, produced);
            }
        }
        let tail = repeat.finish();
        if !tail.is_empty() {
            produced.push_str(&tail);
            if let Some(deltas) = deltas {
                let _ = deltas.send(tail);
            }
        }
        let mut reply = result?;
        // The whole answer: the earlier text, then this attempt's without a restart's repetition.
        if !earlier.is_empty() {
            let continued = reply
                .text
                .strip_prefix(earlier.as_str())
                .unwrap_or(&reply.text);
            reply.text = format!("{earlier}{continued}");
        }
        Ok(reply)
    }
}
