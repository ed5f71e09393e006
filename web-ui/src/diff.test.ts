import { describe, expect, it } from "vitest";

import { diff } from "./diff";

describe("diff", () => {
  it("lists the paths that changed, added and removed", () => {
    const a = { status: "running", usage: { prompt_tokens: 5 }, transcript: [{ text: "hi" }] };
    const b = { status: "idle", usage: { prompt_tokens: 5, completion_tokens: 3 }, transcript: [{ text: "hi" }, { text: "yo" }] };
    expect(diff(a, b)).toEqual([
      { path: "status", before: "running", after: "idle" },
      { path: "transcript[1]", before: undefined, after: { text: "yo" } },
      { path: "usage.completion_tokens", before: undefined, after: 3 },
    ]);
    expect(diff(a, a)).toEqual([]);
  });
});
