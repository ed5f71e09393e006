// Attachments in a real browser (Debian's Chromium through playwright-core) against a running
// `stead serve` whose model is an upstream double that sees images: a screenshot picked with
// the file picker is uploaded, sent with a question and shown inline under the message, and
// the double's answer (it says how many images it was shown) appears; then one image pasted
// into the message box and one dropped on the composer go out together.
// Run by tests/e2e/multimodal.rs as `node attach.mjs BASE_URL OUT_DIR SESSION_ID`.

import { inBrowser } from "./harness.mjs";

const [base, out, id] = process.argv.slice(2);

/** A PNG drawn in the page: a coloured panel with a caption, like a small screenshot. */
const drawn = (page, colour, caption) =>
  page.evaluate(
    ([colour, caption]) => {
      const canvas = document.createElement("canvas");
      canvas.width = 320;
      canvas.height = 180;
      const g = canvas.getContext("2d");
      g.fillStyle = colour;
      g.fillRect(0, 0, 320, 180);
      g.fillStyle = "white";
      g.font = "bold 28px sans-serif";
      g.fillText(caption, 20, 100);
      return canvas.toDataURL("image/png").split(",")[1];
    },
    [colour, caption],
  );

/** Dispatches a paste (on the message box) or a drop (on the composer) carrying one PNG. */
const deliver = (page, kind, base64) =>
  page.evaluate(
    ([kind, base64]) => {
      const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
      const data = new DataTransfer();
      data.items.add(new File([bytes], `${kind}.png`, { type: "image/png" }));
      if (kind === "paste") {
        const box = document.querySelector(".composer textarea");
        box.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true }));
      } else {
        const form = document.querySelector(".composer");
        form.dispatchEvent(new DragEvent("dragover", { dataTransfer: data, bubbles: true, cancelable: true }));
        form.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
      }
    },
    [kind, base64],
  );

const pendingCount = (page, n) =>
  page.waitForFunction(
    (n) => document.querySelectorAll('[aria-label="Files to send"] img').length === n,
    n,
    { timeout: 15000 },
  );

await inBrowser(out, "attach", async (page, { step, shot }) => {
  await page.goto(`${base}/#/sessions/${id}`);
  await page.getByTestId("connection").filter({ hasText: "connected" }).waitFor({ timeout: 15000 });

  // The picker.
  const screenshot = await drawn(page, "#b91c1c", "Build failed: 3 errors");
  await page.getByLabel("Attach files").setInputFiles({
    name: "screenshot.png",
    mimeType: "image/png",
    buffer: Buffer.from(screenshot, "base64"),
  });
  await pendingCount(page, 1);
  await page.getByLabel("Message").fill("What is on this screenshot?");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.locator('[data-role="assistant"]', { hasText: "I was shown 1 image" }).waitFor({ timeout: 15000 });
  const inline = page.getByRole("list", { name: "Attachments" }).locator("img").first();
  await inline.waitFor({ timeout: 15000 });
  await page.waitForFunction(() => {
    const img = document.querySelector('[aria-label="Attachments"] img');
    return img && img.complete && img.naturalWidth === 320;
  });
  if ((await page.locator('[aria-label="Files to send"]').count()) !== 0) throw new Error("the sent file is still pending");
  await shot(page, "39-attach-screenshot");
  step("a picked screenshot was sent, shown inline, and the model was shown it");

  // Paste and drop.
  await deliver(page, "paste", await drawn(page, "#1d4ed8", "Pasted"));
  await pendingCount(page, 1);
  await deliver(page, "drop", await drawn(page, "#15803d", "Dropped"));
  await pendingCount(page, 2);
  await shot(page, "40-attach-paste-drop");
  await page.getByLabel("Message").fill("And these two?");
  await page.getByRole("button", { name: "Send", exact: true }).click();
  await page.locator('[data-role="assistant"]', { hasText: "I was shown 3 images" }).waitFor({ timeout: 15000 });
  step("a pasted and a dropped image went out together");
});
