// The example's server: serves the built app (dist/) and `POST /api/session`, which creates a
// Stead session with the operator key (kept here, never sent to the browser) and answers the
// session's id and token. Plain Node, no dependencies.
//
//   STEAD_URL=http://127.0.0.1:8787 STEAD_API_KEY=… STEAD_AGENT=assistant PORT=5174 node server.mjs

import { createReadStream, existsSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";

const steadUrl = process.env.STEAD_URL ?? "http://127.0.0.1:8787";
const apiKey = process.env.STEAD_API_KEY ?? "";
const agent = process.env.STEAD_AGENT ?? "assistant";
const port = Number(process.env.PORT ?? 5174);
const dist = join(fileURLToPath(new URL(".", import.meta.url)), "dist");
const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".map": "application/json" };

const server = createServer(async (req, res) => {
  if (req.method === "POST" && req.url === "/api/session") {
    const answer = await fetch(`${steadUrl}/v1/sessions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
      body: JSON.stringify({ agent, metadata: { app: "ai-sdk-chat" } }),
    });
    const body = await answer.json();
    res.writeHead(answer.ok ? 200 : 502, { "content-type": "application/json" });
    res.end(JSON.stringify(answer.ok ? { id: body.id, token: body.token, steadUrl } : body));
    return;
  }
  const path = normalize(decodeURIComponent((req.url ?? "/").split("?")[0])).replace(/^(\.\.[/\\])+/, "");
  let file = join(dist, path === "/" ? "index.html" : path);
  if (!file.startsWith(dist) || !existsSync(file)) file = join(dist, "index.html");
  res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream" });
  createReadStream(file).pipe(res);
});
server.listen(port, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${server.address().port}`));
