import { describe, expect, it } from "vitest";

import { documentPath, documentsPath } from "@stead/client";
import {
  collectionHash,
  collectionModel,
  compactMetadata,
  documentRequest,
  formatBytes,
  formatScore,
  parseJsonObject,
  queryRequest,
  resultRows,
  selectedCollection,
} from "./knowledge";

describe("metadata JSON", () => {
  it("leaves an empty field out", () => {
    expect(parseJsonObject("", "Metadata")).toEqual({ ok: true, value: undefined });
    expect(parseJsonObject("  \n", "Metadata")).toEqual({ ok: true, value: undefined });
  });

  it("reads an object", () => {
    expect(parseJsonObject('{"topic": "drinks", "year": 2024}', "Metadata")).toEqual({
      ok: true,
      value: { topic: "drinks", year: 2024 },
    });
  });

  it("refuses what is not JSON, naming the field", () => {
    const checked = parseJsonObject("{topic: drinks}", "Metadata");
    expect(checked.ok).toBe(false);
    if (!checked.ok) expect(checked.error).toMatch(/^Metadata is not valid JSON: /);
  });

  it("refuses JSON that is not an object", () => {
    for (const text of ["[1, 2]", '"drinks"', "42", "null", "true"]) {
      const checked = parseJsonObject(text, "Filter");
      expect(checked).toEqual({ ok: false, error: 'Filter must be a JSON object, like {"topic": "drinks"}' });
    }
  });
});

describe("adding a document", () => {
  it("builds the PUT body with metadata", () => {
    expect(documentRequest({ id: " tea ", text: "Green tea.", metadata: '{"topic":"drinks"}' })).toEqual({
      ok: true,
      value: { id: "tea", body: { text: "Green tea.", metadata: { topic: "drinks" } } },
    });
  });

  it("leaves metadata out when the field is empty", () => {
    const checked = documentRequest({ id: "tea", text: "Green tea.", metadata: "" });
    expect(checked.ok && checked.value.body).toEqual({ text: "Green tea." });
    expect(checked.ok && "metadata" in checked.value.body).toBe(false);
  });

  it("refuses a missing id or text and bad metadata", () => {
    expect(documentRequest({ id: "  ", text: "x", metadata: "" })).toEqual({ ok: false, error: "Enter a document id." });
    expect(documentRequest({ id: "tea", text: " ", metadata: "" })).toEqual({
      ok: false,
      error: "Enter the document's text.",
    });
    const bad = documentRequest({ id: "tea", text: "x", metadata: '{"topic":' });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.error).toContain("Metadata is not valid JSON");
  });
});

describe("the query body", () => {
  const form = { text: "How hot should the water be?", topK: "5", mode: "exact" as const, filter: "" };

  it("has text, top_k and mode", () => {
    expect(queryRequest(form)).toEqual({
      ok: true,
      value: { text: "How hot should the water be?", top_k: 5, mode: "exact" },
    });
    expect(queryRequest({ ...form, topK: " 3 ", mode: "hybrid" })).toEqual({
      ok: true,
      value: { text: "How hot should the water be?", top_k: 3, mode: "hybrid" },
    });
  });

  it("adds a filter object", () => {
    const checked = queryRequest({ ...form, mode: "ann", filter: '{"topic":"drinks"}' });
    expect(checked).toEqual({
      ok: true,
      value: { text: form.text, top_k: 5, mode: "ann", filter: { topic: "drinks" } },
    });
  });

  it("needs a text, and says so for hybrid", () => {
    expect(queryRequest({ ...form, text: "  ", mode: "hybrid" })).toEqual({
      ok: false,
      error: "Hybrid search needs a query text.",
    });
    expect(queryRequest({ ...form, text: "", mode: "exact" })).toEqual({ ok: false, error: "Enter a query text." });
  });

  it("needs a whole top_k of at least 1", () => {
    for (const topK of ["", "0", "-2", "2.5", "five"]) {
      expect(queryRequest({ ...form, topK })).toEqual({
        ok: false,
        error: "Top k must be a whole number of at least 1.",
      });
    }
  });

  it("refuses an unknown mode and a filter that is not an object", () => {
    expect(queryRequest({ ...form, mode: "fuzzy" as never }).ok).toBe(false);
    const bad = queryRequest({ ...form, filter: "[]" });
    expect(bad).toEqual({ ok: false, error: 'Filter must be a JSON object, like {"topic": "drinks"}' });
  });
});

describe("showing results", () => {
  it("numbers ranked chunks from 1 with three-decimal scores", () => {
    const rows = resultRows([
      { document_id: "tea", chunk_index: 0, chunk: "Green tea…", score: 0.71234, metadata: { topic: "drinks" } },
      { document_id: "bikes", chunk_index: 2, chunk: "To fix…", score: 0.0327868852, metadata: {} },
    ]);
    expect(rows).toEqual([
      {
        key: "tea#0",
        rank: 1,
        score: "0.712",
        documentId: "tea",
        chunkIndex: 0,
        chunk: "Green tea…",
        metadata: '{"topic":"drinks"}',
      },
      { key: "bikes#2", rank: 2, score: "0.033", documentId: "bikes", chunkIndex: 2, chunk: "To fix…", metadata: "—" },
    ]);
  });

  it("formats scores, sizes and metadata", () => {
    expect(formatScore(1)).toBe("1.000");
    expect(formatScore(Number.NaN)).toBe("—");
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatBytes(2 * 1024 * 1024)).toBe("2.0 MiB");
    expect(compactMetadata(null)).toBe("—");
    expect(compactMetadata({ a: "x".repeat(100) }, 20)).toBe('{"a":"xxxxxxxxxxxxx…');
    expect(compactMetadata({ a: "x".repeat(100) }, 20)).toHaveLength(20);
  });

  it("shows a collection's model, or that it is empty", () => {
    expect(collectionModel({ model: null, dimension: null })).toBe("— (empty)");
    expect(collectionModel({ model: "all-minilm-l6-v2", dimension: 384 })).toBe("all-minilm-l6-v2 · 384");
  });
});

describe("paths", () => {
  it("escapes collection names and document ids as single segments", () => {
    expect(documentPath("handbook", "docs/api.md")).toBe("/v1/collections/handbook/documents/docs%2Fapi.md");
    expect(documentsPath("handbook", null, 20)).toBe("/v1/collections/handbook/documents?limit=20");
    expect(documentsPath("handbook", "rust & tea", 20)).toBe(
      "/v1/collections/handbook/documents?limit=20&after=rust+%26+tea",
    );
  });

  it("reads the selected collection from the hash route", () => {
    expect(selectedCollection("/knowledge")).toBeNull();
    expect(selectedCollection("/knowledge/handbook")).toBe("handbook");
    expect(selectedCollection(collectionHash("my.notes-1").slice(1))).toBe("my.notes-1");
    expect(selectedCollection("/knowledge/%E0%A4%A")).toBeNull();
  });
});
