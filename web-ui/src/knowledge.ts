// The Knowledge page's logic without React (docs/knowledge.md): the request bodies built from
// the forms (with the checks the page can make before asking the server), and how a
// collection, a document and a ranked chunk are shown.

import type { KnowledgeCollection, KnowledgeDocument, KnowledgeMode, KnowledgeResult } from "@stead/client";

export const MODES: KnowledgeMode[] = ["exact", "ann", "hybrid"];

/** A check that passed with a value, or failed with what to tell the user. */
export type Checked<T> = { ok: true; value: T } | { ok: false; error: string };

/**
 * An optional JSON object typed in a field: empty is `undefined` (the field is left out of the
 * request); anything else must parse as a JSON object.
 */
export function parseJsonObject(text: string, what: string): Checked<Record<string, unknown> | undefined> {
  if (text.trim() === "") return { ok: true, value: undefined };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { ok: false, error: `${what} is not valid JSON: ${e instanceof Error ? e.message : String(e)}` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { ok: false, error: `${what} must be a JSON object, like {"topic": "drinks"}` };
  }
  return { ok: true, value: value as Record<string, unknown> };
}

export interface DocumentForm {
  id: string;
  text: string;
  metadata: string;
}

/** The id and the body of `PUT /v1/collections/{c}/documents/{id}` from the add-document form. */
export function documentRequest(
  form: DocumentForm,
): Checked<{ id: string; body: { text: string; metadata?: Record<string, unknown> } }> {
  const id = form.id.trim();
  if (id === "") return { ok: false, error: "Enter a document id." };
  if (form.text.trim() === "") return { ok: false, error: "Enter the document's text." };
  const metadata = parseJsonObject(form.metadata, "Metadata");
  if (!metadata.ok) return metadata;
  const body: { text: string; metadata?: Record<string, unknown> } = { text: form.text };
  if (metadata.value !== undefined) body.metadata = metadata.value;
  return { ok: true, value: { id, body } };
}

export interface QueryForm {
  text: string;
  /** As typed in the number field. */
  topK: string;
  mode: KnowledgeMode;
  /** An optional JSON object of metadata equalities. */
  filter: string;
}

export interface QueryBody {
  text: string;
  top_k: number;
  mode: KnowledgeMode;
  filter?: Record<string, unknown>;
}

/** The body of `POST /v1/collections/{c}/query` from the search form. */
export function queryRequest(form: QueryForm): Checked<QueryBody> {
  if (!MODES.includes(form.mode)) return { ok: false, error: `Unknown search mode ${form.mode}.` };
  if (form.text.trim() === "") {
    return {
      ok: false,
      error: form.mode === "hybrid" ? "Hybrid search needs a query text." : "Enter a query text.",
    };
  }
  const topK = Number(form.topK.trim());
  if (form.topK.trim() === "" || !Number.isInteger(topK) || topK < 1) {
    return { ok: false, error: "Top k must be a whole number of at least 1." };
  }
  const filter = parseJsonObject(form.filter, "Filter");
  if (!filter.ok) return filter;
  const body: QueryBody = { text: form.text.trim(), top_k: topK, mode: form.mode };
  if (filter.value !== undefined) body.filter = filter.value;
  return { ok: true, value: body };
}

/** Metadata on one line: `{"topic":"drinks"}`, cut at `max` characters; "—" when there is none. */
export function compactMetadata(metadata: unknown, max = 80): string {
  if (metadata === null || metadata === undefined) return "—";
  if (typeof metadata === "object" && !Array.isArray(metadata) && Object.keys(metadata).length === 0) return "—";
  const text = JSON.stringify(metadata);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A score with three decimals. */
export function formatScore(score: number): string {
  return Number.isFinite(score) ? score.toFixed(3) : "—";
}

/** "512 B", "1.5 KiB", "2.0 MiB". */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}

/** A ranked chunk as one row of the results list. */
export interface ResultRow {
  key: string;
  rank: number;
  score: string;
  documentId: string;
  chunkIndex: number;
  chunk: string;
  metadata: string;
}

export function resultRows(results: KnowledgeResult[]): ResultRow[] {
  return results.map((r, i) => ({
    key: `${r.document_id}#${r.chunk_index}`,
    rank: i + 1,
    score: formatScore(r.score),
    documentId: r.document_id,
    chunkIndex: r.chunk_index,
    chunk: r.chunk,
    metadata: compactMetadata(r.metadata),
  }));
}

/** What the score of a mode's results means. */
export function scoreMeaning(mode: KnowledgeMode): string {
  return mode === "hybrid" ? "reciprocal-rank fusion score" : "cosine similarity";
}

/** A collection's model and dimension: "all-minilm-l6-v2 · 384", or "— (empty)". */
export function collectionModel(c: Pick<KnowledgeCollection, "model" | "dimension">): string {
  if (c.model === null) return "— (empty)";
  return c.dimension === null ? c.model : `${c.model} · ${c.dimension}`;
}

/** A document's row cells besides its id and actions. */
export function documentCells(d: KnowledgeDocument): { chunks: string; bytes: string; metadata: string } {
  return { chunks: String(d.chunks), bytes: formatBytes(d.bytes), metadata: compactMetadata(d.metadata) };
}

/** The collection named in `#/knowledge/{name}`, or null (`#/knowledge`, or a broken escape). */
export function selectedCollection(path: string): string | null {
  const match = path.match(/^\/knowledge\/(.+)$/);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return null;
  }
}

export function collectionHash(name: string): string {
  return `#/knowledge/${encodeURIComponent(name)}`;
}
