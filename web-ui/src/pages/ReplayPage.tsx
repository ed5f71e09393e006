// The replay debugger: the journal as a timeline (kind, time, duration, tokens, cost), a slider
// and step buttons to any seq with the state rebuilt there (`state?at=N`), a diff between two
// steps, and "fork from here" with another route or system prompt, opening the fork.

import { useEffect, useMemo, useState } from "react";

import { api, ApiError } from "@stead/client";
import { operator, rememberToken, sessionToken } from "../credentials";
import { diff } from "../diff";
import type { JournalEvent } from "@stead/client";

function creds(id: string) {
  const token = sessionToken(id);
  return token ? { bearer: token } : operator();
}

export function ReplayPage({ id }: { id: string }) {
  const [events, setEvents] = useState<JournalEvent[]>([]);
  const [at, setAt] = useState(1);
  const [compareTo, setCompareTo] = useState<number | null>(null);
  const [state, setState] = useState<unknown>(null);
  const [other, setOther] = useState<unknown>(null);
  const [routes, setRoutes] = useState<string[]>([]);
  const [route, setRoute] = useState("");
  const [prompt, setPrompt] = useState("");
  const [error, setError] = useState<string | null>(null);
  // Set when retention compacted the journal: steps up to here are summarized, not kept.
  const [compacted, setCompacted] = useState<number | null>(null);

  useEffect(() => {
    (async () => {
      try {
        const all: JournalEvent[] = [];
        let after = 0;
        for (;;) {
          const page = await api.events(creds(id), id, after, 1000);
          setCompacted(page.compacted_through ?? null);
          all.push(...page.events);
          if (page.events.length === 0 || all[all.length - 1].seq >= page.last_seq) break;
          after = all[all.length - 1].seq;
        }
        setEvents(all);
        setAt(all.length ? all[all.length - 1].seq : 1);
      } catch (e) {
        setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
      }
    })();
    api.models(operator()).then((m) => setRoutes(m.data.map((d) => d.id))).catch(() => undefined);
  }, [id]);

  useEffect(() => {
    if (compacted !== null && !events.length) setAt(compacted);
  }, [compacted, events.length]);
  useEffect(() => {
    if (!events.length && compacted === null) return;
    api.stateAt(creds(id), id, at).then((s) => setState(s.state)).catch(() => undefined);
  }, [id, at, events.length, compacted]);
  useEffect(() => {
    if (compareTo === null) return setOther(null);
    api.stateAt(creds(id), id, compareTo).then((s) => setOther(s.state)).catch(() => undefined);
  }, [id, compareTo]);

  // Durations: from a step to the next; tokens and cost from finished model calls.
  const rows = useMemo(
    () =>
      events.map((e, i) => {
        const next = events[i + 1];
        const ms = next ? new Date(next.at).getTime() - new Date(e.at).getTime() : 0;
        const p = e.payload as Record<string, any>;
        const tokens = p.usage ? p.usage.prompt_tokens + p.usage.completion_tokens : null;
        return { e, ms, tokens, cost: typeof p.cost === "number" ? p.cost : null };
      }),
    [events],
  );
  const last = events.length ? events[events.length - 1].seq : compacted ?? 1;
  const first = compacted ?? 1;
  const changes = other !== null ? diff(other, state) : [];

  const fork = async () => {
    try {
      const overrides: { route?: string; system_prompt?: string } = {};
      if (route) overrides.route = route;
      if (prompt) overrides.system_prompt = prompt;
      const forked = await api.fork(operator(), id, at, overrides);
      rememberToken(forked.id, forked.token, forked.token_expires_at);
      window.location.hash = `#/sessions/${forked.id}`;
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
  };

  return (
    <section aria-labelledby="replay-title" className="replay">
      <h1 id="replay-title">
        Replay <a href={`#/sessions/${id}`}><code>{id.slice(0, 8)}</code></a>
      </h1>
      {error && <p role="alert" className="error">{error}</p>}
      {compacted !== null && (
        <p role="status">
          The journal was compacted through step {compacted}: earlier steps are summarized, not kept, so
          the timeline starts after it and the state is shown from step {compacted} on.
        </p>
      )}
      <div className="toolbar">
        <button type="button" onClick={() => setAt(Math.max(first, at - 1))} disabled={at <= first} aria-label="Previous step">
          ◀
        </button>
        <label className="grow">
          Step {at} of {last}
          <input
            type="range"
            min={first}
            max={last}
            value={at}
            onChange={(e) => setAt(Number(e.target.value))}
            aria-label="Step"
            data-testid="replay-slider"
          />
        </label>
        <button type="button" onClick={() => setAt(Math.min(last, at + 1))} disabled={at >= last} aria-label="Next step">
          ▶
        </button>
        <label>
          Compare with step
          <input
            type="number"
            min={1}
            max={last}
            value={compareTo ?? ""}
            onChange={(e) => setCompareTo(e.target.value ? Number(e.target.value) : null)}
          />
        </label>
      </div>
      <div className="columns">
        <table className="list timeline">
          <thead>
            <tr>
              <th>Seq</th>
              <th>Kind</th>
              <th>Time</th>
              <th>Duration</th>
              <th>Tokens</th>
              <th>Cost</th>
            </tr>
          </thead>
          <tbody>
            {rows.map(({ e, ms, tokens, cost }) => (
              <tr key={e.seq} aria-selected={e.seq === at} className={e.seq === at ? "current" : e.seq > at ? "future" : ""}>
                <td>
                  <button type="button" onClick={() => setAt(e.seq)} aria-label={`Go to step ${e.seq}`}>
                    {e.seq}
                  </button>
                </td>
                <td>{e.kind}</td>
                <td>{new Date(e.at).toLocaleTimeString()}</td>
                <td>{ms ? `${ms} ms` : ""}</td>
                <td>{tokens ?? ""}</td>
                <td>{cost ? cost.toFixed(6) : ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
        <div>
          <h2>State at step {at}</h2>
          <pre className="state" data-testid="replay-state">{JSON.stringify(state, null, 2)}</pre>
          {compareTo !== null && (
            <>
              <h2>
                Changes from step {compareTo} to {at}
              </h2>
              <ul className="diff">
                {changes.map((c) => (
                  <li key={c.path}>
                    <code>{c.path}</code>: {JSON.stringify(c.before) ?? "—"} → {JSON.stringify(c.after) ?? "—"}
                  </li>
                ))}
              </ul>
            </>
          )}
          <h2>Fork from step {at}</h2>
          <div className="toolbar">
            <label>
              Route
              <select value={route} onChange={(e) => setRoute(e.target.value)}>
                <option value="">same</option>
                {routes.map((r) => (
                  <option key={r}>{r}</option>
                ))}
              </select>
            </label>
            <label className="grow">
              System prompt
              <input value={prompt} onChange={(e) => setPrompt(e.target.value)} placeholder="same" />
            </label>
            <button type="button" onClick={fork}>
              Fork from here
            </button>
          </div>
        </div>
      </div>
    </section>
  );
}
