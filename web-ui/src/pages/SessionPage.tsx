// One session: the chat with streamed text, tool calls as cards with their arguments and
// results, approval cards (approve, approve for the rest of the session, reject with a reason)
// that update live in every open tab, cancel, the connection state, and in-doubt tool calls
// asked as a question; an `agent` call's card shows its child session (status, latest line, a
// link) and the sub-agents' approvals are decided here (ChildApprovals); below, the session's
// schedules (SchedulesPanel).

import type { ChildLink, Credentials, ToolCard, ToolProgress } from "@stead/client";
import { useSteadSession } from "@stead/react";
import { useState } from "react";

import { forgetTokens, operator, sessionToken } from "../credentials";
import { MessageAttachments, PendingAttachments, resultFiles, usePendingFiles } from "./Attachments";
import { VoiceRecorder } from "./Voice";
import { AddToDataset, RateReply } from "./CaseForms";
import { ChildApprovals } from "./ChildApprovals";
import { MarkedResult, Verdicts } from "./Guardrails";
import { MemoryPanel } from "./MemoryPanel";
import { SchedulesPanel } from "./SchedulesPanel";

function json(value: unknown) {
  return JSON.stringify(value, null, 2);
}

function ApprovalActions({
  card,
  approve,
  reject,
}: {
  card: ToolCard;
  approve: (callId: string, scope?: "once" | "session") => boolean;
  reject: (callId: string, reason: string) => boolean;
}) {
  const [reason, setReason] = useState("");
  return (
    <div className="approval" role="group" aria-label={`Approval for ${card.tool}`}>
      <p>
        <strong>Approval needed</strong> — {card.approval?.reason}
      </p>
      <button type="button" onClick={() => approve(card.callId)}>
        Approve
      </button>
      <button type="button" onClick={() => approve(card.callId, "session")}>
        Approve for this session
      </button>
      <label>
        Reason
        <input value={reason} onChange={(e) => setReason(e.target.value)} placeholder="why not" />
      </label>
      <button type="button" onClick={() => reject(card.callId, reason || "rejected")}>
        Reject
      </button>
    </div>
  );
}

/** A result an `approve` guardrail holds: the verdicts, the result with what they found marked,
 * and the decision. */
function HeldResult({
  card,
  approve,
  reject,
}: {
  card: ToolCard;
  approve: (callId: string, scope?: "once" | "session") => boolean;
  reject: (callId: string, reason: string) => boolean;
}) {
  const checks = card.guardrails ?? [];
  return (
    <div className="approval held" role="group" aria-label={`Held result of ${card.tool}`}>
      <p>
        <strong>Result held by a guardrail</strong> — the model reads it only if you let it.
      </p>
      <Verdicts checks={checks} />
      <MarkedResult value={card.held} checks={checks} />
      <button type="button" onClick={() => approve(card.callId)}>
        Let the model read it
      </button>
      <button type="button" onClick={() => reject(card.callId, "withheld")}>
        Withhold it
      </button>
    </div>
  );
}

/** A running tool's progress: a bar when the total is known, else the count; its message. */
function Progress({ progress, tool }: { progress: ToolProgress; tool: string }) {
  const known = progress.total !== undefined && progress.total > 0;
  const percent = known ? Math.round((100 * (progress.progress ?? 0)) / progress.total!) : undefined;
  return (
    <div className="progress" data-testid="tool-progress">
      <progress
        aria-label={`Progress of ${tool}`}
        value={known ? progress.progress ?? 0 : undefined}
        max={known ? progress.total : undefined}
      />
      <span>
        {known ? `${progress.progress ?? 0} / ${progress.total} (${percent}%)` : progress.progress ?? ""}
        {progress.message ? ` — ${progress.message}` : ""}
      </span>
    </div>
  );
}

/** An `agent` call's child session: its status, what it did last, and a link to it. */
function Child({ child }: { child: ChildLink }) {
  return (
    <div className="child" data-testid="child-session">
      <span>Sub-agent session </span>
      <a href={`#/sessions/${child.sessionId}`}>{child.sessionId.slice(0, 8)}</a>{" "}
      {child.status && <span className={`status ${child.status}`}>{child.status.replace("_", " ")}</span>}
      {child.text && <p className="child-line">{child.text}</p>}
    </div>
  );
}

function Card({
  card,
  creds,
  approve,
  reject,
  send,
}: {
  card: ToolCard;
  creds: Credentials;
  approve: (callId: string, scope?: "once" | "session") => boolean;
  reject: (callId: string, reason: string) => boolean;
  send: (text: string) => boolean;
}) {
  return (
    <article className={`tool ${card.status}`} data-call={card.callId} aria-label={`Tool call ${card.tool}`}>
      <header>
        <code>{card.tool}</code>{" "}
        {card.server && (
          <span className="badge" title={`A tool of the MCP server ${card.server}`}>
            MCP · {card.server}
          </span>
        )}{" "}
        <span className={`status ${card.status}`}>{card.status.replace("_", " ")}</span>
      </header>
      {card.status === "running" && card.progress && <Progress progress={card.progress} tool={card.tool} />}
      {card.child && <Child child={card.child} />}
      <details open={card.status === "awaiting_approval"}>
        <summary>Arguments</summary>
        <pre>{json(card.arguments)}</pre>
      </details>
      {card.status === "awaiting_approval" &&
        (card.held !== undefined ? (
          <HeldResult card={card} approve={approve} reject={reject} />
        ) : (
          <ApprovalActions card={card} approve={approve} reject={reject} />
        ))}
      {card.decision && (
        <p className="decision">
          {card.decision.approved ? "Approved" : "Rejected"} by {card.decision.decidedBy}
          {card.decision.scope === "session" ? " for this session" : ""}
          {card.decision.reason ? ` — ${card.decision.reason}` : ""}
        </p>
      )}
      {card.result !== undefined && (
        <details open>
          <summary>Result</summary>
          {card.guardrails ? (
            <>
              <Verdicts checks={card.guardrails} />
              <MarkedResult value={card.result} checks={card.guardrails} />
            </>
          ) : (
            <pre className="result">{json(card.result)}</pre>
          )}
          {resultFiles(card.result).length > 0 && (
            <MessageAttachments creds={creds} attachments={resultFiles(card.result)} />
          )}
        </details>
      )}
      {card.status === "failed" && card.guardrails && <Verdicts checks={card.guardrails} />}
      {card.status === "in_doubt" && (
        <div className="doubt" role="group" aria-label={`Did ${card.tool} take effect?`}>
          <p>
            The server stopped while <code>{card.tool}</code> ran, and it is not safe to retry. Did it take effect?
          </p>
          <button type="button" onClick={() => send(`Yes: the ${card.tool} call ${card.callId} took effect.`)}>
            It happened
          </button>
          <button type="button" onClick={() => send(`No: the ${card.tool} call ${card.callId} did not take effect.`)}>
            It did not happen
          </button>
        </div>
      )}
      {(card.status === "failed" || card.status === "cancelled") && card.error && <p className="error">{card.error}</p>}
    </article>
  );
}

export function SessionPage({ id }: { id: string }) {
  const token = sessionToken(id);
  // A refused token (expired, rotated) or a purged session: drop the stored token.
  const session = useSteadSession(id, { token, onRefused: () => forgetTokens([id]) });
  const creds = token ? { bearer: token } : operator();
  const [text, setText] = useState("");
  // Files for the next message: picked, dropped on the composer or pasted into it.
  const pending = usePendingFiles(id, creds);
  const [dropping, setDropping] = useState(false);
  const sendNow = (mode?: "interrupt") => {
    const ids = pending.files.map((f) => f.id);
    if (!text.trim() || pending.uploading > 0 || !session.send(text.trim(), mode, ids)) return;
    setText("");
    pending.clear();
  };
  // The user message whose "Add to dataset" form is open.
  const [caseAt, setCaseAt] = useState<number | null>(null);
  const busy = session.status === "running" || session.status === "awaiting_approval";
  // Chat entries and tool cards in journal order.
  const items = [
    ...session.messages.map((m) => ({ seq: m.seq, key: m.id, node: m.role === "compaction" ? (
      <details key={m.id} className="compaction" data-role="compaction">
        <summary>
          {m.turns} earlier turn{m.turns === 1 ? "" : "s"} {m.text ? "summarised" : "dropped"} to keep the prompt
          within its budget
        </summary>
        {m.text && <p>{m.text}</p>}
      </details>
    ) : (
      <div key={m.id} className={`entry ${m.role}`}>
        <p
          className={`msg ${m.role}${m.fallback ? " fallback" : ""}`}
          data-role={m.role}
          title={m.fallback ? "Built from the tool results: the model gave no usable reply" : undefined}
        >
          {m.text}
        </p>
        {m.attachments && <MessageAttachments creds={creds} attachments={m.attachments} />}
        {m.role === "user" && (
          <button
            type="button"
            className="link"
            aria-label={`Add to dataset (seq ${m.seq})`}
            onClick={() => setCaseAt(caseAt === m.seq ? null : m.seq)}
          >
            Add to dataset
          </button>
        )}
        {m.role === "user" && caseAt === m.seq && (
          <AddToDataset sessionId={id} seq={m.seq} onClose={() => setCaseAt(null)} />
        )}
        {m.role === "assistant" && <RateReply sessionId={id} seq={m.seq} creds={creds} />}
      </div>
    ) })),
    ...session.tools.map((card) => ({ seq: card.seq, key: card.callId, node: (
      <Card
        key={card.callId}
        card={card}
        creds={creds}
        approve={session.approve}
        reject={session.reject}
        send={session.send}
      />
    ) })),
  ].sort((a, b) => a.seq - b.seq);
  return (
    <section aria-labelledby="session-title" className="session">
      <h1 id="session-title">
        Session <code>{id.slice(0, 8)}</code>{" "}
        <span className={`status ${session.status}`} data-testid="session-status">
          {session.status}
        </span>
      </h1>
      <p className={`connection ${session.connection}`} role="status" data-testid="connection">
        {session.connection === "open" ? "connected" : session.connection}
      </p>
      <p>
        <a href={`#/replay/${id}`}>Replay this session</a>
      </p>
      <div className="chat" aria-live="polite">
        {items.map((item) => item.node)}
        {session.streaming && (
          <p className="msg assistant streaming" data-role="streaming">
            {session.streaming.text}
          </p>
        )}
      </div>
      {session.view.budgetWait && (
        <div className="budget-wait" role="status" data-testid="budget-wait">
          <strong>Waiting for a budget decision</strong> — the budget of {session.view.budgetWait.budget} is spent;
          the next model call needs up to ${session.view.budgetWait.neededUsd.toFixed(2)} more. The project's admin
          (or the installation) decides it in <a href="#/approvals">Approvals</a>; the turn then continues where it
          stopped.
        </div>
      )}
      <ChildApprovals
        id={id}
        creds={creds}
        refresh={`${session.view.lastSeq}:${session.tools.map((t) => `${t.child?.sessionId}=${t.child?.status}`).join(",")}`}
      />
      {session.error && (
        <p role="alert" className="error">
          {session.error.code}: {session.error.message}
        </p>
      )}
      <form
        className={`composer${dropping ? " dropping" : ""}`}
        aria-label="Composer"
        onSubmit={(e) => {
          e.preventDefault();
          sendNow();
        }}
        onDragOver={(e) => {
          if (!e.dataTransfer.types.includes("Files")) return;
          e.preventDefault();
          setDropping(true);
        }}
        onDragLeave={() => setDropping(false)}
        onDrop={(e) => {
          e.preventDefault();
          setDropping(false);
          pending.add(e.dataTransfer.files);
        }}
      >
        <PendingAttachments creds={creds} pending={pending} />
        <VoiceRecorder
          sessionId={id}
          creds={creds}
          onRecorded={(audio, said) => {
            pending.put(audio);
            setText((typed) => [typed.trim(), said.trim()].filter(Boolean).join(" "));
          }}
        />
        <label className="grow">
          Message
          <textarea
            value={text}
            onChange={(e) => setText(e.target.value)}
            onPaste={(e) => {
              // A pasted screenshot (or file) is attached; pasted text is typed as usual.
              if (e.clipboardData.files.length === 0) return;
              e.preventDefault();
              pending.add(e.clipboardData.files);
            }}
            rows={2}
            disabled={session.status === "closed" || session.status === "failed"}
            onKeyDown={(e) => {
              if (e.key === "Enter" && !e.shiftKey) {
                e.preventDefault();
                e.currentTarget.form?.requestSubmit();
              }
            }}
          />
        </label>
        <button type="submit" disabled={session.connection !== "open"}>
          Send
        </button>
        {busy && (
          <button
            type="button"
            disabled={session.connection !== "open" || !text.trim()}
            title="Cancel the running turn and start a new one with this message"
            onClick={() => sendNow("interrupt")}
          >
            Send now (interrupt)
          </button>
        )}
        <button type="button" onClick={session.cancel} disabled={!busy}>
          Cancel turn
        </button>
      </form>
      <MemoryPanel id={id} creds={creds} lastSeq={session.view.lastSeq} />
      <SchedulesPanel id={id} creds={creds} lastSeq={session.view.lastSeq} />
    </section>
  );
}
