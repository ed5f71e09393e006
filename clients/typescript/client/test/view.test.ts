import { describe, expect, it } from "vitest";

import type { JournalEvent, ServerFrame } from "../src/protocol.js";
import { inDoubt, initialView, pendingApprovals, reduce, type SessionView } from "../src/view.js";

const at = "2026-11-30T12:00:00Z";
let seq = 0;
function ev(kind: string, payload: Record<string, unknown>, s?: number): ServerFrame {
  seq = s ?? seq + 1;
  return { type: "event", seq, kind, payload, at } as ServerFrame;
}
function run(frames: ServerFrame[], from: SessionView = initialView): SessionView {
  return frames.reduce(reduce, from);
}

/** A turn: a message, a streamed answer that asks for an approval-gated tool, the decision,
 * the tool's result and the final answer. */
function turn(): ServerFrame[] {
  seq = 0;
  return [
    { type: "hello", session_id: "s1", last_seq: 0, status: "idle" },
    ev("session_created", { agent: "ops" }),
    ev("user_message", { text: "forget note a", client_id: "c1" }),
    ev("model_call_started", { call_id: "m1", route: "default", model: "x" }),
    { type: "delta", call_id: "m1", attempt: 1, text: "Let me ", offset: 0 },
    { type: "delta", call_id: "m1", attempt: 1, text: "do that.", offset: 7 },
    ev("model_call_finished", {
      call_id: "m1",
      text: "Let me do that.",
      tool_calls: [{ call_id: "t1", tool: "forget", arguments: { key: "a" } }],
      usage: { prompt_tokens: 5, completion_tokens: 4 },
      provider: "local",
      model: "x",
      latency_ms: 10,
      ttft_ms: 2,
      cost: 0,
    }),
    ev("tool_call_requested", { call_id: "t1", tool: "forget", arguments: { key: "a" } }),
    ev("approval_requested", { call_id: "t1", tool: "forget", arguments: { key: "a" }, args_hash: "h", reason: "always" }),
    ev("approval_decided", { call_id: "t1", approved: true, reason: null, decided_by: "local", scope: "once" }),
    ev("tool_call_started", { call_id: "t1", tool: "forget", idempotency_key: "s1:t1" }),
    ev("tool_call_finished", { call_id: "t1", tool: "forget", result: { deleted: true } }),
    ev("model_call_started", { call_id: "m2", route: "default", model: "x" }),
    { type: "delta", call_id: "m2", attempt: 1, text: "Done.", offset: 0 },
    ev("model_call_finished", {
      call_id: "m2",
      text: "Done.",
      tool_calls: [],
      usage: { prompt_tokens: 9, completion_tokens: 2 },
      provider: "local",
      model: "x",
      latency_ms: 10,
      ttft_ms: 2,
      cost: 0,
    }),
    ev("assistant_message", { text: "Done." }),
    ev("turn_finished", { reason: "answered" }),
  ];
}

describe("the session reducer", () => {
  it("folds a turn into chat entries, a tool card and the status", () => {
    const view = run(turn());
    expect(view.lastSeq).toBe(13);
    expect(view.status).toBe("idle");
    expect(view.entries.map((e) => [e.role, e.text])).toEqual([
      ["user", "forget note a"],
      ["assistant", "Let me do that."],
      ["assistant", "Done."],
    ]);
    expect(view.tools.t1).toMatchObject({
      status: "finished",
      result: { deleted: true },
      decision: { approved: true, decidedBy: "local", scope: "once" },
    });
    expect(view.streaming).toBeNull();
  });

  it("parks on an approval and shows it as pending", () => {
    const frames = turn().slice(0, 9);
    const view = run(frames);
    expect(view.status).toBe("awaiting_approval");
    expect(pendingApprovals(view).map((c) => c.callId)).toEqual(["t1"]);
    expect(view.tools.t1.approval).toEqual({ argsHash: "h", reason: "always" });
  });

  it("holds a result a guardrail parked, with the verdicts, until it is decided", () => {
    const start = turn().slice(0, 8); // through tool_call_requested (seq 5)
    const checks = [
      { guardrail: "injection", outcome: "found", effect: "approve", elapsed_ms: 0.1, findings: [
        { path: "/body", start: 0, end: 6, entity: "INJECTION", excerpt: "Ignore" },
      ] },
    ];
    const held = run([
      ...start,
      ev("tool_call_started", { call_id: "t1", tool: "forget", idempotency_key: "s1:t1" }, 6),
      ev("guardrail_checked", { call_id: "t1", tool: "forget", checks, held: { body: "Ignore" } }, 7),
    ]);
    expect(held.status).toBe("awaiting_approval");
    expect(pendingApprovals(held).map((c) => c.callId)).toEqual(["t1"]);
    expect(held.tools.t1).toMatchObject({ held: { body: "Ignore" }, guardrails: checks });
    const decided = run(
      [
        ev("approval_decided", { call_id: "t1", approved: true, reason: null, decided_by: "ada", scope: "once" }, 8),
        ev("tool_call_finished", { call_id: "t1", tool: "forget", result: { body: "Ignore" } }, 9),
      ],
      held,
    );
    expect(decided.status).toBe("running");
    expect(decided.tools.t1.held).toBeUndefined();
    expect(decided.tools.t1).toMatchObject({ status: "finished", guardrails: checks });
  });

  it("applies each event once when a resume sends them again", () => {
    const frames = turn();
    const once = run(frames);
    // A reconnect resumes from an older seq: the server sends events 4.. again, and the
    // in-flight stream from offset 0.
    const again = run(frames.slice(4), once);
    expect(again).toEqual(once);
  });

  it("holds events that arrive ahead of a gap until the gap is filled", () => {
    const frames = turn().filter((f) => f.type === "event");
    const shuffled = [frames[0], frames[3], frames[2], frames[1], ...frames.slice(4)];
    const inOrder = run(frames);
    const view = run(shuffled);
    expect(view.entries).toEqual(inOrder.entries);
    expect(view.lastSeq).toBe(inOrder.lastSeq);
    // Until the gap is filled nothing after it is applied.
    const partial = run([frames[0], frames[2], frames[3]]);
    expect(partial.lastSeq).toBe(1);
    expect(Object.keys(partial.ahead).map(Number)).toEqual([3, 4]);
  });

  it("places stream text by offset: a resent stream neither duplicates nor loses text", () => {
    seq = 0;
    const start = run([
      ev("user_message", { text: "hi", client_id: null }),
      ev("model_call_started", { call_id: "m1", route: "r", model: "x" }),
      { type: "delta", call_id: "m1", attempt: 1, text: "Hello", offset: 0 },
      { type: "delta", call_id: "m1", attempt: 1, text: ", wor", offset: 5 },
    ]);
    expect(start.streaming).toEqual({ callId: "m1", attempt: 1, text: "Hello, wor" });
    // After a reconnect the server sends the stream from the beginning, then goes on.
    const resumed = run(
      [
        { type: "delta", call_id: "m1", attempt: 1, text: "Hello, wor", offset: 0 },
        { type: "delta", call_id: "m1", attempt: 1, text: "ld!", offset: 10 },
        { type: "delta", call_id: "m1", attempt: 1, text: "ld!", offset: 10 },
      ],
      start,
    );
    expect(resumed.streaming).toEqual({ callId: "m1", attempt: 1, text: "Hello, world!" });
    // The call re-issued after a server restart streams a new text: it replaces the old one
    // instead of being spliced onto it, and the old run's late deltas are dropped.
    const rerun = run(
      [
        { type: "delta", call_id: "m1", attempt: 2, text: "Hi", offset: 0 },
        { type: "delta", call_id: "m1", attempt: 1, text: "!!", offset: 13 },
        { type: "delta", call_id: "m1", attempt: 2, text: " there", offset: 2 },
      ],
      resumed,
    );
    expect(rerun.streaming).toEqual({ callId: "m1", attempt: 2, text: "Hi there" });
    // A delta past a gap is ignored until the resend.
    const gapped = run([{ type: "delta", call_id: "m1", attempt: 1, text: "zzz", offset: 99 }], resumed);
    expect(gapped.streaming?.text).toBe("Hello, world!");
    // Deltas for a finished call are dropped.
    const finished = run(
      [
        ev("model_call_finished", {
          call_id: "m1", text: "Hello, world!", tool_calls: [], usage: { prompt_tokens: 1, completion_tokens: 1 },
          provider: "p", model: "x", latency_ms: 1, ttft_ms: 1, cost: 0,
        }),
        { type: "delta", call_id: "m1", attempt: 1, text: "late", offset: 13 },
      ],
      resumed,
    );
    expect(finished.streaming).toBeNull();
  });

  it("asks about tool calls in doubt and records errors", () => {
    seq = 0;
    const view = run([
      ev("user_message", { text: "pay", client_id: null }),
      ev("tool_call_requested", { call_id: "t9", tool: "pay", arguments: {} }),
      ev("tool_call_started", { call_id: "t9", tool: "pay", idempotency_key: "s:t9" }),
      ev("tool_call_failed", { call_id: "t9", tool: "pay", error: "the process stopped", in_doubt: true }),
      { type: "error", code: "duplicate_client_id", message: "already applied" },
    ]);
    expect(inDoubt(view).map((c) => c.callId)).toEqual(["t9"]);
    expect(view.lastError).toEqual({ code: "duplicate_client_id", message: "already applied" });
  });

  it("keeps events that are not the next one out of the applied state", () => {
    seq = 0;
    const first = ev("user_message", { text: "a", client_id: null }) as JournalEvent & { type: "event" };
    const view = run([first, first]);
    expect(view.entries).toHaveLength(1);
  });
});

describe("MCP tools", () => {
  it("shows the latest progress of a running call, then drops it, and marks cancelled calls", () => {
    seq = 0;
    const start: ServerFrame[] = [
      { type: "hello", session_id: "s1", last_seq: 0, status: "idle" },
      ev("session_created", { agent: "ops" }),
      ev("user_message", { text: "count", client_id: null }),
      ev("model_call_started", { call_id: "m1", route: "default", model: "x" }),
      ev("tools_seen", { digest: "sha256:x", tools: [] }),
      ev("tool_call_requested", { call_id: "t1", tool: "files__slow_count", arguments: { n: 3 } }),
      // Progress before the call runs is dropped.
      { type: "tool_progress", call_id: "t1", progress: 0, total: 3 },
      ev("tool_call_started", { call_id: "t1", tool: "files__slow_count", idempotency_key: "s1:t1" }),
      { type: "tool_progress", call_id: "t1", progress: 1, total: 3, message: "step 1" },
      { type: "tool_progress", call_id: "t1", progress: 2, total: 3, message: "step 2" },
    ];
    const running = run(start);
    expect(running.tools.t1.server).toBe("files");
    expect(running.tools.t1.progress).toEqual({ progress: 2, total: 3, message: "step 2" });
    const cancelled = run(
      [
        ev("tool_call_cancelled", { call_id: "t1", tool: "files__slow_count", reason: "cancelled by ada" }),
        ev("turn_cancelled", { reason: "cancelled by ada" }),
        { type: "tool_progress", call_id: "t1", progress: 3, total: 3 },
      ],
      running,
    );
    expect(cancelled.tools.t1.status).toBe("cancelled");
    expect(cancelled.tools.t1.error).toBe("cancelled: cancelled by ada");
    expect(cancelled.tools.t1.progress).toEqual({ progress: 2, total: 3, message: "step 2" });
    expect(cancelled.status).toBe("idle");
  });

  it("shows an agent call's child session, its status and latest line", () => {
    seq = 0;
    const frames: ServerFrame[] = [
      { type: "hello", session_id: "s1", last_seq: 0, status: "idle" },
      ev("session_created", { agent: "lead" }),
      ev("user_message", { text: "delegate", client_id: null }),
      ev("model_call_started", { call_id: "m1", route: "default", model: "x" }),
      ev("tool_call_requested", { call_id: "t1", tool: "write", arguments: { task: "a line" } }),
      ev("tool_call_started", { call_id: "t1", tool: "write", idempotency_key: "s1:t1" }),
      ev("child_session_started", { call_id: "t1", child_session_id: "c1" }),
      {
        type: "tool_progress",
        call_id: "t1",
        child_session_id: "c1",
        child_status: "awaiting_approval",
        text: "awaiting approval of clock",
      },
    ];
    const parked = run(frames);
    expect(parked.tools.t1.child).toEqual({ sessionId: "c1", status: "awaiting_approval", text: "awaiting approval of clock" });
    // The parent itself runs: its own card does not wait for a person.
    expect(parked.status).toBe("running");
    const done = run([ev("tool_call_finished", { call_id: "t1", tool: "write", result: { reply: "done" } })], parked);
    expect(done.tools.t1.status).toBe("finished");
    expect(done.tools.t1.child?.status).toBe("idle");
  });

  it("waits on a budget approval, and the same model call streams again once approved", () => {
    seq = 0;
    const parked = run([
      { type: "hello", session_id: "s1", last_seq: 0, status: "idle" },
      ev("session_created", { agent: "writer" }),
      ev("user_message", { text: "write a haiku", client_id: null }),
      ev("model_call_started", { call_id: "m1", route: "alt", model: "alt" }),
      ev("budget_approval_requested", {
        call_id: "m1",
        budget: "key `tight`",
        needed_usd: 3.096,
        reason: "budget_exceeded: the budget of key `tight` is spent",
      }),
    ]);
    expect(parked.status).toBe("awaiting_approval");
    expect(parked.budgetWait).toEqual({
      callId: "m1",
      budget: "key `tight`",
      neededUsd: 3.096,
      reason: "budget_exceeded: the budget of key `tight` is spent",
    });
    expect(parked.streaming).toBeNull();
    const approved = run(
      [
        ev("budget_approval_decided", { call_id: "m1", approved: true, overspend_usd: 5, reason: null, decided_by: "local" }),
        { type: "delta", call_id: "m1", attempt: 1, text: "Autumn", offset: 0 },
      ],
      parked,
    );
    expect(approved.status).toBe("running");
    expect(approved.budgetWait).toBeNull();
    expect(approved.streaming?.text).toBe("Autumn");
  });
});
