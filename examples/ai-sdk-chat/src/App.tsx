// A chat on the AI SDK's `useChat` whose backend is a Stead session. This app's server
// (server.mjs) creates the session with the operator key and gives the browser that session's
// token only; the browser talks to Stead directly (CORS: `server.cors_origins`).

import { useChat } from "@ai-sdk/react";
import { messagesFromJournal, SteadChatTransport } from "@stead/ai-sdk";
import { api } from "@stead/client";
import { lastAssistantMessageIsCompleteWithApprovalResponses, type UIMessage } from "ai";
import { useEffect, useMemo, useState } from "react";

interface Session {
  id: string;
  token: string;
  steadUrl: string;
}

const STORE = "stead-example.session";

async function session(): Promise<Session> {
  const kept = localStorage.getItem(STORE);
  if (kept) return JSON.parse(kept) as Session;
  const response = await fetch("/api/session", { method: "POST" });
  if (!response.ok) throw new Error(`could not start a session: ${response.status}`);
  const created = (await response.json()) as Session;
  localStorage.setItem(STORE, JSON.stringify(created));
  return created;
}

export function App() {
  const [loaded, setLoaded] = useState<{ session: Session; messages: UIMessage[] } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    (async () => {
      const s = await session();
      // A reload shows the session's journal as the chat so far.
      const { events } = await api.events({ baseUrl: s.steadUrl, bearer: s.token }, s.id, 0, 1000);
      setLoaded({ session: s, messages: messagesFromJournal(s.id, events) });
    })().catch((e) => setError(String(e)));
  }, []);
  if (error) return <main role="alert">{error}</main>;
  if (!loaded) return <main>Connecting…</main>;
  return <Chat session={loaded.session} initial={loaded.messages} />;
}

function Chat({ session, initial }: { session: Session; initial: UIMessage[] }) {
  const transport = useMemo(
    () => new SteadChatTransport({ baseUrl: session.steadUrl, token: () => session.token }),
    [session],
  );
  const { messages, sendMessage, addToolApprovalResponse, status, error, stop } = useChat({
    id: session.id,
    messages: initial,
    transport,
    resume: true,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [input, setInput] = useState("");
  return (
    <main>
      <h1>Stead × AI SDK</h1>
      <p className="status" data-status={status}>
        session <code>{session.id.slice(0, 8)}</code> · {status}
      </p>
      {messages.map((m) => (
        <article key={m.id} className={`message ${m.role}`} data-role={m.role}>
          <div className="role">{m.role}</div>
          {m.parts.map((part, i) => {
            if (part.type === "text") return <p key={i}>{part.text}</p>;
            if (part.type === "dynamic-tool") {
              return (
                <div key={i} className={`tool ${part.state}`} data-tool={part.toolName} data-state={part.state}>
                  <strong>{part.toolName}</strong> <span className="status">{part.state}</span>
                  <pre>{JSON.stringify(part.input)}</pre>
                  {part.state === "approval-requested" && (
                    <>
                      <p>{part.approval.requestReason}</p>
                      <button type="button" onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: true })}>
                        Approve
                      </button>{" "}
                      <button
                        type="button"
                        onClick={() => addToolApprovalResponse({ id: part.approval.id, approved: false, reason: "not now" })}
                      >
                        Reject
                      </button>
                    </>
                  )}
                  {part.state === "output-available" && <pre className="output">{JSON.stringify(part.output)}</pre>}
                  {part.state === "output-error" && <pre className="output">{part.errorText}</pre>}
                </div>
              );
            }
            return null;
          })}
        </article>
      ))}
      {error && <p role="alert">{error.message}</p>}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!input.trim()) return;
          void sendMessage({ text: input });
          setInput("");
        }}
      >
        <input type="text" aria-label="Message" value={input} onChange={(e) => setInput(e.target.value)} />
        <button type="submit" disabled={status === "streaming" || status === "submitted"}>
          Send
        </button>
        {(status === "streaming" || status === "submitted") && (
          <button type="button" onClick={() => stop()}>
            Stop
          </button>
        )}
      </form>
    </main>
  );
}
