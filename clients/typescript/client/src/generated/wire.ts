// Generated from Stead's Rust wire types (edge/src/wire.rs) — do not edit.
// Regenerate: STEAD_WRITE_WIRE_TYPES=1 cargo test -p stead-http wire_types

/**
 * Lifecycle status of a session, as stored and as shown to clients (docs/api.md).
 */
export type SessionStatus = "idle" | "running" | "awaiting_approval" | "failed" | "closed";

export type Usage = { prompt_tokens: number, completion_tokens: number, };

/**
 * Whether an approval covers this call only or the tool for the rest of the session.
 */
export type ApprovalScope = "once" | "session";

/**
 * What a user message does when it arrives while a turn runs (docs/sessions.md): `queue` waits
 * for the turn to end; `interrupt` cancels the turn (its model call aborted, its running tools
 * cancelled) and starts a new one with this message ahead of any queued; `steer` joins the
 * running turn before its next model call; `drop_if_busy` is refused (409 `busy`).
 */
export type MessageMode = "queue" | "interrupt" | "steer" | "drop_if_busy";

/**
 * Why a turn ended by itself (`turn_finished`'s `reason`).
 */
export type TurnEnd = "completed" | "model_failed" | "max_steps";

/**
 * A tool call as the model asked for it.
 */
export type RequestedCall = { call_id: string, tool: string, arguments: unknown, };

/**
 * What a fork changes for the model calls after it.
 */
export type Overrides = { 
/**
 * Another route (what `/v1/chat/completions` calls `model`).
 */
route?: string | null, system_prompt?: string | null, };

/**
 * A tool of a dynamic source (an MCP server) as the model saw it: `tools_seen` journals the
 * list, so the decisions and the decision check use the list the model was given.
 */
export type SeenTool = { 
/**
 * The name the model sees (`{server}__{tool}`).
 */
name: string, description: string, 
/**
 * JSON Schema of the arguments.
 */
parameters: unknown, };

/**
 * A file a user message carries: an artifact of the store, named by reference — a journal
 * never holds the bytes (docs/artifacts.md, "Attachments").
 */
export type Attachment = { artifact_id: string, 
/**
 * As read from the bytes when it was uploaded.
 */
content_type: string, size: number, 
/**
 * Lowercase hex SHA-256 of the bytes: the blob's name.
 */
sha256: string, };

/**
 * An artifact a message attaches, by id (an upload's `id`).
 */
export type AttachmentRef = { artifact_id: string, };

/**
 * What a schedule does with occurrences it missed (the server was down, or the session's
 * firing waited): `one` fires once for all of them, `all` fires each (at most
 * [`MAX_CATCH_UP`]), `skip` fires none that are more than [`SKIP_GRACE_SECS`] late.
 */
export type CatchUp = "one" | "all" | "skip";

/**
 * The session and tool call that started a child session.
 */
export type ParentRef = { session_id: string, call_id: string, 
/**
 * The child's depth: 1 for a child of a top-level session (absent in older journals: 1).
 */
depth: number, 
/**
 * The delegation this child belongs to: the child session of a top-level session's call
 * that it descends from (absent at depth 1: the child itself). Its row counts the
 * delegation's model calls (`sessions.max_delegation_steps`).
 */
delegation?: string, 
/**
 * The top-level session's message this child descends from: all its descendants share
 * one budget of model calls and child sessions (`sessions.max_delegation_steps`,
 * `sessions.max_delegation_sessions`; absent in journals from before it: the
 * `delegation`'s own count).
 */
message?: RootMessage, };

/**
 * A top-level session's message, by the seq at which its turn started.
 */
export type RootMessage = { session_id: string, turn_seq: number, };

/**
 * What a `context_compacted` event records: the oldest `entries` of the transcript — `turns`
 * whole turns — left the prompt of the model call `call_id` (in flight), replaced by `summary`
 * (written by `model`; `None` with the `truncate` strategy or when the summariser failed).
 * The fold drops them; later prompts show the summary after the system prompt.
 */
export type Compaction = { call_id: string, entries: number, turns: number, summary?: string, model?: string, tokens_before: number, tokens_after: number, };

/**
 * What a firing delivers: a user message — its `text`, or the agent's `callback` (a prompt
 * template from the agent's configuration) rendered with `args` and the occurrence.
 */
export type ScheduleMessage = { text?: string, callback?: string, 
/**
 * The callback's arguments (a JSON object), as `args` in its template.
 */
args?: Record<string, unknown>, };

/**
 * A schedule's definition: exactly one of `at`, `delay_secs`, `cron` (with `tz`, default
 * `UTC`) and `every_secs`; the message; the catch-up rule.
 */
export type ScheduleDef = { at?: string, delay_secs?: number, cron?: string, tz?: string, every_secs?: number, message: ScheduleMessage, catch_up: CatchUp, };

/**
 * What a guardrail's check came to.
 */
export type CheckOutcome = "clean" | "found" | "error";

/**
 * What a check did to the text.
 */
export type Effect = "pass" | "redact" | "block" | "flag" | "approve";

/**
 * One finding in a checked value.
 */
export type Finding = { 
/**
 * The JSON pointer of the string it is in (`""`: the value is that string).
 */
path: string, 
/**
 * Byte offsets into that string as this guardrail saw it.
 */
start: number, end: number, entity: string, 
/**
 * The text found, for checks whose findings are not personal data (`injection`,
 * `regex`, `deny_terms`; at most 200 characters). Never set for `pii`.
 */
excerpt?: string, 
/**
 * What replaced it (`redact`).
 */
placeholder?: string, };

/**
 * One guardrail's verdict on a value (`guardrail_checked`).
 */
export type GuardrailCheck = { guardrail: string, outcome: CheckOutcome, effect: Effect, findings?: Array<Finding>, 
/**
 * A model's reason for its verdict, or the checker's error.
 */
reason?: string, 
/**
 * How long the check took.
 */
elapsed_ms: number, };

/**
 * One journaled step of a session.
 */
export type SessionEvent = { "kind": "session_created", "payload": { agent: string, 
/**
 * Who created the session, as the model router's limits and budgets name callers: an
 * API key's fingerprint or `local`. Every model call of the session is charged to it
 * (`null` in journals written before it existed: charged as `local`).
 */
principal: string | null, 
/**
 * Set on a child session (sub-agents): the session and tool call that started it.
 */
parent?: ParentRef, } } | { "kind": "user_message", "payload": { text: string, client_id: string | null, 
/**
 * Set when the message arrived during a turn and interrupted or steered it (absent:
 * it started a turn, or was queued behind the running one).
 */
mode?: MessageMode, 
/**
 * The key of the schedule whose firing delivered this message (absent: a person or
 * client sent it).
 */
schedule?: string, 
/**
 * Files the message carries, by reference (docs/artifacts.md, "Attachments").
 */
attachments?: Array<Attachment>, } } | { "kind": "model_call_started", "payload": { call_id: string, route: string, model: string, } } | { "kind": "model_call_finished", "payload": { call_id: string, text: string, tool_calls: Array<RequestedCall>, usage: Usage, provider: string, model: string, latency_ms: number, ttft_ms: number, cost: number, 
/**
 * The route's guardrails that acted on the call — its request and this answer — with
 * what they did and the entities they found, never the text (docs/guardrails.md).
 */
guardrails?: Array<GuardrailEntry>, } } | { "kind": "model_call_failed", "payload": { call_id: string, error: string, } } | { "kind": "tool_call_requested", "payload": { call_id: string, tool: string, arguments: unknown, } } | { "kind": "approval_requested", "payload": { call_id: string, tool: string, arguments: unknown, args_hash: string, reason: string, } } | { "kind": "approval_decided", "payload": { call_id: string, approved: boolean, reason: string | null, decided_by: string, scope: ApprovalScope, } } | { "kind": "budget_approval_requested", "payload": { call_id: string, budget: string, needed_usd: number, reason: string, } } | { "kind": "budget_approval_decided", "payload": { call_id: string, approved: boolean, overspend_usd?: number, reason: string | null, decided_by: string, } } | { "kind": "tool_call_started", "payload": { call_id: string, tool: string, idempotency_key: string, } } | { "kind": "tool_call_finished", "payload": { call_id: string, tool: string, result: unknown, } } | { "kind": "guardrail_checked", "payload": { call_id: string, tool: string, checks: Array<GuardrailCheck>, 
/**
 * The result an `approve` guardrail holds for a person.
 */
held?: unknown, } } | { "kind": "tool_call_failed", "payload": { call_id: string, tool: string, error: string, 
/**
 * The call may or may not have taken effect (started, not finished, not idempotent).
 */
in_doubt: boolean, } } | { "kind": "tool_call_cancelled", "payload": { call_id: string, tool: string, reason: string, } } | { "kind": "tools_seen", "payload": { digest: string, tools: Array<SeenTool>, } } | { "kind": "assistant_message", "payload": { text: string, fallback?: boolean, } } | { "kind": "context_compacted", "payload": Compaction } | { "kind": "memory_updated", "payload": { text: string, by: string, } } | { "kind": "reply_rejected", "payload": { call_id: string, reason: string, } } | { "kind": "turn_finished", "payload": { reason: TurnEnd, } } | { "kind": "turn_cancelled", "payload": { reason: string, } } | { "kind": "session_failed", "payload": { reason: string, } } | { "kind": "session_closed", "payload": { reason: string, } } | { "kind": "schedule_created", "payload": { key: string, schedule: ScheduleDef, created_at: string, next_due_at: string | null, } } | { "kind": "schedule_fired", "payload": { key: string, due_at: string, at: string, 
/**
 * `null`: the schedule is done.
 */
next_due_at: string | null, missed?: number | undefined, } } | { "kind": "schedule_skipped", "payload": { key: string, at: string, missed: number, next_due_at: string | null, } } | { "kind": "schedule_cancelled", "payload": { key: string, reason: string, } } | { "kind": "child_session_started", "payload": { call_id: string, child_session_id: string, } } | { "kind": "session_forked", "payload": { from: string, at: number, overrides: Overrides, 
/**
 * Who forked: the fork's model calls are charged to it from here on.
 */
principal: string | null, } };

/**
 * One journaled step, as `GET …/events` and the WebSocket `event` frame carry it.
 */
export type EventView = { seq: number, kind: string, payload: unknown, 
/**
 * RFC 3339 with microseconds, UTC.
 */
at: string, };

export type ErrorCode = "agent_not_configured" | "already_decided" | "approval_not_found" | "args_hash_mismatch" | "artifact_not_found" | "artifact_too_large" | "budget_exceeded" | "busy" | "collection_exists" | "collection_not_found" | "compacted" | "dataset_exists" | "dataset_not_found" | "document_not_found" | "document_too_large" | "duplicate_client_id" | "embedding_mismatch" | "eval_not_found" | "event_too_large" | "forbidden" | "frame_too_large" | "guardrail_blocked" | "host_not_allowed" | "images_unsupported" | "internal" | "invalid_body" | "invalid_collection" | "invalid_credentials" | "invalid_document" | "invalid_frame" | "invalid_id" | "invalid_json" | "invalid_metadata" | "invalid_query" | "invalid_request" | "invalid_schedule" | "invalid_search" | "key_not_found" | "message_too_large" | "method_not_allowed" | "missing_credentials" | "model_not_found" | "not_found" | "not_ready" | "nothing_to_cancel" | "operator_required" | "origin_not_allowed" | "overloaded" | "payload_too_large" | "project_exists" | "project_not_found" | "queue_full" | "range_not_satisfiable" | "rate_limited" | "schedule_conflict" | "schedule_not_found" | "seq_out_of_range" | "session_elsewhere" | "session_ended" | "session_not_found" | "stale" | "token_expired" | "too_many_mcp_sessions" | "too_many_schedules" | "too_many_websockets" | "too_slow" | "unavailable" | "unknown_agent" | "unknown_filter_field" | "unknown_frame_type" | "unknown_route" | "unsupported_frame" | "unsupported_media_type" | "upstream_failed" | "upstream_rejected" | "wrong_dimension";

/**
 * A WebSocket frame from the server.
 */
export type ServerFrame = { "type": "hello", session_id: string, last_seq: number, status: SessionStatus, } | { "type": "event" } & EventView | { "type": "delta", call_id: string, attempt: number, text: string, offset: number, } | { "type": "tool_progress", call_id: string, progress?: number, total?: number, message?: string, 
/**
 * An `agent` call's child session.
 */
child_session_id?: string, 
/**
 * The child session's status.
 */
child_status?: string, 
/**
 * What the child did last, in a line.
 */
text?: string, } | { "type": "error", code: ErrorCode, message: string, };

/**
 * A WebSocket frame from a client.
 */
export type ClientFrame = { "type": "user_message", text: string, 
/**
 * Echoed back; a repeated one is not applied twice.
 */
client_id?: string, 
/**
 * While a turn runs: `queue`, `interrupt`, `steer` or `drop_if_busy` (default: the
 * agent's `message_mode`).
 */
mode?: MessageMode, 
/**
 * Artifacts of the session it carries (docs/artifacts.md, "Attachments").
 */
attachments?: Array<AttachmentRef>, } | { "type": "approval", call_id: string, approved: boolean, reason?: string, scope?: ApprovalScope, 
/**
 * The arguments the decision was made on (refused when they changed).
 */
args_hash?: string, 
/**
 * On a budget approval: the overspend allowed, in USD (default: the shortfall).
 */
overspend_usd?: number, } | { "type": "cancel", } | { "type": "resume", after_seq: number, };

/**
 * A session as `GET /v1/sessions` lists it.
 */
export type SessionRow = { id: string, agent: string, 
/**
 * `idle`, `running`, `awaiting_approval`, `failed` or `closed`.
 */
status: SessionStatus, metadata: Record<string, unknown>, last_seq: number, created_at: string, updated_at: string, closed_at: string | null, 
/**
 * A child session's parent (sub-agents); absent on other sessions.
 */
parent_session_id?: string, 
/**
 * The parent's tool call that started this child.
 */
parent_call_id?: string, };

/**
 * How a call ended.
 */
export type LogStatus = "ok" | "error" | "rate_limited" | "budget_exceeded" | "abandoned";

/**
 * One attempt at one target.
 */
export type AttemptRecord = { provider: string, model: string, 
/**
 * `ok`, `error`, `skipped` (cooling down) or `unavailable`.
 */
outcome: string, 
/**
 * The failure class (`status`, `connect`, `timeout`, `ttft_timeout`, `stream`, `invalid`,
 * `unavailable`, `cooldown`).
 */
error_kind?: string, status?: number, error?: string, retry_after_ms?: number, latency_ms: number, 
/**
 * Text this attempt added to the answer (mid-stream failover: the next attempt continues
 * after it).
 */
streamed_chars: number, };

/**
 * A guardrail that acted on a call (docs/guardrails.md): where, what it did, and the
 * entities it found — never the text.
 */
export type GuardrailEntry = { guardrail: string, 
/**
 * `request` (the messages or embedding inputs sent) or `answer`.
 */
place: string, 
/**
 * `redact`, `block`, `flag`, or `error` (a model check that failed or missed its deadline).
 */
effect: string, entities: Array<string>, };

/**
 * One call through the router (chat or embeddings), as `GET /v1/gateway/logs` lists it.
 */
export type RequestLogEntry = { id: string, at: string, session_id: string | null, 
/**
 * The API key's name (the first hex digits of its digest), `local` for loopback callers,
 * none for session actors.
 */
api_key: string | null, route: string, 
/**
 * The target that answered (or was tried last).
 */
provider: string | null, model: string | null, status: LogStatus, 
/**
 * Every attempt at every target, in order.
 */
attempts: Array<AttemptRecord>, latency_ms: number, ttft_ms: number | null, tokens_in: number, tokens_out: number, cost: number, cache_hit: boolean, stream: boolean, metadata: Record<string, unknown>, error: string | null, 
/**
 * `{"request", "response"}` with `[gateway.log] bodies = "full"`, else null.
 */
bodies: { request: unknown; response: unknown } | null, 
/**
 * The route's guardrails that acted on the call, in order (empty: none did).
 */
guardrails: Array<GuardrailEntry>, };
