// `useSteadSession(id)`: one Stead session in a React component — its messages, status, pending
// approvals and the actions on it — over the session's WebSocket, reconnecting by itself with
// `after_seq` so that nothing is shown twice or lost after a reconnect.

import { useCallback, useEffect, useReducer, useRef, useState } from "react";

import { api, ApiError } from "./api";
import { forgetTokens } from "./credentials";
import type { ClientFrame, MessageMode, ServerFrame } from "./protocol";
import { inDoubt, initialView, pendingApprovals, reduce } from "./reducer";

export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";

export interface SteadSessionOptions {
  /** Origin of the Stead server (`http://host:port`); empty: the page's own. */
  baseUrl?: string;
  /** The session's token (or an operator API key). It is sent in a header only: each
   * connection asks `POST /v1/sessions/{id}/ticket` for a one-minute ticket and puts that in
   * the WebSocket URL (browsers cannot set headers on WebSockets), so no key or long-lived
   * token ever lands in a URL or a proxy's log. */
  token?: string;
}

function socketUrl(baseUrl: string | undefined, id: string, ticket: string, afterSeq: number) {
  const origin = baseUrl || window.location.origin;
  const url = new URL(`/v1/sessions/${id}/ws`, origin.replace(/^http/, "ws"));
  url.searchParams.set("ticket", ticket);
  // Always resume, from 0 on the first connection: without it the server sends live frames
  // only, and the view would wait forever for the history before them.
  url.searchParams.set("after_seq", String(afterSeq));
  return url.toString();
}

export function useSteadSession(id: string, options: SteadSessionOptions = {}) {
  const [view, dispatch] = useReducer(reduce, initialView);
  const [connection, setConnection] = useState<ConnectionState>("connecting");
  const socket = useRef<WebSocket | null>(null);
  const lastSeq = useRef(0);
  lastSeq.current = view.lastSeq;

  useEffect(() => {
    let stopped = false;
    let failures = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const retry = () => {
      if (stopped) return;
      setConnection("reconnecting");
      const wait = Math.min(250 * 2 ** failures, 5000);
      failures += 1;
      timer = setTimeout(connect, wait);
    };
    const connect = async () => {
      let ticket: string;
      try {
        ticket = (await api.ticket({ baseUrl: options.baseUrl, bearer: options.token }, id)).ticket;
      } catch (e) {
        // A credential that is refused, or a session that is gone, will not come back by
        // retrying: stop, and drop the stored token.
        if (e instanceof ApiError && [401, 403, 404].includes(e.status)) {
          forgetTokens([id]);
          setConnection("closed");
          return;
        }
        retry();
        return;
      }
      if (stopped) return;
      // Resume after what this view already holds: the server sends the rest of the journal,
      // then the in-flight stream from its start (placed by offset), then live frames.
      const ws = new WebSocket(socketUrl(options.baseUrl, id, ticket, lastSeq.current));
      socket.current = ws;
      ws.onopen = () => {
        failures = 0;
        setConnection("open");
      };
      ws.onmessage = (message) => {
        try {
          dispatch(JSON.parse(message.data) as ServerFrame);
        } catch {
          // Not a frame of this protocol: ignore.
        }
      };
      ws.onclose = retry;
    };
    setConnection("connecting");
    void connect();
    return () => {
      stopped = true;
      clearTimeout(timer);
      socket.current?.close();
      setConnection("closed");
    };
  }, [id, options.baseUrl, options.token]);

  const sendFrame = useCallback((frame: ClientFrame) => {
    const ws = socket.current;
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(frame));
    return true;
  }, []);

  const send = useCallback(
    (text: string, mode?: MessageMode) =>
      sendFrame({ type: "user_message", text, client_id: crypto.randomUUID(), ...(mode ? { mode } : {}) }),
    [sendFrame],
  );
  const approve = useCallback(
    (callId: string, scope: "once" | "session" = "once") => {
      const card = view.tools[callId];
      return sendFrame({ type: "approval", call_id: callId, approved: true, scope, args_hash: card?.approval?.argsHash });
    },
    [sendFrame, view.tools],
  );
  const reject = useCallback(
    (callId: string, reason: string) => {
      const card = view.tools[callId];
      return sendFrame({ type: "approval", call_id: callId, approved: false, reason, args_hash: card?.approval?.argsHash });
    },
    [sendFrame, view.tools],
  );
  const cancel = useCallback(() => sendFrame({ type: "cancel" }), [sendFrame]);

  return {
    view,
    messages: view.entries,
    streaming: view.streaming,
    tools: view.toolOrder.map((callId) => view.tools[callId]),
    status: view.status,
    pendingApprovals: pendingApprovals(view),
    inDoubt: inDoubt(view),
    connection,
    error: view.lastError,
    send,
    approve,
    reject,
    cancel,
  };
}
