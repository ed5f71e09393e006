// `SteadChatTransport`: the AI SDK's `useChat` over a Stead session. The chat's id is the
// session's id; the browser holds that session's token only. A new user message is posted to
// the session; a tool-approval response (`addToolApprovalResponse`) becomes the session's
// approval decision, bound to the arguments' hash; each answer streams from the session's
// WebSocket (ticketed, resumed after the seq the session had before the request) as UI-message
// chunks until the turn ends or parks on an approval. `reconnectToStream` replays the running
// turn from its user message, so a reloaded page picks the answer up where it is.

import {
  api,
  type Credentials,
  type JournalEvent,
  SessionConnection,
  type ServerFrame,
  type WebSocketConstructor,
} from "@stead/client";
import type { ChatTransport, UIMessage, UIMessageChunk } from "ai";

import { TurnTranslator } from "./translate.js";

export interface SteadChatTransportOptions {
  /** Origin of the Stead server; empty: the page's own. */
  baseUrl?: string;
  /** The session token for a chat (its id is the session's id). */
  token: (chatId: string) => string | undefined | Promise<string | undefined>;
  WebSocket?: WebSocketConstructor;
  fetch?: typeof fetch;
}

export class SteadChatTransport implements ChatTransport<UIMessage> {
  /** A reconnect replays the running turn's answer from its start. */
  readonly resumeStreamIsReplay = true;

  constructor(private options: SteadChatTransportOptions) {}

  private async creds(chatId: string): Promise<Credentials> {
    return { baseUrl: this.options.baseUrl, bearer: await this.options.token(chatId), fetch: this.options.fetch };
  }

  async sendMessages(options: Parameters<ChatTransport<UIMessage>["sendMessages"]>[0]) {
    const { chatId, messages, abortSignal } = options;
    if (options.trigger === "regenerate-message") {
      // A journal is append-only: an answer cannot be taken back and asked again.
      throw new Error(
        "a Stead session cannot regenerate an answer (its journal is append-only); fork the session at an earlier step instead (docs/replay.md)",
      );
    }
    const creds = await this.creds(chatId);
    const last = messages[messages.length - 1];
    const session = await api.getSession(creds, chatId);
    const before = session.last_seq;
    let act: () => Promise<boolean>;
    if (last?.role === "assistant") {
      // Approval responses: decide each call the person answered that still waits.
      const responded = last.parts.flatMap((part: any) =>
        part.approval && part.state === "approval-responded" ? [part] : [],
      );
      if (responded.length === 0) {
        throw new Error("nothing to send: the last message is the assistant's and answers no approval");
      }
      const { approvals } = await api.treeApprovals(creds, chatId);
      act = async () => {
        let decided = 0;
        for (const part of responded) {
          const pending = approvals.find((a) => a.session_id === chatId && a.call_id === part.toolCallId);
          if (!pending) continue; // decided already (another tab, or a retry)
          await api.decide(creds, pending, part.approval.approved, part.approval.reason ?? (part.approval.approved ? "approved" : "rejected"));
          decided += 1;
        }
        // Nothing decided here and nothing running: no events will come for this request.
        return decided > 0 || session.status === "running";
      };
    } else {
      const text = (last?.parts ?? [])
        .map((part: any) => (part.type === "text" ? part.text : ""))
        .join("");
      // The message's own id makes a retried request apply once (`client_id`).
      act = async () => {
        await api.sendMessage(creds, chatId, text, { clientId: last?.id });
        return true;
      };
    }
    return this.stream(chatId, creds, before, new TurnTranslator(), abortSignal, act);
  }

  async reconnectToStream(options: Parameters<ChatTransport<UIMessage>["reconnectToStream"]>[0]) {
    const creds = await this.creds(options.chatId);
    const session = await api.getSession(creds, options.chatId);
    if (session.status !== "running") return null;
    // Find the running turn's user message (the last one) and replay from just before it.
    const events = await allEvents(creds, options.chatId);
    const lastUser = [...events].reverse().find((e) => e.kind === "user_message");
    const from = lastUser ? lastUser.seq : 0;
    return this.stream(options.chatId, creds, from, new TurnTranslator(`${options.chatId}:${from}`), options.abortSignal);
  }

  private stream(
    chatId: string,
    creds: Credentials,
    afterSeq: number,
    translator: TurnTranslator,
    abortSignal: AbortSignal | undefined,
    act?: () => Promise<boolean>,
  ): ReadableStream<UIMessageChunk> {
    let conn: SessionConnection | null = null;
    return new ReadableStream<UIMessageChunk>({
      start: async (controller) => {
        conn = new SessionConnection(chatId, { ...creds, afterSeq, WebSocket: this.options.WebSocket });
        const finish = () => {
          conn?.close();
          try {
            controller.close();
          } catch {
            // closed already
          }
        };
        conn.onFrame((frame: ServerFrame) => {
          for (const chunk of translator.push(frame)) controller.enqueue(chunk);
          if (translator.state !== "open") finish();
        });
        conn.onState((state, closed) => {
          if (state === "closed" && closed?.kind === "refused") {
            controller.enqueue({ type: "error", errorText: closed.error?.message ?? "refused" });
            finish();
          }
        });
        abortSignal?.addEventListener("abort", () => {
          // Stopping the chat cancels the session's turn; the journal keeps what was done.
          void api.cancel(creds, chatId).catch(() => undefined);
          finish();
        });
        if (act) {
          try {
            if (!(await act())) {
              controller.enqueue({ type: "start" });
              controller.enqueue({ type: "finish", finishReason: "other" });
              finish();
            }
          } catch (e) {
            controller.enqueue({ type: "error", errorText: e instanceof Error ? e.message : String(e) });
            finish();
          }
        }
      },
      cancel: () => conn?.close(),
    });
  }
}

async function allEvents(creds: Credentials, id: string): Promise<JournalEvent[]> {
  const events: JournalEvent[] = [];
  for (let after = 0; ; ) {
    const page = await api.events(creds, id, after, 1000);
    events.push(...page.events);
    if (page.events.length === 0 || after >= page.last_seq) return events;
    after = page.events[page.events.length - 1].seq;
    if (after >= page.last_seq) return events;
  }
}

/** A session's journal as the chat's messages (a page that loads an existing session): one
 * user message per `user_message`, one assistant message per turn's answer. */
export function messagesFromJournal(sessionId: string, events: JournalEvent[]): UIMessage[] {
  const messages: UIMessage[] = [];
  let turn: { translator: TurnTranslator; chunks: UIMessageChunk[]; seq: number } | null = null;
  const flush = () => {
    if (turn && turn.chunks.length) messages.push(assemble(`${sessionId}:${turn.seq}`, turn.chunks));
    turn = null;
  };
  for (const event of events) {
    if (event.kind === "user_message") {
      flush();
      const p = event.payload as { text: string; client_id?: string };
      messages.push({ id: p.client_id ?? `${sessionId}:u${event.seq}`, role: "user", parts: [{ type: "text", text: p.text }] });
      turn = { translator: new TurnTranslator(), chunks: [], seq: event.seq };
      continue;
    }
    if (!turn) continue;
    turn.chunks.push(...turn.translator.push({ type: "event", ...event } as ServerFrame));
  }
  flush();
  return messages;
}

/** The parts a list of chunks builds, the way the AI SDK's stream reader builds them. */
function assemble(id: string, chunks: UIMessageChunk[]): UIMessage {
  const parts: any[] = [];
  const texts = new Map<string, any>();
  const tools = new Map<string, any>();
  for (const chunk of chunks) {
    switch (chunk.type) {
      case "start-step":
        parts.push({ type: "step-start" });
        break;
      case "text-start": {
        const part = { type: "text", text: "", state: "done" };
        texts.set(chunk.id, part);
        parts.push(part);
        break;
      }
      case "text-delta":
        texts.get(chunk.id).text += chunk.delta;
        break;
      case "tool-input-available": {
        const part = { type: "dynamic-tool", toolName: chunk.toolName, toolCallId: chunk.toolCallId, state: "input-available", input: chunk.input };
        tools.set(chunk.toolCallId, part);
        parts.push(part);
        break;
      }
      case "tool-approval-request": {
        const part = tools.get(chunk.toolCallId);
        if (part) Object.assign(part, { state: "approval-requested", approval: { id: chunk.approvalId, requestReason: chunk.reason } });
        break;
      }
      case "tool-approval-response":
        for (const part of tools.values()) {
          if (part.approval?.id === chunk.approvalId) {
            Object.assign(part, { state: "approval-responded", approval: { ...part.approval, approved: chunk.approved, reason: chunk.reason } });
          }
        }
        break;
      case "tool-output-available":
        Object.assign(tools.get(chunk.toolCallId) ?? {}, { state: "output-available", output: chunk.output });
        break;
      case "tool-output-error":
        Object.assign(tools.get(chunk.toolCallId) ?? {}, { state: "output-error", errorText: chunk.errorText });
        break;
      case "tool-output-denied":
        Object.assign(tools.get(chunk.toolCallId) ?? {}, { state: "output-denied" });
        break;
      default:
        break;
    }
  }
  return { id, role: "assistant", parts };
}
