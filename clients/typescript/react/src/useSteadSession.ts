// `useSteadSession(id)`: one Stead session in a React component — its messages, status, pending
// approvals and the actions on it — over a `SessionConnection` (a ticketed WebSocket that
// resumes after the last seq it delivered), so that nothing is shown twice or lost after a
// reconnect.

import { useCallback, useEffect, useReducer, useRef, useState } from "react";

import {
  type ApiError,
  type ConnectionState,
  inDoubt,
  initialView,
  type MessageMode,
  pendingApprovals,
  reduce,
  SessionConnection,
  type WebSocketConstructor,
} from "@stead/client";

export interface SteadSessionOptions {
  /** Origin of the Stead server (`http://host:port`); empty: the page's own. */
  baseUrl?: string;
  /** The session's token. It is sent in a header only: each connection asks for a one-minute
   * ticket and puts that in the WebSocket URL (browsers cannot set headers on WebSockets). */
  token?: string;
  /** Called once when the server refuses the credential or the session is gone (401, 403,
   * 404): the hook stops reconnecting. */
  onRefused?: (error: ApiError) => void;
  /** A WebSocket class other than the global one. */
  WebSocket?: WebSocketConstructor;
}

export function useSteadSession(id: string, options: SteadSessionOptions = {}) {
  const [view, dispatch] = useReducer(reduce, initialView);
  const [connection, setConnection] = useState<ConnectionState>("connecting");
  const socket = useRef<SessionConnection | null>(null);
  const lastSeq = useRef(0);
  lastSeq.current = view.lastSeq;
  const onRefused = useRef(options.onRefused);
  onRefused.current = options.onRefused;

  useEffect(() => {
    // A new connection (another session, credential or server) resumes after what this view holds.
    const conn = new SessionConnection(id, {
      baseUrl: options.baseUrl,
      bearer: options.token,
      afterSeq: lastSeq.current,
      WebSocket: options.WebSocket,
    });
    socket.current = conn;
    setConnection("connecting");
    const offFrame = conn.onFrame(dispatch);
    const offState = conn.onState((state, closed) => {
      setConnection(state);
      if (closed?.kind === "refused" && closed.error) onRefused.current?.(closed.error);
    });
    return () => {
      offFrame();
      offState();
      conn.close();
      setConnection("closed");
    };
  }, [id, options.baseUrl, options.token, options.WebSocket]);

  const send = useCallback(
    (text: string, mode?: MessageMode, attachments?: string[]) =>
      socket.current?.sendMessage(text, { mode, attachments }) ?? false,
    [],
  );
  const approve = useCallback(
    (callId: string, scope: "once" | "session" = "once") =>
      socket.current?.approve(callId, { scope, argsHash: view.tools[callId]?.approval?.argsHash }) ?? false,
    [view.tools],
  );
  const reject = useCallback(
    (callId: string, reason: string) =>
      socket.current?.reject(callId, reason, { argsHash: view.tools[callId]?.approval?.argsHash }) ?? false,
    [view.tools],
  );
  const cancel = useCallback(() => socket.current?.cancel() ?? false, []);

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
