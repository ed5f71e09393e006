// The app shell: a hash router over the pages (sessions, one session, approvals inbox, replay,
// gateway log, evaluations, knowledge) and the operator key field. Pages speak only the public REST and
// WebSocket APIs.

import { useEffect, useState } from "react";

import { ApprovalsPage } from "./pages/ApprovalsPage";
import { AuditPage } from "./pages/AuditPage";
import { SpendPage } from "./pages/SpendPage";
import { ComparePage, EvalRunPage } from "./pages/EvalResults";
import { EvalsPage } from "./pages/EvalsPage";
import { GatewayPage } from "./pages/GatewayPage";
import { KnowledgePage } from "./pages/KnowledgePage";
import { ReplayPage } from "./pages/ReplayPage";
import { SessionPage } from "./pages/SessionPage";
import { SessionsPage } from "./pages/SessionsPage";
import { operator, setApiKey } from "./credentials";
import { signInConfig, startSignIn, type SignInConfig } from "./signin";
import { selectedCollection } from "./knowledge";

function useHash(): string {
  const [hash, setHash] = useState(window.location.hash || "#/");
  useEffect(() => {
    const changed = () => setHash(window.location.hash || "#/");
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return hash;
}

export function App({ signInProblem }: { signInProblem: string | null }) {
  const hash = useHash();
  const [key, setKey] = useState(operator().bearer ?? "");
  // The identity provider's sign-in, when the server offers one.
  const [signIn, setSignIn] = useState<SignInConfig | null>(null);
  useEffect(() => {
    signInConfig()
      .then(setSignIn)
      .catch(() => setSignIn(null));
  }, []);
  const path = hash.slice(1);
  const session = path.match(/^\/sessions\/([0-9a-f-]{36})$/)?.[1];
  const replay = path.match(/^\/replay\/([0-9a-f-]{36})$/)?.[1];
  const evalRun = path.match(/^\/evals\/runs\/([0-9a-f-]{36})$/)?.[1];
  const compared = path.match(/^\/evals\/compare\/([0-9a-f-]{36})\/([0-9a-f-]{36})$/);
  let page;
  if (session) page = <SessionPage id={session} />;
  else if (replay) page = <ReplayPage id={replay} />;
  else if (evalRun) page = <EvalRunPage id={evalRun} />;
  else if (compared) page = <ComparePage a={compared[1]} b={compared[2]} />;
  else if (path === "/evals") page = <EvalsPage />;
  else if (path === "/approvals") page = <ApprovalsPage />;
  else if (path === "/audit") page = <AuditPage />;
  else if (path === "/spend") page = <SpendPage />;
  else if (path === "/gateway") page = <GatewayPage />;
  else if (path === "/knowledge" || path.startsWith("/knowledge/"))
    page = <KnowledgePage selected={selectedCollection(path)} />;
  else page = <SessionsPage />;
  return (
    <div className="app">
      <header className="bar">
        <a className="brand" href="#/">
          Stead
        </a>
        <nav aria-label="Main">
          <a href="#/" aria-current={path === "/" ? "page" : undefined}>
            Sessions
          </a>
          <a href="#/approvals" aria-current={path === "/approvals" ? "page" : undefined}>
            Approvals
          </a>
          <a href="#/gateway" aria-current={path === "/gateway" ? "page" : undefined}>
            Gateway log
          </a>
          <a href="#/evals" aria-current={path.startsWith("/evals") ? "page" : undefined}>
            Evals
          </a>
          <a href="#/spend" aria-current={path === "/spend" ? "page" : undefined}>
            Spend
          </a>
          <a href="#/audit" aria-current={path === "/audit" ? "page" : undefined}>
            Audit
          </a>
          <a
            href="#/knowledge"
            aria-current={path === "/knowledge" || path.startsWith("/knowledge/") ? "page" : undefined}
          >
            Knowledge
          </a>
        </nav>
        <form
          className="key"
          onSubmit={(e) => {
            e.preventDefault();
            setApiKey(key.trim());
            window.location.reload();
          }}
        >
          <label>
            API key
            <input
              type="password"
              value={key}
              placeholder="not needed on loopback"
              onChange={(e) => setKey(e.target.value)}
            />
          </label>
          <button type="submit">Save key</button>
          {signIn && (
            <button type="button" onClick={() => void startSignIn(signIn)}>
              Sign in
            </button>
          )}
        </form>
      </header>
      <main>
        {signInProblem && (
          <p role="alert" className="error">
            {signInProblem}
          </p>
        )}
        {page}
      </main>
    </div>
  );
}
