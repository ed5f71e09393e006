// A voice message in a real browser (Debian's Chromium through playwright-core) against
// `stead serve` with its speech model: Chromium's fake microphone plays a recorded sentence
// (`--use-file-for-fake-audio-capture`), the page records it (MediaRecorder: WebM/Opus),
// uploads it, has it transcribed, and puts the words in the message box with the recording
// attached; the message goes out with the audio, which plays back under it.
// Run by tests/local_model/speech.rs as `node voice.mjs BASE_URL OUT_DIR SESSION_ID WAV SECONDS`.

import { inBrowser } from "./harness.mjs";

const [base, out, id, wav, seconds] = process.argv.slice(2);

await inBrowser(
  out,
  "voice",
  async (page, { step, shot }) => {
    await page.goto(`${base}/#/sessions/${id}`);
    await page.getByTestId("connection").filter({ hasText: "connected" }).waitFor({ timeout: 15000 });
    await page.getByRole("button", { name: "Record voice" }).click();
    await page.getByRole("button", { name: /^Stop/ }).waitFor({ timeout: 10000 });
    await page.waitForTimeout(Number(seconds) * 1000);
    await page.getByRole("button", { name: /^Stop/ }).click();
    step("recorded");
    // Transcribed into the message box, the recording attached.
    await page.waitForFunction(() => document.querySelector(".composer textarea").value.trim().length > 0, null, {
      timeout: 120000,
    });
    const said = await page.getByLabel("Message").inputValue();
    console.log(JSON.stringify({ transcript: said }));
    await page.locator('[aria-label="Files to send"] audio').waitFor({ timeout: 15000 });
    await shot(page, "41-voice-transcribed");
    step("transcribed into the composer");
    await page.getByRole("button", { name: "Send", exact: true }).click();
    await page.locator('[data-role="user"]', { hasText: said.slice(0, 20) }).waitFor({ timeout: 15000 });
    await page.locator('[aria-label="Attachments"] audio').waitFor({ timeout: 15000 });
    await page.locator('[data-role="assistant"]').first().waitFor({ timeout: 240000 });
    await shot(page, "42-voice-sent");
    step("sent with the recording attached");
  },
  {
    args: ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream", `--use-file-for-fake-audio-capture=${wav}`],
    permissions: ["microphone"],
  },
);
