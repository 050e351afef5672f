/**
 * A graph framework's checkpoints (LangGraph's) as the stores keep them: the
 * pending writes a batch keeps, in the order every store reads them back, and
 * a row from a store's columns.
 *
 * @module
 */
import type { GraphChannelValue, GraphCheckpointRow, GraphWrite } from "./types.ts";

/**
 * The writes of a batch a store keeps, one per task and index: a regular
 * write (index 0 or more) as first given, a special one (a negative index:
 * an error, an interrupt) as last given, as LangGraph's savers do.
 *
 * @example
 * ```ts
 * import { writesOnce } from "./_checkpoints.ts";
 * import assert from "node:assert/strict";
 *
 * const w = (index: number, channel: string) =>
 *   ({ taskId: "t", index, channel, type: "json", bytes: new Uint8Array(), taskPath: "" });
 * const kept = writesOnce([w(0, "a"), w(0, "b"), w(-3, "x"), w(-3, "y")]);
 * assert.deepEqual(kept.map((k) => k.channel), ["a", "y"]);
 * ```
 */
export function writesOnce(writes: readonly GraphWrite[]): GraphWrite[] {
  const kept = new Map<string, GraphWrite>();
  for (const w of writes) {
    const key = `${w.index}\u0000${w.taskId}`;
    if (w.index >= 0 && kept.has(key)) continue;
    kept.set(key, w);
  }
  return [...kept.values()];
}

/** Strings by Unicode code point (the order SQLite's and PostgreSQL's "C" collation give UTF-8). */
function byCodePoint(a: string, b: string): number {
  if (a === b) return 0;
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i]!.codePointAt(0)! - y[i]!.codePointAt(0)!;
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return x.length - y.length < 0 ? -1 : x.length === y.length ? 0 : 1;
}

/**
 * Pending writes in the order every store reads them back: by task path,
 * task id (each by code point), then index.
 *
 * @example
 * ```ts
 * import { writeOrder } from "./_checkpoints.ts";
 * import assert from "node:assert/strict";
 *
 * const w = (taskPath: string, taskId: string, index: number) =>
 *   ({ taskId, index, channel: "c", type: "json", bytes: new Uint8Array(), taskPath });
 * const sorted = [w("b", "a", 0), w("", "z", 1), w("", "z", -1), w("a", "b", 0)]
 *   .sort(writeOrder).map((x) => `${x.taskPath}/${x.taskId}/${x.index}`);
 * assert.deepEqual(sorted, ["/z/-1", "/z/1", "a/b/0", "b/a/0"]);
 * ```
 */
export function writeOrder(a: GraphWrite, b: GraphWrite): number {
  return byCodePoint(a.taskPath, b.taskPath) || byCodePoint(a.taskId, b.taskId) ||
    a.index - b.index;
}

/**
 * Bytes as a store hands them back: a copy of their own (a driver's buffer
 * may be a slice of a larger pool, which a message to another thread would
 * copy whole).
 *
 * @example
 * ```ts
 * import { bytesOf } from "./_checkpoints.ts";
 * import assert from "node:assert/strict";
 *
 * const pool = new Uint8Array([1, 2, 3, 4]);
 * const out = bytesOf(pool.subarray(1, 3));
 * assert.deepEqual([...out], [2, 3]);
 * assert.equal(out.buffer.byteLength, 2);
 * ```
 */
export function bytesOf(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value);
  if (value instanceof ArrayBuffer) return new Uint8Array(value.slice(0));
  throw new TypeError(`a stored body is not bytes: ${typeof value}`);
}

/**
 * A checkpoint from its table's columns (`thread_id`, `ns`, `checkpoint_id`,
 * `parent_id`, `type`, `checkpoint`, `meta_type`, `metadata`), with its
 * channel values and pending writes.
 *
 * @example
 * ```ts
 * import { checkpointOf } from "./_checkpoints.ts";
 * import assert from "node:assert/strict";
 *
 * const row = checkpointOf({
 *   thread_id: "t", ns: "", checkpoint_id: "2", parent_id: "1", type: "json",
 *   checkpoint: new Uint8Array([123, 125]), meta_type: "json", metadata: new Uint8Array([123, 125]),
 * }, [], []);
 * assert.equal(row.parent, "1");
 * assert.deepEqual([...row.checkpoint.bytes], [123, 125]);
 * ```
 */
export function checkpointOf(
  row: Record<string, unknown>,
  values: GraphChannelValue[],
  writes: GraphWrite[],
): GraphCheckpointRow {
  const out: GraphCheckpointRow = {
    thread: String(row.thread_id),
    ns: String(row.ns),
    id: String(row.checkpoint_id),
    checkpoint: { type: String(row.type), bytes: bytesOf(row.checkpoint) },
    metadata: { type: String(row.meta_type), bytes: bytesOf(row.metadata) },
    values,
    writes,
  };
  if (typeof row.parent_id === "string") out.parent = row.parent_id;
  return out;
}
