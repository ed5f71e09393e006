// The AI SDK example in a real browser (Debian's Chromium through playwright-core): `useChat` over
// a Stead session on another origin (CORS), with the session's token only. Ask, see the tool
// call wait for approval, reload (the chat is rebuilt from the journal and still asks), approve
// it, see the tool's output and the streamed answer; reload and
// see the chat rebuilt from the journal; reload in the middle of a slow answer and see it
// resumed to the end, once. Run as `node e2e/chat.mjs APP_URL OUT_DIR`; screenshots go to OUT_DIR.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [app, out] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const step = (name, detail = {}) => console.log(JSON.stringify({ step: name, ...detail }));
const shot = (page, name) => page.screenshot({ path: join(out, `${name}.png`), fullPage: true });
const slow = { timeout: 20000 };

let page;
try {
  const context = await browser.newContext({ viewport: { width: 900, height: 900 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  const keys = [];
  page.on("request", (r) => keys.push(r.headers().authorization ?? ""));
  await page.goto(app);
  await page.getByRole("heading", { name: "Stead × AI SDK" }).waitFor(slow);
  step("app loaded");

  await page.getByLabel("Message").fill("What time is it?");
  await page.getByRole("button", { name: "Send" }).click();
  const tool = page.locator('[data-tool="clock"]');
  await tool.and(page.locator('[data-state="approval-requested"]')).waitFor(slow);
  await page.locator('[data-status="ready"]').waitFor(slow);
  await shot(page, "01-ai-sdk-approval");
  step("the tool call waits for approval");

  // Reloaded while it waits: the chat, rebuilt from the journal, still asks; answer it there.
  await page.reload();
  await tool.and(page.locator('[data-state="approval-requested"]')).waitFor(slow);

  await tool.getByRole("button", { name: "Approve" }).click();
  await tool.and(page.locator('[data-state="output-available"]')).waitFor(slow);
  await page.getByText("It is noon.").waitFor(slow);
  await page.locator('[data-status="ready"]').waitFor(slow);
  step("approved: the tool ran and the answer streamed");
  await shot(page, "02-ai-sdk-answer");

  await page.reload();
  await page.getByText("It is noon.").waitFor(slow);
  await page.locator('[data-tool="clock"][data-state="output-available"]').waitFor(slow);
  const roles = await page.locator("article[data-role]").evaluateAll((els) => els.map((e) => e.dataset.role));
  step("reloaded: the chat rebuilt from the journal", { roles });
  if (JSON.stringify(roles) !== JSON.stringify(["user", "assistant"])) throw new Error(`roles after reload: ${roles}`);

  // A slow answer: reload while it streams; the running turn is resumed to its end.
  await page.getByLabel("Message").fill("Tell me a story.");
  await page.getByRole("button", { name: "Send" }).click();
  await page.getByText("Once upon a time").waitFor(slow);
  await page.reload();
  // The reloaded chat resumes the running answer (useChat's `resume`), streaming again.
  await page.locator('[data-status="streaming"]').waitFor(slow);
  const story = page.locator("article[data-role=assistant]").last();
  await story.getByText("they lived happily ever after.", { exact: false }).waitFor(slow);
  await page.locator('[data-status="ready"]').waitFor(slow);
  const text = await story.innerText();
  const once = text.split("Once upon a time").length - 1;
  step("resumed after a reload mid-answer", { once });
  if (once !== 1) throw new Error(`the story appears ${once} times: ${text}`);
  await shot(page, "03-ai-sdk-resumed");

  const leaked = keys.filter((k) => k.includes(process.env.STEAD_API_KEY || "\u0000"));
  step("no operator key in the browser", { requests: keys.length, leaked: leaked.length });
  if (leaked.length) throw new Error("the operator key reached the browser");
} catch (e) {
  if (page) await shot(page, "failure").catch(() => undefined);
  console.error(e);
  process.exitCode = 1;
} finally {
  await browser.close();
}
