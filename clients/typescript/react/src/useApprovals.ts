// `useApprovals()`: pending approvals and a way to decide them. Without `sessionId`, every
// pending approval across sessions (the inbox: an operator's credential); with it, what that
// session's tree waits for — its own and its child sessions' (the session's token suffices).

import { useCallback } from "react";

import { api, type Credentials, type PendingApproval } from "@stead/client";

import { errorText, usePolled } from "./usePolled.js";

export interface ApprovalsOptions extends Credentials {
  /** Only this session's tree. */
  sessionId?: string;
  /** Read again this often (default 2000 ms; 0: only on `refresh()`). */
  intervalMs?: number;
}

export function useApprovals(options: ApprovalsOptions = {}) {
  const { baseUrl, bearer, sessionId } = options;
  const creds: Credentials = { baseUrl, bearer, fetch: options.fetch };
  const polled = usePolled(
    async () =>
      sessionId ? (await api.treeApprovals(creds, sessionId)).approvals : (await api.pendingApprovals(creds)).approvals,
    [baseUrl, bearer, sessionId],
    options.intervalMs ?? 2000,
  );
  const { refresh, setError } = polled;
  const decide = useCallback(
    async (
      approval: PendingApproval,
      approved: boolean,
      reason = approved ? "approved" : "rejected",
      overspendUsd?: number,
    ) => {
      try {
        await api.decide({ baseUrl, bearer }, approval, approved, reason, "once", overspendUsd);
      } catch (e) {
        setError(errorText(e));
      }
      await refresh();
    },
    [baseUrl, bearer, refresh, setError],
  );
  return { approvals: polled.value ?? [], error: polled.error, refresh, decide };
}
