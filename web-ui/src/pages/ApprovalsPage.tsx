// The approvals inbox: every pending approval across sessions, decided over REST. A tool call's
// approval shows its arguments; a budget approval (a model call a key's or a project's budget
// refused) shows the budget, how much more it needs, and the overspend to allow.

import { useState } from "react";

import type { PendingApproval } from "@stead/client";
import { useApprovals } from "@stead/react";

import { operator } from "../credentials";

type Decide = (p: PendingApproval, approved: boolean, reason?: string, overspendUsd?: number) => Promise<void>;

/** Dollars as people read them: cents, or more digits for sub-cent amounts. */
function usd(amount: number): string {
  return amount >= 0.01 ? `$${amount.toFixed(2)}` : `$${amount.toPrecision(2)}`;
}

function BudgetApproval({ p, decide }: { p: PendingApproval; decide: Decide }) {
  const needed = p.budget?.needed_usd ?? 0;
  // The shortfall rounded up to the cent: what lets this one call through.
  const [allow, setAllow] = useState((Math.ceil(needed * 100) / 100).toFixed(2));
  const amount = Number(allow);
  const valid = allow.trim() !== "" && Number.isFinite(amount) && amount >= 0;
  return (
    <>
      <p>
        The budget of <strong>{p.budget?.name}</strong> is spent: the next model call needs up to{" "}
        <strong data-testid="needed-usd">{usd(needed)}</strong> more. Allow a one-off overspend to let the turn
        continue where it stopped, or reject to end the turn.
      </p>
      <p className="reason">{p.reason}</p>
      <label>
        Overspend allowed (USD)
        <input
          type="number"
          min="0"
          step="0.01"
          value={allow}
          onChange={(e) => setAllow(e.target.value)}
          aria-invalid={!valid}
        />
      </label>
      <button type="button" disabled={!valid} onClick={() => decide(p, true, "overspend approved from the inbox", amount)}>
        Approve overspend
      </button>
      <button type="button" onClick={() => decide(p, false, "overspend rejected from the inbox")}>
        Reject
      </button>
    </>
  );
}

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
        <article
          key={`${p.session_id}/${p.call_id}`}
          className={`tool awaiting_approval${p.kind === "budget" ? " budget" : ""}`}
          aria-label={p.kind === "budget" ? `Budget approval in ${p.session_id.slice(0, 8)}` : undefined}
        >
          <header>
            {p.kind === "budget" ? <strong>Budget</strong> : <code>{p.tool}</code>} in{" "}
            <a href={`#/sessions/${p.session_id}`}>{p.session_id.slice(0, 8)}</a> ({p.agent})
            {p.parent_session_id && (
              <>
                {" "}
                — a sub-agent of <a href={`#/sessions/${p.parent_session_id}`}>{p.parent_session_id.slice(0, 8)}</a>
              </>
            )}
          </header>
          {p.kind === "budget" ? (
            <BudgetApproval p={p} decide={decideOne} />
          ) : (
            <>
              <pre>{JSON.stringify(p.arguments, null, 2)}</pre>
              <p>{p.reason}</p>
              <button type="button" onClick={() => decide(p, true)}>
                Approve
              </button>
              <button type="button" onClick={() => decide(p, false)}>
                Reject
              </button>
            </>
          )}
        </article>
      ))}
    </section>
  );
}
