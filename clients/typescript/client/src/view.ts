// The session view as a pure fold of server frames: journal events (applied once each, in seq
// order, whatever order and how many times they arrive) and streamed deltas (text placed by
// offset, so a resume that sends the stream again from offset 0 neither duplicates nor loses
// text). `useSteadSession` runs it; the tests drive it directly.

import type { Attachment, GuardrailCheck, JournalEvent, ServerFrame, SessionStatus } from "./protocol.js";

export interface ChatEntry {
  /** Stable key: `u{seq}` for user messages, the model call id for assistant text. */
  id: string;
  /** `compaction`: earlier turns left the prompt (`text` is their summary, if any). */
  role: "user" | "assistant" | "error" | "compaction";
  text: string;
  seq: number;
  /** An assistant reply Stead built from the tool results (the model gave none usable). */
  fallback?: boolean;
  /** A compaction's count of earlier turns summarised or dropped. */
  turns?: number;
  /** A user message's files, by reference (docs/artifacts.md). */
  attachments?: Attachment[];
}

export type ToolStatus =
  | "requested"
  | "awaiting_approval"
  | "approved"
  | "rejected"
  | "running"
  | "finished"
  | "failed"
  | "in_doubt"
  | "cancelled";

/** A running tool's latest progress (`tool_progress` frames; not journaled). */
export interface ToolProgress {
  progress?: number;
  total?: number;
  message?: string;
}

/** An `agent` call's child session: its id, and its latest status and line from progress. */
export interface ChildLink {
  sessionId: string;
  status?: string;
  text?: string;
}

export interface ToolCard {
  callId: string;
  tool: string;
  arguments: unknown;
  status: ToolStatus;
  /** Set while (or after) the call waited for a person. */
  approval?: { argsHash: string; reason: string };
  decision?: { approved: boolean; reason: string | null; decidedBy: string; scope: string };
  result?: unknown;
  error?: string;
  /** The latest progress while it runs. */
  progress?: ToolProgress;
  /** The MCP server behind it (`{server}__{tool}` names), if any. */
  server?: string;
  /** For an `agent` call: the child session doing the work. */
  child?: ChildLink;
  /** The agent's guardrails' verdicts on the result (`guardrail_checked`), in order. */
  guardrails?: GuardrailCheck[];
  /** The result an `approve` guardrail holds for a person, until they decide. */
  held?: unknown;
  seq: number;
}

export interface SessionView {
  sessionId: string | null;
  status: SessionStatus | "connecting";
  /** Highest seq applied: everything up to it is applied, nothing after it. */
  lastSeq: number;
  entries: ChatEntry[];
  tools: Record<string, ToolCard>;
  /** Tool call ids in the order they were requested. */
  toolOrder: string[];
  /** The model call streaming now, the run of it the text belongs to, and its text so far. */
  streaming: { callId: string; attempt: number; text: string } | null;
  /** Events that arrived ahead of a gap, by seq, applied once the gap is filled. */
  ahead: Record<number, JournalEvent>;
  /** Model calls that finished (late deltas for them are dropped). */
  finishedCalls: string[];
  lastError: { code: string; message: string } | null;
  /** The model call a key's or a project's budget refused, waiting for the project's admin or
   * the installation (`budget_approval_requested`). */
  budgetWait: { callId: string; budget: string; neededUsd: number; reason: string } | null;
}

export const initialView: SessionView = {
  sessionId: null,
  status: "connecting",
  lastSeq: 0,
  entries: [],
  tools: {},
  toolOrder: [],
  streaming: null,
  ahead: {},
  finishedCalls: [],
  lastError: null,
  budgetWait: null,
};

/** Pending approvals, in request order. */
export function pendingApprovals(view: SessionView): ToolCard[] {
  return view.toolOrder
    .map((id) => view.tools[id])
    .filter((card) => card.status === "awaiting_approval");
}

/** Tool calls whose outcome is unknown: the user is asked whether they happened. */
export function inDoubt(view: SessionView): ToolCard[] {
  return view.toolOrder.map((id) => view.tools[id]).filter((card) => card.status === "in_doubt");
}

export function reduce(view: SessionView, frame: ServerFrame): SessionView {
  switch (frame.type) {
    case "hello":
      return {
        ...view,
        sessionId: frame.session_id,
        // The server's status is the truth until events say otherwise.
        status: frame.last_seq <= view.lastSeq ? frame.status : view.status,
        lastError: null,
      };
    case "event": {
      const { type: _type, ...event } = frame;
      return receive(view, event as JournalEvent);
    }
    case "delta":
      return delta(view, frame.call_id, frame.attempt, frame.text, frame.offset);
    case "tool_progress": {
      const card = view.tools[frame.call_id];
      // Progress of a call this view has not seen start, or that has ended, is dropped.
      if (!card || card.status !== "running") return view;
      if (frame.child_session_id) {
        return setTool(view, frame.call_id, {
          child: { sessionId: frame.child_session_id, status: frame.child_status, text: frame.text },
        });
      }
      return setTool(view, frame.call_id, {
        progress: { progress: frame.progress, total: frame.total, message: frame.message },
      });
    }
    case "error":
      return { ...view, lastError: { code: frame.code, message: frame.message } };
  }
}

/** A journal event: applied if next, kept if ahead of a gap, dropped if already applied. */
export function receive(view: SessionView, event: JournalEvent): SessionView {
  if (event.seq <= view.lastSeq || view.ahead[event.seq]) {
    return view;
  }
  if (event.seq > view.lastSeq + 1) {
    return { ...view, ahead: { ...view.ahead, [event.seq]: event } };
  }
  let next = apply(view, event);
  // Drain what waited for this one.
  while (next.ahead[next.lastSeq + 1]) {
    const waiting = next.ahead[next.lastSeq + 1];
    const ahead = { ...next.ahead };
    delete ahead[waiting.seq];
    next = apply({ ...next, ahead }, waiting);
  }
  return next;
}

function delta(
  view: SessionView,
  callId: string,
  attempt: number,
  text: string,
  offset?: number,
): SessionView {
  if (view.finishedCalls.includes(callId)) {
    return view;
  }
  const same = view.streaming?.callId === callId;
  if (same && view.streaming!.attempt > attempt) {
    return view; // an older run of the call
  }
  // A new run of the call (re-issued after a server restart) replaces the old partial text.
  const current = same && view.streaming!.attempt === attempt ? view.streaming!.text : "";
  const at = offset ?? current.length;
  if (at > current.length) {
    // A gap (frames lost): wait for the resend from the start.
    return view;
  }
  const end = at + text.length;
  if (end <= current.length) {
    return view; // already have it
  }
  const merged = current.slice(0, at) + text;
  return { ...view, streaming: { callId, attempt, text: merged } };
}

function setTool(view: SessionView, callId: string, change: Partial<ToolCard>): SessionView {
  const card = view.tools[callId];
  if (!card) {
    return view;
  }
  return { ...view, tools: { ...view.tools, [callId]: { ...card, ...change } } };
}

function turnStatus(view: SessionView): SessionStatus {
  return pendingApprovals(view).length > 0 || view.budgetWait ? "awaiting_approval" : "running";
}

function apply(view: SessionView, event: JournalEvent): SessionView {
  let next: SessionView = { ...view, lastSeq: event.seq };
  const p = event.payload as Record<string, any>;
  switch (event.kind) {
    case "user_message":
      next.entries = [
        ...next.entries,
        {
          id: `u${event.seq}`,
          role: "user",
          text: p.text,
          seq: event.seq,
          ...(p.attachments?.length ? { attachments: p.attachments } : {}),
        },
      ];
      next.status = "running";
      break;
    case "model_call_started":
      next.streaming =
        view.streaming?.callId === p.call_id
          ? view.streaming
          : { callId: p.call_id, attempt: 0, text: "" };
      next.status = "running";
      break;
    case "model_call_finished":
      next.streaming = null;
      next.finishedCalls = [...next.finishedCalls, p.call_id];
      // Text beside tool calls is shown now; a final answer comes as `assistant_message`.
      if (p.tool_calls?.length && p.text) {
        next.entries = [...next.entries, { id: p.call_id, role: "assistant", text: p.text, seq: event.seq }];
      }
      break;
    case "model_call_failed":
      next.streaming = null;
      next.finishedCalls = [...next.finishedCalls, p.call_id];
      next.entries = [
        ...next.entries,
        { id: `e${event.seq}`, role: "error", text: `The model call failed: ${p.error}`, seq: event.seq },
      ];
      break;
    case "assistant_message":
      next.entries = [
        ...next.entries,
        { id: `a${event.seq}`, role: "assistant", text: p.text, seq: event.seq, ...(p.fallback ? { fallback: true } : {}) },
      ];
      break;
    case "context_compacted":
      next.entries = [
        ...next.entries,
        { id: `c${event.seq}`, role: "compaction", text: p.summary ?? "", seq: event.seq, turns: p.turns },
      ];
      break;
    case "tool_call_requested":
      next.tools = {
        ...next.tools,
        [p.call_id]: {
          callId: p.call_id,
          tool: p.tool,
          arguments: p.arguments,
          status: "requested",
          server: p.tool.includes("__") ? p.tool.slice(0, p.tool.indexOf("__")) : undefined,
          seq: event.seq,
        },
      };
      next.toolOrder = [...next.toolOrder, p.call_id];
      break;
    case "approval_requested":
      next = setTool(next, p.call_id, {
        status: "awaiting_approval",
        approval: { argsHash: p.args_hash, reason: p.reason },
      });
      next.status = "awaiting_approval";
      break;
    case "budget_approval_requested":
      next.streaming = null;
      next.budgetWait = { callId: p.call_id, budget: p.budget, neededUsd: p.needed_usd, reason: p.reason };
      next.status = "awaiting_approval";
      break;
    case "budget_approval_decided":
      next.budgetWait = null;
      next.status = turnStatus(next);
      break;
    case "guardrail_checked":
      next = setTool(next, p.call_id, {
        guardrails: p.checks,
        ...(p.held !== undefined ? { status: "awaiting_approval" as const, held: p.held } : {}),
      });
      next.status = turnStatus(next);
      break;
    case "approval_decided":
      next = setTool(next, p.call_id, {
        held: undefined,
        status: p.approved ? "approved" : "rejected",
        decision: { approved: p.approved, reason: p.reason, decidedBy: p.decided_by, scope: p.scope },
      });
      next.status = turnStatus(next);
      break;
    case "tool_call_started":
      next = setTool(next, p.call_id, { status: "running" });
      break;
    case "child_session_started":
      next = setTool(next, p.call_id, { child: { sessionId: p.child_session_id, status: "running" } });
      break;
    case "tool_call_finished":
      next = setTool(next, p.call_id, { status: "finished", result: p.result });
      if (next.tools[p.call_id]?.child) {
        next = setTool(next, p.call_id, { child: { ...next.tools[p.call_id].child!, status: "idle" } });
      }
      break;
    case "tool_call_failed":
      next = setTool(next, p.call_id, { status: p.in_doubt ? "in_doubt" : "failed", error: p.error });
      break;
    case "tool_call_cancelled":
      next = setTool(next, p.call_id, { status: "cancelled", error: `cancelled: ${p.reason}` });
      break;
    case "turn_finished":
    case "turn_cancelled":
      next.streaming = null;
      next.budgetWait = null;
      next.status = "idle";
      break;
    case "session_failed":
      next.streaming = null;
      next.status = "failed";
      break;
    case "session_closed":
      next.streaming = null;
      next.status = "closed";
      break;
    default:
      break;
  }
  return next;
}
