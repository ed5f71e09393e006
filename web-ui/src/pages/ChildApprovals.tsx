// A session tree's approvals on the parent's page: what the session's child sessions (started by
// its `agent` tool calls, and their children) wait for, each with Approve and Reject. The parent's
// session token reaches its descendants (docs/security.md), so the person on the parent's page
// decides a child's call without opening it. The list is read again whenever a child's status
// or the parent's journal moves.

import { useCallback, useEffect, useState } from "react";

import { api, ApiError, type Credentials, type PendingApproval } from "../api";

export function ChildApprovals({ id, creds, refresh }: { id: string; creds: Credentials; refresh: string }) {
  const [items, setItems] = useState<PendingApproval[]>([]);
  const [error, setError] = useState<string | null>(null);

  const load = useCallback(async () => {
    try {
      const { approvals } = await api.treeApprovals(creds, id);
      // The session's own approvals are on its tool cards already.
      setItems(approvals.filter((a) => a.session_id !== id));
      setError(null);
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
    // The credential's identity, not the object, decides when to read again.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [id, creds.bearer, creds.baseUrl]);

  useEffect(() => {
    void load();
  }, [load, refresh]);

  const decide = async (p: PendingApproval, approved: boolean) => {
    try {
      await api.decide(creds, p, approved, approved ? "approved from the parent session" : "rejected from the parent session");
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
    void load();
  };

  if (items.length === 0 && !error) return null;
  return (
    <section className="child-approvals" aria-labelledby="child-approvals-title">
      <h2 id="child-approvals-title">Sub-agents waiting for you</h2>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {items.map((p) => (
        <article
          key={`${p.session_id}/${p.call_id}`}
          className="tool awaiting_approval"
          aria-label={`Approval for ${p.tool} in ${p.agent}`}
        >
          <header>
            <code>{p.tool}</code> in the sub-agent <strong>{p.agent}</strong> (
            <a href={`#/sessions/${p.session_id}`}>{p.session_id.slice(0, 8)}</a>)
          </header>
          <pre>{JSON.stringify(p.arguments, null, 2)}</pre>
          <p>{p.reason}</p>
          <button type="button" onClick={() => decide(p, true)}>
            Approve
          </button>
          <button type="button" onClick={() => decide(p, false)}>
            Reject
          </button>
        </article>
      ))}
    </section>
  );
}
