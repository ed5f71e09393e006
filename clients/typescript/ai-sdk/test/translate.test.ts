import { readUIMessageStream, type UIMessage, type UIMessageChunk } from "ai";
import { describe, expect, it } from "vitest";

import type { ServerFrame } from "@stead/client";

import { TurnTranslator } from "../src/translate.js";
import { messagesFromJournal } from "../src/transport.js";

let seq = 0;
function ev(kind: string, payload: Record<string, unknown>): ServerFrame {
  seq += 1;
  return { type: "event", seq, kind, payload, at: "2026-12-04T00:00:00Z" } as ServerFrame;
}
const delta = (call_id: string, text: string, offset: number, attempt = 0): ServerFrame =>
  ({ type: "delta", call_id, attempt, text, offset }) as ServerFrame;

// The AI SDK's own reader builds the message from the chunks, as `useChat` does.
async function read(chunks: UIMessageChunk[], message?: UIMessage): Promise<UIMessage> {
  const stream = new ReadableStream<UIMessageChunk>({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream, message, terminateOnError: true })) last = m;
  return structuredClone(last!);
}

seq = 0;
const firstHalf: ServerFrame[] = [
  ev("user_message", { text: "What time is it?", client_id: "m1" }),
  ev("model_call_started", { call_id: "mc1", route: "default" }),
  delta("mc1", "Let me ", 0),
  delta("mc1", "check.", 7),
  // A reconnect: the stream again from offset 0 adds nothing twice.
  delta("mc1", "Let me check.", 0),
  ev("model_call_finished", { call_id: "mc1", text: "Let me check.", tool_calls: [{ call_id: "t1" }] }),
  ev("tool_call_requested", { call_id: "t1", tool: "clock", arguments: { tz: "UTC" } }),
  ev("approval_requested", { call_id: "t1", args_hash: "h1", reason: "clock needs approval" }),
];
const secondHalf: ServerFrame[] = [
  ev("approval_decided", { call_id: "t1", approved: true, reason: "ok", decided_by: "ada", scope: "once" }),
  ev("tool_call_started", { call_id: "t1" }),
  ev("tool_call_finished", { call_id: "t1", result: { time: "12:00" } }),
  ev("model_call_started", { call_id: "mc2" }),
  delta("mc2", "It is noon.", 0),
  ev("model_call_finished", { call_id: "mc2", text: "It is noon.", tool_calls: [] }),
  ev("assistant_message", { text: "It is noon." }),
  ev("turn_finished", { reason: "completed" }),
];

describe("TurnTranslator", () => {
  it("streams text once and parks on an approval", async () => {
    const t = new TurnTranslator("a1");
    const chunks = firstHalf.flatMap((f) => t.push(f));
    expect(t.state).toBe("parked");
    expect(chunks.filter((c) => c.type === "text-delta").map((c) => (c as { delta: string }).delta)).toEqual([
      "Let me ",
      "check.",
    ]);
    const message = await read(chunks);
    expect(message.id).toBe("a1");
    expect(message.parts).toEqual([
      { type: "step-start" },
      { type: "text", text: "Let me check.", state: "done" },
      {
        type: "dynamic-tool",
        toolName: "clock",
        toolCallId: "t1",
        state: "approval-requested",
        input: { tz: "UTC" },
        approval: { id: "t1", requestReason: "clock needs approval" },
      },
    ]);
  });

  it("continues the message after the decision and ends with the turn", async () => {
    const first = new TurnTranslator("a1");
    const parked = await read(firstHalf.flatMap((f) => first.push(f)));
    const t = new TurnTranslator();
    const chunks = secondHalf.flatMap((f) => t.push(f));
    expect(t.state).toBe("done");
    expect(chunks.at(-1)).toEqual({ type: "finish", finishReason: "stop" });
    const message = await read(chunks, parked);
    const tool = message.parts.find((p) => p.type === "dynamic-tool") as Record<string, unknown>;
    expect(tool.state).toBe("output-available");
    expect(tool.output).toEqual({ time: "12:00" });
    expect(message.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text)).toEqual([
      "Let me check.",
      "It is noon.",
    ]);
  });

  it("a rejected call is denied, and a cancelled turn aborts", () => {
    seq = 100;
    const t = new TurnTranslator();
    t.push(ev("tool_call_requested", { call_id: "t9", tool: "rm", arguments: {} }));
    t.push(ev("approval_requested", { call_id: "t9", args_hash: "h", reason: "r" }));
    const t2 = new TurnTranslator();
    const chunks = [
      ...t2.push(ev("approval_decided", { call_id: "t9", approved: false, reason: "no", decided_by: "x", scope: "once" })),
      ...t2.push(ev("turn_cancelled", { reason: "user" })),
    ];
    expect(chunks).toContainEqual({ type: "tool-output-denied", toolCallId: "t9" });
    expect(chunks.at(-1)).toEqual({ type: "abort", reason: "cancelled" });
    expect(t2.state).toBe("done");
  });
});

describe("messagesFromJournal", () => {
  it("builds what the stream builds, one assistant message per turn", async () => {
    const events = [...firstHalf, ...secondHalf].flatMap((f) => (f.type === "event" ? [f] : []));
    const messages = messagesFromJournal("s1", events as never);
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(messages[0]).toEqual({ id: "m1", role: "user", parts: [{ type: "text", text: "What time is it?" }] });
    const t1 = new TurnTranslator();
    const t2 = new TurnTranslator();
    const streamed = await read(secondHalf.flatMap((f) => t2.push(f)), await read(firstHalf.flatMap((f) => t1.push(f))));
    const strip = (parts: unknown[]) => JSON.parse(JSON.stringify(parts));
    expect(strip(messages[1].parts)).toEqual(strip(streamed.parts));
  });
});
