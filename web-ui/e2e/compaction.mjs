// A compacted session in a real browser (Debian's Chromium through playwright-core): the
// session page shows each `context_compacted` as a divider between the turns ("N earlier turns
// summarised …"); opening the last one shows its summary. A screenshot goes to OUT_DIR. Run by
// tests/e2e/context.rs as `node compaction.mjs BASE_URL OUT_DIR SESSION_ID`; prints
// `{"dividers", "label", "summary"}`.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, out, session] = process.argv.slice(2);
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
  await dividers.first().waitFor({ timeout: 60000 });
  const count = await dividers.count();
  const last = dividers.nth(count - 1);
  await last.locator("summary").click();
  await last.locator("p").waitFor();
  await last.scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(out, "compaction.png") });
  console.log(
    JSON.stringify({
      dividers: count,
      label: await last.locator("summary").innerText(),
      summary: await last.locator("p").innerText(),
    }),
  );
} catch (error) {
  if (page) {
    await page.screenshot({ path: join(out, "compaction-failure.png") }).catch(() => undefined);
  }
  throw error;
} finally {
  await browser.close();
}
