// Knowledge in a real browser (Debian's Chromium through playwright-core) against a fresh
// `stead serve` on loopback (open mode: no key) with the real local embedding model: create a
// collection, add three documents through the form, ask a question in exact and hybrid mode and
// see the right document ranked first. Run as `node knowledge.mjs BASE_URL OUT_DIR`; a
// screenshot goes to OUT_DIR.

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
// Embedding on a CPU takes a moment (the first call loads the model).
const slow = { timeout: 15000 };

const DOCUMENTS = [
  {
    id: "tea",
    text: "Green tea is steeped at 80 degrees Celsius for two minutes; black tea takes boiling water and four minutes.",
    metadata: '{"topic":"drinks"}',
  },
  {
    id: "bikes",
    text: "To fix a flat bicycle tyre, remove the wheel, find the puncture, patch the inner tube and pump it up again.",
    metadata: '{"topic":"repair"}',
  },
  {
    id: "rust",
    text: "Rust's borrow checker makes sure references never outlive the data they point to.",
    metadata: '{"topic":"code"}',
  },
];
const QUESTION = "How hot should the water be for green tea?";

let page;
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${base}/#/knowledge`);
  await page.getByRole("heading", { name: "Knowledge", exact: true }).waitFor();
  step("knowledge page");

  await page.getByLabel("Collection name", { exact: true }).fill("handbook");
  await page.getByRole("button", { name: "Create collection", exact: true }).click();
  await page.waitForURL(/#\/knowledge\/handbook$/, slow);
  await page.locator('[data-testid="knowledge-collections"] tr[data-collection="handbook"]').waitFor(slow);
  await page.getByRole("heading", { name: /Collection handbook/ }).waitFor(slow);
  step("collection handbook created and selected");

  const documents = page.getByRole("region", { name: "Documents", exact: true });
  for (const doc of DOCUMENTS) {
    await documents.getByLabel("Document id", { exact: true }).fill(doc.id);
    await documents.getByLabel("Document text", { exact: true }).fill(doc.text);
    await documents.getByLabel("Metadata (JSON)", { exact: true }).fill(doc.metadata);
    await documents.getByRole("button", { name: "Add document", exact: true }).click();
    await documents.getByTestId("document-saved").filter({ hasText: `Document ${doc.id} created` }).waitFor(slow);
    await documents.locator(`tr[data-document="${doc.id}"]`).waitFor(slow);
  }
  const listed = await documents.locator("tbody tr").count();
  if (listed !== 3) throw new Error(`three documents should be listed, not ${listed}`);
  // The collection now holds the model's embeddings: its counts and model are shown.
  await page.getByRole("heading", { name: /3 documents · 3 chunks/ }).waitFor(slow);
  const model = await page.locator('tr[data-collection="handbook"] td').nth(1).textContent();
  if (model.includes("empty")) throw new Error(`the collection should name its model: ${model}`);
  step("three documents added through the form");

  const search = page.getByRole("region", { name: "Search", exact: true });
  const first = async (mode) => {
    await search.getByLabel("Query", { exact: true }).fill(QUESTION);
    await search.getByLabel("Top k", { exact: true }).fill("3");
    await search.getByLabel("Mode", { exact: true }).selectOption(mode);
    await search.getByRole("button", { name: "Search", exact: true }).click();
    const results = search.locator(`[data-testid="knowledge-results"][data-mode="${mode}"]`);
    await results.waitFor(slow);
    const ranked = await results.locator('[data-testid="knowledge-result"]').evaluateAll((items) =>
      items.map((li) => li.getAttribute("data-document")),
    );
    if (ranked.length === 0 || ranked.length > 3) throw new Error(`${mode}: 1 to 3 results expected: ${ranked}`);
    if (ranked[0] !== "tea") throw new Error(`${mode}: the first result should be tea, not ${ranked.join(", ")}`);
    const shown = await results.locator('[data-testid="knowledge-result"]').first().textContent();
    if (!shown.includes("80 degrees Celsius") || !/\d\.\d{3}/.test(shown) || !shown.includes('"topic":"drinks"')) {
      throw new Error(`${mode}: the first result should show its chunk, score and metadata: ${shown}`);
    }
    return ranked;
  };

  const exact = await first("exact");
  await shot(page, "12-knowledge");
  step(`exact search ranks ${exact.join(", ")}`);

  const hybrid = await first("hybrid");
  step(`hybrid search ranks ${hybrid.join(", ")}`);
  console.log(JSON.stringify({ done: true }));
} catch (error) {
  if (page) {
    await shot(page, "knowledge-failure").catch(() => undefined);
    console.error("page text at the failure:\n" + (await page.innerText("body").catch(() => "?")));
  }
  throw error;
} finally {
  await browser.close();
}
