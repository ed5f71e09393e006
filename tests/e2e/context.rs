//! Context management end to end (docs/sessions.md, "Context management"): a
//! `stead serve` whose route is an upstream double that declares a small context — it
//! refuses (400) any prompt over 2,048 tokens (four characters each) and records every prompt
//! it sees. An agent with `max_prompt_tokens = 1536` talks for 200 turns of ~75-token messages
//! (ten times the context): no turn fails, no prompt reaches the double over its context,
//! summaries are written by the route and appear in the prompts that follow. Then the session's
//! page in a real browser shows the compactions as dividers that open their summaries, and an
//! operator edits the pinned memory block in its panel (`web-ui/e2e/compaction.mjs`;
//! screenshots `{target}/tmp/web-ui-compaction/`).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use stead_testkit::client::Api;
use stead_testkit::external;
use stead_testkit::stead::Stead;
use stead_testkit::upstream::{Reply, Upstream};

/// The double's context, in tokens of four characters.
const CONTEXT: usize = 2_048;

/// The characters of a request's prompt as the double counts them: every message's content
/// and the tool definitions.
fn prompt_chars(body: &Value) -> usize {
    let messages: usize = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["content"].as_str().map_or(0, str::len) + m["tool_calls"].to_string().len())
        .sum();
    messages + body["tools"].to_string().len()
}

fn system_prompt(body: &Value) -> &str {
    body["messages"][0]["content"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_turns_on_a_small_context_never_fail() {
    let over = Arc::new(AtomicUsize::new(0));
    let summaries = Arc::new(AtomicUsize::new(0));
    let up = {
        let over = over.clone();
        let summaries = summaries.clone();
        Upstream::respond(move |body| {
            if prompt_chars(body) > CONTEXT * 4 {
                over.fetch_add(1, Ordering::SeqCst);
                return Reply::status(400);
            }
            if system_prompt(body).starts_with("You summarise conversations.") {
                let n = summaries.fetch_add(1, Ordering::SeqCst) + 1;
                return Reply::text(&format!(
                    "Summary {n}: the user keeps sending numbered notes; the code word is HERON."
                ));
            }
            Reply::text("Noted. I will keep that in mind for the rest of our conversation.")
        })
        .await
    };
    let config = up.config(
        "default",
        r#"model = "double""#,
        r#"[[agents]]
name = "long"
route = "default"
system_prompt = "You are a patient assistant who keeps notes."

[agents.context]
max_prompt_tokens = 1536
"#,
    );
    let server = Stead::start(&config, None);
    let (id, _) = server.create("long").await;
    for n in 0..200 {
        let text = format!(
            "Note {n}: {}",
            "the quick brown fox jumps over the lazy dog ".repeat(6)
        );
        let (status, body) = server.say(&id, &text).await;
        assert_eq!(status, 200, "turn {n}: {body}");
        assert_eq!(body["status"], "idle", "turn {n}: {body}");
    }
    assert_eq!(
        over.load(Ordering::SeqCst),
        0,
        "no prompt over the double's context"
    );

    // The whole journal, page by page.
    let mut journal: Vec<Value> = Vec::new();
    loop {
        let after = journal.last().map_or(0, |e| e["seq"].as_i64().unwrap());
        let (_, page) = server
            .call(
                "GET",
                &format!("/v1/sessions/{id}/events?after={after}&limit=1000"),
                None,
            )
            .await;
        let events = page["events"].as_array().unwrap().clone();
        if events.is_empty() {
            break;
        }
        journal.extend(events);
    }
    let count = |kind: &str| journal.iter().filter(|e| e["kind"] == kind).count();
    assert_eq!(count("turn_finished"), 200);
    assert_eq!(count("model_call_failed"), 0);
    let compactions = count("context_compacted");
    assert!(compactions >= 10, "{compactions} compactions");
    assert_eq!(compactions, summaries.load(Ordering::SeqCst));
    // The summariser's calls are a small share of all calls (each compaction frees 70 % of the
    // budget).
    let agent_calls = count("model_call_started");
    assert!(
        compactions * 10 <= agent_calls + compactions,
        "{compactions} summaries for {agent_calls} agent calls"
    );
    // The prompts after a compaction carry its summary after the system prompt.
    let requests = up.requests();
    let last = requests
        .iter()
        .rev()
        .find(|b| !system_prompt(b).starts_with("You summarise"))
        .unwrap();
    assert!(
        system_prompt(last).contains("Summary of the earlier conversation:\nSummary "),
        "{}",
        system_prompt(last)
    );
    assert!(requests.iter().all(|b| prompt_chars(b) <= CONTEXT * 4));

    // In the browser: a divider per compaction; the last opens to its summary.
    let web_ui = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-ui");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-ui-compaction");
    let _ = std::fs::remove_dir_all(&out);
    let mut command = Command::new("node");
    command
        .current_dir(&web_ui)
        .arg("e2e/compaction.mjs")
        .arg(&server.base)
        .arg(&out)
        .arg(&id)
        .arg(compactions.to_string())
        .env(
            "CHROMIUM",
            std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
        );
    let stdout = external::run(command, Duration::from_secs(180), "the browser run failed")
        .await
        .stdout;
    let shown: Value = stdout
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no result: {stdout}"));
    assert_eq!(shown["dividers"], compactions, "{shown}");
    assert!(
        shown["label"].as_str().unwrap().contains("summarised"),
        "{shown}"
    );
    assert!(
        shown["summary"].as_str().unwrap().starts_with("Summary "),
        "{shown}"
    );
    assert!(out.join("compaction.png").is_file());
    // The edit in the panel is journaled as the operator's.
    assert_eq!(shown["memory"], "Code word: HERON", "{shown}");
    let (_, memory) = server
        .call("GET", &format!("/v1/sessions/{id}/memory"), None)
        .await;
    assert_eq!(memory["text"], "Code word: HERON", "{memory}");
    let after = journal.last().unwrap()["seq"].as_i64().unwrap();
    let (_, page) = server
        .call(
            "GET",
            &format!("/v1/sessions/{id}/events?after={after}&limit=10"),
            None,
        )
        .await;
    let updated = page["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(updated["kind"], "memory_updated", "{page}");
    assert!(updated["payload"]["by"]
        .as_str()
        .unwrap()
        .starts_with("operator:"));
    assert!(out.join("memory.png").is_file());
}
