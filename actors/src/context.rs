//! Context management (docs/sessions.md, "Context management"): what keeps a session's prompt
//! inside its route's budget for as long as the session lives. An agent's [`ContextRules`]
//! name the budget, the strategy and the limit on tool results shown to the model; the actor
//! measures each model call's prompt before sending it and, when it would not fit, drops the
//! oldest whole turns — replaced by a summary a route writes (`summarize`) or by nothing
//! (`truncate`) — and journals the result as `context_compacted` before the call that uses
//! it, so the fold, the decision check, forks and exports rebuild the exact prompt without
//! calling the summariser again. Everything here is pure.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::state::{Transcript, TranscriptEntry};

/// What replaces the oldest turns when a prompt outgrows its budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// A summary written by a route (the agent's own unless `summary_route` names another).
    #[default]
    Summarize,
    /// Nothing: the turns are dropped (no model call).
    Truncate,
}

/// An agent's `[agents.context]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextRules {
    /// The most prompt tokens a model call may send (`None`: [`DEFAULT_WINDOW_SHARE`] of the
    /// route's context window when the router knows it, else no bound).
    pub max_prompt_tokens: Option<u64>,
    pub strategy: Strategy,
    /// The route that writes summaries (`None`: the agent's route).
    pub summary_route: Option<String>,
    /// Tool results longer than this (in tokens, estimated at four characters each) are shown
    /// to the model cut, with a marker; the journal keeps them whole.
    pub max_tool_result_tokens: u64,
}

impl Default for ContextRules {
    fn default() -> Self {
        ContextRules {
            max_prompt_tokens: None,
            strategy: Strategy::Summarize,
            summary_route: None,
            max_tool_result_tokens: DEFAULT_MAX_TOOL_RESULT_TOKENS,
        }
    }
}

/// The share of a route's context window a prompt may fill by default: the rest is left for
/// the answer.
pub const DEFAULT_WINDOW_SHARE: f64 = 0.75;

/// Tool results shown whole up to this many tokens by default.
pub const DEFAULT_MAX_TOOL_RESULT_TOKENS: u64 = 2_000;

/// A compaction frees room down to this share of the budget, so that the next ones come many
/// calls later (their own model calls stay a small share of all calls).
pub const TARGET_SHARE: f64 = 0.3;

/// Characters per token of the estimate used where no tokenizer is at hand (remote routes):
/// English prose and JSON run at about four; the estimate errs high for code and low for
/// languages written without spaces (docs/sessions.md gives the bound).
pub const CHARS_PER_TOKEN: u64 = 4;

/// The system prompt the summariser is given.
pub const SUMMARY_INSTRUCTION: &str = "You summarise conversations. Write a short summary of the \
conversation below for the assistant that continues it: what the user asked for, what was \
done, the facts, names and numbers that were found or decided, and what is still open. Plain \
sentences, at most 200 words; do not add anything that is not in the conversation.";

/// How a summary is shown to the model: after the agent's system prompt.
pub fn system_prompt_with(system_prompt: &str, summary: Option<&str>, memory: &str) -> String {
    let mut prompt = system_prompt.to_string();
    if !memory.trim().is_empty() {
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        prompt.push_str("Memory (facts to keep):\n");
        prompt.push_str(memory.trim());
    }
    if let Some(summary) = summary.filter(|s| !s.trim().is_empty()) {
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        prompt.push_str("Summary of the earlier conversation:\n");
        prompt.push_str(summary.trim());
    }
    prompt
}

/// Tool results of earlier turns are shown cut to this share of `max_tool_result_tokens`: the
/// model has answered from them already, and a summary or the memory block keeps what matters
/// (clearing old tool results is the cheapest compaction there is).
pub const EARLIER_RESULT_DIVISOR: u64 = 8;

/// The transcript as the model is shown it: tool results of the turn in progress longer than
/// `max_tokens` (estimated) cut, earlier turns' longer than `max_tokens /`
/// [`EARLIER_RESULT_DIVISOR`]; each with a marker saying how much was left out.
pub fn shown(transcript: &[TranscriptEntry], max_tokens: u64) -> Vec<TranscriptEntry> {
    let limit = ResultLimits::new(transcript.iter(), max_tokens);
    transcript
        .iter()
        .enumerate()
        .map(|(i, entry)| cut(entry, limit.at(i)).unwrap_or_else(|| entry.clone()))
        .collect()
}

/// [`shown`] for the state's persistent transcript, sharing it: the copy costs nothing, and
/// only the tool results that are cut are replaced in it, so a step's request does not grow
/// with the session's length (docs/benchmarks.md, "Step cost against session length").
pub fn shown_shared(transcript: &Transcript, max_tokens: u64) -> Transcript {
    let limit = ResultLimits::new(transcript.iter(), max_tokens);
    let mut shown = transcript.clone();
    // Leaf by leaf: slices, faster to walk than the vector's iterator.
    for (i, entry) in transcript.leaves().flatten().enumerate() {
        if let Some(cut) = cut(entry, limit.at(i)) {
            shown.set(i, cut);
        }
    }
    shown
}

/// How many characters of a tool result are shown at each position of a transcript: the
/// whole `max_tokens` from the turn in progress (its last user message) on, a share of it
/// before.
struct ResultLimits {
    current: usize,
    earlier: usize,
    now: usize,
}

impl ResultLimits {
    fn new<'a, I>(mut entries: I, max_tokens: u64) -> Self
    where
        I: DoubleEndedIterator<Item = &'a TranscriptEntry> + ExactSizeIterator,
    {
        let chars = |tokens: u64| {
            usize::try_from(tokens.saturating_mul(CHARS_PER_TOKEN)).unwrap_or(usize::MAX)
        };
        ResultLimits {
            current: entries
                .rposition(|e| matches!(e, TranscriptEntry::User { .. }))
                .unwrap_or(0),
            earlier: chars((max_tokens / EARLIER_RESULT_DIVISOR).max(1)),
            now: chars(max_tokens),
        }
    }

    fn at(&self, i: usize) -> usize {
        if i < self.current {
            self.earlier
        } else {
            self.now
        }
    }
}

/// `entry` cut to `limit` characters with a marker, when it is a longer tool result.
fn cut(entry: &TranscriptEntry, limit: usize) -> Option<TranscriptEntry> {
    let TranscriptEntry::Tool {
        call_id,
        tool,
        content,
    } = entry
    else {
        return None;
    };
    let text = match content {
        Value::String(s) if s.len() <= limit => return None,
        Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
        other => std::borrow::Cow::Owned(other.to_string()),
    };
    if text.len() <= limit {
        return None;
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(TranscriptEntry::Tool {
        call_id: call_id.clone(),
        tool: tool.clone(),
        content: Value::String(format!(
            "{} … [cut: {} of {} characters shown; the whole result is in the journal]",
            &text[..cut],
            cut,
            text.len()
        )),
    })
}

/// The estimated tokens of a prompt: its characters over [`CHARS_PER_TOKEN`], rounded up.
pub fn estimate(chars: usize) -> u64 {
    (chars as u64).div_ceil(CHARS_PER_TOKEN)
}

/// What one attachment counts as in [`entry_chars`]: an image as the 1,600 tokens the vision
/// APIs charge for a large one at most (docs/multimodal.md); another file is a line of text,
/// well under it.
pub const ATTACHMENT_CHARS: usize = 1_600 * CHARS_PER_TOKEN as usize;

/// The characters an entry adds to a prompt (its text, calls, content and attachments).
pub fn entry_chars(entry: &TranscriptEntry) -> usize {
    match entry {
        TranscriptEntry::User { text, attachments } => {
            text.len() + attachments.len() * ATTACHMENT_CHARS
        }
        TranscriptEntry::Assistant { text, tool_calls } => {
            text.len()
                + tool_calls
                    .iter()
                    .map(|c| c.tool.len() + c.arguments.to_string().len())
                    .sum::<usize>()
        }
        TranscriptEntry::Tool { content, .. } => match content {
            Value::String(s) => s.len(),
            other => other.to_string().len(),
        },
    }
}

/// Where each earlier turn starts in `transcript` (the index of a user message), oldest
/// first, up to but not including the turn in progress (which starts at the last user
/// message and is never dropped).
pub fn turn_starts(transcript: &[TranscriptEntry]) -> Vec<usize> {
    let starts: Vec<usize> = transcript
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, TranscriptEntry::User { .. }))
        .map(|(i, _)| i)
        .collect();
    starts
}

/// What to drop from a prompt of `tokens` (measured) over `budget`: the smallest number of
/// whole earlier turns — `(entries, turns)` from the front of the transcript — after which the
/// estimate falls to [`TARGET_SHARE`] of the budget, or every earlier turn when none is
/// enough. `None` when there is no earlier turn to drop.
pub fn plan(transcript: &[TranscriptEntry], tokens: u64, budget: u64) -> Option<(usize, u32)> {
    let starts = turn_starts(transcript);
    // The turn in progress starts at the last user message; earlier turns end where the next
    // one starts.
    let current = *starts.last()?;
    let earlier: Vec<usize> = starts
        .iter()
        .copied()
        .skip(1)
        .take_while(|&s| s <= current)
        .collect();
    if earlier.is_empty() {
        return None;
    }
    let total_chars: usize = transcript.iter().map(entry_chars).sum::<usize>().max(1);
    let per_char = tokens as f64 / total_chars as f64;
    let target = (budget as f64 * TARGET_SHARE) as u64;
    let mut dropped_chars = 0usize;
    let mut from = 0usize;
    for (turns, &end) in earlier.iter().enumerate() {
        dropped_chars += transcript[from..end].iter().map(entry_chars).sum::<usize>();
        from = end;
        let left = tokens.saturating_sub((dropped_chars as f64 * per_char) as u64);
        if left <= target || end == current {
            return Some((end, turns as u32 + 1));
        }
    }
    Some((current, earlier.len() as u32))
}

/// The text the summariser is given: the summary so far, then the dropped entries as
/// `User:` / `Assistant:` / `Tool …:` lines (tool results cut like the model sees them).
pub fn summary_input(
    previous: Option<&str>,
    dropped: &[TranscriptEntry],
    max_tool_tokens: u64,
) -> String {
    let mut text = String::new();
    if let Some(previous) = previous.filter(|s| !s.trim().is_empty()) {
        text.push_str("Summary so far:\n");
        text.push_str(previous.trim());
        text.push_str("\n\nThe conversation that followed:\n");
    }
    for entry in shown(dropped, max_tool_tokens) {
        match entry {
            TranscriptEntry::User { text: t, .. } => text.push_str(&format!("User: {t}\n")),
            TranscriptEntry::Assistant {
                text: t,
                tool_calls,
            } => {
                for call in &tool_calls {
                    text.push_str(&format!(
                        "Assistant called {} with {}\n",
                        call.tool, call.arguments
                    ));
                }
                if !t.trim().is_empty() {
                    text.push_str(&format!("Assistant: {t}\n"));
                }
            }
            TranscriptEntry::Tool { tool, content, .. } => {
                let shown = match content {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                text.push_str(&format!("Tool {tool} returned: {shown}\n"));
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(n: usize, chars: usize) -> Vec<TranscriptEntry> {
        vec![
            TranscriptEntry::User {
                text: format!("question {n} {}", "x".repeat(chars)),
                attachments: Vec::new(),
            },
            TranscriptEntry::Assistant {
                text: format!("answer {n}"),
                tool_calls: Vec::new(),
            },
        ]
    }

    #[test]
    fn the_plan_drops_the_fewest_whole_turns_and_never_the_current_one() {
        let transcript: Vec<TranscriptEntry> = (0..10).flat_map(|n| turn(n, 400)).collect();
        let tokens = estimate(transcript.iter().map(entry_chars).sum());
        // Just over the budget: down to 30 % of it takes eight of the nine earlier turns (seven
        // would leave three tenths of the prompt, just over 30 % of the budget).
        let (entries, turns) = plan(&transcript, tokens, tokens - 10).unwrap();
        assert_eq!((entries, turns), (16, 8));
        assert!(
            matches!(&transcript[entries], TranscriptEntry::User { text, .. } if text.starts_with("question 8"))
        );
        // A tiny budget: every earlier turn, not the current one.
        assert_eq!(plan(&transcript, tokens, 10), Some((18, 9)));
        // One turn only: nothing to drop.
        assert_eq!(plan(&turn(0, 10), 1000, 10), None);
    }

    #[test]
    fn earlier_turns_results_are_cut_shorter_than_the_current_ones() {
        let result = || TranscriptEntry::Tool {
            call_id: "t".into(),
            tool: "fetch".into(),
            content: json!("x".repeat(100)),
        };
        let transcript = vec![
            TranscriptEntry::User {
                text: "a".into(),
                attachments: Vec::new(),
            },
            result(),
            TranscriptEntry::User {
                text: "b".into(),
                attachments: Vec::new(),
            },
            result(),
        ];
        // 16 tokens: 64 characters now, 8 (2 tokens) for the earlier turn.
        let shown = shown(&transcript, 16);
        let text = |e: &TranscriptEntry| match e {
            TranscriptEntry::Tool { content, .. } => content.as_str().unwrap().to_string(),
            _ => String::new(),
        };
        assert!(
            text(&shown[1]).contains("[cut: 8 of 100"),
            "{}",
            text(&shown[1])
        );
        assert!(
            text(&shown[3]).contains("[cut: 64 of 100"),
            "{}",
            text(&shown[3])
        );
    }

    #[test]
    fn the_shared_transcript_is_shown_as_the_plain_one_and_left_whole() {
        let long = |n: usize| TranscriptEntry::Tool {
            call_id: format!("t{n}").into(),
            tool: "fetch".into(),
            content: json!({ "rows": "y".repeat(90 + n) }),
        };
        // Over several leaves of the persistent vector (64 entries each).
        let plain: Vec<TranscriptEntry> = (0..100)
            .flat_map(|n| {
                let mut entries = turn(n, 3);
                entries.insert(1, long(n));
                entries
            })
            .collect();
        let shared = Transcript::from(plain.clone());
        let shown_shared = shown_shared(&shared, 16);
        assert_eq!(
            shown_shared.iter().cloned().collect::<Vec<_>>(),
            shown(&plain, 16)
        );
        assert_ne!(shown_shared, shared, "long results are cut");
        assert_eq!(
            shared,
            Transcript::from(plain),
            "the state's transcript is untouched"
        );
    }

    #[test]
    fn long_tool_results_are_shown_cut_with_a_marker() {
        let transcript = vec![TranscriptEntry::Tool {
            call_id: "t1".into(),
            tool: "fetch".into(),
            content: json!("é".repeat(100)),
        }];
        let shown = shown(&transcript, 10);
        let TranscriptEntry::Tool { content, .. } = &shown[0] else {
            panic!()
        };
        let text = content.as_str().unwrap();
        assert!(text.starts_with(&"é".repeat(20)), "{text}");
        assert!(text.contains("[cut: 40 of 200 characters shown"), "{text}");
    }

    #[test]
    fn the_summary_and_memory_follow_the_system_prompt() {
        assert_eq!(
            system_prompt_with("Be brief.", Some("They met."), "name: Ada"),
            "Be brief.\n\nMemory (facts to keep):\nname: Ada\n\nSummary of the earlier conversation:\nThey met."
        );
        assert_eq!(system_prompt_with("Be brief.", None, ""), "Be brief.");
    }
}
