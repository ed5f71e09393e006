// A voice message (docs/speech.md): the browser records the microphone (MediaRecorder: WebM
// with Opus in Chromium and Firefox), the recording is uploaded into the session as an
// artifact, transcribed by the server's speech model, and put into the composer — the words as
// the message's text, the recording as its attachment — for the person to read and send.

import { api, type Artifact, type Credentials } from "@stead/client";
import { useEffect, useRef, useState } from "react";

type State = { kind: "idle" } | { kind: "recording"; since: number } | { kind: "transcribing" };

export function VoiceRecorder({
  sessionId,
  creds,
  onRecorded,
}: {
  sessionId: string;
  creds: Credentials;
  /** The uploaded recording and what it says. */
  onRecorded: (audio: Artifact, text: string) => void;
}) {
  const [state, setState] = useState<State>({ kind: "idle" });
  const [error, setError] = useState<string | null>(null);
  const [now, setNow] = useState(Date.now());
  const recorder = useRef<MediaRecorder | null>(null);
  useEffect(() => {
    if (state.kind !== "recording") return;
    const timer = setInterval(() => setNow(Date.now()), 250);
    return () => clearInterval(timer);
  }, [state.kind]);
  useEffect(() => () => recorder.current?.stream.getTracks().forEach((t) => t.stop()), []);

  const start = async () => {
    setError(null);
    let stream: MediaStream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (e) {
      setError(`the microphone is not available: ${(e as Error).message}`);
      return;
    }
    const chunks: Blob[] = [];
    const media = new MediaRecorder(stream);
    media.ondataavailable = (e) => e.data.size > 0 && chunks.push(e.data);
    media.onstop = async () => {
      stream.getTracks().forEach((t) => t.stop());
      setState({ kind: "transcribing" });
      try {
        const blob = new Blob(chunks, { type: media.mimeType || "audio/webm" });
        const audio = await api.uploadArtifact(creds, sessionId, blob);
        const { text } = await api.transcribeArtifact(creds, audio.id);
        onRecorded(audio, text);
      } catch (e) {
        setError(`the voice message could not be transcribed: ${(e as Error).message}`);
      } finally {
        setState({ kind: "idle" });
      }
    };
    recorder.current = media;
    media.start();
    setState({ kind: "recording", since: Date.now() });
  };

  const seconds = state.kind === "recording" ? Math.max(0, Math.floor((now - state.since) / 1000)) : 0;
  return (
    <span className="voice">
      {state.kind === "recording" ? (
        <button type="button" className="recording" onClick={() => recorder.current?.stop()}>
          Stop ({Math.floor(seconds / 60)}:{String(seconds % 60).padStart(2, "0")})
        </button>
      ) : (
        <button type="button" disabled={state.kind === "transcribing"} onClick={start}>
          Record voice
        </button>
      )}
      {state.kind === "transcribing" && <span role="status">transcribing…</span>}
      {error && (
        <span role="alert" className="error">
          {error}
        </span>
      )}
    </span>
  );
}
