//! Small talk: a user message that is nothing but pleasantries (a greeting, thanks, a
//! goodbye, "how are you") or a question about what the assistant can do. The local engine
//! answers such a message without offering tools (docs/inference.md, "Small talk"): measured
//! on Qwen2.5-Coder-0.5B, a bare "hello" put 0.91–0.94 of the first token's probability on a
//! call, more than any real request did, and no prompt wording fixed it without breaking a
//! real request. The rule is lexical and strict, so that it can never hide the tools from a
//! request: every clause of the message must be made of the phrases below and nothing else.

use crate::{ChatMessage, Role, ToolSpec};

/// What kind of small talk a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmallTalk {
    /// Greetings, thanks, goodbyes, "how are you" and their answers.
    Pleasantry,
    /// A question about what the assistant is or can do (possibly with pleasantries).
    Capabilities,
}

/// Phrases a pleasantry clause is made of (lower case, apostrophes straight). Words that can
/// confirm something the assistant offered ("ok", "sure", "great", "fine") are not among them:
/// such a reply may need the tool the offer was about.
const PLEASANTRIES: &[&str] = &[
    "hello",
    "hi",
    "hey",
    "heya",
    "hiya",
    "howdy",
    "greetings",
    "yo",
    "good morning",
    "good afternoon",
    "good evening",
    "good day",
    "morning",
    "how are you",
    "how are you doing",
    "how are things",
    "how's it going",
    "how is it going",
    "how do you do",
    "how have you been",
    "what's up",
    "whats up",
    "sup",
    "nice to meet you",
    "pleased to meet you",
    "i'm fine",
    "i am fine",
    "i'm good",
    "i am good",
    "i'm well",
    "i am well",
    "not bad",
    "thanks",
    "thank you",
    "thx",
    "ty",
    "cheers",
    "many thanks",
    "much appreciated",
    "appreciate it",
    "i appreciate it",
    "that was helpful",
    "that's helpful",
    "that is helpful",
    "that helps",
    "that helped",
    "helpful",
    "bye",
    "goodbye",
    "bye bye",
    "see you",
    "see you later",
    "see ya",
    "good night",
    "take care",
    "have a nice day",
    "have a good day",
];

/// Phrases a capability question is made of.
const CAPABILITIES: &[&str] = &[
    "what can you do",
    "what else can you do",
    "what are you able to do",
    "what do you do",
    "what can you help with",
    "what can you help me with",
    "how can you help",
    "how can you help me",
    "what can i ask you",
    "what can i ask",
    "what are your capabilities",
    "what are your skills",
    "what tools do you have",
    "which tools do you have",
    "what are your tools",
    "who are you",
    "what are you",
    "help",
];

/// Words that may stand anywhere in a clause of small talk without changing what it is
/// ("hi there", "thanks so much", "hello again, assistant", "what can you do for me").
const FILLERS: &[&str] = &[
    "there",
    "again",
    "so",
    "very",
    "much",
    "a",
    "lot",
    "really",
    "you",
    "too",
    "all",
    "everyone",
    "everybody",
    "friend",
    "assistant",
    "bot",
    "oh",
    "well",
    "and",
    "for",
    "me",
    "today",
    "then",
    "just",
    "please",
    // Alone, "ok" may confirm an offer: a clause of fillers alone is neither small talk nor
    // more, so "ok" keeps the tools and "ok, thanks" does not.
    "ok",
    "okay",
];

/// The kind of small talk `text` is, or `None` when any of it is more than small talk.
pub fn classify(text: &str) -> Option<SmallTalk> {
    let normalized: String = text
        .chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '`' => '\'',
            c if c.is_alphanumeric() || c == '\'' || c.is_whitespace() => c,
            '.' | ',' | '!' | '?' | ';' | ':' | '\u{2014}' | '-' | '\n' => '|',
            // Emoji and other symbols carry no request.
            _ => ' ',
        })
        .flat_map(char::to_lowercase)
        .collect();
    let mut kind = None;
    for clause in normalized.split('|') {
        let words: Vec<&str> = clause.split_whitespace().collect();
        // A clause of fillers alone ("and you?") adds nothing either way.
        if words.iter().all(|w| FILLERS.contains(w)) {
            continue;
        }
        if covered(&words, PLEASANTRIES) {
            kind.get_or_insert(SmallTalk::Pleasantry);
        } else if covered(&words, CAPABILITIES) || covered_mixed(&words) {
            kind = Some(SmallTalk::Capabilities);
        } else {
            return None;
        }
    }
    kind
}

/// The small talk a request ends with when it is answered without tools (docs/inference.md,
/// "Small talk"): in `auto` tool mode with tools, the adapter on.
pub(crate) fn of_request(
    request: &crate::ChatRequest,
    adapters: crate::adapt::Adapters,
) -> Option<SmallTalk> {
    let auto = matches!(request.tool_choice, crate::ToolChoice::Auto);
    if !(auto && adapters.small_talk && !request.tools.is_empty()) {
        return None;
    }
    ending(&request.messages)
}

/// The small talk a conversation ends with: its last message, when that is the user's, has no
/// images and is only small talk.
pub fn ending(messages: &[ChatMessage]) -> Option<SmallTalk> {
    let last = messages.last().filter(|m| m.role == Role::User)?;
    if !last.images.is_empty() {
        return None;
    }
    classify(&last.content)
}

/// What the system message gains for a pleasantry. Without it the 0.5 B model answered "hi"
/// with "Hi" and "good morning" with "good morning"; with it, "Hello! How can I assist you
/// today?" and "Good morning!" (docs/inference.md, "Small talk").
pub const PLEASANTRY_NOTE: &str =
    "Reply to the user's greeting or thanks in one friendly sentence.";

/// The conversation as the model reads it when it ends with small talk and is answered
/// without tools: earlier turns folded as the `digest_history` adapter folds them (when
/// `digest` is on, as it is for tool conversations), then [`PLEASANTRY_NOTE`] — or for a
/// question about what the assistant can do, [`abilities`] — at the end of the system message
/// (created when there is none).
pub fn adapt(
    messages: &[ChatMessage],
    kind: SmallTalk,
    tools: &[ToolSpec],
    digest: bool,
) -> Vec<ChatMessage> {
    let mut adapted = digest
        .then(|| crate::adapt::digest_history(messages))
        .flatten()
        .unwrap_or_else(|| messages.to_vec());
    let note = match kind {
        SmallTalk::Pleasantry => PLEASANTRY_NOTE.to_string(),
        SmallTalk::Capabilities => abilities(tools),
    };
    match adapted.first_mut().filter(|m| m.role == Role::System) {
        Some(system) => {
            if !system.content.trim().is_empty() {
                system.content.push_str("\n\n");
            }
            system.content.push_str(&note);
        }
        None => adapted.insert(0, ChatMessage::system(note)),
    }
    adapted
}

/// What the model is told to answer to "what can you do?": a reply to copy, in the first
/// person, naming each tool by the opening clause of its description. Measured on
/// Qwen2.5-Coder-0.5B (docs/inference.md, "Small talk"): given the descriptions as a list or
/// as a statement about itself, it copied the list's heading, answered with one tool, or said
/// "You can do anything you can do."; given a reply to make, it makes it.
pub fn abilities(tools: &[ToolSpec]) -> String {
    let mut clauses: Vec<String> = tools
        .iter()
        .map(|t| clause(&t.description, &t.name))
        .collect();
    clauses.dedup();
    let list = match clauses.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => clauses.concat(),
    };
    format!(
        "When the user asks what you can do, reply: \"I can answer questions in plain text, and \
         I have tools to {list}.\""
    )
}

/// A description's opening clause (up to its first `,` `:` `;` `(` or `.`), its first letter
/// lower case unless the second is upper case too (an acronym); the tool's name when it has
/// none.
fn clause(description: &str, name: &str) -> String {
    let cut = description
        .split([',', ':', ';', '(', '.'])
        .next()
        .unwrap_or_default()
        .trim();
    let cut = if cut.is_empty() { name } else { cut };
    let mut chars = cut.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if !second.is_uppercase() => first
            .to_lowercase()
            .chain(cut[first.len_utf8()..].chars())
            .collect(),
        _ => cut.to_string(),
    }
}

/// Whether `words` split wholly into `phrases` and fillers, with at least one phrase.
fn covered(words: &[&str], phrases: &[&str]) -> bool {
    split(words, &|w: &[&str]| phrases.iter().any(|p| phrase_is(p, w)))
}

/// A clause that joins a pleasantry and a capability question ("hi what can you do").
fn covered_mixed(words: &[&str]) -> bool {
    split(words, &|w: &[&str]| {
        PLEASANTRIES
            .iter()
            .chain(CAPABILITIES)
            .any(|p| phrase_is(p, w))
    }) && (0..words.len()).any(|i| {
        (i + 1..=words.len()).any(|j| CAPABILITIES.iter().any(|p| phrase_is(p, &words[i..j])))
    })
}

fn phrase_is(phrase: &str, words: &[&str]) -> bool {
    phrase.split(' ').eq(words.iter().copied())
}

/// Whether `words` can be cut into pieces, each a filler or a phrase `is_phrase` accepts, at
/// least one of them a phrase.
fn split(words: &[&str], is_phrase: &dyn Fn(&[&str]) -> bool) -> bool {
    // reach[i]: the first i words split, and whether a phrase was among the pieces.
    let mut reach: Vec<Option<bool>> = vec![None; words.len() + 1];
    reach[0] = Some(false);
    for i in 0..words.len() {
        let Some(had_phrase) = reach[i] else { continue };
        if FILLERS.contains(&words[i]) {
            reach[i + 1] = Some(reach[i + 1].unwrap_or(false) || had_phrase);
        }
        for j in i + 1..=words.len().min(i + 6) {
            if is_phrase(&words[i..j]) {
                reach[j] = Some(true);
            }
        }
    }
    reach[words.len()] == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pleasantries_and_capability_questions_are_small_talk() {
        for text in [
            "hello",
            "hi",
            "Hi!",
            "Hey there 👋",
            "good morning",
            "Good morning!",
            "Hello! How are you?",
            "Thanks, that was helpful!",
            "thank you so much",
            "Thanks again!",
            "ok, thanks",
            "Bye!",
            "Nice to meet you.",
            "I'm fine, thank you. And you?",
            "how’s it going",
        ] {
            assert_eq!(classify(text), Some(SmallTalk::Pleasantry), "{text}");
        }
        for text in [
            "What can you do?",
            "Hi! What can you do?",
            "hello what can you do for me",
            "Who are you?",
            "help",
            "What tools do you have?",
        ] {
            assert_eq!(classify(text), Some(SmallTalk::Capabilities), "{text}");
        }
    }

    #[test]
    fn anything_more_than_small_talk_keeps_the_tools() {
        for text in [
            "",
            "   ",
            "What time is it?",
            "hi, what time is it?",
            "Hello! Please remember that my dentist is on Tuesday.",
            "Thanks! Now what is 17 * 23?",
            "Remember that my wifi password is hunter2",
            "What is my wifi password?",
            "help me remember my keys",
            "forget the note about the dentist",
            "good morning, what's the date today?",
            "Translate 'good morning' into French.",
            "What can you do with 17 * 23?",
            "How are you going to calculate this?",
            "thanks for the note about the dentist",
            "42",
            "you",
            "ok",
            "Great, do it.",
            "sure",
        ] {
            assert_eq!(classify(text), None, "{text:?}");
        }
    }

    fn tool(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    #[test]
    fn a_capability_question_gets_a_reply_naming_the_tools() {
        let tools = [
            tool("clock", "Get the current date and time in UTC"),
            tool(
                "remember",
                "Save a note the user asks you to remember, as one line of text",
            ),
            tool(
                "forget",
                "Delete a saved note (destructive): old is a word of the note",
            ),
            tool("lookup", "URL of a page. Returns its title"),
            tool("noop", ""),
        ];
        assert_eq!(
            abilities(&tools),
            "When the user asks what you can do, reply: \"I can answer questions in plain text, \
             and I have tools to get the current date and time in UTC, save a note the user asks \
             you to remember, delete a saved note, URL of a page and noop.\""
        );
        let conversation = [
            ChatMessage::system("Be brief."),
            ChatMessage::user("What is 17 * 23?"),
            ChatMessage::new(Role::Assistant, "391."),
            ChatMessage::user("What can you do?"),
        ];
        let adapted = adapt(&conversation, SmallTalk::Capabilities, &tools[..1], true);
        assert_eq!(
            adapted,
            [
                ChatMessage::system(format!(
                    "Be brief.\n\nThe conversation so far:\nUser: What is 17 * 23?\n\n{}",
                    abilities(&tools[..1])
                )),
                conversation[3].clone(),
            ]
        );
        // A pleasantry gets its note; without a system message one is made.
        let mut noted = conversation.to_vec();
        noted[0].content.push_str("\n\n");
        noted[0].content.push_str(PLEASANTRY_NOTE);
        assert_eq!(
            adapt(&conversation, SmallTalk::Pleasantry, &tools, false),
            noted
        );
        assert_eq!(
            adapt(
                &conversation[3..],
                SmallTalk::Capabilities,
                &tools[..1],
                true
            ),
            [
                ChatMessage::system(abilities(&tools[..1])),
                conversation[3].clone()
            ]
        );
        assert_eq!(ending(&conversation), Some(SmallTalk::Capabilities));
        assert_eq!(ending(&conversation[..3]), None);
    }

    /// Against the shipped evaluation dataset: no turn that expects a tool is small talk, and
    /// the greetings, thanks and the capability question that expect none are.
    #[test]
    fn no_dataset_turn_that_needs_a_tool_is_small_talk() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../evals/datasets/demo-agent.jsonl"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let (mut asking, mut small) = (0, Vec::new());
        for line in text.lines().skip(1) {
            let case: serde_json::Value = serde_json::from_str(line).unwrap();
            for turn in case["turns"].as_array().unwrap() {
                let user = turn["user"].as_str().unwrap();
                let wants_tools = turn["expect"].as_array().unwrap().iter().any(|e| {
                    e["type"] == "tools" && e["names"].as_array().is_some_and(|n| !n.is_empty())
                });
                if wants_tools {
                    asking += 1;
                    assert_eq!(classify(user), None, "{user:?} asks for a tool");
                } else if classify(user).is_some() {
                    small.push(user.to_string());
                }
            }
        }
        assert!(asking >= 40, "{asking} turns asking for tools");
        small.sort();
        small.dedup();
        assert_eq!(
            small,
            [
                "Hello! How are you?",
                "Thanks, bye!",
                "Thanks, that was helpful!",
                "What can you do?",
                "good morning",
                "hello",
                "hi"
            ]
        );
    }
}
