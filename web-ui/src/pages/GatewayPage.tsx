// The gateway log: the model request log as a table with filters, and charts — latency over
// time, tokens and cost by route/model — drawn with uPlot.

import { useEffect, useRef, useState } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

import { api, ApiError } from "@stead/client";
import { operator } from "../credentials";
import type { RequestLogRow } from "@stead/client";

const COLORS = ["#1f5fbf", "#d9480f", "#2f9e44"];

/** A uPlot chart: lines over time, or bars over categories (`labels` names the x positions). */
export function Chart({
  title,
  data,
  series,
  labels,
}: {
  title: string;
  data: uPlot.AlignedData;
  series: string[];
  labels?: string[];
}) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!box.current || data[0].length === 0) return;
    const width = Math.min(box.current.clientWidth || 600, 1000);
    const bars = labels ? uPlot.paths.bars!({ size: [0.6, 60] }) : undefined;
    const plot = new uPlot(
      {
        title,
        width,
        height: 220,
        scales: labels ? { x: { time: false, range: [-0.5, labels.length - 0.5] } } : undefined,
        axes: labels
          ? [{ values: (_u, ticks) => ticks.map((t) => labels[t] ?? "") }, {}, { side: 1, scale: series[1] }]
          : undefined,
        series: [
          {},
          ...series.map((label, i) => ({
            label,
            stroke: COLORS[i % 3],
            fill: labels ? `${COLORS[i % 3]}55` : undefined,
            width: 2,
            paths: bars,
            scale: labels && i === 1 ? series[1] : undefined,
          })),
        ],
      },
      data,
      box.current,
    );
    return () => plot.destroy();
  }, [title, data, series, labels]);
  return <div ref={box} className="chart" role="img" aria-label={title} />;
}

export function GatewayPage() {
  const [rows, setRows] = useState<RequestLogRow[]>([]);
  const [filters, setFilters] = useState({ route: "", model: "", status: "" });
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const load = () =>
      api
        .gatewayLogs(operator(), {
          limit: "500",
          ...Object.fromEntries(Object.entries(filters).filter(([, v]) => v)),
        })
        .then((page) => {
          setRows(page.logs);
          setError(null);
        })
        .catch((e) => setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e)));
    load();
    const timer = setInterval(load, 3000);
    return () => clearInterval(timer);
  }, [filters]);

  const ordered = [...rows].reverse();
  const latency: uPlot.AlignedData = [
    ordered.map((r) => new Date(r.at).getTime() / 1000),
    ordered.map((r) => r.latency_ms),
    ordered.map((r) => r.ttft_ms ?? null) as number[],
  ];
  const groups = new Map<string, { tokens: number; cost: number }>();
  for (const r of rows) {
    const key = `${r.route} · ${r.model ?? "?"}`;
    const g = groups.get(key) ?? { tokens: 0, cost: 0 };
    g.tokens += r.tokens_in + r.tokens_out;
    g.cost += r.cost;
    groups.set(key, g);
  }
  const set = (key: keyof typeof filters) => (e: React.ChangeEvent<HTMLInputElement>) =>
    setFilters({ ...filters, [key]: e.target.value });

  return (
    <section aria-labelledby="gateway-title">
      <h1 id="gateway-title">Gateway log</h1>
      <div className="toolbar">
        <label>
          Route
          <input value={filters.route} onChange={set("route")} />
        </label>
        <label>
          Model
          <input value={filters.model} onChange={set("model")} />
        </label>
        <label>
          Status
          <input value={filters.status} onChange={set("status")} placeholder="ok, error, rate_limited" />
        </label>
      </div>
      {error && <p role="alert" className="error">{error}</p>}
      <Chart title="Latency and TTFT over time (ms)" data={latency} series={["latency", "TTFT"]} />
      <Chart
        title="Tokens and cost (USD) by route · model"
        labels={[...groups.keys()]}
        data={[
          [...groups.keys()].map((_, i) => i),
          [...groups.values()].map((g) => g.tokens),
          [...groups.values()].map((g) => g.cost),
        ]}
        series={["tokens", "cost"]}
      />
      <table className="list">
        <caption>Tokens and cost by route and model</caption>
        <thead>
          <tr>
            <th>Route · model</th>
            <th>Tokens</th>
            <th>Cost (USD)</th>
          </tr>
        </thead>
        <tbody>
          {[...groups.entries()].map(([key, g]) => (
            <tr key={key}>
              <td>{key}</td>
              <td>
                <meter min={0} max={Math.max(...[...groups.values()].map((x) => x.tokens), 1)} value={g.tokens} /> {g.tokens}
              </td>
              <td>{g.cost.toFixed(6)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <table className="list" data-testid="gateway-log">
        <caption>Requests, newest first</caption>
        <thead>
          <tr>
            <th>Time</th>
            <th>Route</th>
            <th>Provider · model</th>
            <th>Status</th>
            <th>Attempts</th>
            <th>Latency</th>
            <th>TTFT</th>
            <th>Tokens</th>
            <th>Cost</th>
            <th>Cache</th>
            <th>Guardrails</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={r.id}>
              <td>{new Date(r.at).toLocaleTimeString()}</td>
              <td>{r.route}</td>
              <td>
                {r.provider ?? "—"} · {r.model ?? "—"}
              </td>
              <td>
                <span className={`status ${r.status === "ok" ? "finished" : "failed"}`}>{r.status}</span>
              </td>
              <td>{r.attempts.length}</td>
              <td>{r.latency_ms.toFixed(1)} ms</td>
              <td>{r.ttft_ms === null ? "—" : `${r.ttft_ms.toFixed(1)} ms`}</td>
              <td>
                {r.tokens_in} / {r.tokens_out}
              </td>
              <td>{r.cost.toFixed(6)}</td>
              <td>{r.cache_hit ? "hit" : ""}</td>
              <td data-testid="log-guardrails">
                {(r.guardrails ?? [])
                  .map((g) => `${g.guardrail} ${g.effect} ${g.entities.join(", ")} (${g.place})`)
                  .join("; ")}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
