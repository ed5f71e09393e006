// Evaluations (docs/evals.md): `#/evals` lists the datasets and the runs, starts a run of a
// dataset (route, system prompt, tools, approvals, judge, concurrency) and picks two runs to
// compare (`EvalResults.tsx` has a run's page and the comparison).

import { api, errorText, evals, type Dataset, type EvalRun, type NewRun } from "@stead/client";
import { useEffect, useState } from "react";

import { operator } from "../credentials";
import { shortId } from "./EvalResults";

/** The configured routes as a select's options. */
function RouteOptions({ routes }: { routes: string[] }) {
  return (
    <>
      {routes.map((r) => (
        <option key={r} value={r}>
          {r}
        </option>
      ))}
    </>
  );
}

export function EvalsPage() {
  const [datasets, setDatasets] = useState<Dataset[]>([]);
  const [runs, setRuns] = useState<EvalRun[]>([]);
  const [routes, setRoutes] = useState<string[]>([]);
  const [picked, setPicked] = useState<string[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [form, setForm] = useState({
    dataset: "",
    route: "",
    system_prompt: "",
    tools: "replay",
    approvals: "reject",
    judge_route: "",
    concurrency: "4",
  });
  const load = () =>
    Promise.all([evals.datasets(operator()), evals.runs(operator())])
      .then(([d, r]) => {
        setDatasets(d.datasets);
        setRuns(r.runs);
        setForm((f) => (f.dataset || !d.datasets.length ? f : { ...f, dataset: d.datasets[0].name }));
      })
      .catch((e) => setError(errorText(e)));
  useEffect(() => {
    load();
    api
      .models(operator())
      .then((m) => setRoutes(m.data.map((d) => d.id)))
      .catch(() => undefined);
    // Runs move while they run.
    const timer = setInterval(load, 2000);
    return () => clearInterval(timer);
  }, []);
  const set = (key: keyof typeof form) => (e: { target: { value: string } }) =>
    setForm({ ...form, [key]: e.target.value });
  return (
    <section className="evals" aria-labelledby="evals-title">
      <h1 id="evals-title">Evaluations</h1>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      <section aria-labelledby="datasets-title">
        <h2 id="datasets-title">Datasets</h2>
        {datasets.length === 0 ? (
          <p>No dataset yet: open a session and use “Add to dataset” on a user message, or `stead eval dataset add`.</p>
        ) : (
          <table className="list">
            <thead>
              <tr>
                <th>Name</th>
                <th>Cases</th>
                <th>Version</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {datasets.map((d) => (
                <tr key={d.name}>
                  <td>{d.name}</td>
                  <td>{d.cases}</td>
                  <td>{d.version}</td>
                  <td>{new Date(d.updated_at).toLocaleString()}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </section>
      <section aria-labelledby="run-title">
        <h2 id="run-title">Run a dataset</h2>
        <form
          className="toolbar"
          onSubmit={async (e) => {
            e.preventDefault();
            setError(null);
            const run: NewRun = {
              dataset: form.dataset,
              tools: form.tools as NewRun["tools"],
              approvals: form.approvals as NewRun["approvals"],
              concurrency: Number(form.concurrency) || 1,
              ...(form.route ? { route: form.route } : {}),
              ...(form.system_prompt.trim() ? { system_prompt: form.system_prompt } : {}),
              ...(form.judge_route ? { judge_route: form.judge_route } : {}),
            };
            try {
              const started = await evals.startRun(operator(), run);
              window.location.hash = `#/evals/runs/${started.id}`;
            } catch (err) {
              setError(errorText(err));
            }
          }}
        >
          <label>
            Dataset
            <select aria-label="Dataset" value={form.dataset} onChange={set("dataset")}>
              {datasets.map((d) => (
                <option key={d.name} value={d.name}>
                  {d.name}
                </option>
              ))}
            </select>
          </label>
          <label>
            Route
            <select aria-label="Route" value={form.route} onChange={set("route")}>
              <option value="">the agent's own</option>
              <RouteOptions routes={routes} />
            </select>
          </label>
          <label>
            Tools
            <select aria-label="Tools" value={form.tools} onChange={set("tools")}>
              <option value="replay">replay (recorded results)</option>
              <option value="live">live</option>
            </select>
          </label>
          <label>
            Unrecorded approvals
            <select aria-label="Unrecorded approvals" value={form.approvals} onChange={set("approvals")}>
              <option value="reject">reject</option>
              <option value="approve">approve</option>
              <option value="fail">fail the case</option>
            </select>
          </label>
          <label>
            Judge route
            <select aria-label="Judge route" value={form.judge_route} onChange={set("judge_route")}>
              <option value="">none</option>
              <RouteOptions routes={routes} />
            </select>
          </label>
          <label>
            Concurrency
            <input aria-label="Concurrency" type="number" min={1} max={64} value={form.concurrency} onChange={set("concurrency")} />
          </label>
          <label className="grow">
            System prompt (optional)
            <textarea rows={1} value={form.system_prompt} onChange={set("system_prompt")} />
          </label>
          <button type="submit" disabled={!form.dataset}>
            Start run
          </button>
        </form>
      </section>
      <section aria-labelledby="runs-title">
        <h2 id="runs-title">Runs</h2>
        <div className="toolbar">
          <button
            type="button"
            disabled={picked.length !== 2}
            onClick={() => (window.location.hash = `#/evals/compare/${picked[0]}/${picked[1]}`)}
          >
            Compare the two picked runs
          </button>
        </div>
        <table className="list">
          <thead>
            <tr>
              <th>Pick</th>
              <th>Run</th>
              <th>Dataset</th>
              <th>Route</th>
              <th>Status</th>
              <th>Passed</th>
              <th>Started</th>
            </tr>
          </thead>
          <tbody>
            {runs.map((r) => (
              <tr key={r.id} data-testid="eval-run">
                <td>
                  <input
                    type="checkbox"
                    aria-label={`Pick run ${r.id}`}
                    checked={picked.includes(r.id)}
                    onChange={(e) =>
                      setPicked(e.target.checked ? [...picked, r.id].slice(-2) : picked.filter((p) => p !== r.id))
                    }
                  />
                </td>
                <td>
                  <a href={`#/evals/runs/${r.id}`}>{shortId(r.id)}</a>
                </td>
                <td>
                  {r.dataset} v{r.dataset_version}
                </td>
                <td>{String(r.settings.route ?? "agent's own")}</td>
                <td>
                  <span className={`status ${r.status}`}>{r.status}</span>
                </td>
                <td>
                  {r.summary.passed} / {r.summary.total}
                  {r.status === "running" ? ` (${r.summary.done} done)` : ""}
                </td>
                <td>{new Date(r.created_at).toLocaleString()}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
    </section>
  );
}

