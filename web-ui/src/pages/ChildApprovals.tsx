// A session tree's approvals on the parent's page: what the session's child sessions (started by
// its `agent` tool calls, and their children) wait for, each with Approve and Reject. The parent's
// session token reaches its descendants (docs/security.md), so the person on the parent's page
// decides a child's call without opening it. The list is read again whenever a child's status
// or the parent's journal moves.

import type { Credentials, PendingApproval } from "@stead/client";
import { useApprovals } from "@stead/react";
import { useEffect } from "react";

export function ChildApprovals({ id, creds, refresh }: { id: string; creds: Credentials; refresh: string }) {
  const tree = useApprovals({ ...creds, sessionId: id, intervalMs: 0 });
  const reload = tree.refresh;
  useEffect(() => {
    void reload();
  }, [reload, refresh]);
  // The session's own approvals are on its tool cards already.
  const items = tree.approvals.filter((a) => a.session_id !== id);
  const error = tree.error;
  const decide = (p: PendingApproval, approved: boolean) =>
    tree.decide(p, approved, approved ? "approved from the parent session" : "rejected from the parent session");

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
