// The wire protocol of Stead (docs/api.md), in one module: WebSocket frames both ways, journal
// events and their payloads, and the REST shapes the UI reads. Nothing here does I/O.

export type SessionStatus = "idle" | "running" | "awaiting_approval" | "failed" | "closed";

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
}

/** Journal event payloads clients rely on (more fields may be present). */
export interface EventPayloads {
  session_created: { agent: string };
  user_message: { text: string; client_id: string | null };
  model_call_started: { call_id: string; route: string; model: string };
  model_call_finished: {
    call_id: string;
    text: string;
    tool_calls: { call_id: string; tool: string; arguments: unknown }[];
    usage: Usage;
    provider: string;
    model: string;
    latency_ms: number;
    ttft_ms: number;
    cost: number;
  };
  model_call_failed: { call_id: string; error: string };
  tool_call_requested: { call_id: string; tool: string; arguments: unknown };
  approval_requested: {
    call_id: string;
    tool: string;
    arguments: unknown;
    args_hash: string;
    reason: string;
  };
  approval_decided: {
    call_id: string;
    approved: boolean;
    reason: string | null;
    decided_by: string;
    scope: "once" | "session";
  };
  tool_call_started: { call_id: string; tool: string; idempotency_key: string };
  tool_call_finished: { call_id: string; tool: string; result: unknown };
  /** `in_doubt`: the call started and its outcome is unknown (a non-idempotent tool after a
   * crash): the user is asked whether it happened. */
  tool_call_failed: { call_id: string; tool: string; error: string; in_doubt: boolean };
  assistant_message: { text: string };
  turn_finished: { reason: string };
  turn_cancelled: { reason: string };
  session_forked: {
    from: string;
    at: number;
    overrides: { route?: string | null; system_prompt?: string | null };
  };
  session_failed: { reason: string };
  session_closed: { reason: string };
}

export type EventKind = keyof EventPayloads;

/** One journaled step, as `GET …/events` and the WebSocket `event` frame carry it. */
export interface JournalEvent<K extends string = string> {
  seq: number;
  kind: K;
  payload: K extends EventKind ? EventPayloads[K] : Record<string, unknown>;
  at: string;
}

export type ServerFrame =
  | { type: "hello"; session_id: string; last_seq: number; status: SessionStatus }
  | ({ type: "event" } & JournalEvent)
  | { type: "delta"; call_id: string; text: string; offset?: number }
  | { type: "error"; code: string; message: string };

export type ClientFrame =
  | { type: "user_message"; text: string; client_id?: string }
  | {
      type: "approval";
      call_id: string;
      approved: boolean;
      reason?: string;
      scope?: "once" | "session";
      args_hash?: string;
    }
  | { type: "cancel" }
  | { type: "resume"; after_seq: number };

/** `GET /v1/sessions` rows. */
export interface SessionRow {
  id: string;
  agent: string;
  status: SessionStatus;
  metadata: Record<string, unknown>;
  last_seq: number;
  created_at: string;
  updated_at: string;
  closed_at: string | null;
}

/** `GET /v1/gateway/logs` rows. */
export interface RequestLogRow {
  id: string;
  at: string;
  session_id: string | null;
  route: string;
  provider: string | null;
  model: string | null;
  status: string;
  attempts: unknown[];
  latency_ms: number;
  ttft_ms: number | null;
  tokens_in: number;
  tokens_out: number;
  cost: number;
  cache_hit: boolean;
  metadata: Record<string, unknown>;
  error: string | null;
}
