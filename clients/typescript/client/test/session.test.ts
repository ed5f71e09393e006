// SessionConnection against doubles of `fetch` (the ticket endpoint) and of WebSocket (named as
// such): resume after the last delivered seq, events delivered once across a reconnect, backoff,
// and a refused credential stopping the retries. The real server is exercised by
// test/live.mjs (tests/e2e/clients.rs).

import { describe, expect, it } from "vitest";

import { SessionConnection } from "../src/session.js";
import type { ServerFrame } from "../src/protocol.js";

class WebSocketDouble {
  static opened: WebSocketDouble[] = [];
  readyState = 0;
  onopen: ((e: unknown) => void) | null = null;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onclose: ((e: { code: number }) => void) | null = null;
  onerror: ((e: unknown) => void) | null = null;
  sent: string[] = [];
  constructor(public url: string) {
    WebSocketDouble.opened.push(this);
    setTimeout(() => {
      this.readyState = 1;
      this.onopen?.({});
    }, 0);
  }
  send(data: string) {
    this.sent.push(data);
  }
  close() {
    this.readyState = 3;
  }
  /** The server's side: a frame, or a dropped connection. */
  frame(frame: unknown) {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }
  drop() {
    this.readyState = 3;
    this.onclose?.({ code: 1006 });
  }
}

const fetchDouble = (status = 200) =>
  (async () =>
    new Response(JSON.stringify(status === 200 ? { session_id: "s", ticket: "tk", expires_at: "" } : { error: { code: "unauthorized", message: "no" } }), {
      status,
    })) as typeof fetch;

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
const event = (seq: number) => ({ type: "event", seq, kind: "assistant_message", payload: { text: `e${seq}` }, at: "" });

describe("SessionConnection", () => {
  it("resumes after the last delivered seq and delivers each event once", async () => {
    WebSocketDouble.opened = [];
    const conn = new SessionConnection("s", {
      baseUrl: "http://127.0.0.1:1",
      fetch: fetchDouble(),
      WebSocket: WebSocketDouble,
      backoff: { initialMs: 5, maxMs: 10 },
    });
    const seen: number[] = [];
    conn.onFrame((f: ServerFrame) => f.type === "event" && seen.push(f.seq));
    await wait(20);
    const first = WebSocketDouble.opened[0];
    expect(new URL(first.url).searchParams.get("after_seq")).toBe("0");
    expect(new URL(first.url).searchParams.get("ticket")).toBe("tk");
    expect(first.url.startsWith("ws://127.0.0.1:1/v1/sessions/s/ws")).toBe(true);
    first.frame(event(1));
    first.frame(event(2));
    first.drop();
    expect(conn.state).toBe("reconnecting");
    await wait(40);
    const second = WebSocketDouble.opened[1];
    expect(new URL(second.url).searchParams.get("after_seq")).toBe("2");
    // The server sends 2 again (a resume that overlaps), then 3.
    second.frame(event(2));
    second.frame(event(3));
    expect(seen).toEqual([1, 2, 3]);
    expect(conn.lastSeq).toBe(3);
    expect(conn.sendMessage("hi", { clientId: "c1" })).toBe(true);
    expect(JSON.parse(second.sent[0])).toEqual({ type: "user_message", text: "hi", client_id: "c1" });
    conn.close();
    expect(conn.state).toBe("closed");
    expect(conn.sendMessage("late")).toBe(false);
  });

  it("stops for good when the credential is refused", async () => {
    WebSocketDouble.opened = [];
    const states: string[] = [];
    const conn = new SessionConnection("s", { baseUrl: "http://127.0.0.1:1", fetch: fetchDouble(401), WebSocket: WebSocketDouble });
    let refused: string | undefined;
    conn.onState((s, closed) => {
      states.push(s);
      refused = closed?.error?.code;
    });
    await wait(30);
    expect(states).toEqual(["closed"]);
    expect(refused).toBe("unauthorized");
    expect(WebSocketDouble.opened).toHaveLength(0);
  });
});
