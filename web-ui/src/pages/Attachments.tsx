// Files on session messages (docs/artifacts.md, docs/multimodal.md): the composer's pending
// attachments — added by the picker, by dropping files on the composer or by pasting (a
// screenshot) into the message — each uploaded into the session at once; and a message's
// attachments shown under it, images inline. Artifacts are fetched with the page's credentials
// (an `<img src>` could not send them) and shown from object URLs.

import { api, type Artifact, type Attachment, type Credentials } from "@stead/client";
import { useEffect, useRef, useState } from "react";

function size(bytes: number) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

const isAudio = (type: string) => type.startsWith("audio/");
const isImage = (type: string) => ["image/png", "image/jpeg", "image/gif", "image/webp"].includes(type);

/** An artifact's bytes as an object URL, fetched with `creds` (revoked when unmounted). */
function useArtifactUrl(creds: Credentials, id: string) {
  const [url, setUrl] = useState<string | null>(null);
  useEffect(() => {
    let made: string | null = null;
    let live = true;
    api
      .artifactBlob(creds, id)
      .then((blob) => {
        if (!live) return;
        made = URL.createObjectURL(blob);
        setUrl(made);
      })
      .catch(() => undefined);
    return () => {
      live = false;
      if (made) URL.revokeObjectURL(made);
    };
  }, [id, creds.bearer]);
  return url;
}

function Thumbnail({ creds, id, type, label }: { creds: Credentials; id: string; type: string; label: string }) {
  const url = useArtifactUrl(creds, id);
  if (isImage(type)) {
    return url ? <img src={url} alt={label} className="attachment-image" /> : <span className="attachment-file">{label}</span>;
  }
  if (isAudio(type) && url) {
    return <audio controls src={url} aria-label={label} className="attachment-audio" />;
  }
  return url ? (
    <a href={url} download={`artifact-${id.slice(0, 8)}`} className="attachment-file">
      {label}
    </a>
  ) : (
    <span className="attachment-file">{label}</span>
  );
}

/** The files a tool's result names (kept as artifacts: docs/artifacts.md, "Tools' files"):
 *  its content blocks with an `artifact_id`, or resources holding one. */
export function resultFiles(result: unknown): Attachment[] {
  const content = (result as { content?: unknown } | null)?.content;
  if (!Array.isArray(content)) return [];
  return content.flatMap((block: any) => {
    const file = block?.artifact_id ? block : block?.resource?.artifact_id ? block.resource : null;
    if (!file || typeof file.artifact_id !== "string") return [];
    return [
      {
        artifact_id: file.artifact_id,
        content_type: String(file.content_type ?? file.mimeType ?? "application/octet-stream"),
        size: Number(file.bytes ?? 0),
        sha256: String(file.sha256 ?? ""),
      },
    ];
  });
}

/** A sent message's attachments. */
export function MessageAttachments({ creds, attachments }: { creds: Credentials; attachments: Attachment[] }) {
  return (
    <ul className="attachments" aria-label="Attachments">
      {attachments.map((a) => (
        <li key={a.artifact_id}>
          <Thumbnail creds={creds} id={a.artifact_id} type={a.content_type} label={`${a.content_type}, ${size(a.size)}`} />
        </li>
      ))}
    </ul>
  );
}

/** The composer's attachments: uploaded as they are added, sent with the next message. */
export function usePendingFiles(sessionId: string, creds: Credentials) {
  const [files, setFiles] = useState<Artifact[]>([]);
  const [uploading, setUploading] = useState(0);
  const [error, setError] = useState<string | null>(null);
  const add = (list: FileList | File[] | null | undefined) => {
    const picked = Array.from(list ?? []);
    if (picked.length === 0) return;
    setError(null);
    setUploading((n) => n + picked.length);
    for (const file of picked) {
      api
        .uploadArtifact(creds, sessionId, file)
        .then((artifact) => setFiles((now) => [...now, artifact]))
        .catch((e) => setError(`${file.name || "the file"}: ${e.message}`))
        .finally(() => setUploading((n) => n - 1));
    }
  };
  const remove = (id: string) => setFiles((now) => now.filter((f) => f.id !== id));
  const clear = () => setFiles([]);
  /** An artifact uploaded already (a voice recording). */
  const put = (artifact: Artifact) => setFiles((now) => [...now, artifact]);
  return { files, uploading, error, add, remove, clear, put };
}

export type PendingFiles = ReturnType<typeof usePendingFiles>;

/** The picker and the pending files, above the composer's buttons. */
export function PendingAttachments({ creds, pending }: { creds: Credentials; pending: PendingFiles }) {
  const input = useRef<HTMLInputElement>(null);
  return (
    <div className="pending-attachments">
      <input
        ref={input}
        type="file"
        multiple
        hidden
        aria-label="Attach files"
        onChange={(e) => {
          pending.add(e.currentTarget.files);
          e.currentTarget.value = "";
        }}
      />
      <button type="button" onClick={() => input.current?.click()}>
        Attach…
      </button>
      {pending.uploading > 0 && <span role="status">uploading {pending.uploading}…</span>}
      {pending.error && (
        <span role="alert" className="error">
          {pending.error}
        </span>
      )}
      {pending.files.length > 0 && (
        <ul className="attachments" aria-label="Files to send">
          {pending.files.map((f) => (
            <li key={f.id}>
              <Thumbnail creds={creds} id={f.id} type={f.content_type} label={`${f.content_type}, ${size(f.size)}`} />
              <button type="button" className="link" aria-label={`Remove ${f.content_type}`} onClick={() => pending.remove(f.id)}>
                ×
              </button>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
