import { describe, expect, it } from "vitest";

import { SteadChatTransport } from "../src/transport.js";

describe("SteadChatTransport", () => {
  it("refuses to regenerate an answer, before any request", async () => {
    let fetched = 0;
    const transport = new SteadChatTransport({
      baseUrl: "http://127.0.0.1:1",
      token: () => "t",
      fetch: (async () => {
        fetched += 1;
        return new Response("{}");
      }) as typeof fetch,
    });
    await expect(
      transport.sendMessages({ trigger: "regenerate-message", chatId: "s", messageId: "m", messages: [], abortSignal: undefined }),
    ).rejects.toThrow(/append-only/);
    expect(fetched).toBe(0);
  });
});
