// The approvals inbox: every pending approval across sessions, decided over REST. A tool call's
// approval shows its arguments; a budget approval (a model call a key's or a project's budget
// refused) shows the budget, how much more it needs, and the overspend to allow; a guardrail's
// (a tool result an `approve` guardrail holds) shows the verdicts and the result, found text
// marked.

import { useState } from "react";

import type { PendingApproval } from "@stead/client";
import { useApprovals } from "@stead/react";

import { operator } from "../credentials";
import { MarkedResult, Verdicts } from "./Guardrails";

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

function GuardrailApproval({ p, decide }: { p: PendingApproval; decide: (p: PendingApproval, approved: boolean) => void }) {
  const checks = p.held?.checks ?? [];
  return (
    <>
      <p>
        A guardrail holds what <code>{p.tool}</code> returned: the model reads it only if you let it. Rejected, the
        call fails and the model is told why.
      </p>
      <Verdicts checks={checks} />
      <MarkedResult value={p.held?.result} checks={checks} />
      <button type="button" onClick={() => decide(p, true)}>
        Let the model read it
      </button>
      <button type="button" onClick={() => decide(p, false)}>
        Withhold it
      </button>
    </>
  );
}

/** The card's accessible name and its heading's first words, by kind. */
function title(p: PendingApproval) {
  const id = p.session_id.slice(0, 8);
  if (p.kind === "budget") return { label: `Budget approval in ${id}`, head: <strong>Budget</strong> };
  if (p.kind === "guardrail") {
    return {
      label: `Held result in ${id}`,
      head: (
        <>
          <strong>Held result</strong> of <code>{p.tool}</code>
        </>
      ),
    };
  }
  return { label: undefined, head: <code>{p.tool}</code> };
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
          className={`tool awaiting_approval${p.kind === "budget" || p.kind === "guardrail" ? ` ${p.kind}` : ""}`}
          aria-label={title(p).label}
        >
          <header>
            {title(p).head} in{" "}
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
          ) : p.kind === "guardrail" ? (
            <GuardrailApproval p={p} decide={decide} />
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
