// REST calls of Stead's public API (docs/api.md), each with the caller's credential. Errors become
// `ApiError` with the server's `code` and `message`. Works wherever `fetch` does: browsers, and
// Node 18 or later.

import type {
  ApprovalScope,
  GuardrailCheck,
  JournalEvent,
  KnowledgeCollection,
  KnowledgeDocumentFull,
  KnowledgeDocumentPage,
  KnowledgePutAnswer,
  KnowledgeQueryAnswer,
  MessageMode,
  RequestLogRow,
  ScheduleView,
  SessionRow,
} from "./protocol.js";

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
  ) {
    super(message);
  }
}

/** A session as `POST /v1/sessions` and `POST …/fork` answer: the row and its token. */
export type CreatedSession = SessionRow & { token: string; token_expires_at: string | null };

/** `GET /v1/sessions/{id}`: the row plus what the session's fold says now. */
export type SessionDetail = SessionRow & {
  pending_approvals: PendingApproval[] | unknown[];
  usage?: unknown;
  queued_messages?: number;
  forked_from?: unknown;
  failure?: unknown;
};

/** `POST …/messages?wait=true`: how the turn ended (or parked), and its reply. */
export interface TurnOutcome {
  status: string;
  reply: string | null;
  pending_approvals: unknown[];
  last_seq: number;
}

/** What an approval decides: a tool call, a model call a budget refused, or a tool's result an
 * `approve` guardrail holds (docs/guardrails.md, "Tool results"). */
export type ApprovalKind = "tool" | "budget" | "guardrail";

/** A pending approval as the inbox and a session tree's view list it. */
export interface PendingApproval {
  session_id: string;
  agent: string;
  /** `budget`: the model call `call_id` waits because a key's or a project's budget is spent;
   * only the installation or the project's admin may decide it (docs/tenancy.md). */
  kind?: ApprovalKind;
  call_id: string;
  /** The tool (empty for a budget approval). */
  tool: string;
  arguments: unknown;
  args_hash: string;
  reason: string;
  /** A budget approval's budget and how far over it the call would go. */
  budget?: { name: string; needed_usd: number };
  /** A guardrail approval's held result and every guardrail's verdict on it (`args_hash` is the
   * result's hash: a decision is bound to the result the person saw). */
  held?: { result: unknown; checks: GuardrailCheck[] };
  /** Set for a child session's approval: the session whose agent call started it. */
  parent_session_id?: string;
  parent_call_id?: string;
}

/** A project as `/v1/projects` lists it. */
export interface ProjectView {
  id: string;
  name: string;
  budget_usd: number | null;
  budget_period_secs: number | null;
  /** The installation's agents and routes the project may use (`null`: all of them). */
  agents: string[] | null;
  routes: string[] | null;
  created_at: string;
}

/** What one group spent (`name`: a key's name, a route, a model, a metadata value, a session). */
export interface SpendLine {
  name: string | null;
  cost: number;
  requests: number;
  tokens_in: number;
  tokens_out: number;
}

/** `GET /v1/projects/{project}/spend`. */
export interface SpendReport {
  project_id: string;
  since: string;
  until: string;
  bucket_secs: number;
  total: SpendLine;
  over_time: { at: string; cost: number; requests: number }[];
  by_key: SpendLine[];
  by_route: SpendLine[];
  by_model: SpendLine[];
  by_metadata: SpendLine[];
  top_sessions: SpendLine[];
  budgets: { name: string; usd: number; period_secs: number | null; spent: number; remaining_share: number | null }[];
}

/** One act of the audit trail. */
export interface AuditEntry {
  id: string;
  at: string;
  project_id: string;
  /** `api_key:{fingerprint}`, `project_key:{id}`, `session_token:{session}` or `local`. */
  actor: string;
  /** The operation: `POST /v1/projects/{project}/keys`, `WS approval`, … */
  action: string;
  /** The path it named. */
  target: string;
  status: number;
  source: string | null;
  details: Record<string, unknown>;
}

/** An uploaded artifact (`POST /v1/artifacts`). */
export interface Artifact {
  id: string;
  sha256: string;
  size: number;
  content_type: string;
  session_id?: string;
  created_at: string;
}

export interface Credentials {
  /** Origin of the Stead server; empty: the page's own. */
  baseUrl?: string;
  /** An API key or a session token, sent as `Authorization: Bearer`. A browser app should
   * hold session tokens only, never an operator key (docs/clients.md). */
  bearer?: string;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
}

export async function call<T>(
  creds: Credentials,
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const headers: Record<string, string> = {};
  if (creds.bearer) headers.authorization = `Bearer ${creds.bearer}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await (creds.fetch ?? fetch)(`${creds.baseUrl ?? ""}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON (a proxy's error page): the status says what happened.
  }
  if (!response.ok) {
    throw new ApiError(
      response.status,
      json?.error?.code ?? "http_error",
      json?.error?.message ?? response.statusText,
    );
  }
  return json as T;
}

export const api = {
  listSessions: (
    c: Credentials,
    q: { agent?: string; status?: string; parent?: string; cursor?: string; limit?: number } = {},
  ) =>
    call<{ sessions: SessionRow[]; next_cursor: string | null }>(c, "GET", `/v1/sessions?${query(q)}`),
  createSession: (c: Credentials, agent: string, metadata?: Record<string, unknown>) =>
    call<CreatedSession>(c, "POST", "/v1/sessions", metadata ? { agent, metadata } : { agent }),
  getSession: (c: Credentials, id: string) => call<SessionDetail>(c, "GET", `/v1/sessions/${id}`),
  children: (c: Credentials, id: string) =>
    call<{ sessions: SessionRow[]; next_cursor: string | null }>(c, "GET", `/v1/sessions/${id}/children`),
  ticket: (c: Credentials, id: string) =>
    call<{ session_id: string; ticket: string; expires_at: string }>(c, "POST", `/v1/sessions/${id}/ticket`),
  closeSession: (c: Credentials, id: string) => call<SessionRow>(c, "DELETE", `/v1/sessions/${id}`),
  events: (c: Credentials, id: string, after = 0, limit = 1000) =>
    call<{ events: JournalEvent[]; last_seq: number; compacted_through?: number }>(
      c,
      "GET",
      `/v1/sessions/${id}/events?after=${after}&limit=${limit}`,
    ),
  memory: (c: Credentials, id: string) =>
    call<{ session_id: string; text: string; max_chars: number }>(c, "GET", `/v1/sessions/${id}/memory`),
  setMemory: (c: Credentials, id: string, text: string) =>
    call<{ session_id: string; seq: number }>(c, "PUT", `/v1/sessions/${id}/memory`, { text }),
  stateAt: (c: Credentials, id: string, at: number) =>
    call<{ seq: number; status: string; state: unknown }>(c, "GET", `/v1/sessions/${id}/state?at=${at}`),
  fork: (
    c: Credentials,
    id: string,
    at: number,
    overrides: { route?: string; system_prompt?: string },
  ) =>
    call<SessionRow & { token: string; token_expires_at: string | null }>(c, "POST", `/v1/sessions/${id}/fork`, {
      at,
      overrides,
    }),
  sendMessage: (c: Credentials, id: string, text: string, options: { clientId?: string; mode?: MessageMode } = {}) =>
    call<{ session_id: string; seq: number }>(c, "POST", `/v1/sessions/${id}/messages`, messageBody(text, options)),
  /** Sends a message and waits until the turn ends or parks on an approval (at most 300 s). */
  sendMessageAndWait: (
    c: Credentials,
    id: string,
    text: string,
    options: { clientId?: string; mode?: MessageMode } = {},
  ) => call<TurnOutcome>(c, "POST", `/v1/sessions/${id}/messages?wait=true`, messageBody(text, options)),
  cancel: (c: Credentials, id: string) => call<{ session_id: string; seq: number }>(c, "POST", `/v1/sessions/${id}/cancel`),
  rotateToken: (c: Credentials, id: string) =>
    call<{ session_id: string; token: string; token_expires_at: string | null }>(c, "POST", `/v1/sessions/${id}/token`),
  createSchedule: (c: Credentials, id: string, schedule: Record<string, unknown>) =>
    call<unknown>(c, "POST", `/v1/sessions/${id}/schedules`, schedule),
  schedules: (c: Credentials, id: string) =>
    call<{ schedules: ScheduleView[] }>(c, "GET", `/v1/sessions/${id}/schedules`),
  cancelSchedule: (c: Credentials, id: string, key: string) =>
    call<{ session_id: string; seq: number }>(c, "DELETE", `/v1/sessions/${id}/schedules/${encodeURIComponent(key)}`),
  pendingApprovals: (c: Credentials) =>
    call<{ approvals: PendingApproval[] }>(c, "GET", "/v1/approvals?status=pending"),
  /** The pending approvals of a session and its descendants (child sessions of agent calls). */
  treeApprovals: (c: Credentials, id: string) =>
    call<{ approvals: PendingApproval[] }>(c, "GET", `/v1/sessions/${id}/approvals`),
  /** Decides a pending approval; a tool call's decision is bound to the arguments the person
   * saw, a budget approval's may allow `overspendUsd` (default: the shortfall). */
  decide: (
    c: Credentials,
    p: Pick<PendingApproval, "session_id" | "call_id" | "args_hash" | "kind">,
    approved: boolean,
    reason: string,
    scope: ApprovalScope = "once",
    overspendUsd?: number,
  ) =>
    call<{ session_id: string; seq: number }>(
      c,
      "POST",
      `/v1/sessions/${p.session_id}/approvals/${p.call_id}`,
      p.kind === "budget"
        ? { approved, reason, ...(overspendUsd === undefined ? {} : { overspend_usd: overspendUsd }) }
        : { approved, reason, scope, args_hash: p.args_hash },
    ),
  agents: (c: Credentials) => call<{ agents: { name: string; route: string }[] }>(c, "GET", "/v1/agents"),
  models: (c: Credentials) => call<{ data: { id: string }[] }>(c, "GET", "/v1/models"),
  /** Projects, a page by name (the installation's keys: all; a project's admin key: its own). */
  projects: (c: Credentials) =>
    call<{ projects: ProjectView[]; next_cursor: string | null }>(c, "GET", "/v1/projects?limit=500"),
  /** A project's spend (docs/tenancy.md, "Spend"): `query`: `days`, `group_by` (`metadata.KEY`). */
  spend: (c: Credentials, project: string, query: Record<string, string> = {}) =>
    call<SpendReport>(c, "GET", `/v1/projects/${encodeURIComponent(project)}/spend?${new URLSearchParams(query)}`),
  /** The audit trail (docs/audit.md), newest first: the installation's keys and a project's
   * admin keys. `query`: `actor`, `action` (a prefix), `since`, `until`, `before`, `limit`. */
  audit: (c: Credentials, query: Record<string, string> = {}) =>
    call<{ entries: AuditEntry[]; next_cursor: string | null }>(c, "GET", `/v1/audit?${new URLSearchParams(query)}`),
  gatewayLogs: (c: Credentials, query: Record<string, string> = {}) =>
    call<{ logs: RequestLogRow[]; next_cursor: string | null }>(
      c,
      "GET",
      `/v1/gateway/logs?${new URLSearchParams(query)}`,
    ),
  // Knowledge collections (docs/knowledge.md). Names and document ids are path segments.
  collections: (c: Credentials) =>
    call<{ collections: KnowledgeCollection[] }>(c, "GET", "/v1/collections"),
  createCollection: (c: Credentials, name: string, embeddingRoute?: string) =>
    call<KnowledgeCollection>(
      c,
      "POST",
      "/v1/collections",
      embeddingRoute ? { name, embedding_route: embeddingRoute } : { name },
    ),
  deleteCollection: (c: Credentials, name: string) =>
    call<null>(c, "DELETE", `/v1/collections/${encodeURIComponent(name)}`),
  documents: (c: Credentials, collection: string, after: string | null, limit: number) =>
    call<KnowledgeDocumentPage>(c, "GET", documentsPath(collection, after, limit)),
  document: (c: Credentials, collection: string, id: string) =>
    call<KnowledgeDocumentFull>(c, "GET", documentPath(collection, id)),
  putDocument: (c: Credentials, collection: string, id: string, body: { text: string; metadata?: unknown }) =>
    call<KnowledgePutAnswer>(c, "PUT", documentPath(collection, id), body),
  deleteDocument: (c: Credentials, collection: string, id: string) =>
    call<null>(c, "DELETE", documentPath(collection, id)),
  queryCollection: (c: Credentials, collection: string, body: unknown) =>
    call<KnowledgeQueryAnswer>(c, "POST", `/v1/collections/${encodeURIComponent(collection)}/query`, body),
  /** Uploads `body` into session `sessionId` (the type is read from the bytes: docs/artifacts.md). */
  uploadArtifact: async (c: Credentials, sessionId: string, body: Blob): Promise<Artifact> => {
    const headers: Record<string, string> = {};
    if (c.bearer) headers.authorization = `Bearer ${c.bearer}`;
    if (body.type) headers["content-type"] = body.type;
    const response = await (c.fetch ?? fetch)(`${c.baseUrl ?? ""}/v1/artifacts?session_id=${sessionId}`, {
      method: "POST",
      headers,
      body,
    });
    const json: any = await response.json().catch(() => null);
    if (!response.ok) {
      throw new ApiError(response.status, json?.error?.code ?? "http_error", json?.error?.message ?? response.statusText);
    }
    return json as Artifact;
  },
  /** The words spoken in an artifact (`POST /v1/audio/transcriptions` with `artifact_id`,
   *  the local Whisper model: docs/speech.md). */
  transcribeArtifact: async (c: Credentials, artifactId: string): Promise<{ text: string }> => {
    const headers: Record<string, string> = {};
    if (c.bearer) headers.authorization = `Bearer ${c.bearer}`;
    const form = new FormData();
    form.append("artifact_id", artifactId);
    form.append("model", "whisper");
    const response = await (c.fetch ?? fetch)(`${c.baseUrl ?? ""}/v1/audio/transcriptions`, {
      method: "POST",
      headers,
      body: form,
    });
    const json: any = await response.json().catch(() => null);
    if (!response.ok) {
      throw new ApiError(response.status, json?.error?.code ?? "http_error", json?.error?.message ?? response.statusText);
    }
    return { text: String(json?.text ?? "") };
  },
  /** An artifact's bytes (with the credentials: an `<img src>` cannot send them). */
  artifactBlob: async (c: Credentials, id: string): Promise<Blob> => {
    const headers: Record<string, string> = {};
    if (c.bearer) headers.authorization = `Bearer ${c.bearer}`;
    const response = await (c.fetch ?? fetch)(`${c.baseUrl ?? ""}/v1/artifacts/${id}`, { headers });
    if (!response.ok) throw new ApiError(response.status, "http_error", response.statusText);
    return response.blob();
  },
};

function query(q: Record<string, string | number | undefined>): URLSearchParams {
  return new URLSearchParams(
    Object.entries(q)
      .filter(([, v]) => v !== undefined && v !== "")
      .map(([k, v]) => [k, String(v)]),
  );
}

function messageBody(text: string, options: { clientId?: string; mode?: MessageMode }) {
  return {
    text,
    ...(options.clientId ? { client_id: options.clientId } : {}),
    ...(options.mode ? { mode: options.mode } : {}),
  };
}

/** `GET /v1/collections/{c}/documents?limit=…&after=…`. */
export function documentsPath(collection: string, after: string | null, limit: number): string {
  const query = new URLSearchParams({ limit: String(limit) });
  if (after !== null) query.set("after", after);
  return `/v1/collections/${encodeURIComponent(collection)}/documents?${query}`;
}

/** `/v1/collections/{c}/documents/{id}`, the id one path segment whatever it holds (`docs/a.md`). */
export function documentPath(collection: string, id: string): string {
  return `/v1/collections/${encodeURIComponent(collection)}/documents/${encodeURIComponent(id)}`;
}

/** An error as a page shows it: `code: message` for the API's own. */
export function errorText(e: unknown): string {
  return e instanceof ApiError ? `${e.code}: ${e.message}` : String(e);
}
