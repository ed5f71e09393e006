// The audit trail (docs/audit.md): who did what, when and from where — newest first, filtered
// by actor and action, a page at a time. The installation's keys see every project's acts, a
// project's admin key its project's.

import { useEffect, useState } from "react";

import { api, type AuditEntry } from "@stead/client";

import { operator } from "../credentials";

/** The facts a handler added, as `name=value` pairs. */
function facts(details: Record<string, unknown>): string {
  return Object.entries(details)
    .filter(([, v]) => v !== null && v !== undefined)
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(" ");
}

export function AuditPage() {
  const [actor, setActor] = useState("");
  const [action, setAction] = useState("");
  const [entries, setEntries] = useState<AuditEntry[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const load = async (before?: string) => {
    const query: Record<string, string> = { limit: "50" };
    if (actor.trim()) query.actor = actor.trim();
    if (action.trim()) query.action = action.trim();
    if (before) query.before = before;
    try {
      const page = await api.audit(operator(), query);
      setEntries((shown) => (before ? [...shown, ...page.entries] : page.entries));
      setNext(page.next_cursor);
      setError(null);
    } catch (e) {
      setError(String(e instanceof Error ? e.message : e));
    }
  };
  useEffect(() => {
    void load();
    // Loaded once; the filters apply on "Filter".
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);
  return (
    <section aria-labelledby="audit-title">
      <h1 id="audit-title">Audit trail</h1>
      <form
        className="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          void load();
        }}
      >
        <label>
          Actor
          <input value={actor} onChange={(e) => setActor(e.target.value)} placeholder="project_key:…" />
        </label>
        <label>
          Action
          <input value={action} onChange={(e) => setAction(e.target.value)} placeholder="POST /v1/projects" />
        </label>
        <button type="submit">Filter</button>
      </form>
      {error && <p role="alert" className="error">{error}</p>}
      {entries.length === 0 && !error && <p>No acts recorded.</p>}
      {entries.length > 0 && (
        <table className="list audit" data-testid="audit">
          <thead>
            <tr>
              <th>When</th>
              <th>Actor</th>
              <th>Action</th>
              <th>Target</th>
              <th>Status</th>
              <th>From</th>
              <th>Details</th>
            </tr>
          </thead>
          <tbody>
            {entries.map((e) => (
              <tr key={e.id}>
                <td>{new Date(e.at).toLocaleString()}</td>
                <td>
                  <code>{e.actor}</code>
                </td>
                <td>{e.action}</td>
                <td>
                  <code>{e.target}</code>
                </td>
                <td>{e.status}</td>
                <td>{e.source ?? "—"}</td>
                <td>{facts(e.details)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {next && (
        <button type="button" onClick={() => void load(next)}>
          Older acts
        </button>
      )}
    </section>
  );
}
