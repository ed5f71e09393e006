// End to end in a real browser (Debian's Chromium through playwright-core, no browser
// download) against a running `stead serve` whose model is a scripted upstream double:
// create a session, send a message and see streamed text; an approval card appears; approve it
// in a second tab and see the first tab update; the tool result shows; the replay slider shows
// an earlier state; fork opens a new session; the gateway log lists the calls. A screenshot of
// each page goes to OUT_DIR. Run by tests/web_ui.rs as `node e2e.mjs BASE_URL OUT_DIR`.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [base, out] = process.argv.slice(2);
mkdirSync(out, { recursive: true });
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
});
const step = (name) => console.log(JSON.stringify({ step: name }));
const shot = (page, name) => page.screenshot({ path: join(out, `${name}.png`), fullPage: true });

let one;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  // Every WebSocket URL a page opens: none may carry a key or a long-lived token.
  const sockets = [];
  context.on("page", (page) => page.on("websocket", (ws) => sockets.push(ws.url())));
  one = await context.newPage();
  one.on("pageerror", (e) => console.error("page error:", e.message));
  one.on("websocket", (ws) => sockets.push(ws.url()));

  await one.goto(`${base}/`);
  await one.getByRole("heading", { name: "Sessions" }).waitFor();
  await shot(one, "1-sessions");
  step("sessions page");

  await one.getByRole("button", { name: "Create session" }).click();
  await one.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/);
  const sessionUrl = one.url();
  await one.getByTestId("connection").filter({ hasText: "connected" }).waitFor();
  step("session created");

  await one.getByLabel("Message").fill("Tell me about the weather.");
  await one.getByRole("button", { name: "Send" }).click();
  // Streamed text: the answer grows in the streaming bubble, then settles as a message.
  await one.locator('[data-role="streaming"]').waitFor({ timeout: 15000 });
  await one.locator('[data-role="assistant"]', { hasText: "The weather is sunny" }).waitFor({ timeout: 15000 });
  await shot(one, "2-streamed");
  step("streamed text");

  await one.getByLabel("Message").fill("What time is it?");
  await one.getByRole("button", { name: "Send" }).click();
  const card = one.getByRole("group", { name: "Approval for clock" });
  await card.waitFor({ timeout: 15000 });
  await shot(one, "3-approval-card");
  step("approval card");

  // A second tab decides; the first one updates live.
  const two = await context.newPage();
  await two.goto(sessionUrl);
  await two.getByRole("group", { name: "Approval for clock" }).getByRole("button", { name: "Approve", exact: true }).click();
  await one.locator(".decision", { hasText: "Approved by" }).waitFor({ timeout: 15000 });
  await one.locator(".result").waitFor({ timeout: 15000 });
  await one.locator('[data-role="assistant"]', { hasText: "It is noon" }).waitFor({ timeout: 15000 });
  await one.getByTestId("session-status").filter({ hasText: "idle" }).waitFor();
  await shot(one, "4-approved-in-another-tab");
  step("approved in a second tab; tool result shown");

  // Schedules: two created over REST appear with their next due time; one is cancelled from
  // the page.
  const sessionPath = `/v1/sessions/${sessionUrl.split("/").pop()}/schedules`;
  for (const body of [
    { key: "standup", message: { text: "Time for the standup" }, cron: "0 9 * * 1-5", tz: "Europe/Paris" },
    { key: "follow-up", message: { text: "Did the deploy go well?" }, delay_secs: 3600 },
  ]) {
    const status = await one.evaluate(
      ([path, body]) =>
        fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }).then(
          (r) => r.status,
        ),
      [sessionPath, body],
    );
    if (status !== 201) throw new Error(`creating a schedule answered ${status}`);
  }
  const schedules = one.getByRole("region", { name: "Schedules" });
  await schedules.locator('tr[data-schedule="follow-up"]').waitFor({ timeout: 15000 });
  await schedules.locator('tr[data-schedule="standup"]', { hasText: "Europe/Paris" }).waitFor();
  const due = await schedules.locator('tr[data-schedule="follow-up"] [data-testid="next-due"]').textContent();
  if (!/in (59 min|60 min|1 h)/.test(due)) throw new Error(`the follow-up should be due in an hour: ${due}`);
  await shot(one, "9-schedules");
  await schedules.getByRole("button", { name: "Cancel schedule follow-up" }).click();
  await schedules.locator('tr[data-schedule="follow-up"]').waitFor({ state: "detached", timeout: 15000 });
  await schedules.locator('tr[data-schedule="standup"]').waitFor();
  step("schedules listed with their next due time; one cancelled from the page");

  // Replay: an earlier step shows an earlier state.
  await one.getByRole("link", { name: "Replay this session" }).click();
  await one.getByRole("heading", { name: /Replay/ }).waitFor();
  const state = one.getByTestId("replay-state");
  await state.filter({ hasText: "It is noon" }).waitFor({ timeout: 15000 });
  const latest = await state.textContent();
  await one.getByRole("button", { name: "Go to step 3" }).click();
  await one.waitForFunction(
    (previous) => document.querySelector('[data-testid="replay-state"]')?.textContent !== previous,
    latest,
  );
  const early = await state.textContent();
  if (early.includes("It is noon")) throw new Error("step 3's state should not hold the final answer");
  await shot(one, "5-replay");
  step("replay shows an earlier state");

  const before = one.url();
  await one.getByRole("button", { name: "Fork from here" }).click();
  await one.waitForURL((url) => url.toString() !== before && /#\/sessions\//.test(url.toString()));
  if (one.url() === sessionUrl) throw new Error("the fork should be a new session");
  await one.getByRole("heading", { name: /Session/ }).waitFor();
  await shot(one, "6-fork");
  step("fork opened a new session");

  await one.goto(`${base}/#/gateway`);
  const rows = one.getByTestId("gateway-log").locator("tbody tr");
  await one.waitForFunction(() => document.querySelectorAll('[data-testid="gateway-log"] tbody tr').length >= 3, null, {
    timeout: 15000,
  });
  await shot(one, "7-gateway-log");
  step(`gateway log lists ${await rows.count()} calls`);

  // Credentials: WebSockets were opened with one-minute tickets only; the stored token of a
  // session that closed is dropped.
  if (sockets.length === 0) throw new Error("no WebSocket was opened");
  for (const url of sockets) {
    const params = new URL(url).searchParams;
    const ticket = params.get("ticket") ?? "";
    const expires = Number(ticket.split(".")[2]);
    if (params.has("token") || !(expires > 0 && expires - Date.now() / 1000 <= 120)) {
      throw new Error(`a WebSocket URL carried a long-lived credential: ${url}`);
    }
  }
  step(`${sockets.length} WebSockets opened with one-minute tickets`);
  const sessionId = sessionUrl.split("/").pop();
  const stored = () => one.evaluate(() => JSON.parse(localStorage.getItem("stead.sessionTokens") ?? "{}"));
  const before_close = await stored();
  if (!before_close[sessionId]?.token || !("expiresAt" in before_close[sessionId])) {
    throw new Error(`the session's token should be stored with its expiry: ${JSON.stringify(before_close)}`);
  }
  await one.goto(`${base}/`);
  await one.getByRole("heading", { name: "Sessions" }).waitFor();
  await one.evaluate((id) => fetch(`/v1/sessions/${id}`, { method: "DELETE" }), sessionId);
  await one.waitForFunction(
    (id) => !(id in JSON.parse(localStorage.getItem("stead.sessionTokens") ?? "{}")),
    sessionId,
    { timeout: 15000 },
  );
  step("a closed session's token was dropped from storage");

  // A phone-width look at the session list.
  await one.setViewportSize({ width: 390, height: 844 });
  await one.goto(`${base}/`);
  await one.getByRole("heading", { name: "Sessions" }).waitFor();
  await shot(one, "8-phone-sessions");
  step("phone width");
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  // What the page showed when it failed.
  if (one) {
    await shot(one, "failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await one.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
