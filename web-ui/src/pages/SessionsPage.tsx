// Sessions: list with filters (agent, status), a badge for pending approvals, create a session
// for an agent, close one.

import { api, errorText } from "@stead/client";
import { useApprovals, useSessions } from "@stead/react";
import { useEffect, useState } from "react";

import { forgetTokens, operator, rememberToken } from "../credentials";

const STATUSES = ["", "idle", "running", "awaiting_approval", "failed", "closed"];

export function SessionsPage() {
  const [agents, setAgents] = useState<string[]>([]);
  const [agent, setAgent] = useState("");
  const [status, setStatus] = useState("");
  const [newAgent, setNewAgent] = useState("");
  const [actionError, setActionError] = useState<string | null>(null);
  const list = useSessions({ ...operator(), agent, status });
  const inbox = useApprovals({ ...operator(), intervalMs: 3000 });
  const sessions = list.sessions;
  const error = actionError ?? list.error ?? inbox.error;
  const pending: Record<string, number> = {};
  for (const a of inbox.approvals) pending[a.session_id] = (pending[a.session_id] ?? 0) + 1;

  useEffect(() => {
    // A closed or failed session's token is of no more use: do not keep it.
    forgetTokens(sessions.filter((s) => s.status === "closed" || s.status === "failed").map((s) => s.id));
  }, [sessions]);
  useEffect(() => {
    api
      .agents(operator())
      .then((r) => {
        const names = r.agents.map((a) => a.name);
        setAgents(names);
        setNewAgent((current) => current || names[0] || "");
      })
      .catch(() => undefined);
  }, []);

  const create = async () => {
    try {
      const created = await list.create(newAgent);
      rememberToken(created.id, created.token, created.token_expires_at);
      window.location.hash = `#/sessions/${created.id}`;
    } catch (e) {
      setActionError(errorText(e));
    }
  };
  const close = async (id: string) => {
    await list.close(id).catch(() => undefined);
    forgetTokens([id]);
  };

  return (
    <section aria-labelledby="sessions-title">
      <h1 id="sessions-title">Sessions</h1>
      <div className="toolbar">
        <label>
          New session for
          <select value={newAgent} onChange={(e) => setNewAgent(e.target.value)}>
            {agents.map((a) => (
              <option key={a}>{a}</option>
            ))}
          </select>
        </label>
        <button type="button" onClick={create} disabled={!newAgent}>
          Create session
        </button>
        <label>
          Agent
          <select value={agent} onChange={(e) => setAgent(e.target.value)}>
            <option value="">all</option>
            {agents.map((a) => (
              <option key={a}>{a}</option>
            ))}
          </select>
        </label>
        <label>
          Status
          <select value={status} onChange={(e) => setStatus(e.target.value)}>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s || "all"}
              </option>
            ))}
          </select>
        </label>
      </div>
      {error && <p role="alert" className="error">{error}</p>}
      <table className="list">
        <thead>
          <tr>
            <th>Session</th>
            <th>Agent</th>
            <th>Status</th>
            <th>Steps</th>
            <th>Updated</th>
            <th>
              <span className="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {sessions.map((s) => (
            <tr key={s.id} data-session={s.id}>
              <td>
                <a href={`#/sessions/${s.id}`}>{s.id.slice(0, 8)}</a>
                {pending[s.id] ? (
                  <span className="badge" aria-label={`${pending[s.id]} pending approvals`}>
                    {pending[s.id]}
                  </span>
                ) : null}
              </td>
              <td>{s.agent}</td>
              <td>
                <span className={`status ${s.status}`}>{s.status}</span>
              </td>
              <td>{s.last_seq}</td>
              <td>{new Date(s.updated_at).toLocaleTimeString()}</td>
              <td>
                {s.status !== "closed" && (
                  <button type="button" onClick={() => close(s.id)} aria-label={`Close session ${s.id.slice(0, 8)}`}>
                    Close
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
