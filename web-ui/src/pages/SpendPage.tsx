// A project's spend (docs/tenancy.md, "Spend"): what its keys and their sessions spent over
// time (a uPlot chart), by key, route, model and a metadata entry, its costliest sessions, and
// its budgets with the share left. The installation's keys pick any project; a project's admin
// key sees its own.

import { useEffect, useState } from "react";
import type uPlot from "uplot";

import { api, ApiError, type ProjectView, type SpendLine, type SpendReport } from "@stead/client";

import { operator } from "../credentials";
import { Chart } from "./GatewayPage";

function usd(amount: number): string {
  return amount === 0 ? "$0" : amount >= 0.01 ? `$${amount.toFixed(2)}` : `$${amount.toPrecision(2)}`;
}

function Lines({ title, lines, link }: { title: string; lines: SpendLine[]; link?: (name: string) => string }) {
  return (
    <table className="list spend" aria-label={title}>
      <thead>
        <tr>
          <th>{title}</th>
          <th>Cost</th>
          <th>Requests</th>
          <th>Tokens in / out</th>
        </tr>
      </thead>
      <tbody>
        {lines.length === 0 && (
          <tr>
            <td colSpan={4}>Nothing spent.</td>
          </tr>
        )}
        {lines.map((l) => (
          <tr key={l.name ?? "-"}>
            <td>{l.name === null ? "—" : link ? <a href={link(l.name)}>{l.name.slice(0, 8)}</a> : l.name}</td>
            <td>{usd(l.cost)}</td>
            <td>{l.requests}</td>
            <td>
              {l.tokens_in} / {l.tokens_out}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** What the installation allows the project: its agents and routes (docs/tenancy.md). */
function Grants({ project }: { project: ProjectView }) {
  const list = (items: string[] | null) => (items === null ? "all" : items.length ? items.join(", ") : "none");
  return (
    <p data-testid="project-grants" className="hint">
      Allowed agents: {list(project.agents)} · routes: {list(project.routes)}
    </p>
  );
}

export function SpendPage() {
  const [projects, setProjects] = useState<ProjectView[]>([]);
  const [project, setProject] = useState("");
  const [days, setDays] = useState("30");
  const [group, setGroup] = useState("");
  const [report, setReport] = useState<SpendReport | null>(null);
  const [error, setError] = useState<string | null>(null);
  const show = (e: unknown) => setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
  useEffect(() => {
    api
      .projects(operator())
      .then((page) => {
        const names = page.projects.map((p) => p.name);
        setProjects(page.projects);
        // A project's own key sees one project; the installation starts at its first named one.
        setProject((current) => current || names.find((n) => n !== "default") || names[0] || "");
      })
      .catch(show);
  }, []);
  const load = () => {
    if (!project) return;
    const query: Record<string, string> = { days };
    if (group.trim()) query.group_by = `metadata.${group.trim()}`;
    api
      .spend(operator(), project, query)
      .then((r) => {
        setReport(r);
        setError(null);
      })
      .catch(show);
  };
  // eslint-disable-next-line react-hooks/exhaustive-deps
  useEffect(load, [project]);
  const chart: uPlot.AlignedData | null = report
    ? [report.over_time.map((p) => new Date(p.at).getTime() / 1000), report.over_time.map((p) => p.cost)]
    : null;
  return (
    <section aria-labelledby="spend-title">
      <h1 id="spend-title">Spend</h1>
      <form
        className="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          load();
        }}
      >
        <label>
          Project
          <select value={project} onChange={(e) => setProject(e.target.value)}>
            {projects.map((p) => (
              <option key={p.name}>{p.name}</option>
            ))}
          </select>
        </label>
        <label>
          Days
          <input type="number" min="1" max="366" value={days} onChange={(e) => setDays(e.target.value)} />
        </label>
        <label>
          Group by metadata key
          <input value={group} onChange={(e) => setGroup(e.target.value)} placeholder="customer" />
        </label>
        <button type="submit">Show</button>
      </form>
      {error && <p role="alert" className="error">{error}</p>}
      {projects
        .filter((p) => p.name === project)
        .map((p) => (
          <Grants key={p.id} project={p} />
        ))}
      {report && (
        <>
          <p data-testid="spend-total">
            <strong>{usd(report.total.cost)}</strong> in {report.total.requests} call
            {report.total.requests === 1 ? "" : "s"} over the last {days} days
          </p>
          <h2>Budgets</h2>
          {report.budgets.length === 0 && <p>No budgets.</p>}
          {report.budgets.map((b) => (
            <div key={b.name} className="budget-left" data-testid="budget-left">
              <span>{b.name}</span>
              <meter min={0} max={1} low={0.2} high={0.5} optimum={1} value={b.remaining_share ?? 0} />
              <span>
                {usd(b.spent)} of {usd(b.usd)}
                {b.period_secs ? ` per ${Math.round(b.period_secs / 86400)} day(s)` : " in all"} —{" "}
                {b.remaining_share === null ? "none" : `${Math.round(b.remaining_share * 100)} %`} left
              </span>
            </div>
          ))}
          {chart && <Chart title="Cost over time (USD)" data={chart} series={["cost"]} />}
          <div className="spend-grid">
            <Lines title="Key" lines={report.by_key} />
            <Lines title="Route" lines={report.by_route} />
            <Lines title="Model" lines={report.by_model} />
            {group.trim() && <Lines title={`metadata.${group.trim()}`} lines={report.by_metadata} />}
            <Lines title="Costliest sessions" lines={report.top_sessions} link={(id) => `#/sessions/${id}`} />
          </div>
        </>
      )}
    </section>
  );
}
