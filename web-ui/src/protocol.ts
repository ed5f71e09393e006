// The wire protocol of Stead (docs/api.md), in one module: WebSocket frames both ways, journal
// events and their payloads, and the REST shapes the UI reads. Nothing here does I/O.

import type * as Wire from "./generated/wire";

// Generated from the Rust types (gateway/http/src/wire.rs): a Rust test fails when they drift.
export type {
  ApprovalScope,
  ClientFrame,
  ErrorCode,
  MessageMode,
  RequestedCall,
  SessionEvent,
  SessionRow,
  SessionStatus,
  Usage,
} from "./generated/wire";

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
