// MCP tools in a real browser (Debian's Chromium through playwright-core): a session of an
// agent whose tools come from MCP servers; the approval card of an MCP tool; once approved, its
// progress bar grows from `tool_progress` frames; then the result; then a message sent with
// "Send now (interrupt)" cancels a running call and runs at once; a tool that returns an image
// has it shown in its card. Screenshots go to OUT_DIR.
// Run by tests/e2e/mcp/browser.rs as `node mcp.mjs BASE_URL OUT_DIR AGENT`.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, out, agent] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const step = (name) => console.log(JSON.stringify({ step: name }));
const shot = (page, name) => page.screenshot({ path: join(out, `${name}.png`), fullPage: true });

let page;
try {
  page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${base}/`);
  await page.getByRole("heading", { name: "Sessions" }).waitFor();
  await page.getByLabel("New session for").selectOption(agent);
  await page.getByRole("button", { name: "Create session" }).click();
  await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
  await page.getByTestId("connection").filter({ hasText: "connected" }).waitFor();
  step("session created");

  await page.getByLabel("Message").fill("long 6");
  await page.getByRole("button", { name: "Send" }).click();
  const tool = "everything__trigger-long-running-operation";
  const approval = page.getByRole("group", { name: `Approval for ${tool}` });
  await approval.waitFor({ timeout: 15000 });
  await page.locator(".badge", { hasText: "MCP · everything" }).first().waitFor();
  await shot(page, "mcp-1-approval");
  step("approval card of an MCP tool");

  await approval.getByRole("button", { name: "Approve", exact: true }).click();
  const bar = page.getByRole("progressbar", { name: `Progress of ${tool}` });
  await bar.waitFor({ timeout: 15000 });
  // The bar grows: wait until at least half is done.
  await page.waitForFunction(
    () => {
      const p = document.querySelector('[data-testid="tool-progress"] progress');
      return p && p.max > 0 && p.value / p.max >= 0.5;
    },
    undefined,
    { timeout: 15000 },
  );
  await shot(page, "mcp-2-progress");
  step("progress bar");

  await page.locator(".result").waitFor({ timeout: 20000 });
  await page.getByTestId("session-status").filter({ hasText: "idle" }).waitFor({ timeout: 15000 });
  if (await page.getByTestId("tool-progress").count()) {
    throw new Error("the progress bar should be gone once the call finished");
  }
  await shot(page, "mcp-3-finished");
  step("result");

  // A message sent now interrupts the running turn: its MCP call is cancelled, the new one runs.
  await page.getByLabel("Message").fill("long 30");
  await page.getByRole("button", { name: "Send" }).click();
  const second = page.getByRole("group", { name: `Approval for ${tool}` });
  await second.waitFor({ timeout: 15000 });
  await second.getByRole("button", { name: "Approve", exact: true }).click();
  await page.getByRole("progressbar", { name: `Progress of ${tool}` }).waitFor({ timeout: 15000 });
  await page.getByLabel("Message").fill("echo interrupted");
  await page.getByRole("button", { name: "Send now (interrupt)" }).click();
  await page.locator(".tool.cancelled").waitFor({ timeout: 15000 });
  await page.locator('[data-role="assistant"]', { hasText: "Echo: interrupted" }).waitFor({ timeout: 15000 });
  await page.getByTestId("session-status").filter({ hasText: "idle" }).waitFor({ timeout: 15000 });
  await shot(page, "mcp-4-interrupted");
  step("interrupted");

  // A tool that returns an image: kept as an artifact and shown in the tool's card.
  await page.getByLabel("Message").fill("tiny image");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  const card = page.getByRole("article", { name: "Tool call everything__get-tiny-image" });
  await card.locator('[aria-label="Attachments"] img').waitFor({ timeout: 20000 });
  await page.waitForFunction(() => {
    const img = document.querySelector('article[aria-label="Tool call everything__get-tiny-image"] img');
    return img && img.complete && img.naturalWidth > 0;
  });
  await card.scrollIntoViewIfNeeded();
  await shot(page, "mcp-5-tool-image");
  step("a tool's image shown");
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  if (page) {
    await shot(page, "mcp-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
