// Sub-agents in a real browser (Debian's Chromium through playwright-core) against a running
// `stead serve` whose upstream double answers per agent: a `lead` session delegates to two child
// agents in one answer; its page shows a card per child session with its status and a link; the
// writer child's approval appears on the lead's page and is approved there; both replies come
// back and the lead answers. Run by tests/e2e/web_ui_delegation.rs as
// `node delegation.mjs BASE_URL OUT_DIR`.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, out] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const step = (name) => console.log(JSON.stringify({ step: name }));
const shot = (page, name) => page.screenshot({ path: join(out, `${name}.png`), fullPage: true });

let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${base}/`);
  await page.getByRole("heading", { name: "Sessions" }).waitFor();
  await page.getByLabel("New session for").selectOption("lead");
  await page.getByRole("button", { name: "Create session" }).click();
  await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
  await page.getByTestId("connection").filter({ hasText: "connected" }).waitFor();
  step("lead session created");

  await page.getByLabel("Message").fill("Explain the sky, and write a line about it.");
  await page.getByRole("button", { name: "Send" }).click();
  // A card per child session: both calls run at once.
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="child-session"]').length === 2, null, {
    timeout: 15000,
  });
  // The writer's approval is on the lead's page.
  const approval = page.getByRole("article", { name: "Approval for clock in writer" });
  await approval.waitFor({ timeout: 15000 });
  await page.locator('[data-testid="child-session"]', { hasText: "awaiting approval of clock" }).waitFor({ timeout: 15000 });
  await shot(page, "10-delegation");
  step("two child cards; the writer's approval on the lead's page");

  await approval.getByRole("button", { name: "Approve" }).click();
  await page
    .locator('[data-role="assistant"]', { hasText: "Both sub-agents answered" })
    .waitFor({ timeout: 15000 });
  await page.getByTestId("session-status").filter({ hasText: "idle" }).waitFor();
  await approval.waitFor({ state: "detached", timeout: 15000 });
  const results = await page.locator(".result").allTextContents();
  if (!results.some((r) => r.includes("Rayleigh")) || !results.some((r) => r.includes("A blue line"))) {
    throw new Error(`both children's replies should be results: ${results}`);
  }
  await shot(page, "11-delegation-finished");
  step("approved from the parent; both replies back; the lead answered");

  // A child's link opens the child session.
  await page.locator('[data-testid="child-session"] a').first().click();
  await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
  await page.getByRole("heading", { name: /Session/ }).waitFor();
  step("a child card opens the child session");
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  if (page) {
    await shot(page, "delegation-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
