// @stead/client against a running `stead serve` (driven by tests/e2e/clients.rs, whose model is a
// scripted upstream double: a `clock` call that needs approval, then "It is noon."). Node, with
// the `ws` package as the WebSocket (Node before 22 has none). Prints one JSON line per check.
//
//   node test/live.mjs http://127.0.0.1:PORT OPERATOR_KEY

import { isDeepStrictEqual } from "node:util";

import { api, SessionConnection } from "@stead/client";
import WebSocket from "ws";

const [base, key] = process.argv.slice(2);
const operator = { baseUrl: base, bearer: key };
const check = (name, ok, detail = {}) => {
  console.log(JSON.stringify({ check: name, ok, ...detail }));
  if (!ok) process.exitCode = 1;
};
const until = (conn, predicate, ms = 30000) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timed out")), ms);
    const off = conn.onFrame((frame) => {
      if (predicate(frame)) {
        clearTimeout(timer);
        off();
        resolve(frame);
      }
    });
  });

check("node", true, { version: process.version });
const created = await api.createSession(operator, "ops", { from: "live.mjs" });
check("create", typeof created.token === "string" && created.status === "idle");
// From here on the session's own token only, as a browser app would hold.
const mine = { baseUrl: base, bearer: created.token };
try {
  await api.listSessions(mine);
  check("token is scoped to its session", false);
} catch (e) {
  check("token is scoped to its session", e.status === 403 || e.status === 401, { status: e.status });
}

const seen = [];
let conn = new SessionConnection(created.id, { ...mine, WebSocket });
conn.onFrame((f) => f.type === "event" && seen.push(f));
await until(conn, (f) => f.type === "hello");
conn.sendMessage("What time is it?", { clientId: "live-1" });
const asked = await until(conn, (f) => f.type === "event" && f.kind === "approval_requested");
check("approval requested", asked.payload.call_id !== undefined);

// Drop the connection and open another, resuming after what was delivered.
const resumeFrom = conn.lastSeq;
conn.close();
conn = new SessionConnection(created.id, { ...mine, WebSocket, afterSeq: resumeFrom });
conn.onFrame((f) => f.type === "event" && seen.push(f));
await until(conn, (f) => f.type === "hello");
conn.approve(asked.payload.call_id, { argsHash: asked.payload.args_hash });
await until(conn, (f) => f.type === "event" && f.kind === "turn_finished");
conn.close();

const seqs = seen.map((e) => e.seq);
check(
  "every event once, in order, across the reconnect",
  seqs.every((s, i) => s === i + 1),
  { seqs },
);
const journal = [];
for (let after = 0; ; ) {
  const page = await api.events(mine, created.id, after, 1000);
  journal.push(...page.events);
  if (page.events.length === 0 || journal.at(-1).seq >= page.last_seq) break;
  after = journal.at(-1).seq;
}
// By value (key order aside): each frame, less its `type`, is the journal's event.
const differing = seen.map(({ type, ...e }) => e).filter((e, i) => !isDeepStrictEqual(e, journal[i]));
check("frames equal the journal by value", differing.length === 0 && journal.length === seen.length, {
  frames: seen.length,
  journal: journal.length,
  differing: differing.map((e) => [e, journal.find((j) => j.seq === e.seq)]),
});
check("the tool ran", journal.some((e) => e.kind === "tool_call_finished"));

const outcome = await api.sendMessageAndWait(mine, created.id, "And now?");
check("REST message and wait", outcome.status === "idle" && typeof outcome.reply === "string", { outcome });

try {
  await api.decide(mine, { session_id: created.id, call_id: "nope", args_hash: "x" }, true, "x");
  check("bad decision refused", false);
} catch (e) {
  check("bad decision refused", e.status >= 400 && e.status < 500 && typeof e.code === "string", { code: e.code });
}
await api.closeSession(mine, created.id);
check("closed", (await api.getSession(mine, created.id)).status === "closed");
