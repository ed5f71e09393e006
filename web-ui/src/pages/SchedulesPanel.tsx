// A session's schedules (docs/schedules.md): each with its timing, message, next due time and
// how often it fired, and a button that cancels a pending one. The list is read again whenever
// the session's journal moves (a schedule created, fired or cancelled is a journal event).

import { useCallback, useEffect, useState } from "react";

import { api, ApiError, type Credentials } from "@stead/client";
import type { ScheduleView } from "@stead/client";

/** "every 1 h", "cron 0 9 * * 1-5 (Europe/Paris)", … */
export function timing(s: ScheduleView): string {
  switch (s.kind) {
    case "cron":
      return `cron ${s.cron} (${s.tz ?? "UTC"})`;
    case "every":
      return `every ${duration(s.every_secs ?? 0)}`;
    case "delay":
      return `once, ${duration(s.delay_secs ?? 0)} after creation`;
    case "at":
      return `once, at ${new Date(s.at ?? "").toLocaleString()}`;
  }
}

function duration(secs: number): string {
  if (secs % 86400 === 0) return `${secs / 86400} d`;
  if (secs % 3600 === 0) return `${secs / 3600} h`;
  if (secs % 60 === 0) return `${secs / 60} min`;
  return `${secs} s`;
}

/** "in 5 min", "2 h ago": how far `at` is from `now`. */
export function relative(at: string, now: number): string {
  const secs = Math.round((new Date(at).getTime() - now) / 1000);
  const abs = Math.abs(secs);
  const text =
    abs < 60 ? `${abs} s` : abs < 3600 ? `${Math.round(abs / 60)} min` : abs < 86400 ? `${Math.round(abs / 3600)} h` : `${Math.round(abs / 86400)} d`;
  return secs >= 0 ? `in ${text}` : `${text} ago`;
}

export function SchedulesPanel({ id, creds, lastSeq }: { id: string; creds: Credentials; lastSeq: number }) {
  const [schedules, setSchedules] = useState<ScheduleView[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [now, setNow] = useState(Date.now());

  const load = useCallback(async () => {
    try {
      setSchedules((await api.schedules(creds, id)).schedules);
      setError(null);
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
    // The credential's identity, not the object, decides when to read again.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [id, creds.bearer, creds.baseUrl]);

  useEffect(() => {
    void load();
  }, [load, lastSeq]);

  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, []);

  const cancel = async (key: string) => {
    try {
      await api.cancelSchedule(creds, id, key);
    } catch (e) {
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
    await load();
  };

  if (schedules === null && error === null) return null;
  return (
    <section className="schedules" aria-labelledby="schedules-title">
      <h2 id="schedules-title">Schedules</h2>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {schedules && schedules.length === 0 && <p className="empty">No schedules.</p>}
      {schedules && schedules.length > 0 && (
        <table className="list">
          <thead>
            <tr>
              <th scope="col">Key</th>
              <th scope="col">When</th>
              <th scope="col">Message</th>
              <th scope="col">Next due</th>
              <th scope="col">Fired</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {schedules.map((s) => (
              <tr key={s.key} data-schedule={s.key} className={s.status}>
                <td>
                  <code>{s.key}</code>
                </td>
                <td>{timing(s)}</td>
                <td>{s.message.text ?? `callback ${s.message.callback}`}</td>
                <td data-testid="next-due">
                  {s.next_due_at ? (
                    <time dateTime={s.next_due_at} title={s.next_due_at}>
                      {new Date(s.next_due_at).toLocaleString()} ({relative(s.next_due_at, now)})
                    </time>
                  ) : (
                    "done"
                  )}
                </td>
                <td>{s.fired}</td>
                <td>
                  {s.status === "pending" && (
                    <button type="button" onClick={() => void cancel(s.key)} aria-label={`Cancel schedule ${s.key}`}>
                      Cancel
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
