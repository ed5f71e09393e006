// Stead's session frames as the AI SDK's UI-message stream (docs/clients.md, "AI SDK"): one
// assistant message per turn; each model call a step whose text streams by offset; each tool
// call a dynamic tool part with its input, approval request, decision and output. Pure: the
// transport feeds it frames, the tests feed it scripted ones.

import type { JournalEvent, ServerFrame } from "@stead/client";
import type { UIMessageChunk } from "ai";

/** Where the stream stands after a frame: `open` goes on; `done` the turn ended; `parked` it
 * waits for a person (every call that runs has ended and at least one waits for approval). */
export type TurnState = "open" | "done" | "parked";

export class TurnTranslator {
  private started = false;
  private stepOpen = false;
  /** The model call whose text streams now, the run of it, and how much of it was emitted. */
  private text: { callId: string; attempt: number; id: string; emitted: string; open: boolean } | null = null;
  /** Tool calls of this stream, by call id: waiting for approval, or running (not ended). */
  private awaiting = new Set<string>();
  private running = new Set<string>();
  private finishedCalls = new Set<string>();
  state: TurnState = "open";

  /** `messageId`: the assistant message's id (omit it to continue the chat's last message). */
  constructor(private messageId?: string) {}

  /** The chunks one frame adds. */
  push(frame: ServerFrame): UIMessageChunk[] {
    const out: UIMessageChunk[] = [];
    if (this.state === "done") return out;
    if (frame.type === "delta") {
      this.delta(out, frame.call_id, frame.attempt, frame.text, frame.offset);
    } else if (frame.type === "event") {
      this.event(out, frame);
    } else if (frame.type === "error") {
      // A refused frame (e.g. a duplicate message): the turn is not this stream's to end.
      out.push({ type: "error", errorText: `${frame.code}: ${frame.message}` });
    }
    if (this.state === "open" && this.awaiting.size > 0 && this.running.size === 0 && !this.text) {
      this.end(out, "tool-calls");
      this.state = "parked";
    }
    return out;
  }

  private begin(out: UIMessageChunk[]) {
    if (this.started) return;
    this.started = true;
    out.push(this.messageId ? { type: "start", messageId: this.messageId } : { type: "start" });
  }

  private step(out: UIMessageChunk[]) {
    this.begin(out);
    if (!this.stepOpen) {
      out.push({ type: "start-step" });
      this.stepOpen = true;
    }
  }

  private delta(out: UIMessageChunk[], callId: string, attempt: number, text: string, offset: number) {
    if (this.finishedCalls.has(callId)) return;
    const current = this.text;
    if (current && current.callId === callId && attempt < current.attempt) return; // an older run
    if (current && current.callId === callId && attempt > current.attempt) {
      // The call was re-issued (a server restart): its earlier text goes.
      out.push({ type: "reset-step" });
      this.stepOpen = false;
      this.text = null;
    }
    this.step(out);
    if (!this.text || this.text.callId !== callId) {
      this.closeText(out);
      this.text = { callId, attempt, id: `${callId}:${attempt}`, emitted: "", open: false };
    }
    const t = this.text;
    if (offset > t.emitted.length) return; // a gap: the resend from offset 0 fills it
    const fresh = (t.emitted.slice(0, offset) + text).slice(t.emitted.length);
    if (!fresh) return;
    if (!t.open) {
      out.push({ type: "text-start", id: t.id });
      t.open = true;
    }
    out.push({ type: "text-delta", id: t.id, delta: fresh });
    t.emitted += fresh;
  }

  private closeText(out: UIMessageChunk[]) {
    if (this.text?.open) out.push({ type: "text-end", id: this.text.id });
    this.text = null;
  }

  private end(out: UIMessageChunk[], reason: "stop" | "tool-calls" | "error" | "other") {
    this.closeText(out);
    this.begin(out);
    if (this.stepOpen) out.push({ type: "finish-step" });
    this.stepOpen = false;
    out.push({ type: "finish", finishReason: reason });
  }

  private event(out: UIMessageChunk[], event: JournalEvent) {
    const p = event.payload as Record<string, any>;
    switch (event.kind) {
      case "model_call_started":
        this.step(out);
        break;
      case "model_call_finished": {
        // Text the deltas did not bring (a resume after the call ended) comes from the event.
        const text: string = p.text ?? "";
        const streamed = this.text;
        if (!streamed || streamed.callId !== p.call_id) {
          this.closeText(out);
          if (text) this.delta(out, p.call_id, 0, text, 0);
        } else if (text.length > streamed.emitted.length) {
          this.delta(out, p.call_id, streamed.attempt, text.slice(streamed.emitted.length), streamed.emitted.length);
        }
        this.closeText(out);
        this.finishedCalls.add(p.call_id);
        if (this.stepOpen) out.push({ type: "finish-step" });
        this.stepOpen = false;
        break;
      }
      case "model_call_failed":
        this.closeText(out);
        this.finishedCalls.add(p.call_id);
        break;
      case "tool_call_requested":
        this.begin(out);
        out.push({
          type: "tool-input-available",
          toolCallId: p.call_id,
          toolName: p.tool,
          input: p.arguments,
          dynamic: true,
        });
        this.running.add(p.call_id);
        break;
      case "approval_requested":
        this.running.delete(p.call_id);
        this.awaiting.add(p.call_id);
        out.push({ type: "tool-approval-request", approvalId: p.call_id, toolCallId: p.call_id, reason: p.reason });
        break;
      case "approval_decided":
        this.awaiting.delete(p.call_id);
        out.push({
          type: "tool-approval-response",
          approvalId: p.call_id,
          approved: p.approved,
          ...(p.reason ? { reason: p.reason } : {}),
        });
        if (p.approved) this.running.add(p.call_id);
        else out.push({ type: "tool-output-denied", toolCallId: p.call_id });
        break;
      case "tool_call_finished":
        this.running.delete(p.call_id);
        out.push({ type: "tool-output-available", toolCallId: p.call_id, output: p.result, dynamic: true });
        break;
      case "tool_call_failed":
        this.running.delete(p.call_id);
        out.push({ type: "tool-output-error", toolCallId: p.call_id, errorText: String(p.error), dynamic: true });
        break;
      case "tool_call_cancelled":
        this.running.delete(p.call_id);
        this.awaiting.delete(p.call_id);
        out.push({ type: "tool-output-error", toolCallId: p.call_id, errorText: `cancelled: ${p.reason}`, dynamic: true });
        break;
      case "turn_finished":
        if (p.reason === "model_failed") {
          this.closeText(out);
          out.push({ type: "error", errorText: "the model call failed" });
        }
        this.end(out, p.reason === "completed" ? "stop" : p.reason === "model_failed" ? "error" : "other");
        this.state = "done";
        break;
      case "turn_cancelled":
        this.closeText(out);
        this.begin(out);
        out.push({ type: "abort", reason: "cancelled" });
        this.state = "done";
        break;
      case "session_failed":
      case "session_closed":
        this.closeText(out);
        this.begin(out);
        out.push({ type: "error", errorText: `the session ${event.kind === "session_failed" ? "failed" : "was closed"}` });
        this.state = "done";
        break;
      default:
        break;
    }
  }
}
