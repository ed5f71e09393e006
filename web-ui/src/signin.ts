// Signing in with the identity provider (docs/tenancy.md, "Single sign-on"): the authorization
// code flow with PKCE as a public client in the browser. The server says where to go
// (`GET /v1/auth/oidc`); the verifier and state wait in this tab's sessionStorage while the
// provider's pages run; back at `/?code=…&state=…` the server exchanges the code with the
// verifier (`POST /v1/auth/oidc/token`: the page talks to its own origin only) and the access
// token becomes this tab's bearer (like a pasted API key).

import { setApiKey } from "./credentials";

const PENDING = "stead.signIn";

export interface SignInConfig {
  issuer: string;
  client_id: string;
  audience: string;
  authorization_endpoint: string;
}

interface Pending {
  verifier: string;
  state: string;
}

function random(bytes: number): string {
  const data = crypto.getRandomValues(new Uint8Array(bytes));
  return base64url(data);
}

function base64url(data: Uint8Array): string {
  let text = "";
  for (const byte of data) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The server's sign-in settings, or null when it offers none. */
export async function signInConfig(): Promise<SignInConfig | null> {
  const answer = await fetch("/v1/auth/oidc");
  return answer.ok ? ((await answer.json()) as SignInConfig) : null;
}

/** Where the provider sends the browser back: this web UI's own address. */
function redirectUri(): string {
  return `${window.location.origin}/`;
}

/** Goes to the provider's sign-in page. */
export async function startSignIn(config: SignInConfig) {
  const verifier = random(48);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const pending: Pending = { verifier, state: random(16) };
  sessionStorage.setItem(PENDING, JSON.stringify(pending));
  const url = new URL(config.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: config.client_id,
    redirect_uri: redirectUri(),
    scope: "openid",
    resource: config.audience,
    state: pending.state,
    code_challenge: base64url(digest),
    code_challenge_method: "S256",
  }).toString();
  window.location.assign(url.toString());
}

/** Back from the provider (`?code=…&state=…`): exchanges the code for an access token, which
 * becomes this tab's bearer. Answers whether a sign-in was finished (or why it failed). */
export async function finishSignIn(): Promise<"none" | "done" | string> {
  const params = new URLSearchParams(window.location.search);
  const code = params.get("code");
  const error = params.get("error");
  if (!code && !error) return "none";
  const pending = JSON.parse(sessionStorage.getItem(PENDING) ?? "null") as Pending | null;
  sessionStorage.removeItem(PENDING);
  window.history.replaceState(null, "", `/${window.location.hash}`);
  if (error) return `the identity provider refused: ${params.get("error_description") ?? error}`;
  if (!pending || params.get("state") !== pending.state) return "the sign-in was not started here (state mismatch)";
  const answer = await fetch("/v1/auth/oidc/token", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ code: code ?? "", code_verifier: pending.verifier, redirect_uri: redirectUri() }),
  });
  const body = (await answer.json().catch(() => ({}))) as {
    access_token?: string;
    error?: { message?: string };
  };
  if (!answer.ok || !body.access_token) {
    return `the sign-in failed: ${body.error?.message ?? `HTTP ${answer.status}`}`;
  }
  setApiKey(body.access_token);
  return "done";
}
