// A run's results and two runs compared (docs/evals.md): `EvalRunPage` follows a run live
// (progress, then each case with its graders' verdicts, the decision diff against the recording
// and a link to its session's replay); `ComparePage` puts two runs side by side — figures, then
// every case with how it flipped, regressions first, each opening both runs' turns next to each
// other. The page notes how long its rows took to render (`data-render-ms`).

import { errorText, evals, type CaseResult, type Comparison, type EvalRun, type Flip, type TurnResult } from "@stead/client";
import { useEffect, useLayoutEffect, useRef, useState } from "react";

import { operator } from "../credentials";

const FLIPS: Record<Flip, string> = {
  regressed: "pass → fail",
  fixed: "fail → pass",
  still_failing: "fail → fail",
  still_passing: "pass → pass",
  only_a: "only in A",
  only_b: "only in B",
};

/** A run's id, short: ids made the same minute share their first characters (UUIDv7), so the
 * random tail is kept too. */
export function shortId(id: string) {
  return `${id.slice(0, 8)}…${id.slice(-4)}`;
}

function percent(x: number) {
  return `${(100 * x).toFixed(1)} %`;
}

function ms(x: number) {
  return x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${Math.round(x)} ms`;
}

function usd(x: number) {
  return `$${x.toFixed(x < 0.01 ? 5 : 3)}`;
}

/** One turn of a case's result: the message, the calls, the reply, the verdicts and the diff. */
function TurnView({ turn }: { turn: TurnResult }) {
  const o = turn.outcome;
  return (
    <div className="turn">
      <p>
        <strong>User:</strong> {turn.user}
      </p>
      {o.calls.map((c, i) => (
        <pre key={i}>
          → {c.tool}({JSON.stringify(c.arguments)})
          {c.approval ? (c.approval.approved ? " · approved" : " · rejected") : ""}
          {c.error ? ` · ${c.error}` : ""}
        </pre>
      ))}
      <p>
        <strong>Reply:</strong> {o.reply || <em>(none)</em>}
      </p>
      <ul className="verdicts">
        {turn.verdicts.map((v, i) => (
          <li key={i} className={v.passed ? "pass" : "fail"}>
            {v.passed ? "✓" : "✗"} {v.grader}
            {v.detail ? ` — ${v.detail}` : ""}
            {v.reasoning ? <em> (judge: {v.reasoning})</em> : null}
          </li>
        ))}
      </ul>
      {turn.diff && turn.diff.length > 0 && (
        <ol className="diff-steps" aria-label="Decisions against the recording">
          {turn.diff.map((s, i) => (
            <li key={i} className={s.kind}>
              {s.kind === "same" ? "same" : s.detail}
            </li>
          ))}
        </ol>
      )}
      {turn.unavailable && turn.unavailable.length > 0 && (
        <p className="fail">Not available in evaluation: {turn.unavailable.join(", ")}</p>
      )}
    </div>
  );
}

function CaseView({ result }: { result: CaseResult }) {
  return (
    <div>
      {result.error && <p className="fail">{result.error}</p>}
      {result.turns.map((t, i) => (
        <TurnView key={i} turn={t} />
      ))}
      {result.session_id && (
        <p>
          <a href={`#/replay/${result.session_id}`}>Replay this case's session</a>
        </p>
      )}
    </div>
  );
}

export function EvalRunPage({ id }: { id: string }) {
  const [run, setRun] = useState<EvalRun | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [open, setOpen] = useState<Set<string>>(new Set());
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const poll = () =>
      evals
        .run(operator(), id)
        .then((r) => {
          if (stopped) return;
          setRun(r);
          if (r.status === "running") timer = setTimeout(poll, 500);
        })
        .catch((e) => setError(errorText(e)));
    poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [id]);
  if (error)
    return (
      <p role="alert" className="error">
        {error}
      </p>
    );
  if (!run) return <p>Loading…</p>;
  const s = run.summary;
  return (
    <section className="evals" aria-labelledby="run-page-title">
      <h1 id="run-page-title">
        Run <code>{shortId(id)}</code> of {run.dataset} v{run.dataset_version}{" "}
        <span className={`status ${run.status}`} data-testid="run-status">
          {run.status}
        </span>
      </h1>
      <div className="run-progress">
        <progress aria-label="Cases done" value={s.done} max={Math.max(s.total, 1)} />
        <span data-testid="run-summary">
          {s.done} / {s.total} done · {s.passed} passed · {s.failed} failed
        </span>
      </div>
      <p className="settings" data-testid="run-settings">
        {Object.entries(run.settings)
          .filter(([, v]) => v !== false && v !== null && v !== undefined)
          .map(([k, v]) => `${k.replace(/_/g, " ")}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
          .join(" · ")}
      </p>
      {run.error && <p className="fail">{run.error}</p>}
      <table className="list">
        <thead>
          <tr>
            <th>Case</th>
            <th>Result</th>
            <th>Latency</th>
            <th>Tokens</th>
            <th>Cost</th>
          </tr>
        </thead>
        <tbody>
          {(run.cases ?? []).map((c) => (
            <CaseRow
              key={c.case_id}
              result={c}
              open={open.has(c.case_id)}
              toggle={() => {
                const next = new Set(open);
                if (!next.delete(c.case_id)) next.add(c.case_id);
                setOpen(next);
              }}
            />
          ))}
        </tbody>
      </table>
    </section>
  );
}

function CaseRow({ result, open, toggle }: { result: CaseResult; open: boolean; toggle: () => void }) {
  return (
    <>
      <tr data-testid="case-result">
        <td>
          <button type="button" className="link" aria-expanded={open} onClick={toggle}>
            {result.name}
          </button>
        </td>
        <td className={result.passed ? "pass" : "fail"}>{result.passed ? "pass" : "fail"}</td>
        <td>{ms(result.latency_ms)}</td>
        <td>{result.tokens}</td>
        <td>{usd(result.cost_usd)}</td>
      </tr>
      {open && (
        <tr>
          <td colSpan={5}>
            <CaseView result={result} />
          </td>
        </tr>
      )}
    </>
  );
}

export function ComparePage({ a, b }: { a: string; b: string }) {
  const [comparison, setComparison] = useState<Comparison | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  const [onlyChanged, setOnlyChanged] = useState(false);
  const arrived = useRef(0);
  const [renderMs, setRenderMs] = useState<number | null>(null);
  useEffect(() => {
    evals
      .compare(operator(), a, b)
      .then((c) => {
        arrived.current = performance.now();
        setComparison(c);
      })
      .catch((e) => setError(errorText(e)));
  }, [a, b]);
  // How long the rows took to render once the comparison arrived (the Playwright test reads it).
  useLayoutEffect(() => {
    if (comparison && renderMs === null) setRenderMs(performance.now() - arrived.current);
  }, [comparison, renderMs]);
  if (error)
    return (
      <p role="alert" className="error">
        {error}
      </p>
    );
  if (!comparison) return <p>Loading…</p>;
  const { a: fa, b: fb } = comparison;
  const rows = onlyChanged
    ? comparison.cases.filter((c) => c.flip === "regressed" || c.flip === "fixed")
    : comparison.cases;
  const figure = (label: string, x: string, y: string) => (
    <tr>
      <td>{label}</td>
      <td>{x}</td>
      <td>{y}</td>
    </tr>
  );
  return (
    <section className="evals" aria-labelledby="compare-title" data-render-ms={renderMs ?? undefined}>
      <h1 id="compare-title">
        Compare <a href={`#/evals/runs/${a}`}>{shortId(a)}</a> (A) with{" "}
        <a href={`#/evals/runs/${b}`}>{shortId(b)}</a> (B)
      </h1>
      <p data-testid="compare-summary">
        <span className="fail">{comparison.regressed} regressed</span> ·{" "}
        <span className="pass">{comparison.fixed} fixed</span> · {comparison.cases.length} cases
      </p>
      <table className="list figures" aria-label="Figures">
        <thead>
          <tr>
            <th />
            <th>A</th>
            <th>B</th>
          </tr>
        </thead>
        <tbody>
          {figure("Pass rate", `${percent(fa.pass_rate)} (${fa.passed}/${fa.cases})`, `${percent(fb.pass_rate)} (${fb.passed}/${fb.cases})`)}
          {figure("Cost", usd(fa.cost_usd), usd(fb.cost_usd))}
          {figure("Tokens", String(fa.tokens), String(fb.tokens))}
          {figure("Latency p50", ms(fa.latency_p50_ms), ms(fb.latency_p50_ms))}
          {figure("Latency p99", ms(fa.latency_p99_ms), ms(fb.latency_p99_ms))}
        </tbody>
      </table>
      <p>
        <label className="inline">
          <input type="checkbox" checked={onlyChanged} onChange={(e) => setOnlyChanged(e.target.checked)} /> Only cases
          that flipped
        </label>
      </p>
      <table className="list" aria-label="Cases">
        <thead>
          <tr>
            <th>Case</th>
            <th>Change</th>
            <th>A</th>
            <th>B</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((c) => (
            <CompareRow
              key={c.case_id}
              name={c.name}
              flip={c.flip}
              a={c.a}
              b={c.b}
              open={open === c.case_id}
              toggle={() => setOpen(open === c.case_id ? null : c.case_id)}
            />
          ))}
        </tbody>
      </table>
    </section>
  );
}

function verdict(r?: CaseResult) {
  if (!r) return <td>—</td>;
  return <td className={r.passed ? "pass" : "fail"}>{r.passed ? "pass" : "fail"}</td>;
}

function CompareRow(props: {
  name: string;
  flip: Flip;
  a?: CaseResult;
  b?: CaseResult;
  open: boolean;
  toggle: () => void;
}) {
  return (
    <>
      <tr data-testid="compare-row">
        <td>
          <button type="button" className="link" aria-expanded={props.open} onClick={props.toggle}>
            {props.name}
          </button>
        </td>
        <td>
          <span className={`flip ${props.flip}`}>{FLIPS[props.flip]}</span>
        </td>
        {verdict(props.a)}
        {verdict(props.b)}
      </tr>
      {props.open && (
        <tr>
          <td colSpan={4}>
            <div className="side-by-side" data-testid="side-by-side">
              <div>
                <h3>A</h3>
                {props.a ? <CaseView result={props.a} /> : <p>Not in run A.</p>}
              </div>
              <div>
                <h3>B</h3>
                {props.b ? <CaseView result={props.b} /> : <p>Not in run B.</p>}
              </div>
            </div>
          </td>
        </tr>
      )}
    </>
  );
}
