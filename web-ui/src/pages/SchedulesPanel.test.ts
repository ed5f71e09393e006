import { describe, expect, it } from "vitest";

import type { ScheduleView } from "@stead/client";
import { relative, timing } from "./SchedulesPanel";

const base: ScheduleView = {
  key: "k",
  kind: "every",
  message: { text: "x" },
  catch_up: "one",
  created_at: "2026-12-03T10:00:00Z",
  next_due_at: "2026-12-03T11:00:00Z",
  fired: 0,
  status: "pending",
};

describe("schedule list", () => {
  it("says when a schedule fires", () => {
    expect(timing({ ...base, kind: "every", every_secs: 3600 })).toBe("every 1 h");
    expect(timing({ ...base, kind: "every", every_secs: 90 })).toBe("every 90 s");
    expect(timing({ ...base, kind: "cron", cron: "0 9 * * 1-5", tz: "Europe/Paris" })).toBe(
      "cron 0 9 * * 1-5 (Europe/Paris)",
    );
    expect(timing({ ...base, kind: "cron", cron: "@daily" })).toBe("cron @daily (UTC)");
    expect(timing({ ...base, kind: "delay", delay_secs: 120 })).toBe("once, 2 min after creation");
  });

  it("says how far the next due time is", () => {
    const now = Date.parse("2026-12-03T10:00:00Z");
    expect(relative("2026-12-03T11:00:00Z", now)).toBe("in 1 h");
    expect(relative("2026-12-03T10:00:30Z", now)).toBe("in 30 s");
    expect(relative("2026-12-03T09:55:00Z", now)).toBe("5 min ago");
    expect(relative("2026-12-05T10:00:00Z", now)).toBe("in 2 d");
  });
});
