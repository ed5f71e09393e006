// `SessionConnection`: one session's WebSocket (docs/api.md, "WebSocket"), kept open. Each
// connection asks `POST /v1/sessions/{id}/ticket` for a one-minute ticket, so the credential
// travels in a header and never in a URL; it resumes after the last journal seq it delivered,
// drops events it already delivered (so a listener sees each seq once, in order), and
// reconnects with exponential backoff until it is closed or its credential is refused.

import type { ApprovalScope, ClientFrame, MessageMode, ServerFrame } from "./protocol.js";
import { api, ApiError, type Credentials } from "./rest.js";

export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";

/** What `SessionConnection` needs of a WebSocket: the browser's, or Node's `ws` package. */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((event: any) => void) | null;
  onmessage: ((event: { data: any }) => void) | null;
  onclose: ((event: { code: number; reason?: string }) => void) | null;
  onerror: ((event: any) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

export interface SessionConnectionOptions extends Credentials {
  /** Deliver only journal events after this seq (default 0: the whole journal). */
  afterSeq?: number;
  /** The WebSocket class: the global one by default (browsers, Node 22+); on older Node pass
   * the `ws` package's. */
  WebSocket?: WebSocketConstructor;
  /** Backoff between reconnects: `initialMs` doubled per failure up to `maxMs`. */
  backoff?: { initialMs?: number; maxMs?: number };
}

/** Why a connection stopped for good. */
export interface ClosedReason {
  /** `refused`: the credential or session was refused (401, 403, 404); `closed`: `close()`. */
  kind: "refused" | "closed";
  error?: ApiError;
}

type FrameListener = (frame: ServerFrame) => void;
type StateListener = (state: ConnectionState, closed?: ClosedReason) => void;

const OPEN = 1;

export class SessionConnection {
  readonly sessionId: string;
  private options: SessionConnectionOptions;
  private socket: WebSocketLike | null = null;
  private frameListeners = new Set<FrameListener>();
  private stateListeners = new Set<StateListener>();
  private failures = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  private seq: number;
  private current: ConnectionState = "connecting";

  constructor(sessionId: string, options: SessionConnectionOptions = {}) {
    this.sessionId = sessionId;
    this.options = options;
    this.seq = options.afterSeq ?? 0;
    // Connect on the next tick, so that listeners added right after construction see the first frames.
    this.timer = setTimeout(() => void this.connect(), 0);
  }

  /** The highest journal seq delivered to listeners. */
  get lastSeq(): number {
    return this.seq;
  }

  get state(): ConnectionState {
    return this.current;
  }

  /** Calls `listener` with every frame: each journal event once, in seq order. Returns the
   * function that removes it. */
  onFrame(listener: FrameListener): () => void {
    this.frameListeners.add(listener);
    return () => this.frameListeners.delete(listener);
  }

  onState(listener: StateListener): () => void {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /** Sends a frame now; false when the socket is not open (nothing is queued). */
  send(frame: ClientFrame): boolean {
    const ws = this.socket;
    if (!ws || ws.readyState !== OPEN) return false;
    ws.send(JSON.stringify(frame));
    return true;
  }

  /** Sends a user message. `clientId` (a fresh one by default) makes a retry apply once;
   * `attachments` are ids of the session's uploaded artifacts (`api.uploadArtifact`). */
  sendMessage(
    text: string,
    options: { mode?: MessageMode; clientId?: string; attachments?: string[] } = {},
  ): boolean {
    const clientId = options.clientId ?? newClientId();
    return this.send({
      type: "user_message",
      text,
      client_id: clientId,
      ...(options.mode ? { mode: options.mode } : {}),
      ...(options.attachments?.length
        ? { attachments: options.attachments.map((artifact_id) => ({ artifact_id })) }
        : {}),
    });
  }

  /** Approves a pending call. `argsHash` (from its `approval_requested`) binds the decision to
   * the arguments the person saw. */
  approve(callId: string, options: { argsHash?: string; scope?: ApprovalScope; reason?: string } = {}): boolean {
    return this.send({
      type: "approval",
      call_id: callId,
      approved: true,
      scope: options.scope ?? "once",
      args_hash: options.argsHash,
      ...(options.reason ? { reason: options.reason } : {}),
    });
  }

  reject(callId: string, reason: string, options: { argsHash?: string } = {}): boolean {
    return this.send({ type: "approval", call_id: callId, approved: false, reason, args_hash: options.argsHash });
  }

  /** Cancels the running turn (its model call and running tools). */
  cancel(): boolean {
    return this.send({ type: "cancel" });
  }

  /** Closes the connection for good. */
  close(): void {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    const ws = this.socket;
    this.socket = null;
    ws?.close(1000);
    this.setState("closed", { kind: "closed" });
  }

  private setState(state: ConnectionState, closed?: ClosedReason) {
    this.current = state;
    for (const listener of this.stateListeners) listener(state, closed);
  }

  private retry() {
    if (this.stopped) return;
    this.setState("reconnecting");
    const initial = this.options.backoff?.initialMs ?? 250;
    const max = this.options.backoff?.maxMs ?? 5000;
    const wait = Math.min(initial * 2 ** this.failures, max);
    this.failures += 1;
    this.timer = setTimeout(() => void this.connect(), wait);
  }

  private async connect() {
    if (this.stopped) return;
    let ticket: string;
    try {
      ticket = (await api.ticket(this.options, this.sessionId)).ticket;
    } catch (e) {
      // A refused credential, or a session that is gone, will not come back by retrying.
      if (e instanceof ApiError && [401, 403, 404].includes(e.status)) {
        this.stopped = true;
        this.setState("closed", { kind: "refused", error: e });
        return;
      }
      this.retry();
      return;
    }
    if (this.stopped) return;
    const Socket = this.options.WebSocket ?? (globalThis as any).WebSocket;
    if (!Socket) {
      throw new Error("no WebSocket: pass the `ws` package's WebSocket as options.WebSocket");
    }
    // Resume after what was delivered: the server sends the rest of the journal, then the
    // in-flight stream from its start (placed by offset), then live frames.
    const ws: WebSocketLike = new Socket(socketUrl(this.options.baseUrl, this.sessionId, ticket, this.seq));
    this.socket = ws;
    ws.onopen = () => {
      this.failures = 0;
      this.setState("open");
    };
    ws.onmessage = (message) => {
      const frame = parse(message.data);
      if (!frame) return;
      if (frame.type === "event") {
        if (frame.seq <= this.seq) return; // delivered before this reconnect
        this.seq = frame.seq;
      }
      for (const listener of this.frameListeners) listener(frame);
    };
    ws.onerror = () => undefined;
    ws.onclose = () => {
      if (this.socket !== ws) return;
      this.socket = null;
      this.retry();
    };
  }
}

/** A fresh `client_id` (a random UUID; Node 18 has no global `crypto`). */
function newClientId(): string {
  const webCrypto = (globalThis as any).crypto;
  if (webCrypto?.randomUUID) return webCrypto.randomUUID();
  const hex = Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16));
  return `${hex.slice(0, 8).join("")}-${hex.slice(8, 12).join("")}-4${hex.slice(13, 16).join("")}-a${hex.slice(17, 20).join("")}-${hex.slice(20).join("")}`;
}

function parse(data: unknown): ServerFrame | null {
  try {
    const text = typeof data === "string" ? data : new TextDecoder().decode(data as ArrayBuffer);
    const frame = JSON.parse(text);
    return frame && typeof frame.type === "string" ? (frame as ServerFrame) : null;
  } catch {
    return null; // not a frame of this protocol
  }
}

/** The WebSocket URL of a session: `ws(s)://…/v1/sessions/{id}/ws?ticket=…&after_seq=…`. */
export function socketUrl(baseUrl: string | undefined, id: string, ticket: string, afterSeq: number): string {
  const origin = baseUrl || (globalThis as any).location?.origin;
  if (!origin) throw new Error("baseUrl is needed outside a browser");
  const url = new URL(`/v1/sessions/${id}/ws`, origin.replace(/^http/, "ws"));
  url.searchParams.set("ticket", ticket);
  // Always resume, from 0 on the first connection: without it the server sends live frames
  // only, and the history before them would never come.
  url.searchParams.set("after_seq", String(afterSeq));
  return url.toString();
}
