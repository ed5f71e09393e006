// The demo flow on the real default model, in a real browser (Debian's Chromium through
// playwright-core): a new demo session; "hello" → a greeting back, no tool; "remember" a note (no approval needed) → a reply that
// confirms it; a calculation → a reply with the number; ask the agent to forget the note → an
// approval card for `forget` appears → reject it → the reply says it was not done; ask again
// and approve → the tool's result names the deleted note, and so does the reply. After
// each turn the reply bubble's text is printed as `{"reply": {step, text}}` (the Rust test
// checks them against the journal). A screenshot of each step goes to OUT_DIR. Run by
// tests/local_model/web_demo.rs as `node demo.mjs BASE_URL OUT_DIR`.

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
// A real model on two cores: a turn takes seconds, not milliseconds.
const turn = { timeout: 120000 };
// The text of the newest reply bubble once the turn is over (there are `count` replies then).
const reply = async (page, name, count) => {
  const bubbles = page.locator('p.msg[data-role="assistant"]');
  await bubbles.nth(count - 1).waitFor(turn);
  await page.getByTestId("session-status").filter({ hasText: "idle" }).waitFor(turn);
  const text = await bubbles.last().innerText();
  console.log(JSON.stringify({ reply: { step: name, text } }));
  return text;
};

let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${base}/`);
  await page.getByRole("heading", { name: "Sessions" }).waitFor();
  await page.getByRole("button", { name: "Create session" }).click();
  await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
  await page.getByTestId("connection").filter({ hasText: "connected" }).waitFor();
  step("demo session created");

  await page.getByLabel("Message").fill("hello");
  await page.getByRole("button", { name: "Send" }).click();
  await reply(page, "greeting", 1);
  await shot(page, "demo-0-greeted");
  step("greeted back, no tool called");

  await page.getByLabel("Message").fill("Remember that my wifi password is hunter2.");
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator(".result", { hasText: "hunter2" }).waitFor(turn);
  await reply(page, "remember", 2);
  await shot(page, "demo-1-remembered");
  step("the note was stored (remember needs no approval)");

  await page.getByLabel("Message").fill("What is 17 * 23?");
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator(".result", { hasText: "391" }).waitFor(turn);
  await reply(page, "calculator", 3);
  await shot(page, "demo-2-calculated");
  step("the calculator's result is in the reply");

  await page.getByLabel("Message").fill("Forget the note about my wifi password.");
  await page.getByRole("button", { name: "Send" }).click();
  const card = page.getByRole("group", { name: "Approval for forget" });
  await card.waitFor(turn);
  await shot(page, "demo-3-approval-card");
  step("an approval card for forget appeared");

  await card.getByRole("button", { name: "Reject", exact: true }).click();
  await page.locator(".decision", { hasText: "Rejected by" }).waitFor(turn);
  await reply(page, "forget-rejected", 4);
  await shot(page, "demo-4-rejected");
  step("rejected: the reply says it was not done, the note stays");

  await page.getByLabel("Message").fill("Forget the note about my wifi password.");
  await page.getByRole("button", { name: "Send" }).click();
  const second = page.getByRole("group", { name: "Approval for forget" });
  await second.waitFor(turn);
  await second.getByRole("button", { name: "Approve", exact: true }).click();
  await page.locator(".decision", { hasText: "Approved by" }).waitFor(turn);
  await page.locator(".result", { hasText: /"deleted":\s*"/ }).waitFor(turn);
  await reply(page, "forget-approved", 5);
  await shot(page, "demo-5-forgotten");
  step("approved: the note is gone");
  console.log(JSON.stringify({ done: true, session: page.url().split("/").pop() }));
} catch (error) {
  if (page) {
    await shot(page, "demo-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
