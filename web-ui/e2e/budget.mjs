// Budget approvals in a real browser (Debian's Chromium through playwright-core) against a
// running `stead serve`: a session parked because its key's budget is spent. With the project
// admin's key (STEAD_KEY) saved in the page, the session page says what it waits for; the inbox
// shows the budget, the amount needed and the overspend to allow; approving it lets the turn
// finish with the model's reply; the audit trail shows the decision and the spend page the call.
// Run by tests/e2e/web_ui_budget.rs as
// `node budget.mjs BASE_URL OUT_DIR SESSION_ID`.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, out, id] = process.argv.slice(2);
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
  await page.getByLabel("API key").fill(process.env.STEAD_KEY);
  await page.getByRole("button", { name: "Save key" }).click();
  await page.getByRole("heading", { name: "Sessions" }).waitFor();
  step("the project admin's key saved");

  await page.goto(`${base}/#/sessions/${id}`);
  await page.getByTestId("session-status").filter({ hasText: "awaiting_approval" }).waitFor({ timeout: 15000 });
  const wait = page.getByTestId("budget-wait");
  await wait.waitFor({ timeout: 15000 });
  const said = await wait.innerText();
  if (!said.includes("key `tight`") || !said.includes("$3.10")) throw new Error(`the wait says: ${said}`);
  await shot(page, "30-budget-wait");
  step("the session page says it waits on the key's budget");

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Approvals" }).click();
  const card = page.getByRole("article", { name: `Budget approval in ${id.slice(0, 8)}` });
  await card.waitFor({ timeout: 15000 });
  const needed = await card.getByTestId("needed-usd").innerText();
  if (needed !== "$3.10") throw new Error(`needed: ${needed}`);
  const allowed = await card.getByLabel("Overspend allowed (USD)").inputValue();
  if (allowed !== "3.10") throw new Error(`the overspend offered: ${allowed}`);
  await shot(page, "31-budget-inbox");
  step("the inbox shows the budget, the amount needed and the overspend");

  await card.getByRole("button", { name: "Approve overspend" }).click();
  await card.waitFor({ state: "detached", timeout: 15000 });
  await page.goto(`${base}/#/sessions/${id}`);
  await page.locator('[data-role="assistant"]', { hasText: "Leaves fall" }).waitFor({ timeout: 15000 });
  await page.getByTestId("session-status").filter({ hasText: "idle" }).waitFor();
  if (await page.getByTestId("budget-wait").count()) throw new Error("the wait notice stayed");
  await shot(page, "32-budget-approved");
  step("approved: the turn finished with the reply");

  // The audit trail holds the decision: who, what, from where.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Audit" }).click();
  const row = page.getByTestId("audit").locator("tr", { hasText: "overspend_usd=3.1" });
  await row.waitFor({ timeout: 15000 });
  const text = await row.innerText();
  if (!text.includes("project_key:") || !text.includes("/approvals/") || !text.includes("127.0.0.1")) {
    throw new Error(`the audit row: ${text}`);
  }
  await shot(page, "33-audit");
  step("the audit trail shows the decision");

  // The project's spend: the call, charged to the key, in its session; the key's budget.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Spend" }).click();
  // The request log is written in batches: show again until the call is in it.
  const total = page.getByTestId("spend-total").filter({ hasText: "in 1 call over" });
  for (let i = 0; i < 30 && !(await total.count()); i++) {
    await page.getByRole("button", { name: "Show" }).click();
    await total.waitFor({ timeout: 500 }).catch(() => undefined);
  }
  await total.waitFor({ timeout: 1000 });
  await page.getByRole("table", { name: "Key" }).locator("tr", { hasText: "tight" }).waitFor();
  const budget = await page.getByTestId("budget-left").filter({ hasText: "key `tight`" }).innerText();
  if (!budget.includes("of $1.00") || !budget.includes("% left")) throw new Error(`the budget: ${budget}`);
  await page.locator(".chart canvas").first().waitFor();
  const grants = await page.getByTestId("project-grants").innerText();
  if (grants !== "Allowed agents: writer · routes: all") throw new Error(`the grants: ${grants}`);
  await shot(page, "34-spend");
  step("the spend page shows the call, the key's budget and what the project may use");
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  if (page) {
    await shot(page, "budget-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
