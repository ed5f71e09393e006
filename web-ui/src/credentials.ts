// Credentials kept in the browser: an operator API key (when the server has keys) and the
// token of each session this browser created or opened, so a session page can attach.

import type { Credentials } from "./api";

const KEY = "stead.apiKey";
const TOKENS = "stead.sessionTokens";

export function operator(): Credentials {
  const key = localStorage.getItem(KEY) ?? "";
  return key ? { bearer: key } : {};
}

export function setApiKey(key: string) {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

function tokens(): Record<string, string> {
  try {
    return JSON.parse(localStorage.getItem(TOKENS) ?? "{}");
  } catch {
    return {};
  }
}

export function rememberToken(session: string, token: string) {
  localStorage.setItem(TOKENS, JSON.stringify({ ...tokens(), [session]: token }));
}

/** The session's own token, else the operator key (which may open any session). */
export function sessionToken(session: string): string | undefined {
  return tokens()[session] ?? (localStorage.getItem(KEY) || undefined);
}
