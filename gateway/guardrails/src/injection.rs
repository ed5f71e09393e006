//! The `injection` check's patterns: instructions hidden in text an agent reads (a web page, a
//! ticket, an email, an MCP result) or a user sends. Three entities:
//! - `INJECTION`: an order to drop earlier instructions ("ignore all previous instructions"),
//!   a new identity or rule set ("from now on you are…", "new instructions:"), a role-play
//!   jailbreak (DAN, "developer mode", "act as an unrestricted AI"), a forged turn marker
//!   (`<|im_start|>system`, `[INST]`, `<<SYS>>`), or a request for the hidden prompt;
//! - `EXFIL`: a way out for data — a Markdown image whose URL carries a query (rendered, it
//!   sends the query), or an order to send the conversation, keys or credentials somewhere;
//! - `HIDDEN`: characters a person does not see — Unicode tag characters, runs of zero-width
//!   characters, bidirectional overrides.
//!
//! Patterns catch the common phrasings in English; paraphrases and other languages need the
//! model behind `route` (docs/guardrails.md, "Checks").

use regex::{Regex, RegexBuilder};

/// `(entity, pattern)`: compiled case-insensitive, multi-line.
const PATTERNS: &[(&str, &str)] = &[
    // Dropping what came before.
    (
        "INJECTION",
        r"\b(?:ignor(?:e|ing)|disregard(?:ing)?|forget(?:ting)?|override|overriding|bypass(?:ing)?|skip)\s+(?:(?:all|any|each|every|the|your|my|these|those|of|everything|that|what|was|said|told|you|were|been|given)\s+){0,4}(?:previous|prior|above|earlier|preceding|former|initial|original|system|developer|safety|old)\s+(?:instructions?|prompts?|rules|directions|directives|guidelines|messages|context|constraints|restrictions|polic(?:y|ies)|commands|orders)\b",
    ),
    (
        "INJECTION",
        r"\b(?:ignore|disregard|forget)\s+(?:all|any|every)\s+(?:of\s+)?(?:the\s+|your\s+)?(?:instructions?|rules|guidelines|restrictions|directions)\b",
    ),
    // A new rule set or identity.
    (
        "INJECTION",
        r"\b(?:new|updated|real|actual|true|revised|override)\s+(?:system\s+)?(?:instructions?|directives?|rules)\s*:",
    ),
    (
        "INJECTION",
        r"\byour\s+(?:new|real|actual|true)\s+(?:task|role|instructions?|goal|purpose|objective)\s+(?:is|are|will\s+be)\b",
    ),
    (
        "INJECTION",
        r"\bfrom\s+now\s+on,?\s+(?:you\s+(?:are|will|must|shall|should)|act\s+as|respond\s+as|ignore)\b",
    ),
    // Dropping a policy: "ignoring OpenAI's content policies", "free of all restrictions".
    (
        "INJECTION",
        r"\b(?:ignor(?:e|ing)|disregard(?:ing)?|bypass(?:ing)?|violat(?:e|ing)|break(?:ing)?)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:openai'?s?|anthropic'?s?|the|your|its|their)?\s*(?:content|safety|usage|ethical)\s+(?:polic(?:y|ies)|guidelines|filters|restrictions|rules|safeguards)\b",
    ),
    (
        "INJECTION",
        r"\bfree\s+(?:of|from)\s+(?:all\s+|any\s+)?(?:restrictions|filters|censorship|limitations|guidelines|rules)\b",
    ),
    // Role-play jailbreaks.
    (
        "INJECTION",
        r"\byou\s+are\s+(?:now\s+)?(?:DAN\b|in\s+(?:developer|god|jailbreak)\s+mode|an?\s+(?:unrestricted|unfiltered|uncensored|jailbroken|unaligned)\b)",
    ),
    (
        "INJECTION",
        r"\b(?:act|pretend|behave|roleplay|role-play)\s+(?:as|like|to\s+be)\s+(?:if\s+you\s+(?:are|were)\s+)?(?:an?\s+)?(?:unrestricted|unfiltered|uncensored|jailbroken|unaligned|evil)\b",
    ),
    ("INJECTION", r"\bdo\s+anything\s+now\b"),
    (
        "INJECTION",
        r"\byou\s+(?:are\s+going\s+to|will\s+now|will\s+from\s+now\s+on|must\s+now)\s+(?:act|pretend|behave|roleplay|role-play|simulate|respond)\b",
    ),
    (
        "INJECTION",
        r"\b(?:never|don'?t|do\s+not)\s+break\s+character\b|\bstay\s+in\s+character\b",
    ),
    // A persona made to have no limits: two such traits close together.
    (
        "INJECTION",
        r"\b(?:amoral|unfiltered|uncensored|unrestricted|jailbroken|unethical)\b[^.\n]{0,60}?\b(?:amoral|unfiltered|uncensored|unrestricted|jailbroken|unethical|no\s+(?:restrictions|filters|limits|morals|ethics|guidelines))\b",
    ),
    (
        "INJECTION",
        r"\b(?:never|not|won'?t|doesn'?t|does\s+not|don'?t|do\s+not|will\s+not|can'?t|cannot)\s+(?:ever\s+)?(?:refuse|deny|decline|reject)s?\s+(?:a\s+|any\s+)?(?:human\s+|user\s+)?(?:request|question|prompt|order)s?\b",
    ),
    (
        "INJECTION",
        r"\b(?:pretend|act|behave|role-?play)\s+(?:to\s+be|as|like)\s+(?:an?\s+)?(?:\w+\s+){0,2}(?:AI|chatbot|language\s+model|\w*GPT)\b",
    ),
    (
        "INJECTION",
        r"\byou\s+are\s+no\s+longer\s+(?:ChatGPT|\w*GPT|an?\s+AI|an?\s+assistant|an?\s+language\s+model|bound|restricted)\b",
    ),
    (
        "INJECTION",
        r"\b(?:not|never|isn'?t|aren'?t|no\s+longer)\s+(?:bound|confined|restricted|limited)\s+(?:by|to)\s+(?:any\s+)?(?:the\s+)?(?:rules|morals|ethics|polic(?:y|ies)|guidelines|restrictions|open\s*ai)",
    ),
    (
        "INJECTION",
        r"\b(?:AI|chatbot|model|assistant|bot|\w*GPT)\s+(?:\w+\s+){0,3}(?:without|with\s+no)\s+(?:any\s+)?(?:restrictions|limits|limitations|filters|censorship|rules|content\s+polic(?:y|ies))\b",
    ),
    (
        "INJECTION",
        r"\b(?:doesn'?t|does\s+not|don'?t|do\s+not)\s+have\s+(?:any\s+|a\s+)?(?:content\s+polic(?:y|ies)|content\s+filters?|restrictions|filters)\b|\bno\s+prohibitions\b|\bbreaks?\s+(?:the\s+)?(?:AI|OpenAI|ChatGPT)\s+(?:rules|polic(?:y|ies)|guidelines)\b",
    ),
    (
        "INJECTION",
        r"\b(?:ChatGPT|GPT-?\d?|AI|assistant|model)\b[^.\n]{0,40}\b(?:DAN|jailbreak|developer)\s+mode\b|\b(?:DAN|jailbreak|developer)\s+mode\b[^.\n]{0,40}\b(?:ChatGPT|GPT-?\d?|AI|assistant|model)\b",
    ),
    (
        "INJECTION",
        r"\b(?:developer|god|jailbreak|DAN|sudo)\s+mode\s+(?:is\s+)?(?:now\s+)?(?:enabled|activated|unlocked)\b",
    ),
    // Forged turns and system blocks.
    (
        "INJECTION",
        r"<\|(?:im_start|im_end|system|endoftext|start_header_id|end_header_id|eot_id)\|>",
    ),
    ("INJECTION", r"\[/?INST\]|<</?SYS>>"),
    (
        "INJECTION",
        r"^[ \t]*#{0,3}[ \t]*(?:system|admin|developer)[ \t]+(?:prompt|message|override|instructions?)[ \t]*:",
    ),
    // Asking for the hidden prompt.
    (
        "INJECTION",
        r"\b(?:reveal|print|show|output|repeat|leak|dump|disclose|display|recite|tell\s+me)\b[^.\n]{0,40}?(?:\bsystem[\s_-]*prompt|\binitial\s+(?:configuration|instructions|prompt)|\bhidden\s+instructions|\b(?:instructions|prompt|text)\s+above|\byour\s+(?:instructions|rules|guidelines)\s+(?:verbatim|word\s+for\s+word))",
    ),
    // A forged answer turn at the start of a line.
    ("INJECTION", r"^[ \t]*assistant[ \t]*:[ \t]"),
    // Ways out for data.
    (
        "EXFIL",
        r"!\[[^\]\n]*\]\(\s*https?://[^)\s]*\?[^)\s]*=[^)\s]*\)",
    ),
    (
        "EXFIL",
        r"\b(?:send|post|forward|upload|exfiltrate|transmit|leak|append|include|email)\b[^.\n]{0,60}?\b(?:conversation|chat\s+history|system\s+prompt|api\s+keys?|passwords?|credentials|secrets?|access\s+tokens?|previous\s+messages|session\s+tokens?)\b[^.\n]{0,60}?\b(?:to|into|at)\s+(?:https?://|[\w.+-]+@[\w-]+\.[\w.]+|the\s+(?:url|link|address|endpoint|server))",
    ),
    // Characters nobody sees.
    ("HIDDEN", r"[\x{E0000}-\x{E007F}]+"),
    (
        "HIDDEN",
        r"[\x{200B}-\x{200F}\x{2060}-\x{2064}\x{FEFF}]{3,}",
    ),
    ("HIDDEN", r"[\x{202A}-\x{202E}\x{2066}-\x{2069}]"),
];

/// The compiled patterns.
pub(crate) fn patterns() -> Vec<(String, Regex)> {
    PATTERNS
        .iter()
        .map(|(entity, pattern)| {
            let re = RegexBuilder::new(pattern)
                .case_insensitive(true)
                .multi_line(true)
                .size_limit(1 << 22)
                .build();
            // The patterns are constants, compiled by every test run.
            #[allow(clippy::expect_used)]
            let re = re.expect("injection patterns compile");
            (entity.to_string(), re)
        })
        .collect()
}
