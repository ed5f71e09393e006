// A value read over REST again every `intervalMs` and whenever `refresh()` is called; the last
// error is kept beside the last good value.

import { useCallback, useEffect, useRef, useState } from "react";

import { ApiError } from "@stead/client";

export function errorText(e: unknown): string {
  return e instanceof ApiError ? `${e.code}: ${e.message}` : String(e);
}

export function usePolled<T>(read: () => Promise<T>, deps: unknown[], intervalMs: number | undefined) {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const reader = useRef(read);
  reader.current = read;
  const refresh = useCallback(async () => {
    try {
      setValue(await reader.current());
      setError(null);
    } catch (e) {
      setError(errorText(e));
    }
    // The caller's deps say when the reader changed meaning.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, deps);
  useEffect(() => {
    void refresh();
    if (!intervalMs) return;
    const timer = setInterval(() => void refresh(), intervalMs);
    return () => clearInterval(timer);
  }, [refresh, intervalMs]);
  return { value, error, setError, refresh };
}
