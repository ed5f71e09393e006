// The web UI's sign-in in a real browser (Debian's Chromium through playwright-core) against a
// real OpenID Connect provider (npm oidc-provider, started by tests/e2e/web_ui_sso.rs): "Sign
// in" goes to the provider's login and consent pages, comes back with a code the page exchanges
// (PKCE) for an access token, and the signed-in person creates a session. Run as
// `node signin.mjs BASE_URL OUT_DIR`.

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
  await page.getByRole("button", { name: "Sign in" }).click();
  // The provider's development login form, then its consent page.
  await page.locator('input[name="login"]').waitFor({ timeout: 15000 });
  await page.locator('input[name="login"]').fill("alice");
  await page.locator('input[name="password"]').fill("any password");
  await shot(page, "35-provider-login");
  await page.locator('button[type="submit"]').click();
  step("signed in at the provider");
  const consent = page.locator('button[type="submit"]', { hasText: /continue/i });
  await consent.waitFor({ timeout: 15000 });
  await consent.click();
  step("consented");

  // Back in the web UI, signed in: its API calls carry the provider's access token.
  await page.waitForURL((url) => url.origin === new URL(base).origin && !url.search, { timeout: 15000 });
  await page.getByRole("heading", { name: "Sessions" }).waitFor();
  await page.getByLabel("New session for").selectOption("ops");
  await page.getByRole("button", { name: "Create session" }).click();
  await page.waitForURL(/#\/sessions\/[0-9a-f-]{36}$/, { timeout: 15000 });
  await page.getByTestId("connection").filter({ hasText: "connected" }).waitFor({ timeout: 15000 });
  await page.goto(`${base}/#/`);
  await page.locator("table").first().waitFor();
  await shot(page, "36-signed-in");
  step("a session created as the signed-in person");
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  if (page) {
    await shot(page, "signin-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
    console.error("url at the failure: " + page.url());
  }
  throw error;
} finally {
  await browser.close();
}
