import { StrictMode } from "react";
import { createRoot } from "react-dom/client";

import { App } from "./App";
import { finishSignIn } from "./signin";
import "./styles.css";

// Back from the identity provider: finish the sign-in before any page asks the API.
const signIn = await finishSignIn().catch((e: unknown) => `the sign-in failed: ${String(e)}`);

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <App signInProblem={signIn === "none" || signIn === "done" ? null : signIn} />
  </StrictMode>,
);
