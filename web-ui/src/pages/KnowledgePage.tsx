// Knowledge (docs/knowledge.md): the collections with their model and counts, a form that
// creates one; a selected collection (`#/knowledge/{name}`) shows its documents page by page
// (`next_after`), a form that adds or replaces a document, a delete button per document, and a
// search box whose ranked chunks show their score, document and chunk.

import { useCallback, useEffect, useRef, useState } from "react";

import { api, errorText } from "@stead/client";
import { operator } from "../credentials";
import {
  collectionHash,
  collectionModel,
  documentCells,
  documentRequest,
  MODES,
  queryRequest,
  resultRows,
  scoreMeaning,
} from "../knowledge";
import type {
  KnowledgeCollection,
  KnowledgeDocumentFull,
  KnowledgeDocumentPage,
  KnowledgeMode,
  KnowledgeQueryAnswer,
} from "@stead/client";

const PAGE_SIZE = 20;

export function KnowledgePage({ selected }: { selected: string | null }) {
  const [collections, setCollections] = useState<KnowledgeCollection[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [name, setName] = useState("");
  const [route, setRoute] = useState("");
  const [busy, setBusy] = useState(false);

  const load = useCallback(async () => {
    try {
      setCollections((await api.collections(operator())).collections);
      setError(null);
    } catch (e) {
      setError(errorText(e));
    }
  }, []);

  useEffect(() => {
    void load();
  }, [load]);

  const create = async (e: React.FormEvent) => {
    e.preventDefault();
    const wanted = name.trim();
    if (!wanted) {
      setError("Enter a collection name.");
      return;
    }
    setBusy(true);
    try {
      const created = await api.createCollection(operator(), wanted, route.trim() || undefined);
      setName("");
      setError(null);
      await load();
      window.location.hash = collectionHash(created.name);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };

  const current = collections?.find((c) => c.name === selected);
  return (
    <section aria-labelledby="knowledge-title">
      <h1 id="knowledge-title">Knowledge</h1>
      <form className="toolbar" onSubmit={create}>
        <label>
          Collection name
          <input value={name} onChange={(e) => setName(e.target.value)} placeholder="handbook" />
        </label>
        <label>
          Embedding route
          <input value={route} onChange={(e) => setRoute(e.target.value)} placeholder="embed (default)" />
        </label>
        <button type="submit" disabled={busy}>
          Create collection
        </button>
      </form>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {collections && collections.length === 0 && <p className="empty">No collections yet.</p>}
      {collections && collections.length > 0 && (
        <table className="list collections" data-testid="knowledge-collections">
          <caption>Collections</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Model · dimension</th>
              <th scope="col">Route</th>
              <th scope="col">Documents</th>
              <th scope="col">Chunks</th>
            </tr>
          </thead>
          <tbody>
            {collections.map((c) => (
              <tr key={c.name} data-collection={c.name} className={c.name === selected ? "current" : undefined}>
                <td>
                  <a href={collectionHash(c.name)} aria-current={c.name === selected ? "true" : undefined}>
                    {c.name}
                  </a>
                </td>
                <td>{collectionModel(c)}</td>
                <td>{c.embedding_route}</td>
                <td>{c.documents}</td>
                <td>{c.chunks}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {selected !== null && (
        <CollectionView key={selected} name={selected} collection={current} onChanged={load} />
      )}
    </section>
  );
}

/** One collection: its documents and its search. Keyed by name: a new one starts afresh. */
function CollectionView({
  name,
  collection,
  onChanged,
}: {
  name: string;
  collection: KnowledgeCollection | undefined;
  onChanged: () => Promise<void>;
}) {
  const [error, setError] = useState<string | null>(null);
  const remove = async () => {
    if (!window.confirm(`Delete the collection ${name} with all its documents?`)) return;
    try {
      await api.deleteCollection(operator(), name);
      await onChanged();
      window.location.hash = "#/knowledge";
    } catch (e) {
      setError(errorText(e));
    }
  };
  return (
    <section className="collection" aria-labelledby="collection-title">
      <div className="toolbar">
        <h2 id="collection-title" className="grow">
          Collection <code>{name}</code>
          {collection && (
            <span className="meta">
              {" "}
              {collectionModel(collection)} · {collection.documents} documents · {collection.chunks} chunks
            </span>
          )}
        </h2>
        <button type="button" onClick={() => void remove()}>
          Delete collection
        </button>
      </div>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      <div className="columns">
        <Documents name={name} onChanged={onChanged} />
        <Search name={name} />
      </div>
    </section>
  );
}

function Documents({ name, onChanged }: { name: string; onChanged: () => Promise<void> }) {
  // The `after` of each page read so far; the last is the page shown (null: the first).
  const [afters, setAfters] = useState<(string | null)[]>([null]);
  const [page, setPage] = useState<KnowledgeDocumentPage | null>(null);
  const [listError, setListError] = useState<string | null>(null);
  const [form, setForm] = useState({ id: "", text: "", metadata: "" });
  const [formError, setFormError] = useState<string | null>(null);
  const [saved, setSaved] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [open, setOpen] = useState<KnowledgeDocumentFull | null>(null);
  const after = afters[afters.length - 1];

  const load = useCallback(async () => {
    try {
      setPage(await api.documents(operator(), name, after, PAGE_SIZE));
      setListError(null);
    } catch (e) {
      setListError(errorText(e));
    }
  }, [name, after]);

  useEffect(() => {
    void load();
  }, [load]);

  const add = async (e: React.FormEvent) => {
    e.preventDefault();
    const request = documentRequest(form);
    if (!request.ok) {
      setFormError(request.error);
      setSaved(null);
      return;
    }
    setBusy(true);
    try {
      const answer = await api.putDocument(operator(), name, request.value.id, request.value.body);
      setSaved(`Document ${answer.id} ${answer.outcome}: ${answer.chunks} ${answer.chunks === 1 ? "chunk" : "chunks"}.`);
      setFormError(null);
      setForm({ id: "", text: "", metadata: "" });
      if (open?.id === answer.id) setOpen(null);
      await Promise.all([load(), onChanged()]);
    } catch (e) {
      setFormError(errorText(e));
      setSaved(null);
    } finally {
      setBusy(false);
    }
  };

  const remove = async (id: string) => {
    try {
      await api.deleteDocument(operator(), name, id);
      if (open?.id === id) setOpen(null);
      setListError(null);
    } catch (e) {
      setListError(errorText(e));
    }
    await Promise.all([load(), onChanged()]);
  };

  const view = async (id: string) => {
    if (open?.id === id) {
      setOpen(null);
      return;
    }
    try {
      setOpen(await api.document(operator(), name, id));
    } catch (e) {
      setListError(errorText(e));
    }
  };

  const set = (key: keyof typeof form) => (e: React.ChangeEvent<HTMLInputElement | HTMLTextAreaElement>) =>
    setForm({ ...form, [key]: e.target.value });

  return (
    <section className="documents" aria-labelledby="documents-title">
      <h3 id="documents-title">Documents</h3>
      <form className="stack" onSubmit={add} aria-label="Add a document">
        <label>
          Document id
          <input value={form.id} onChange={set("id")} placeholder="tea" />
        </label>
        <label>
          Document text
          <textarea value={form.text} onChange={set("text")} rows={5} />
        </label>
        <label>
          Metadata (JSON)
          <input value={form.metadata} onChange={set("metadata")} placeholder='{"topic": "drinks"}' />
        </label>
        <div>
          <button type="submit" disabled={busy}>
            {busy ? "Adding…" : "Add document"}
          </button>
        </div>
        {formError && (
          <p role="alert" className="error">
            {formError}
          </p>
        )}
        {saved && (
          <p role="status" data-testid="document-saved">
            {saved}
          </p>
        )}
      </form>
      {listError && (
        <p role="alert" className="error">
          {listError}
        </p>
      )}
      {page && page.documents.length === 0 && (
        <p className="empty">{after === null ? "No documents yet." : "No more documents."}</p>
      )}
      {page && page.documents.length > 0 && (
        <table className="list" data-testid="knowledge-documents">
          <thead>
            <tr>
              <th scope="col">Id</th>
              <th scope="col">Chunks</th>
              <th scope="col">Size</th>
              <th scope="col">Updated</th>
              <th scope="col">Metadata</th>
              <th scope="col">
                <span className="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {page.documents.map((d) => {
              const cells = documentCells(d);
              return (
                <tr key={d.id} data-document={d.id}>
                  <td>
                    <button
                      type="button"
                      className="link"
                      onClick={() => void view(d.id)}
                      aria-expanded={open?.id === d.id}
                      aria-label={`Show document ${d.id}`}
                    >
                      {d.id}
                    </button>
                  </td>
                  <td>{cells.chunks}</td>
                  <td title={`${d.bytes} bytes`}>{cells.bytes}</td>
                  <td>
                    <time dateTime={d.updated_at} title={d.updated_at}>
                      {new Date(d.updated_at).toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" })}
                    </time>
                  </td>
                  <td>
                    <code className="meta">{cells.metadata}</code>
                  </td>
                  <td>
                    <button type="button" onClick={() => void remove(d.id)} aria-label={`Delete document ${d.id}`}>
                      Delete
                    </button>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {page && (after !== null || page.next_after !== null) && (
        <div className="toolbar pager">
          <button type="button" disabled={after === null} onClick={() => setAfters(afters.slice(0, -1))}>
            Previous page
          </button>
          <button
            type="button"
            disabled={page.next_after === null}
            onClick={() => page.next_after !== null && setAfters([...afters, page.next_after])}
          >
            Next page
          </button>
        </div>
      )}
      {open && (
        <article className="document" aria-label={`Document ${open.id}`}>
          <h4>
            <code>{open.id}</code> · {open.chunk_texts.length} {open.chunk_texts.length === 1 ? "chunk" : "chunks"}
          </h4>
          <ol start={0} className="chunks">
            {open.chunk_texts.map((chunk, i) => (
              <li key={i}>{chunk}</li>
            ))}
          </ol>
        </article>
      )}
    </section>
  );
}

function Search({ name }: { name: string }) {
  const [form, setForm] = useState<{ text: string; topK: string; mode: KnowledgeMode; filter: string }>({
    text: "",
    topK: "5",
    mode: "exact",
    filter: "",
  });
  const [answer, setAnswer] = useState<KnowledgeQueryAnswer | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [searching, setSearching] = useState(false);
  // Only the latest search's answer is shown.
  const latest = useRef(0);

  const search = async (e: React.FormEvent) => {
    e.preventDefault();
    const request = queryRequest(form);
    if (!request.ok) {
      setError(request.error);
      return;
    }
    const ticket = ++latest.current;
    setSearching(true);
    setAnswer(null);
    setError(null);
    try {
      const found = await api.queryCollection(operator(), name, request.value);
      if (ticket === latest.current) setAnswer(found);
    } catch (e) {
      if (ticket === latest.current) setError(errorText(e));
    } finally {
      if (ticket === latest.current) setSearching(false);
    }
  };

  const rows = answer ? resultRows(answer.results) : [];
  return (
    <section className="search" aria-labelledby="search-title">
      <h3 id="search-title">Search</h3>
      <form className="stack" onSubmit={search} aria-label="Search the collection">
        <label>
          Query
          <input
            type="search"
            value={form.text}
            onChange={(e) => setForm({ ...form, text: e.target.value })}
            placeholder="How hot should the water be?"
          />
        </label>
        <div className="toolbar">
          <label>
            Top k
            <input
              type="number"
              min={1}
              step={1}
              className="narrow"
              value={form.topK}
              onChange={(e) => setForm({ ...form, topK: e.target.value })}
            />
          </label>
          <label>
            Mode
            {/* Named outright: a label's name would include the options' text. */}
            <select
              aria-label="Mode"
              value={form.mode}
              onChange={(e) => setForm({ ...form, mode: e.target.value as KnowledgeMode })}
            >
              {MODES.map((m) => (
                <option key={m} value={m}>
                  {m}
                </option>
              ))}
            </select>
          </label>
          <label className="grow">
            Filter (JSON)
            <input
              value={form.filter}
              onChange={(e) => setForm({ ...form, filter: e.target.value })}
              placeholder='{"topic": "drinks"}'
            />
          </label>
          <button type="submit" disabled={searching}>
            {searching ? "Searching…" : "Search"}
          </button>
        </div>
      </form>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {answer && answer.results.length === 0 && <p className="empty">No chunks found.</p>}
      {answer && answer.results.length > 0 && (
        <>
          <p className="meta">
            {answer.results.length} {answer.results.length === 1 ? "chunk" : "chunks"} by {answer.mode} search; score:{" "}
            {scoreMeaning(answer.mode)}.
          </p>
          <ol className="results" data-testid="knowledge-results" data-mode={answer.mode}>
            {rows.map((r) => (
              <li key={r.key} data-testid="knowledge-result" data-document={r.documentId}>
                <div className="result-head">
                  <span className="rank">#{r.rank}</span>
                  <span className="score" title={scoreMeaning(answer.mode)}>
                    {r.score}
                  </span>
                  <code data-testid="result-document">{r.documentId}</code>
                  <span className="meta">chunk {r.chunkIndex}</span>
                  <code className="meta">{r.metadata}</code>
                </div>
                <p className="chunk">{r.chunk}</p>
              </li>
            ))}
          </ol>
        </>
      )}
    </section>
  );
}
