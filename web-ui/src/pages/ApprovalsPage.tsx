// The approvals inbox: every pending approval across sessions, decided over REST.

import { useCallback, useEffect, useState } from "react";

import { api, ApiError, type PendingApproval } from "../api";
import { operator } from "../credentials";

type Pending = PendingApproval;

export function ApprovalsPage() {
  const [items, setItems] = useState<Pending[]>([]);
  const [error, setError] = useState<string | null>(null);
  const load = useCallback(async () => {
    try {
      setItems((await api.pendingApprovals(operator())).approvals as Pending[]);
      setError(null);
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
  }, []);
  useEffect(() => {
    load();
    const timer = setInterval(load, 2000);
    return () => clearInterval(timer);
  }, [load]);
  const decide = async (p: Pending, approved: boolean) => {
    try {
      await api.decide(operator(), p, approved, approved ? "approved from the inbox" : "rejected from the inbox");
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
    load();
  };
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
