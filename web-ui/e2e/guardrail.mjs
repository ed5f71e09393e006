// A tool result an `approve` guardrail holds, in a real browser (Debian's Chromium through
// playwright-core) against a running `stead serve`: the inbox's card shows the verdicts and the
// result with the injected text and the redacted address marked; letting the model read it
// lets the turn finish, and the session page marks the same spans in the tool's result.
// Run by tests/e2e/guardrails_tools.rs as `node guardrail.mjs BASE_URL OUT_DIR SESSION_ID`.

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
const expectText = async (locator, wanted, what) => {
  const text = await locator.innerText();
  if (!text.includes(wanted)) throw new Error(`${what}: ${text}`);
};

let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${base}/#/approvals`);
  const card = page.getByRole("article", { name: `Held result in ${id.slice(0, 8)}` });
  await card.waitFor({ timeout: 15000 });
  const verdicts = card.getByRole("list", { name: "Guardrail verdicts" });
  await expectText(verdicts, "injection held it for a person: INJECTION, EXFIL", "the verdicts");
  await expectText(verdicts, "pii-results redacted EMAIL", "the verdicts");
  await expectText(card.getByTestId("guardrail-found").first(), "Ignore all previous instructions", "the span");
  await expectText(card.getByTestId("guardrail-redacted").first(), "[EMAIL_1]", "the placeholder");
  await shot(page, "37-guardrail-inbox");
  step("the inbox shows the verdicts and the held result, spans marked");

  await card.getByRole("button", { name: "Let the model read it" }).click();
  await card.waitFor({ state: "detached", timeout: 15000 });
  await page.goto(`${base}/#/sessions/${id}`);
  await page.locator('[data-role="assistant"]', { hasText: "The review likes the widget." }).waitFor({ timeout: 15000 });
  await page.getByTestId("session-status").filter({ hasText: "idle" }).waitFor();
  const tool = page.getByRole("article", { name: "Tool call fetch_page" });
  await expectText(tool.getByTestId("guardrail-redacted").first(), "[EMAIL_1]", "the session's placeholder");
  await expectText(tool.getByTestId("guardrail-found").first(), "Ignore all previous instructions", "the session's span");
  await shot(page, "38-guardrail-approved");
  step("approved: the model read it and answered; the session page marks the spans");
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  if (page) {
    await shot(page, "guardrail-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
