// The session's pinned memory block (docs/sessions.md, "Memory block"): what the agent keeps
// with its memory tool, shown after the system prompt in every model call and never compacted.
// Anyone who may read the session sees it; an operator may edit it (journaled as
// `memory_updated`). It is read again whenever the session's journal moves.

import { useCallback, useEffect, useState } from "react";

import { api, ApiError, type Credentials } from "@stead/client";

export function MemoryPanel({ id, creds, lastSeq }: { id: string; creds: Credentials; lastSeq: number }) {
  const [saved, setSaved] = useState<{ text: string; max: number } | null>(null);
  const [draft, setDraft] = useState<string | null>(null);
  const [note, setNote] = useState<string | null>(null);

  const load = useCallback(async () => {
    try {
      const block = await api.memory(creds, id);
      setSaved({ text: block.text, max: block.max_chars });
    } catch (e) {
      setNote(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
    // The credential's identity, not the object, decides when to read again.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [id, creds.bearer, creds.baseUrl]);

  useEffect(() => {
    void load();
  }, [load, lastSeq]);

  const save = async () => {
    if (draft === null) return;
    try {
      await api.setMemory(creds, id, draft);
      setDraft(null);
      setNote("saved");
      await load();
    } catch (e) {
      setNote(e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
    }
  };

  const text = draft ?? saved?.text ?? "";
  return (
    <section className="memory" aria-labelledby="memory-title">
      <h2 id="memory-title">Memory</h2>
      <p className="hint">
        Kept by the agent with its memory tool and shown to the model in every call; never summarised away.
      </p>
      <textarea
        aria-label="Memory block"
        value={text}
        rows={Math.max(3, text.split("\n").length + 1)}
        maxLength={saved?.max}
        onChange={(e) => {
          setDraft(e.target.value);
          setNote(null);
        }}
        placeholder="(empty)"
      />
      <p>
        <button type="button" onClick={save} disabled={draft === null || draft === saved?.text}>
          Save memory
        </button>{" "}
        <span data-testid="memory-note">{note ?? `${[...text].length} / ${saved?.max ?? "…"} characters`}</span>
      </p>
    </section>
  );
}
