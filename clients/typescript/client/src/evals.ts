// Evaluations from the journal (docs/evals.md): datasets of cases cut from recorded sessions,
// runs of a dataset through the agent loop, comparisons of two runs, and reviewers' feedback on
// replies. Written by hand after the server's shapes (`stead-evals`, `edge/src/rest/evals.rs`,
// `edge/src/rest/feedback.rs`); every call needs an operator credential except feedback on a
// session, which its own token may give.

import { call, type Credentials } from "./rest.js";

/** How an argument of a tool call is matched. */
export type Matcher = { equals: unknown } | { contains: string } | { regex: string } | { schema: unknown };

/** One expectation on a case's turn (a grader), tagged by `type`. */
export type Expectation =
  | { type: "tool_called"; tool: string; args?: Record<string, Matcher> }
  | { type: "tools"; names: string[] }
  | { type: "no_tool" }
  | { type: "reply_contains"; text: string }
  | { type: "reply_contains_any"; texts: string[] }
  | { type: "reply_not_contains"; text: string }
  | { type: "reply_matches"; regex: string }
  | { type: "reply_json"; schema: unknown }
  | { type: "reply_usable" }
  | { type: "judge"; rubric: string; route?: string }
  | { type: "max_steps"; steps: number }
  | { type: "max_tokens"; tokens: number }
  | { type: "max_latency_ms"; ms: number }
  | { type: "max_cost_usd"; usd: number }
  | { type: "approve"; approved: boolean };

export interface Dataset {
  name: string;
  version: number;
  cases: number;
  created_at: string;
  updated_at: string;
}

/** One tool call of a turn as the journal has it. */
export interface CallOutcome {
  tool: string;
  arguments: unknown;
  result?: unknown;
  error?: string;
  approval?: { approved: boolean; reason?: string };
}

/** What one turn did (an evaluated or recorded turn; `TurnOutcome` is `?wait=true`'s answer). */
export interface EvalTurnOutcome {
  calls: CallOutcome[];
  reply: string;
  fallback?: boolean;
  model_calls: number;
  prompt_tokens: number;
  completion_tokens: number;
  cost_usd?: number;
  latency_ms: number;
  end: string;
  /** Each model call's time to its first token (ms). */
  ttft_ms?: number[];
  /** Answers dropped as unusable (repair calls and a built reply). */
  rejected_replies?: number;
}

export interface CaseTurn {
  user: string;
  expect?: Expectation[];
  recorded?: EvalTurnOutcome;
}

export interface EvalCase {
  id: string;
  name: string;
  agent: string;
  source?: { session_id: string; at_seq: number };
  turns: CaseTurn[];
}

export interface Verdict {
  grader: string;
  passed: boolean;
  detail?: string;
  reasoning?: string;
}

/** One step of a turn against its recording. */
export interface DiffStep {
  step: number;
  kind: "same" | "tool" | "arguments" | "approval" | "missing" | "extra" | "reply";
  recorded?: string;
  actual?: string;
  detail: string;
}

export interface TurnResult {
  user: string;
  verdicts: Verdict[];
  diff?: DiffStep[];
  outcome: EvalTurnOutcome;
  unavailable?: string[];
  live?: string[];
}

export interface CaseResult {
  case_id: string;
  name: string;
  passed: boolean;
  session_id?: string;
  turns: TurnResult[];
  error?: string;
  tokens: number;
  cost_usd: number;
  latency_ms: number;
}

export type EvalStatus = "running" | "finished" | "failed";

export interface EvalRun {
  id: string;
  dataset: string;
  dataset_version: number;
  status: EvalStatus;
  settings: Record<string, unknown>;
  summary: { total: number; done: number; passed: number; failed: number };
  error?: string;
  created_at: string;
  finished_at?: string;
  cases?: CaseResult[];
}

export interface RunFigures {
  run: string;
  cases: number;
  passed: number;
  pass_rate: number;
  tokens: number;
  cost_usd: number;
  latency_p50_ms: number;
  latency_p99_ms: number;
}

export type Flip = "regressed" | "fixed" | "still_failing" | "still_passing" | "only_a" | "only_b";

export interface Comparison {
  a: RunFigures;
  b: RunFigures;
  regressed: number;
  fixed: number;
  cases: { case_id: string; name: string; flip: Flip; a?: CaseResult; b?: CaseResult }[];
}

/** What `POST /v1/evals` takes. */
export interface NewRun {
  dataset: string;
  route?: string;
  system_prompt?: string;
  tools?: "replay" | "live";
  live_idempotent?: boolean;
  side_effects?: boolean;
  approvals?: "approve" | "reject" | "fail";
  judge_route?: string;
  concurrency?: number;
}

export type Rating = "up" | "down";

export interface Feedback {
  id: string;
  session_id: string;
  seq: number;
  rating: Rating;
  note: string;
  correction?: string;
  created_by: string;
  created_at: string;
}

const dataset = (name: string) => `/v1/datasets/${encodeURIComponent(name)}`;

export const evals = {
  datasets: (c: Credentials) => call<{ datasets: Dataset[] }>(c, "GET", "/v1/datasets"),
  createDataset: (c: Credentials, name: string) => call<Dataset>(c, "POST", "/v1/datasets", { name }),
  dataset: (c: Credentials, name: string) => call<Dataset & { items: EvalCase[] }>(c, "GET", dataset(name)),
  /** A case at a user message of a recorded session (`atSeq`; default its first); without
   * expectations the recording is the baseline. */
  addCase: (c: Credentials, name: string, sessionId: string, atSeq?: number, expect?: Expectation[]) =>
    call<{ id: string; name: string; dataset: Dataset }>(c, "POST", `${dataset(name)}/cases`, {
      session_id: sessionId,
      ...(atSeq !== undefined ? { at_seq: atSeq } : {}),
      ...(expect && expect.length ? { expect } : {}),
    }),
  /** A case from a reviewer's rating: its correction (or `expect`) is what the case expects. */
  addCaseFromFeedback: (c: Credentials, name: string, feedbackId: string, expect?: Expectation[]) =>
    call<{ id: string; name: string; dataset: Dataset }>(c, "POST", `${dataset(name)}/cases`, {
      feedback_id: feedbackId,
      ...(expect && expect.length ? { expect } : {}),
    }),
  startRun: (c: Credentials, run: NewRun) => call<{ id: string }>(c, "POST", "/v1/evals", run),
  runs: (c: Credentials, datasetName?: string) =>
    call<{ runs: EvalRun[] }>(
      c,
      "GET",
      datasetName ? `/v1/evals?dataset=${encodeURIComponent(datasetName)}` : "/v1/evals",
    ),
  run: (c: Credentials, id: string) => call<EvalRun>(c, "GET", `/v1/evals/${id}`),
  compare: (c: Credentials, a: string, b: string) => call<Comparison>(c, "GET", `/v1/evals/${a}/compare/${b}`),
  /** Rates the reply at `seq` (an `assistant_message`) of a session. */
  rate: (
    c: Credentials,
    sessionId: string,
    seq: number,
    rating: Rating,
    note = "",
    correction?: string,
  ) =>
    call<Feedback>(c, "POST", `/v1/sessions/${sessionId}/feedback`, {
      seq,
      rating,
      note,
      ...(correction ? { correction } : {}),
    }),
  sessionFeedback: (c: Credentials, sessionId: string) =>
    call<{ feedback: Feedback[] }>(c, "GET", `/v1/sessions/${sessionId}/feedback`),
  feedback: (c: Credentials, rating?: Rating) =>
    call<{ feedback: Feedback[] }>(c, "GET", rating ? `/v1/feedback?rating=${rating}` : "/v1/feedback"),
};
