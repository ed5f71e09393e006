// The approvals inbox: every pending approval across sessions, decided over REST.

import type { PendingApproval } from "@stead/client";
import { useApprovals } from "@stead/react";

import { operator } from "../credentials";

export function ApprovalsPage() {
  const { approvals: items, error, decide: decideOne } = useApprovals(operator());
  const decide = (p: PendingApproval, approved: boolean) =>
    decideOne(p, approved, approved ? "approved from the inbox" : "rejected from the inbox");
  return (
    <section aria-labelledby="approvals-title">
      <h1 id="approvals-title">Approvals</h1>
      {error && <p role="alert" className="error">{error}</p>}
      {items.length === 0 && <p>Nothing is waiting for a decision.</p>}
      {items.map((p) => (
        <article key={`${p.session_id}/${p.call_id}`} className="tool awaiting_approval">
          <header>
            <code>{p.tool}</code> in <a href={`#/sessions/${p.session_id}`}>{p.session_id.slice(0, 8)}</a> ({p.agent})
            {p.parent_session_id && (
              <>
                {" "}
                — a sub-agent of <a href={`#/sessions/${p.parent_session_id}`}>{p.parent_session_id.slice(0, 8)}</a>
              </>
            )}
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
