// The wire protocol of Stead (docs/api.md), in one module: WebSocket frames both ways, journal
// events and their payloads, and the REST shapes the UI reads. Nothing here does I/O.

import type * as Wire from "./generated/wire.js";

// Generated from the Rust types (edge/src/wire.rs): a Rust test fails when they drift.
export type {
  ApprovalScope,
  Attachment,
  ClientFrame,
  ErrorCode,
  Finding,
  GuardrailCheck,
  MessageMode,
  RequestedCall,
  SessionEvent,
  SessionRow,
  SessionStatus,
  Usage,
} from "./generated/wire.js";

/** Journal event payloads by kind, from the journal's event enum (more fields may be present). */
export type EventPayloads = { [E in Wire.SessionEvent as E["kind"]]: E["payload"] };

export type EventKind = keyof EventPayloads;

/** One journaled step, as `GET …/events` and the WebSocket `event` frame carry it. */
export interface JournalEvent<K extends string = string> {
  seq: number;
  kind: K;
  payload: K extends EventKind ? EventPayloads[K] : Record<string, unknown>;
  at: string;
}

/** Server frames; an `event` frame's payload typed by its kind. */
export type ServerFrame =
  | Exclude<Wire.ServerFrame, { type: "event" }>
  | ({ type: "event" } & JournalEvent);

/** A schedule of a session, as `GET /v1/sessions/{id}/schedules` lists it (docs/schedules.md). */
export type ScheduleView = Wire.ScheduleDef & {
  key: string;
  kind: "at" | "delay" | "cron" | "every";
  created_at: string;
  /** null once a one-time schedule fired. */
  next_due_at: string | null;
  fired: number;
  status: "pending" | "done";
};

/** `GET /v1/gateway/logs` rows. */
export type RequestLogRow = Wire.RequestLogEntry;

/** A knowledge collection (docs/knowledge.md). `model` and `dimension` are null while it is empty. */
export interface KnowledgeCollection {
  name: string;
  embedding_route: string;
  model: string | null;
  dimension: number | null;
  documents: number;
  chunks: number;
  created_at: string;
  updated_at: string;
}

/** A document of a collection, as `GET …/documents` lists it. */
export interface KnowledgeDocument {
  id: string;
  metadata: Record<string, unknown> | null;
  chunks: number;
  bytes: number;
  sha256: string;
  created_at: string;
  updated_at: string;
}

/** `GET /v1/collections/{c}/documents`: null `next_after` when this is the last page. */
export interface KnowledgeDocumentPage {
  documents: KnowledgeDocument[];
  next_after: string | null;
}

/** The answer of `PUT /v1/collections/{c}/documents/{id}`. */
export type KnowledgePutAnswer = KnowledgeDocument & { outcome: "created" | "replaced" | "unchanged" };

/** `GET /v1/collections/{c}/documents/{id}`: the document with its text and its chunks. */
export type KnowledgeDocumentFull = KnowledgeDocument & { text: string; chunk_texts: string[] };

export type KnowledgeMode = "exact" | "ann" | "hybrid";

/** One ranked chunk of `POST /v1/collections/{c}/query`, best first. */
export interface KnowledgeResult {
  document_id: string;
  chunk_index: number;
  chunk: string;
  /** Cosine similarity (exact, ann) or a reciprocal-rank fusion score (hybrid). */
  score: number;
  metadata: Record<string, unknown> | null;
}

export interface KnowledgeQueryAnswer {
  results: KnowledgeResult[];
  mode: KnowledgeMode;
}
