//! The decisions of a run against its recording, step by step: each tool call by position (the
//! same, another tool, other arguments — naming each argument that changed — missing or
//! extra), its approval, and the reply.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::{CallOutcome, TurnOutcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Same,
    /// Another tool at this step.
    Tool,
    /// The same tool with other arguments.
    Arguments,
    /// The same call, decided otherwise (approved in one, rejected in the other).
    Approval,
    /// The recording made this call; the run did not.
    Missing,
    /// The run made this call; the recording did not.
    Extra,
    /// The reply (whether it changed is in `detail`; graded on its own).
    Reply,
}

/// One step of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 1-based position of the call in the turn (0 for the reply).
    pub step: usize,
    pub kind: Change,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<String>,
    pub detail: String,
}

/// `recorded` against `actual`, call by call, then the reply.
pub fn diff(recorded: &TurnOutcome, actual: &TurnOutcome) -> Vec<Step> {
    let mut steps = Vec::new();
    let n = recorded.calls.len().max(actual.calls.len());
    for i in 0..n {
        let (r, a) = (recorded.calls.get(i), actual.calls.get(i));
        let show = |c: Option<&CallOutcome>| c.map(|c| format!("{}({})", c.tool, c.arguments));
        let (kind, detail) = match (r, a) {
            (Some(r), Some(a)) if r.tool != a.tool => (
                Change::Tool,
                format!("call {}: `{}` became `{}`", i + 1, r.tool, a.tool),
            ),
            (Some(r), Some(a)) if r.arguments != a.arguments => (
                Change::Arguments,
                format!(
                    "call {} `{}`: {}",
                    i + 1,
                    r.tool,
                    argument_changes(&r.arguments, &a.arguments).join(", ")
                ),
            ),
            (Some(r), Some(a))
                if r.approval.as_ref().map(|x| x.approved)
                    != a.approval.as_ref().map(|x| x.approved) =>
            {
                (
                    Change::Approval,
                    format!(
                        "call {} `{}`: approval {} → {}",
                        i + 1,
                        r.tool,
                        decided(r),
                        decided(a)
                    ),
                )
            }
            (Some(r), Some(_)) => (Change::Same, format!("call {} `{}`", i + 1, r.tool)),
            (Some(r), None) => (
                Change::Missing,
                format!("call {} `{}` was not made", i + 1, r.tool),
            ),
            (None, Some(a)) => (Change::Extra, format!("call {} `{}` is new", i + 1, a.tool)),
            (None, None) => continue,
        };
        steps.push(Step {
            step: i + 1,
            kind,
            recorded: show(r),
            actual: show(a),
            detail,
        });
    }
    let same = recorded.reply.trim() == actual.reply.trim();
    steps.push(Step {
        step: 0,
        kind: Change::Reply,
        recorded: Some(recorded.reply.clone()),
        actual: Some(actual.reply.clone()),
        detail: if same {
            "the reply is the same".into()
        } else {
            "the reply changed".into()
        },
    });
    steps
}

fn decided(call: &CallOutcome) -> &'static str {
    match &call.approval {
        None => "none",
        Some(a) if a.approved => "approved",
        Some(_) => "rejected",
    }
}

/// Each argument path whose value differs: `table: "users" → "orders"`.
pub fn argument_changes(recorded: &Value, actual: &Value) -> Vec<String> {
    let mut changes = Vec::new();
    walk("", recorded, actual, &mut changes);
    if changes.is_empty() {
        changes.push(format!("{recorded} → {actual}"));
    }
    changes
}

fn walk(path: &str, recorded: &Value, actual: &Value, changes: &mut Vec<String>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (recorded, actual) {
        (Value::Object(r), Value::Object(a)) => {
            let mut keys: Vec<&String> = r.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                match (r.get(key), a.get(key)) {
                    (Some(x), Some(y)) => walk(&join(key), x, y, changes),
                    (Some(x), None) => changes.push(format!("`{}` {x} → absent", join(key))),
                    (None, Some(y)) => changes.push(format!("`{}` absent → {y}", join(key))),
                    (None, None) => {}
                }
            }
        }
        (x, y) if x != y => {
            let name = if path.is_empty() { "arguments" } else { path };
            changes.push(format!("`{name}` {x} → {y}"));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(tool: &str, arguments: Value) -> CallOutcome {
        CallOutcome {
            tool: tool.into(),
            arguments,
            result: None,
            error: None,
            approval: None,
        }
    }

    #[test]
    fn the_diff_names_the_call_and_the_argument_that_changed() {
        let recorded = TurnOutcome {
            calls: vec![
                call("lookup", json!({"table": "users", "filter": {"days": 7}})),
                call("delete_rows", json!({"table": "users"})),
            ],
            reply: "Done.".into(),
            ..Default::default()
        };
        let actual = TurnOutcome {
            calls: vec![
                call("lookup", json!({"table": "users", "filter": {"days": 30}})),
                call("archive_rows", json!({"table": "users"})),
                call("clock", json!({})),
            ],
            reply: "Done.".into(),
            ..Default::default()
        };
        let steps = diff(&recorded, &actual);
        let kinds: Vec<Change> = steps.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [
                Change::Arguments,
                Change::Tool,
                Change::Extra,
                Change::Reply
            ]
        );
        assert_eq!(steps[0].detail, "call 1 `lookup`: `filter.days` 7 → 30");
        assert_eq!(
            steps[1].detail,
            "call 2: `delete_rows` became `archive_rows`"
        );
        assert_eq!(steps[3].detail, "the reply is the same");
    }
}
