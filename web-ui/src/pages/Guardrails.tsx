// What an agent's guardrails said about a tool's result (docs/guardrails.md, "Tool results"):
// each verdict on a line, and the result with what they found marked — the placeholder a
// redaction left, the text an injection check or the operator's patterns found. Used by the
// approvals inbox (a held result) and the session page (every checked result).

import type { GuardrailCheck } from "@stead/client";
import type { ReactNode } from "react";

const PLACEHOLDER = /\[[A-Z][A-Z0-9_]*_\d+\]/g;

const SAID: Record<GuardrailCheck["effect"], string> = {
  pass: "let it pass",
  redact: "redacted",
  block: "blocked it:",
  flag: "flagged",
  approve: "held it for a person:",
};

/** The verdicts that did something (or failed), one per line. */
export function Verdicts({ checks }: { checks: GuardrailCheck[] }) {
  const shown = checks.filter((c) => c.effect !== "pass" || c.outcome === "error");
  if (!shown.length) return null;
  return (
    <ul className="verdicts" aria-label="Guardrail verdicts">
      {shown.map((c) => {
        const entities = [...new Set((c.findings ?? []).map((f) => f.entity))];
        return (
          <li key={c.guardrail} className={`verdict ${c.effect}`}>
            <strong>{c.guardrail}</strong> {c.outcome === "error" ? "could not check it" : SAID[c.effect]}{" "}
            {entities.join(", ")}
            {c.reason ? ` — ${c.reason}` : ""}
          </li>
        );
      })}
    </ul>
  );
}

type Mark = { start: number; end: number; kind: "redacted" | "found" };

/** `value` as indented JSON, placeholders and found text marked. */
export function MarkedResult({ value, checks }: { value: unknown; checks: GuardrailCheck[] }) {
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  const marks: Mark[] = [];
  for (const m of text.matchAll(PLACEHOLDER)) {
    marks.push({ start: m.index ?? 0, end: (m.index ?? 0) + m[0].length, kind: "redacted" });
  }
  const excerpts = new Set(checks.flatMap((c) => (c.findings ?? []).map((f) => f.excerpt ?? "")).filter(Boolean));
  for (const excerpt of excerpts) {
    // As the JSON text writes it.
    const written = typeof value === "string" ? excerpt : JSON.stringify(excerpt).slice(1, -1);
    for (let at = text.indexOf(written); at >= 0; at = text.indexOf(written, at + written.length)) {
      marks.push({ start: at, end: at + written.length, kind: "found" });
    }
  }
  marks.sort((a, b) => a.start - b.start || b.end - a.end);
  const pieces: ReactNode[] = [];
  let at = 0;
  for (const mark of marks) {
    if (mark.start < at) continue; // overlaps an earlier mark
    pieces.push(text.slice(at, mark.start));
    pieces.push(
      <mark key={mark.start} className={mark.kind} data-testid={`guardrail-${mark.kind}`}>
        {text.slice(mark.start, mark.end)}
      </mark>,
    );
    at = mark.end;
  }
  pieces.push(text.slice(at));
  return <pre className="result">{pieces}</pre>;
}
