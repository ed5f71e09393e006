//! Printing shared by `stead session …` and `stead replay …`: pretty JSON on stdout, an event
//! as JSON, and an event on one line for people.

use std::io::Write;

use serde_json::{json, Value};
use stead_persistence::Event;

pub(super) fn print_json(value: &Value) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// An event as the REST events endpoint and exports show it.
pub(super) fn event_json(event: &Event) -> Value {
    json!({
        "seq": event.seq,
        "kind": event.kind,
        "payload": event.payload,
        "at": event.created_at,
    })
}

/// At most `max` characters of `text`, on one line.
pub(super) fn clip(text: &str, max: usize) -> String {
    let line = text.replace('\n', " ");
    if line.chars().count() <= max {
        line
    } else {
        let mut cut: String = line.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

/// One event on one line for people: seq, time, kind and what matters about it.
pub(super) fn human(event: &Event) -> String {
    let p = &event.payload;
    let s = |key: &str| p[key].as_str().unwrap_or_default().to_string();
    let detail = match event.kind.as_str() {
        "session_created" => format!("agent {}", s("agent")),
        "user_message" => format!("{:?}", clip(&s("text"), 100)),
        "model_call_started" => format!("{} route {}", s("call_id"), s("route")),
        "model_call_finished" => {
            let tools: Vec<String> = p["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["tool"].as_str().unwrap_or_default().to_string())
                .collect();
            format!(
                "{} {:?}{} · {}+{} tokens · {:.0} ms · {}/{}",
                s("call_id"),
                clip(&s("text"), 60),
                if tools.is_empty() {
                    String::new()
                } else {
                    format!(" → {}", tools.join(", "))
                },
                p["usage"]["prompt_tokens"],
                p["usage"]["completion_tokens"],
                p["latency_ms"].as_f64().unwrap_or_default(),
                s("provider"),
                s("model")
            )
        }
        "model_call_failed" => format!("{} {}", s("call_id"), clip(&s("error"), 100)),
        "context_compacted" => format!(
            "before {}: {} earlier turn{} {} · {} → {} tokens",
            s("call_id"),
            p["turns"],
            if p["turns"] == 1 { "" } else { "s" },
            match p["summary"].as_str() {
                Some(summary) => format!("summarised ({}): {:?}", s("model"), clip(summary, 80)),
                None => "dropped".to_string(),
            },
            p["tokens_before"],
            p["tokens_after"],
        ),
        "reply_rejected" => format!("{} {}", s("call_id"), s("reason")),
        "assistant_message" if p["fallback"] == true => {
            format!("{:?} (built from the tool results)", clip(&s("text"), 100))
        }
        "assistant_message" => format!("{:?}", clip(&s("text"), 100)),
        "tool_call_requested" | "approval_requested" => {
            let why = p["reason"]
                .as_str()
                .map_or(String::new(), |r| format!(" — {r}"));
            format!(
                "{} {}({}){why}",
                s("call_id"),
                s("tool"),
                clip(&p["arguments"].to_string(), 80)
            )
        }
        "guardrail_checked" => checked(p),
        "approval_decided" => format!(
            "{} {} by {} ({}){}",
            s("call_id"),
            if p["approved"] == true {
                "approved"
            } else {
                "rejected"
            },
            s("decided_by"),
            s("scope"),
            p["reason"]
                .as_str()
                .map_or(String::new(), |r| format!(": {r}"))
        ),
        "budget_approval_requested" => format!(
            "{} waits: {} is {:.6} USD short — {}",
            s("call_id"),
            s("budget"),
            p["needed_usd"].as_f64().unwrap_or(0.0),
            clip(&s("reason"), 80)
        ),
        "budget_approval_decided" => format!(
            "{} {} by {}{}{}",
            s("call_id"),
            if p["approved"] == true {
                "overspend approved"
            } else {
                "overspend rejected"
            },
            s("decided_by"),
            p["overspend_usd"]
                .as_f64()
                .map_or(String::new(), |usd| format!(" (up to {usd:.6} USD)")),
            p["reason"]
                .as_str()
                .map_or(String::new(), |r| format!(": {r}"))
        ),
        "tool_call_started" => format!("{} {}", s("call_id"), s("tool")),
        "tool_call_finished" => format!(
            "{} {} → {}",
            s("call_id"),
            s("tool"),
            clip(&p["result"].to_string(), 80)
        ),
        "tool_call_failed" => format!(
            "{} {} {}{}",
            s("call_id"),
            s("tool"),
            clip(&s("error"), 80),
            if p["in_doubt"] == true {
                " [in doubt]"
            } else {
                ""
            }
        ),
        "tool_call_cancelled" => {
            format!("{} {} {}", s("call_id"), s("tool"), clip(&s("reason"), 80))
        }
        "tools_seen" => {
            let names: Vec<&str> = p["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str())
                .collect();
            format!("{} tools: {}", names.len(), clip(&names.join(", "), 100))
        }
        "turn_finished" | "turn_cancelled" | "session_failed" | "session_closed" => s("reason"),
        "session_forked" => format!(
            "from {} at seq {} {}",
            s("from"),
            p["at"],
            p.get("overrides").map(Value::to_string).unwrap_or_default()
        ),
        _ => clip(&p.to_string(), 100),
    };
    format!(
        "{:>6}  {}  {:<20}  {detail}",
        event.seq,
        event.created_at.format("%H:%M:%S%.3f"),
        event.kind
    )
}

/// A `guardrail_checked` line: each guardrail and what it did, and whether a person decides.
fn checked(p: &serde_json::Value) -> String {
    let verdicts: Vec<String> = p["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let effect = c["effect"].as_str().unwrap_or_default();
            format!("{} {effect}", c["guardrail"].as_str().unwrap_or_default())
        })
        .collect();
    let held = if p["held"].is_null() {
        ""
    } else {
        " — held for a person"
    };
    format!(
        "{} {}: {}{held}",
        p["call_id"].as_str().unwrap_or_default(),
        p["tool"].as_str().unwrap_or_default(),
        verdicts.join(", ")
    )
}
