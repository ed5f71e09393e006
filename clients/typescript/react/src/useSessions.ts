// `useSessions()`: the newest sessions (filtered by agent, status or parent), read again every
// few seconds, with create and close.

import { useCallback } from "react";

import { api, type Credentials, type SessionRow } from "@stead/client";

import { usePolled } from "./usePolled.js";

export interface SessionsOptions extends Credentials {
  agent?: string;
  status?: string;
  parent?: string;
  limit?: number;
  /** Read again this often (default 3000 ms; 0: only on `refresh()`). */
  intervalMs?: number;
}

export function useSessions(options: SessionsOptions = {}) {
  const { baseUrl, bearer, agent, status, parent, limit } = options;
  const polled = usePolled(
    () => api.listSessions({ baseUrl, bearer, fetch: options.fetch }, { agent, status, parent, limit }),
    [baseUrl, bearer, agent, status, parent, limit],
    options.intervalMs ?? 3000,
  );
  const { refresh } = polled;
  const create = useCallback(
    async (forAgent: string, metadata?: Record<string, unknown>) => {
      const created = await api.createSession({ baseUrl, bearer }, forAgent, metadata);
      await refresh();
      return created;
    },
    [baseUrl, bearer, refresh],
  );
  const close = useCallback(
    async (id: string) => {
      const row = await api.closeSession({ baseUrl, bearer }, id);
      await refresh();
      return row;
    },
    [baseUrl, bearer, refresh],
  );
  const sessions: SessionRow[] = polled.value?.sessions ?? [];
  return { sessions, nextCursor: polled.value?.next_cursor ?? null, error: polled.error, refresh, create, close };
}
