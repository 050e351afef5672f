/**
 * The checkpoint file on disk: atomic writes, safe file names, the persist
 * that replaces the plugin's block while keeping every byte the agent wrote,
 * a burst of persists written concurrently, and a bounded reader.
 *
 * Limits: a checkpoint file is read up to 4 MiB; a larger one is described
 * (`too large`) but neither loaded nor rewritten. Links are never followed:
 * a symbolic link at a checkpoint path is replaced by a regular file (its
 * target is left alone), and a FIFO, device or directory there is refused.
 *
 * The public face of the checkpoint file, which the rest of the library
 * imports; each job lives in a private module: the atomic write with the
 * file-system steps it is made of in `_file_ops.ts`, the block persist and
 * the burst in `_write_steps.ts`, the reader in `_file_ops.ts`; file names
 * are made here.
 *
 * @module
 */
import { nodeCrypto } from "./_file_ops.ts";

export { ensureDir, writeFileAtomic, writeFileAtomicSync } from "./_file_ops.ts";
export {
  type BlockWrite,
  FILE_LOCK_WAIT_MS,
  type FileLock,
  persistBlock,
  persistBlocks,
  type PersistBlocksOptions,
} from "./_write_steps.ts";
export {
  type CheckpointFile,
  type FileState,
  MAX_CHECKPOINT_BYTES,
  readCheckpoint,
  readCheckpointBytes,
} from "./_file_ops.ts";

const MAX_STEM = 120;
const HASHED = /-[0-9a-f]{12}$/;

/**
 * The checkpoint file name for a run id: characters outside `A-Za-z0-9._-`
 * replaced, no leading dot, bounded length, and a short hash of the id added
 * whenever anything was changed, so two ids never share a file.
 *
 * @param runId Any run id.
 * @returns A file name ending in `.md`.
 *
 * @example
 * ```ts
 * import { checkpointFileName } from "./persist.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(checkpointFileName("run-1"), "run-1.md");
 * assert.match(checkpointFileName("../x"), /^_/);
 * ```
 */
export function checkpointFileName(runId: string): string {
  let stem = runId.replace(/[^A-Za-z0-9._-]/g, "_").replace(/^\./, "_");
  if (stem.length > MAX_STEM) stem = stem.slice(0, MAX_STEM);
  if (stem === "") stem = "_";
  if (stem !== runId || HASHED.test(runId)) {
    stem += "-" + nodeCrypto().createHash("sha256").update(runId).digest("hex").slice(0, 12);
  }
  return `${stem}.md`;
}

/** JSON-escaped UTF-8 bytes a run id may take before {@linkcode boundRunId} shortens it. */
export const MAX_RUN_ID_BYTES = 512;

/** Bytes of one code point in a JSON string, escapes included. */
function jsonCost(cp: number): number {
  if (cp === 0x22 || cp === 0x5c) return 2;
  if (cp < 0x20) return cp === 8 || cp === 9 || cp === 10 || cp === 12 || cp === 13 ? 2 : 6;
  if (cp < 0x80) return 1;
  if (cp < 0x800) return 2;
  if (cp >= 0xd800 && cp <= 0xdfff) return 6; // a lone surrogate: JSON.stringify escapes it
  return cp < 0x10000 ? 3 : 4;
}

/**
 * The longest head of `text` whose JSON string form (quotes aside) is at most
 * `maxBytes` of UTF-8, never splitting a code point; the text itself when it fits.
 *
 * @param text Any text.
 * @param maxBytes The bound, in bytes.
 * @returns A prefix of `text`.
 *
 * @example
 * ```ts
 * import { cutBytes } from "./persist.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(cutBytes("🔥🔥🔥", 9), "🔥🔥");
 * assert.equal(cutBytes("abc", 9), "abc");
 * ```
 */
export function cutBytes(text: string, maxBytes: number): string {
  // A cheap exit for the usual short text: no code point costs more than 6 bytes.
  if (text.length * 6 <= maxBytes) return text;
  let bytes = 0;
  let at = 0;
  while (at < text.length) {
    const cp = text.codePointAt(at)!;
    bytes += jsonCost(cp);
    if (bytes > maxBytes) return text.slice(0, at);
    at += cp > 0xffff ? 2 : 1;
  }
  return text;
}

/**
 * A run id as the library keeps it: the id itself when its JSON form is at
 * most {@linkcode MAX_RUN_ID_BYTES} bytes and it holds no NUL, else its head
 * (up to the first NUL), `…` and a short hash of the whole id, so a long id still names one run, the same one at
 * every start, and fits every record made of it.
 *
 * @param runId Any run id.
 * @returns A run id of at most {@linkcode MAX_RUN_ID_BYTES} bytes.
 *
 * @example
 * ```ts
 * import { boundRunId, MAX_RUN_ID_BYTES } from "./persist.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(boundRunId("task-1"), "task-1");
 * const long = "x".repeat(1700);
 * assert.equal(boundRunId(long), boundRunId(long));
 * assert.ok(long.startsWith(boundRunId(long).split("…")[0]!));
 * assert.ok(new TextEncoder().encode(boundRunId(long)).length <= MAX_RUN_ID_BYTES);
 * ```
 */
export function boundRunId(runId: string): string {
  // A NUL ends a string in SQLite's C API, so such ids would all share the key before it.
  const nul = runId.indexOf("\u0000");
  if (nul < 0 && cutBytes(runId, MAX_RUN_ID_BYTES) === runId) return runId;
  const hash = nodeCrypto().createHash("sha256").update(runId).digest("hex").slice(0, 12);
  return `${cutBytes(nul < 0 ? runId : runId.slice(0, nul), MAX_RUN_ID_BYTES - 15)}…${hash}`;
}
