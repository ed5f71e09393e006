// A compacted session in a real browser (Debian's Chromium through playwright-core): the
// session page shows each `context_compacted` as a divider between the turns ("N earlier turns
// summarised …"); opening the last one shows its summary. Then the memory panel: an operator
// writes a line into the session's pinned memory block and saves it. Screenshots go to OUT_DIR.
// Run by tests/e2e/context.rs as `node compaction.mjs BASE_URL OUT_DIR SESSION_ID EXPECTED`
// (the journal's number of compactions: the page loads a long journal in pages, so it waits
// for that many dividers before counting); prints `{"dividers", "label", "summary", "memory"}`.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, out, session, expected] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${base}/#/sessions/${session}`);
  await page.getByTestId("session-status").filter({ hasText: "idle" }).waitFor({ timeout: 60000 });
  const dividers = page.locator('details[data-role="compaction"]');
  await dividers.nth(Math.max(Number(expected ?? 1), 1) - 1).waitFor({ timeout: 60000 });
  const count = await dividers.count();
  const last = dividers.nth(count - 1);
  await last.locator("summary").click();
  await last.locator("p").waitFor();
  await last.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(out, "compaction.png") });
  const label = await last.locator("summary").innerText();
  const summary = await last.locator("p").innerText();

  const memory = page.getByLabel("Memory block");
  await memory.scrollIntoViewIfNeeded();
  await memory.fill("Code word: HERON");
  await page.getByRole("button", { name: "Save memory" }).click();
  await page.getByTestId("memory-note").filter({ hasText: "saved" }).waitFor();
  await page.screenshot({ path: join(out, "memory.png") });
  console.log(JSON.stringify({ dividers: count, label, summary, memory: await memory.inputValue() }));
} catch (error) {
  if (page) {
    await page.screenshot({ path: join(out, "compaction-failure.png") }).catch(() => undefined);
  }
  throw error;
} finally {
  await browser.close();
}
