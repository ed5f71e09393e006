//! The checks after each restart, with the clients paused: every session the clients touched
//! resumes (settles idle, parked or closed — never failed, never stuck running); its journal
//! is gapless; every event a client was sent is still there, equal by value; every
//! acknowledged input is at the seq the server acknowledged it with; forks start with their
//! source's events; no non-idempotent effect happened twice, and every finished tool call's
//! effect reached the webhook with its key.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::doubles::{idempotent, Effects, TOOLS};
use super::workload::{Ack, Shared};

/// What the checks counted.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub struct Checked {
    /// Session checks (a session checked after several restarts counts each time).
    pub sessions: u64,
    pub events: u64,
    pub acks: u64,
    /// Finished calls of idempotent tools whose effect was found under its key.
    pub idempotent_effects: u64,
    /// Finished calls of non-idempotent tools, each found exactly once.
    pub non_idempotent_effects: u64,
    /// Non-idempotent calls a kill left in doubt (journaled as failed, never re-run).
    pub in_doubt: u64,
    /// Calls of idempotent tools that ran again after a restart (more than one delivery).
    pub idempotent_reruns: u64,
    /// Longest time from a fault to every session checked after it having settled (ms):
    /// with a cluster, the takeover of the killed node's running sessions.
    #[serde(default)]
    pub max_settle_ms: u64,
}

impl Checked {
    pub fn add(&mut self, other: Checked) {
        self.sessions += other.sessions;
        self.events += other.events;
        self.acks += other.acks;
        self.idempotent_effects += other.idempotent_effects;
        self.non_idempotent_effects += other.non_idempotent_effects;
        self.in_doubt += other.in_doubt;
        self.idempotent_reruns += other.idempotent_reruns;
        self.max_settle_ms = self.max_settle_ms.max(other.max_settle_ms);
    }
}

/// How long a session may take to settle after a restart.
const SETTLE: Duration = Duration::from_secs(60);

/// Checks `ids` (all when `None`), adds to `checked` (with the time from `fault_at` until
/// they all settled) and returns the violations found.
pub async fn check(
    shared: &Shared,
    effects: &Effects,
    ids: Option<Vec<Uuid>>,
    fault_at: Instant,
    checked: &mut Checked,
) -> Vec<String> {
    let ids = ids.unwrap_or_else(|| shared.ledger().sessions.keys().copied().collect());
    let mut violations = Vec::new();
    let mut journals: HashMap<Uuid, Vec<Value>> = HashMap::new();
    for &id in &ids {
        match settle(shared, id).await {
            Ok(()) => {}
            Err(e) => violations.push(format!("session {id} did not resume: {e:#}")),
        }
    }
    checked.max_settle_ms = checked
        .max_settle_ms
        .max(fault_at.elapsed().as_millis() as u64);
    for &id in &ids {
        match journal(shared, id).await {
            Ok(events) => {
                journals.insert(id, events);
            }
            Err(e) => violations.push(format!("session {id}: cannot read its journal: {e:#}")),
        }
    }
    for &id in &ids {
        let Some(events) = journals.get(&id) else {
            continue;
        };
        checked.sessions += 1;
        let mut problems = Vec::new();
        let verified = session(shared, id, events, checked, &mut problems).await;
        checked.events += events.len().saturating_sub(verified) as u64;
        tools(id, events, verified, effects, checked, &mut problems);
        violations.extend(problems.into_iter().map(|p| format!("session {id}: {p}")));
    }
    // No non-idempotent effect twice, whichever session it came from.
    for (tool, _, _) in TOOLS.iter().filter(|(tool, _, _)| !idempotent(tool)) {
        for (key, count) in effects.keys_of(tool) {
            if count > 1 {
                violations.push(format!(
                    "non-idempotent {tool} ran {count} times under key {key}"
                ));
            }
        }
    }
    violations
}

/// Polls the session until it is idle, parked or closed.
async fn settle(shared: &Shared, id: Uuid) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let (status, row) = shared
            .call(reqwest::Method::GET, &format!("/v1/sessions/{id}"), None)
            .await?;
        anyhow::ensure!(status == 200, "GET answered {status}: {row}");
        match row["status"].as_str().unwrap_or_default() {
            "idle" | "awaiting_approval" | "closed" => return Ok(()),
            "failed" => anyhow::bail!("it failed: {}", row["failure"]),
            other if started.elapsed() > SETTLE => {
                anyhow::bail!("still {other} {} s after the restart", SETTLE.as_secs())
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The whole journal, page by page.
async fn journal(shared: &Shared, id: Uuid) -> anyhow::Result<Vec<Value>> {
    let mut events = Vec::new();
    loop {
        let after = events.len();
        let (status, page) = shared
            .call(
                reqwest::Method::GET,
                &format!("/v1/sessions/{id}/events?after={after}&limit=1000"),
                None,
            )
            .await?;
        anyhow::ensure!(status == 200, "events answered {status}: {page}");
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        if batch.is_empty() {
            return Ok(events);
        }
        events.extend(batch);
    }
}

/// The journal against what the clients were told; returns how much of it earlier checks
/// had seen.
async fn session(
    shared: &Shared,
    id: Uuid,
    events: &[Value],
    checked: &mut Checked,
    problems: &mut Vec<String>,
) -> usize {
    for (i, event) in events.iter().enumerate() {
        if event["seq"].as_i64() != Some(i as i64 + 1) {
            problems.push(format!(
                "the journal has a gap: event {} has seq {}",
                i + 1,
                event["seq"]
            ));
            return events.len();
        }
    }
    let at = |seq: i64| usize::try_from(seq - 1).ok().and_then(|i| events.get(i));
    let (acks, fork_of, closed, verified) = {
        let mut ledger = shared.ledger();
        let tracked = ledger.sessions.entry(id).or_default();
        let verified = std::mem::replace(&mut tracked.verified, events.len());
        problems.append(&mut tracked.conflicts);
        for (seq, seen) in &tracked.observed {
            match at(*seq) {
                Some(event) if event == seen => {}
                Some(event) => problems.push(format!(
                    "event {seq} changed: a client was sent {seen}, the journal now has {event}"
                )),
                None => problems.push(format!(
                    "event {seq} was sent to a client and is gone (the journal ends at {})",
                    events.len()
                )),
            }
        }
        // Committed now: the next kill must keep them too.
        for event in events {
            if let Some(seq) = event["seq"].as_i64() {
                tracked.observed.insert(seq, event.clone());
            }
        }
        // Acknowledgements are checked once they have been found.
        let acks = std::mem::take(&mut tracked.acks);
        (acks, tracked.fork_of, tracked.closed, verified)
    };
    let mut client_ids = HashMap::new();
    for event in events.iter().filter(|e| e["kind"] == "user_message") {
        if let Some(client_id) = event["payload"]["client_id"].as_str() {
            *client_ids.entry(client_id.to_string()).or_insert(0) += 1;
        }
    }
    for (client_id, count) in client_ids {
        if count > 1 {
            problems.push(format!("client_id {client_id} was applied {count} times"));
        }
    }
    // An acknowledgement carries the last seq its step appended: the input's own event is at
    // or before it, and everything through it is journaled.
    let find = |through: i64, hit: &dyn Fn(&Value) -> bool| {
        events
            .iter()
            .take(usize::try_from(through).unwrap_or(0))
            .any(hit)
    };
    for ack in &acks {
        checked.acks += 1;
        let (seq, ok) = match ack {
            Ack::Message { client_id, seq } => (
                *seq,
                find(*seq, &|e| {
                    e["kind"] == "user_message" && e["payload"]["client_id"] == client_id.as_str()
                }),
            ),
            Ack::Approval { call_id, seq } => (
                *seq,
                find(*seq, &|e| {
                    e["kind"] == "approval_decided" && e["payload"]["call_id"] == call_id.as_str()
                }),
            ),
            Ack::Cancel { seq } => (*seq, find(*seq, &|e| e["kind"] == "turn_cancelled")),
        };
        if !ok || at(seq).is_none() {
            problems.push(format!(
                "acknowledged {ack:?} is not in the journal through seq {seq} (it ends at {})",
                events.len()
            ));
        }
    }
    if closed && !events.iter().any(|e| e["kind"] == "session_closed") {
        problems.push("its close was acknowledged and no session_closed is journaled".into());
    }
    if let Some((source, fork_at)) = fork_of {
        match journal(shared, source).await {
            Ok(original) => {
                let n = usize::try_from(fork_at).unwrap_or(0);
                if events.len() <= n || original.len() < n || events[..n] != original[..n] {
                    problems.push(format!(
                        "the fork of {source} at {fork_at} does not start with its events"
                    ));
                } else if events[n]["kind"] != "session_forked" {
                    problems.push(format!(
                        "event {} of a fork is {}",
                        n + 1,
                        events[n]["kind"]
                    ));
                }
            }
            Err(e) => problems.push(format!("cannot read the fork's source {source}: {e:#}")),
        }
    }
    verified
}

/// Tool calls against the webhook's effects. Calls copied into a fork are checked in their
/// source; a fork's own calls run under its own key.
fn tools(
    id: Uuid,
    events: &[Value],
    verified: usize,
    effects: &Effects,
    checked: &mut Checked,
    problems: &mut Vec<String>,
) {
    // A fork of a fork copies its source's fork marker too: the last one is its own.
    let forked_at = events
        .iter()
        .rfind(|e| e["kind"] == "session_forked")
        .and_then(|e| e["seq"].as_i64())
        .unwrap_or(0);
    // The key each call was started under (a call in flight at a fork point carries on in the
    // fork under its source's key: it is the same call).
    let keys: HashMap<&str, &str> = events
        .iter()
        .filter(|e| e["kind"] == "tool_call_started")
        .filter_map(|e| {
            let p = &e["payload"];
            Some((p["call_id"].as_str()?, p["idempotency_key"].as_str()?))
        })
        .collect();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for event in events {
        let kind = event["kind"].as_str().unwrap_or_default();
        let payload = &event["payload"];
        let call_id = payload["call_id"].as_str().unwrap_or_default();
        if matches!(
            kind,
            "tool_call_finished" | "tool_call_failed" | "model_call_finished" | "model_call_failed"
        ) {
            let ends = outcomes
                .entry(format!("{}:{call_id}", &kind[..4]))
                .or_default();
            *ends += 1;
            if *ends == 2 {
                problems.push(format!("{kind} of {call_id} journaled twice"));
            }
        }
        let seq = event["seq"].as_i64().unwrap_or(0);
        if seq <= forked_at {
            continue;
        }
        // Counted once, by the first check that saw the event; judged every time.
        let new = seq > verified as i64;
        let tool = payload["tool"].as_str().unwrap_or_default();
        let key = format!("{id}:{call_id}");
        let count = effects.count(tool, keys.get(call_id).copied().unwrap_or(&key));
        match kind {
            "tool_call_started" if payload["idempotency_key"] != key.as_str() => {
                problems.push(format!(
                    "{tool} {call_id} started under key {}, not its own {key}",
                    payload["idempotency_key"]
                ));
            }
            "tool_call_finished" if idempotent(tool) => {
                if count == 0 {
                    problems.push(format!(
                        "idempotent {tool} {call_id} finished, never delivered"
                    ));
                } else if new {
                    checked.idempotent_effects += 1;
                    if count > 1 {
                        checked.idempotent_reruns += 1;
                    }
                }
            }
            "tool_call_finished" => {
                if count == 1 {
                    checked.non_idempotent_effects += u64::from(new);
                } else {
                    problems.push(format!(
                        "non-idempotent {tool} {call_id} finished with {count} deliveries"
                    ));
                }
            }
            "tool_call_failed" if payload["in_doubt"] == true => {
                if idempotent(tool) {
                    problems.push(format!("idempotent {tool} {call_id} was left in doubt"));
                } else {
                    checked.in_doubt += u64::from(new);
                }
            }
            _ => {}
        }
    }
}
