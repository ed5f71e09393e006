// Evaluation cases from a session page (docs/evals.md): "Add to dataset" on a user message
// (the case starts there; expectations filled in a form, none meaning the recording is the
// baseline), and a reviewer's rating (good / bad, a thumbs up or down) of a reply (a note and, for a bad one, the reply
// that was wanted), which an operator can turn into a case in the same step.

import { ApiError, errorText, evals, type Credentials, type Expectation } from "@stead/client";
import { useEffect, useState } from "react";

import { operator } from "../credentials";

/** The expectations the form offers, with what each one's field holds. */
const KINDS: { type: string; label: string; field?: "text" | "number" }[] = [
  { type: "tool_called", label: "calls the tool", field: "text" },
  { type: "no_tool", label: "calls no tool" },
  { type: "reply_contains", label: "reply contains", field: "text" },
  { type: "reply_not_contains", label: "reply does not contain", field: "text" },
  { type: "reply_matches", label: "reply matches (regex)", field: "text" },
  { type: "reply_usable", label: "reply is usable (not empty, not call text)" },
  { type: "judge", label: "a judge agrees with (rubric)", field: "text" },
  { type: "max_steps", label: "at most N model calls", field: "number" },
  { type: "max_latency_ms", label: "at most N ms", field: "number" },
];

interface Row {
  type: string;
  value: string;
}

/** The form's rows as expectations; a row whose field is empty is an error. */
export function expectations(rows: Row[]): Expectation[] {
  return rows.map((row) => {
    const value = row.value.trim();
    const kind = KINDS.find((k) => k.type === row.type);
    if (kind?.field && !value) throw new Error(`"${kind.label}" needs a value`);
    const n = Number(value);
    if (kind?.field === "number" && !(n > 0)) throw new Error(`"${kind.label}" needs a positive number`);
    switch (row.type) {
      case "tool_called":
        return { type: "tool_called", tool: value };
      case "reply_contains":
      case "reply_not_contains":
        return { type: row.type, text: value };
      case "reply_matches":
        return { type: "reply_matches", regex: value };
      case "judge":
        return { type: "judge", rubric: value };
      case "max_steps":
        return { type: "max_steps", steps: n };
      case "max_latency_ms":
        return { type: "max_latency_ms", ms: n };
      case "no_tool":
        return { type: "no_tool" };
      default:
        return { type: "reply_usable" };
    }
  });
}

function ExpectationRows({ rows, setRows }: { rows: Row[]; setRows: (rows: Row[]) => void }) {
  return (
    <fieldset className="expectations">
      <legend>Expectations {rows.length === 0 && <em>(none: graded against the recorded turn)</em>}</legend>
      {rows.map((row, i) => {
        const kind = KINDS.find((k) => k.type === row.type);
        return (
          <div className="expectation" key={i}>
            <label>
              Expectation {i + 1}
              <select
                aria-label={`Expectation ${i + 1}`}
                value={row.type}
                onChange={(e) => setRows(rows.map((r, j) => (j === i ? { ...r, type: e.target.value } : r)))}
              >
                {KINDS.map((k) => (
                  <option key={k.type} value={k.type}>
                    {k.label}
                  </option>
                ))}
              </select>
            </label>
            {kind?.field && (
              <label className="grow">
                Value {i + 1}
                <input
                  aria-label={`Value ${i + 1}`}
                  type={kind.field}
                  value={row.value}
                  onChange={(e) => setRows(rows.map((r, j) => (j === i ? { ...r, value: e.target.value } : r)))}
                />
              </label>
            )}
            <button type="button" onClick={() => setRows(rows.filter((_, j) => j !== i))}>
              Remove
            </button>
          </div>
        );
      })}
      <button type="button" onClick={() => setRows([...rows, { type: "reply_contains", value: "" }])}>
        Add expectation
      </button>
    </fieldset>
  );
}

/** The datasets that exist, for a name field's suggestions. */
function useDatasets(): string[] {
  const [names, setNames] = useState<string[]>([]);
  useEffect(() => {
    evals
      .datasets(operator())
      .then((d) => setNames(d.datasets.map((x) => x.name)))
      .catch(() => undefined);
  }, []);
  return names;
}

/** Makes the dataset unless it exists. */
async function ensureDataset(c: Credentials, name: string) {
  try {
    await evals.createDataset(c, name);
  } catch (e) {
    if (!(e instanceof ApiError && e.code === "dataset_exists")) throw e;
  }
}

function DatasetField({
  name,
  setName,
  label = "Dataset",
}: {
  name: string;
  setName: (name: string) => void;
  label?: string;
}) {
  const datasets = useDatasets();
  return (
    <label>
      {label}
      <input aria-label={label} list="datasets" value={name} onChange={(e) => setName(e.target.value)} placeholder="a new or existing name" />
      <datalist id="datasets">
        {datasets.map((d) => (
          <option key={d} value={d} />
        ))}
      </datalist>
    </label>
  );
}

/** "Add to dataset" on a user message: the case starts at `seq` of `sessionId`. */
export function AddToDataset({ sessionId, seq, onClose }: { sessionId: string; seq: number; onClose: () => void }) {
  const [name, setName] = useState("");
  const [rows, setRows] = useState<Row[]>([]);
  const [status, setStatus] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  return (
    <form
      className="case-form"
      aria-label={`Add the message at seq ${seq} to a dataset`}
      onSubmit={async (e) => {
        e.preventDefault();
        setError(null);
        try {
          const expect = expectations(rows);
          const c = operator();
          await ensureDataset(c, name.trim());
          const added = await evals.addCase(c, name.trim(), sessionId, seq, expect);
          setStatus(`Added “${added.name}” to ${added.dataset.name} (version ${added.dataset.version}).`);
        } catch (err) {
          setError(errorText(err));
        }
      }}
    >
      <DatasetField name={name} setName={setName} />
      <ExpectationRows rows={rows} setRows={setRows} />
      <div className="actions">
        <button type="submit" disabled={!name.trim()}>
          Add case
        </button>
        <button type="button" onClick={onClose}>
          Close
        </button>
      </div>
      {status && <p role="status">{status}</p>}
      {error && <p role="alert" className="error">{error}</p>}
    </form>
  );
}

/** Thumbs up / down on the reply at `seq`; a bad one asks for a note and the wanted reply. */
export function RateReply({ sessionId, seq, creds }: { sessionId: string; seq: number; creds: Credentials }) {
  const [open, setOpen] = useState<"up" | "down" | null>(null);
  const [note, setNote] = useState("");
  const [correction, setCorrection] = useState("");
  const [dataset, setDataset] = useState("");
  const [saved, setSaved] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  if (saved) {
    return (
      <p className="rated" role="status">
        {saved}
      </p>
    );
  }
  return (
    <div className="rate">
      <span className="rate-label">Rate this reply:</span>
      <button
        type="button"
        className="link"
        aria-label={`Good reply (seq ${seq})`}
        aria-pressed={open === "up"}
        onClick={() => setOpen("up")}
      >
        good
      </button>
      <button
        type="button"
        className="link"
        aria-label={`Bad reply (seq ${seq})`}
        aria-pressed={open === "down"}
        onClick={() => setOpen("down")}
      >
        bad
      </button>
      {open && (
        <form
          className="case-form"
          aria-label={`Feedback on the reply at seq ${seq}`}
          onSubmit={async (e) => {
            e.preventDefault();
            setError(null);
            try {
              const rated = await evals.rate(creds, sessionId, seq, open, note, open === "down" ? correction : undefined);
              let text = `Saved: ${open === "up" ? "good" : "bad"} reply.`;
              if (dataset.trim()) {
                const c = operator();
                await ensureDataset(c, dataset.trim());
                const added = await evals.addCaseFromFeedback(c, dataset.trim(), rated.id);
                text += ` Added “${added.name}” to ${added.dataset.name}.`;
              }
              setSaved(text);
            } catch (err) {
              setError(errorText(err));
            }
          }}
        >
          <label>
            Note
            <input aria-label="Note" value={note} onChange={(e) => setNote(e.target.value)} placeholder="what was wrong or right" />
          </label>
          {open === "down" && (
            <label className="grow">
              The reply that was wanted
              <textarea aria-label="The reply that was wanted" value={correction} rows={2} onChange={(e) => setCorrection(e.target.value)} />
            </label>
          )}
          <DatasetField name={dataset} setName={setDataset} label="Also add as a case to dataset (optional)" />
          <div className="actions">
            <button type="submit">Save feedback</button>
            <button type="button" onClick={() => setOpen(null)}>
              Close
            </button>
          </div>
          {error && <p role="alert" className="error">{error}</p>}
        </form>
      )}
    </div>
  );
}
