/**
 * The run journal as the stores keep it: each body once, by the sha256 of its
 * text, compressed (zlib's deflate, which Deno and Node both have); and an
 * entry from its table's columns, as every backend reads it back.
 *
 * @module
 */
import { builtin, nodeCrypto } from "../_write_steps.ts";
import type { JournalEntry } from "./types.ts";

// node:zlib (and node:crypto) are loaded by the first body, not at import: the stores are
// imported with the library, and a host that journals nothing never pays for them.
let zlibModule: typeof import("node:zlib") | undefined;
const zlib = () => zlibModule ??= builtin<typeof import("node:zlib")>("node:zlib");

/**
 * The key a body is kept under: the sha256 of its text (hex).
 *
 * @example
 * ```ts
 * import { bodyKey } from "./_journal.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(bodyKey("{}"), bodyKey("{}"));
 * assert.match(bodyKey('"hi"'), /^[0-9a-f]{64}$/);
 * ```
 */
export function bodyKey(text: string): string {
  return nodeCrypto().createHash("sha256").update(text).digest("hex");
}

/**
 * A body as a store keeps it: its text, compressed.
 *
 * @example
 * ```ts
 * import { packBody, unpackBody } from "./_journal.ts";
 * import assert from "node:assert/strict";
 *
 * const text = JSON.stringify({ role: "assistant", content: "step ".repeat(200) });
 * const packed = packBody(text);
 * assert.ok(packed.length < text.length);
 * assert.equal(unpackBody(packed), text);
 * ```
 */
export function packBody(text: string): Uint8Array {
  return new Uint8Array(zlib().deflateSync(new TextEncoder().encode(text)));
}

/**
 * A kept body's text (see {@linkcode packBody}).
 *
 * @example
 * ```ts
 * import { packBody, unpackBody } from "./_journal.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(unpackBody(packBody('{"text":"héllo"}')), '{"text":"héllo"}');
 * ```
 */
export function unpackBody(packed: Uint8Array): string {
  // Output chunks near the body's size: Deno's default of 16 KiB a call costs a small body
  // several times its inflating (a retry reads every body of its journal, in a fresh process).
  const chunkSize = Math.min(16_384, Math.max(1_024, packed.length * 4));
  return new TextDecoder().decode(zlib().inflateSync(packed, { chunkSize }));
}

/** The most characters of bodies a {@linkcode StoredBodies} remembers; past it, it starts afresh. */
const STORED_MAX_CHARS = 32 * 1024 * 1024;

/**
 * The bodies one store gave back when read, by their text: a retry replaying
 * them journals them again, and the store keeps them already, so they are
 * neither hashed nor compressed again. Each store has its own.
 *
 * @example
 * ```ts
 * import { journalOf, StoredBodies } from "./_journal.ts";
 * import assert from "node:assert/strict";
 *
 * const seen = new StoredBodies();
 * const row = { run_id: "r", attempt: 1, kind: "model", idx: 0, key: "k", at: 1, body: "h1" };
 * const entry = journalOf(row, '{"text":"read back"}', seen);
 * assert.equal(seen.take(entry.body), "h1");
 * assert.equal(seen.take(entry.body), undefined); // once
 * ```
 */
export class StoredBodies {
  #keys = new Map<string, string>();
  #chars = 0;

  /** A body read from the store, kept under `key`. */
  add(text: string, key: string): void {
    if (this.#keys.has(text)) return;
    if (this.#chars + text.length > STORED_MAX_CHARS) {
      this.#keys.clear();
      this.#chars = 0;
    }
    this.#keys.set(text, key);
    this.#chars += text.length;
  }

  /** The key a body read from the store is kept under, once; undefined for any other text. */
  take(text: string): string | undefined {
    const key = this.#keys.get(text);
    if (key === undefined) return undefined;
    this.#keys.delete(text);
    this.#chars -= text.length;
    return key;
  }
}

/**
 * A journal entry from its table's columns (`run_id`, `attempt`, `kind`,
 * `idx`, `key`, `tool`, `usage`, `at`, and `replayed` and `ms` when the
 * table has them) and its body's text; `seen` remembers the body's key
 * (the `body` column), for the store's next write of it.
 *
 * @example
 * ```ts
 * import { journalOf } from "./_journal.ts";
 * import assert from "node:assert/strict";
 *
 * const entry = journalOf({
 *   run_id: "r", attempt: 2, kind: "model", idx: 0, key: "ab", tool: null, usage: null, at: 5,
 * }, '{"text":"hi"}');
 * assert.deepEqual(entry, {
 *   runId: "r", attempt: 2, kind: "model", index: 0, key: "ab", body: '{"text":"hi"}', at: 5,
 * });
 * const replayed = journalOf({
 *   run_id: "r", attempt: 3, kind: "tool", idx: 0, key: "jk", tool: "ls", usage: null, at: 6,
 *   replayed: 2, ms: null,
 * }, "[]");
 * assert.equal(replayed.replayed, 2);
 * assert.equal(replayed.ms, undefined);
 * ```
 */
export function journalOf(
  row: Record<string, unknown>,
  body: string,
  seen?: StoredBodies,
): JournalEntry {
  const out: JournalEntry = {
    runId: String(row.run_id),
    attempt: Number(row.attempt),
    kind: row.kind === "tool" ? "tool" : "model",
    index: Number(row.idx),
    key: String(row.key),
    body,
    at: Number(row.at),
  };
  if (typeof row.tool === "string") out.tool = row.tool;
  if (typeof row.usage === "string") out.usage = row.usage;
  if (seen && typeof row.body === "string") seen.add(body, row.body); // the key it is kept under
  // Columns a journal table made before them lacks: absent, as for an entry written without them.
  const replayed = wholeOf(row.replayed);
  if (replayed !== undefined) out.replayed = replayed;
  const ms = wholeOf(row.ms);
  if (ms !== undefined) out.ms = ms;
  return out;
}

/** A whole number from a column (a driver may give a bigint or its text), else undefined. */
function wholeOf(value: unknown): number | undefined {
  if (value === null || value === undefined || value === "") return undefined;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : undefined;
}

/**
 * Entries in the order every store reads them back: by attempt, kind (model first), index.
 *
 * @example
 * ```ts
 * import { journalOrder } from "./_journal.ts";
 * import assert from "node:assert/strict";
 *
 * const e = (attempt: number, kind: "model" | "tool", index: number) =>
 *   ({ runId: "r", attempt, kind, index, key: "k", body: "{}", at: 0 });
 * const sorted = [e(2, "model", 0), e(1, "tool", 0), e(1, "model", 1), e(1, "model", 0)]
 *   .sort(journalOrder).map((x) => `${x.attempt}${x.kind[0]}${x.index}`);
 * assert.deepEqual(sorted, ["1m0", "1m1", "1t0", "2m0"]);
 * ```
 */
export function journalOrder(a: JournalEntry, b: JournalEntry): number {
  return a.attempt - b.attempt || (a.kind === b.kind ? 0 : a.kind === "model" ? -1 : 1) ||
    a.index - b.index;
}
