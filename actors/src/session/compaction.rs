//! Keeping a model call's prompt inside its budget (docs/sessions.md, "Context management"):
//! before the actor's model task sends a call, it measures the prompt; one that would not fit
//! is not sent — the oldest whole turns are summarised (or dropped) and the task answers with
//! an [`Input::Compact`], which the decision journals as `context_compacted` and answers by
//! issuing the call again over the compacted transcript. A prompt whose turn alone is over the
//! budget fails the call with `context_overflow`.

use stead_model::CallId;
use tokio_util::sync::CancellationToken;

use super::{Calibration, ModelClient, ModelError, ModelRequest};
use crate::context::{self, ContextRules, Strategy};
use crate::decide::Input;
use crate::state::TranscriptEntry;

/// What to do with a model call.
pub(super) enum Fit {
    /// It fits (or no budget applies): send it. `chars`: its prompt's characters
    /// ([`super::prompt_chars`]), counted once for the calibration and the caller.
    Send { chars: usize },
    /// Journal this compaction; the decision issues the call again.
    Compact(Input),
    /// It cannot fit: fail the call with this error.
    Overflow(String),
}

/// What a call's system prompt is made of: the agent's own (or a fork's), the pinned memory
/// block and the latest summary.
#[derive(Clone, Copy)]
pub(super) struct PromptParts<'a> {
    pub(super) base: &'a str,
    pub(super) summary: Option<&'a str>,
    pub(super) memory: &'a str,
}

/// The agent's budget for a prompt on a route whose context window is `window`.
pub(super) fn budget(rules: &ContextRules, window: Option<u64>) -> Option<u64> {
    rules
        .max_prompt_tokens
        .or_else(|| window.map(|w| (w as f64 * context::DEFAULT_WINDOW_SHARE) as u64))
}

/// Measures `request` (whose system prompt is `base_prompt` with `memory` and `summary` shown
/// after it; an estimate corrected by `last`, the session's last counted call) and decides
/// whether it fits, compacting when it does not.
pub(super) async fn fit(
    model: &dyn ModelClient,
    request: &ModelRequest,
    rules: &ContextRules,
    prompt: &PromptParts<'_>,
    last: Option<&Calibration>,
    call_id: &str,
    cancel: CancellationToken,
) -> Fit {
    let PromptParts {
        base: base_prompt,
        summary,
        memory,
    } = *prompt;
    let chars = super::prompt_chars(request);
    let size = model
        .measure(request)
        .await
        .calibrated(&request.route, chars, last);
    let Some(budget) = budget(rules, size.window) else {
        return Fit::Send { chars };
    };
    if size.tokens <= budget {
        return Fit::Send { chars };
    }
    // Over the budget (rare: then the call is compacted): the plan reads a plain copy.
    let transcript: Vec<TranscriptEntry> = request.transcript.iter().cloned().collect();
    let Some((entries, turns)) = context::plan(&transcript, size.tokens, budget) else {
        return Fit::Overflow(format!(
            "context_overflow: this model call's prompt needs {} tokens{}, over the agent's \
             budget of {budget} (`[agents.context] max_prompt_tokens`, or 75 % of the route's \
             context window), and no earlier turn is left to compact: the newest message and \
             its turn alone do not fit. Send a shorter message.",
            size.tokens,
            if size.exact { "" } else { " (estimated)" },
        ));
    };
    let dropped = &transcript[..entries];
    let (new_summary, summariser) = match rules.strategy {
        Strategy::Truncate => (None, None),
        Strategy::Summarize => {
            match summarise(model, request, rules, summary, dropped, budget, cancel).await {
                Ok((text, model)) => (Some(text), Some(model)),
                Err(error) => {
                    tracing::warn!(session = %request.session_id, %error,
                        "the summary could not be written; the oldest turns are dropped without one");
                    (None, None)
                }
            }
        }
    };
    let mut compacted = request.clone();
    compacted.transcript = compacted.transcript.skip(entries);
    compacted.system_prompt =
        context::system_prompt_with(base_prompt, new_summary.as_deref().or(summary), memory);
    let after = model
        .measure(&compacted)
        .await
        .calibrated(&compacted.route, super::prompt_chars(&compacted), last)
        .tokens;
    Fit::Compact(Input::Compact(crate::events::Compaction {
        call_id: CallId::new(call_id.to_string()),
        entries: entries as u64,
        turns,
        summary: new_summary,
        model: summariser,
        tokens_before: size.tokens,
        tokens_after: after,
    }))
}

/// Why no summary was written (the oldest turns are then dropped without one).
#[derive(Debug, thiserror::Error)]
enum SummaryError {
    #[error("the summary call failed: {0}")]
    Call(#[from] ModelError),
    #[error("the summariser answered with nothing")]
    Empty,
}

/// Asks the summary route (the agent's own by default) for a summary of `dropped` and the
/// summary so far; returns the text and the model that wrote it.
async fn summarise(
    model: &dyn ModelClient,
    request: &ModelRequest,
    rules: &ContextRules,
    previous: Option<&str>,
    dropped: &[TranscriptEntry],
    budget: u64,
    cancel: CancellationToken,
) -> Result<(String, String), SummaryError> {
    let mut input = context::summary_input(previous, dropped, rules.max_tool_result_tokens);
    // The summariser's own prompt stays inside the budget: the newest part is kept.
    let cap =
        usize::try_from(budget.saturating_mul(context::CHARS_PER_TOKEN) / 2).unwrap_or(usize::MAX);
    if input.len() > cap {
        let mut from = input.len() - cap;
        while !input.is_char_boundary(from) {
            from += 1;
        }
        input = format!("[the start of this part was cut]\n{}", &input[from..]);
    }
    let summary_request = ModelRequest {
        session_id: request.session_id,
        route: rules
            .summary_route
            .clone()
            .unwrap_or_else(|| request.route.clone()),
        system_prompt: context::SUMMARY_INSTRUCTION.to_string(),
        transcript: imbl::vector![TranscriptEntry::User {
            text: input,
            attachments: Vec::new(),
        }],
        tools: Vec::new(),
        principal: request.principal.clone(),
        metadata: request.metadata.clone(),
        repair: false,
        // What a person approved was for the call itself, not for its summary.
        budget_grant_usd: None,
    };
    let (deltas, _stream) = tokio::sync::mpsc::unbounded_channel();
    let output = model.complete(summary_request, deltas, cancel).await?;
    let text = output.text.trim().to_string();
    if text.is_empty() {
        return Err(SummaryError::Empty);
    }
    Ok((text, output.model))
}
