// `@stead/react`: React hooks over `@stead/client` (docs/clients.md) — one session's live view and
// actions (`useSteadSession`), pending approvals (`useApprovals`), and the session list
// (`useSessions`).

export { useSteadSession, type SteadSessionOptions } from "./useSteadSession.js";
export { useApprovals, type ApprovalsOptions } from "./useApprovals.js";
export { useSessions, type SessionsOptions } from "./useSessions.js";
export { errorText } from "./usePolled.js";
