// What every browser script shares: Debian's Chromium through playwright-core (never a browser
// download), a page of 1280×900, `step` lines on stdout for the Rust test, full-page
// screenshots into OUT_DIR, and on a failure a screenshot and the page's text before the error
// goes up. Scripts written before it keep their own copy of the same lines.

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { chromium } from "playwright-core";

/** Runs `body(page, { step, shot })` in a fresh browser; `name` names the failure screenshot;
 *  `options.args` are more Chromium flags, `options.permissions` the page's (`microphone`). */
export async function inBrowser(out, name, body, options = {}) {
  mkdirSync(out, { recursive: true });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--no-first-run",
      ...(options.args ?? []),
    ],
  });
  const step = (what) => console.log(JSON.stringify({ step: what }));
  const shot = (page, file) => page.screenshot({ path: join(out, `${file}.png`), fullPage: true });
  let page;
  try {
    const context = await browser.newContext({
      viewport: { width: 1280, height: 900 },
      permissions: options.permissions ?? [],
    });
    page = await context.newPage();
    page.on("pageerror", (e) => console.error("page error:", e.message));
    await body(page, { step, shot });
    console.log(JSON.stringify({ done: true }));
  } catch (error) {
    if (page) {
      await shot(page, `${name}-failure`).catch(() => undefined);
      console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
    }
    throw error;
  } finally {
    await browser.close();
  }
}
