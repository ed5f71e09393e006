// Evaluations in a real browser (Debian's Chromium through playwright-core) against a running
// `stead serve` whose upstream double answers "what time" with a clock call on route `default`
// and without it on `alt`: "Add to dataset" on a recorded user message with an expectation from
// the form; a thumbs down with a correction, added as a case; a run of that dataset watched to
// its end, a second on `alt`; the compare page with the regressions, one opened side by side;
// and the compare page of two runs of 1,000 cases, timed. Run by tests/e2e/web_ui_evals.rs as
// `node evals.mjs BASE_URL OUT_DIR FIRST_SESSION SECOND_SESSION RUN_A RUN_B`.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, out, first, second, bigA, bigB] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const step = (name) => console.log(JSON.stringify({ step: name }));
const shot = (page, name, fullPage = true) => page.screenshot({ path: join(out, `${name}.png`), fullPage });

/** Starts a run of `web` on `route` from the evaluations page and waits for its end. */
async function runFromTheForm(page, route) {
  await page.goto(`${base}/#/evals`);
  await page.getByRole("heading", { name: "Evaluations" }).waitFor();
  const form = page.locator("form", { has: page.getByRole("button", { name: "Start run" }) });
  await form.getByLabel("Dataset", { exact: true }).selectOption("web");
  await form.getByLabel("Route", { exact: true }).selectOption(route);
  await form.getByLabel("Judge route", { exact: true }).selectOption("default");
  await form.getByLabel("Concurrency", { exact: true }).fill("2");
  await form.getByRole("button", { name: "Start run" }).click();
  await page.waitForURL(/#\/evals\/runs\/[0-9a-f-]{36}$/);
  await page.getByRole("progressbar", { name: "Cases done" }).waitFor();
  await page.getByTestId("run-status").filter({ hasText: "finished" }).waitFor({ timeout: 30000 });
  return page.url().split("/").pop();
}

let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));

  // A case from a recorded user message, with an expectation from the form.
  await page.goto(`${base}/#/sessions/${first}`);
  await page.locator('[data-role="assistant"]', { hasText: "It is noon." }).waitFor();
  await page.getByRole("button", { name: /^Add to dataset/ }).first().click();
  const caseForm = page.getByRole("form", { name: /Add the message at seq \d+ to a dataset/ });
  await caseForm.getByLabel("Dataset", { exact: true }).fill("web");
  await caseForm.getByRole("button", { name: "Add expectation" }).click();
  await caseForm.getByLabel("Expectation 1", { exact: true }).selectOption("tool_called");
  await caseForm.getByLabel("Value 1", { exact: true }).fill("clock");
  await caseForm.getByRole("button", { name: "Add case" }).click();
  await caseForm.getByRole("status").filter({ hasText: "to web (version 1)" }).waitFor();
  await shot(page, "20-add-to-dataset");
  step("a case from a user message, expecting a clock call");

  // A thumbs down with the wanted reply becomes a case graded by a judge.
  await page.goto(`${base}/#/sessions/${second}`);
  await page.locator('[data-role="assistant"]', { hasText: "It is noon." }).waitFor();
  await page.getByRole("button", { name: /^Bad reply/ }).click();
  const rating = page.getByRole("form", { name: /Feedback on the reply at seq \d+/ });
  await rating.getByLabel("Note", { exact: true }).fill("too vague");
  await rating.getByLabel("The reply that was wanted", { exact: true }).fill("It is twelve o'clock.");
  await rating.getByLabel("Also add as a case to dataset (optional)", { exact: true }).fill("web");
  await rating.getByRole("button", { name: "Save feedback" }).click();
  await page.getByRole("status").filter({ hasText: "Saved: bad reply. Added" }).waitFor();
  await shot(page, "21-feedback-case");
  step("a bad rating with its correction, added to the dataset");

  // Runs of the dataset: as recorded, then on a route that answers without the tool.
  const runA = await runFromTheForm(page, "default");
  await page.getByTestId("run-summary").filter({ hasText: "2 / 2 done · 2 passed · 0 failed" }).waitFor();
  await page.getByTestId("case-result").first().getByRole("button").click();
  await page.getByText("✓ tool_called clock").waitFor();
  await shot(page, "22-eval-run");
  step("a run watched to its end: both cases pass");
  const runB = await runFromTheForm(page, "alt");
  await page.getByTestId("run-summary").filter({ hasText: "2 / 2 done · 0 passed · 2 failed" }).waitFor();
  step("the run on alt: both cases fail");

  // Pick the two runs (A first) and compare.
  await page.goto(`${base}/#/evals`);
  await page.getByRole("checkbox", { name: `Pick run ${runA}` }).check();
  await page.getByRole("checkbox", { name: `Pick run ${runB}` }).check();
  await page.getByRole("button", { name: "Compare the two picked runs" }).click();
  await page.waitForURL(new RegExp(`#/evals/compare/${runA}/${runB}$`));
  await page.getByTestId("compare-summary").filter({ hasText: "2 regressed" }).waitFor();
  await shot(page, "23-eval-compare");
  await page.getByTestId("compare-row").first().getByRole("button").click();
  const sides = page.getByTestId("side-by-side");
  await sides.waitFor();
  const text = await sides.innerText();
  if (!text.includes("clock") || !text.includes("I cannot tell the time.")) {
    throw new Error(`both turns should be side by side: ${text}`);
  }
  await shot(page, "24-eval-compare-case");
  step("the compare page: two regressions, one opened side by side");

  // 1,000 rows: from the hash change to every row on the page.
  const started = Date.now();
  await page.evaluate((hash) => (window.location.hash = hash), `#/evals/compare/${bigA}/${bigB}`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="compare-row"]').length === 1000, null, {
    timeout: 60000,
  });
  const wall = Date.now() - started;
  const render = Number(await page.locator("[data-render-ms]").getAttribute("data-render-ms"));
  await page.getByTestId("compare-summary").filter({ hasText: "100 regressed" }).waitFor();
  await shot(page, "25-eval-compare-1000", false);
  console.log(JSON.stringify({ compare_1000: { wall_ms: wall, render_ms: Math.round(render) } }));
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  if (page) {
    await shot(page, "evals-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
