// Credentials kept in the browser. The operator API key (when the server has keys) lives in
// sessionStorage: this tab only, gone when it closes. The token of each session this browser
// created or forked lives in localStorage with its expiry, and is dropped once it expired or
// its session closed. Neither ever goes into a URL: a WebSocket gets a one-minute ticket
// (`POST /v1/sessions/{id}/ticket`, see useSteadSession).

import type { Credentials } from "@stead/client";

const KEY = "stead.apiKey";
const TOKENS = "stead.sessionTokens";

interface Stored {
  token: string;
  /** RFC 3339; null: until rotated. */
  expiresAt: string | null;
}

export function operator(): Credentials {
  // Keys stored by earlier versions in localStorage move to this tab's storage.
  const legacy = localStorage.getItem(KEY);
  if (legacy) {
    sessionStorage.setItem(KEY, legacy);
    localStorage.removeItem(KEY);
  }
  const key = sessionStorage.getItem(KEY) ?? "";
  return key ? { bearer: key } : {};
}

export function setApiKey(key: string) {
  localStorage.removeItem(KEY);
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
}

function load(): Record<string, Stored> {
  try {
    const raw = JSON.parse(localStorage.getItem(TOKENS) ?? "{}") as Record<string, Stored | string>;
    const now = Date.now();
    const kept: Record<string, Stored> = {};
    for (const [session, entry] of Object.entries(raw)) {
      // Tokens of earlier versions (plain strings, an old format the server refuses) go.
      if (typeof entry !== "object" || !entry?.token) continue;
      if (entry.expiresAt && Date.parse(entry.expiresAt) <= now) continue;
      kept[session] = entry;
    }
    return kept;
  } catch {
    return {};
  }
}

function save(tokens: Record<string, Stored>) {
  localStorage.setItem(TOKENS, JSON.stringify(tokens));
}

export function rememberToken(session: string, token: string, expiresAt: string | null = null) {
  save({ ...load(), [session]: { token, expiresAt } });
}

/** Forgets the tokens of these sessions (closed, failed or purged ones). */
export function forgetTokens(sessions: string[]) {
  const tokens = load();
  for (const session of sessions) delete tokens[session];
  save(tokens);
}

/** The session's own token, else the operator key (which may open any session). */
export function sessionToken(session: string): string | undefined {
  return load()[session]?.token ?? operator().bearer;
}
