// The approvals inbox: every pending approval across sessions, decided over REST.

import { useCallback, useEffect, useState } from "react";

import { api, ApiError, call } from "../api";
import { operator } from "../credentials";

interface Pending {
  session_id: string;
  agent: string;
  call_id: string;
  tool: string;
  arguments: unknown;
  args_hash: string;
  reason: string;
}

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
      await call(operator(), "POST", `/v1/sessions/${p.session_id}/approvals/${p.call_id}`, {
        approved,
        reason: approved ? "approved from the inbox" : "rejected from the inbox",
        args_hash: p.args_hash,
      });
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
