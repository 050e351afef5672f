/**
 * The bounded reader of checkpoint files: at most 4 MiB, no link followed,
 * no FIFO or device opened in a way that blocks; a file is described, never
 * thrown over. Private: the library imports it through `persist.ts`.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Buffer, isUtf8 } from "node:buffer";
import { BLOCK_BEGIN, findBlock } from "./_record.ts";
import { type CheckpointRecord, type EndStatus, parseRecord } from "./_record.ts";
import { codeOf, kindOf, READ_FLAGS, readUpTo, runSync } from "./_file_ops.ts";

/**
 * The most of a checkpoint file the library reads, in bytes (4 MiB). A larger
 * file is described, not loaded, and a persist to it fails with a message,
 * leaving it as it is.
 *
 * @example
 * ```ts
 * import { MAX_CHECKPOINT_BYTES } from "./persist.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(MAX_CHECKPOINT_BYTES, 4 * 1024 * 1024);
 * ```
 */
export const MAX_CHECKPOINT_BYTES = 4 * 1024 * 1024;

/** A size in MiB, one decimal, for messages. */
export const MiB = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;

/** What a checkpoint file holds. */
export type FileState =
  | "record" // the plugin's block, intact
  | "agent text only" // no block at all
  | "empty"
  | "truncated" // a begin marker without its end, or a block whose data is unreadable
  | "too large" // over the 4 MiB the library reads
  | "not a regular file" // a symbolic link (never followed), FIFO, device or directory
  | "missing"
  | "unreadable"; // the file could not be read

/** One checkpoint file, described. */
export interface CheckpointFile {
  /** Its path. */
  file: string;
  /** The record's run id, else the file name without `.md`. */
  runId: string;
  /** What it holds. */
  state: FileState;
  /** The plugin's record, when the block is intact. */
  record?: CheckpointRecord;
  /** Whether the run was cut off: a record with no end. */
  cutOff: boolean;
  /** How the run ended, when its record says. */
  ended?: EndStatus;
  /** Whether anything but whitespace lies outside the plugin's block. */
  agentText: boolean;
  /** Whether the agent's own text says INCOMPLETE. */
  incomplete: boolean;
  /** Whether the bytes are valid UTF-8. */
  utf8: boolean;
  /** Its size in bytes. */
  size: number;
  /** When it was last persisted (the record's time, else the file's mtime), ms since the epoch. */
  at: number;
  /** Why it could not be read, when it could not. */
  error?: string;
  /** Fields of the record dropped because they had the wrong type (a forged or damaged data line). */
  dropped?: string[];
}

const loose = new TextDecoder();
const BEGIN_BYTES = Buffer.from(BLOCK_BEGIN);

/** Describe a checkpoint file's bytes. */
function describe(base: CheckpointFile, bytes: Buffer): CheckpointFile {
  base.utf8 = isUtf8(bytes);
  const block = findBlock(bytes);
  const outside = block
    ? Buffer.concat([bytes.subarray(0, block.start), bytes.subarray(block.end)])
    : bytes;
  const agent = loose.decode(outside);
  base.agentText = agent.trim() !== "";
  base.incomplete = /\bINCOMPLETE\b/.test(agent);
  if (bytes.length === 0) return { ...base, state: "empty" };
  const dropped: string[] = [];
  const record = block ? parseRecord(bytes, dropped) : undefined;
  if (record) {
    const at = Date.parse(record.persistedAt);
    const out: CheckpointFile = {
      ...base,
      state: "record",
      record,
      runId: record.runId,
      cutOff: record.end === undefined,
      at: Number.isFinite(at) ? at : base.at,
    };
    if (record.end) out.ended = record.end.status;
    if (dropped.length > 0) out.dropped = dropped;
    return out;
  }
  const hasBegin = bytes.includes(BEGIN_BYTES);
  return { ...base, state: block || hasBegin ? "truncated" : "agent text only" };
}

/**
 * A checkpoint file's bytes, read with the bounds of
 * {@linkcode readCheckpoint}: no link followed, no FIFO or device opened in a
 * way that blocks, at most 4 MiB.
 *
 * @param file The checkpoint file.
 * @returns Its content.
 * @throws {Error} Saying why it was not read (missing, a link, a FIFO, too large …).
 *
 * @example
 * ```ts
 * import { readCheckpointBytes } from "./persist.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "r.md"), "notes");
 * assert.equal(new TextDecoder().decode(readCheckpointBytes(join(dir, "r.md"))), "notes");
 * symlinkSync("/dev/zero", join(dir, "z.md"));
 * assert.throws(() => readCheckpointBytes(join(dir, "z.md")), /symbolic link/);
 * ```
 */
export function readCheckpointBytes(file: string): Uint8Array {
  const st = fs.lstatSync(file);
  if (!st.isFile()) throw new Error(`${file} is a ${kindOf(st)}, not a regular file; not read`);
  if (st.size > MAX_CHECKPOINT_BYTES) {
    throw new Error(`${file} is ${MiB(st.size)}, over the ${MiB(MAX_CHECKPOINT_BYTES)} read`);
  }
  const fd = fs.openSync(file, READ_FLAGS);
  try {
    const opened = fs.fstatSync(fd);
    if (!opened.isFile()) throw new Error(`${file} is a ${kindOf(opened)}; not read`);
    const bytes = runSync(readUpTo(fd, 0, MAX_CHECKPOINT_BYTES, opened.size));
    if (bytes.length > MAX_CHECKPOINT_BYTES) throw new Error(`${file} grew past the bound`);
    return bytes;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Read and describe one checkpoint file, with bounds: a symbolic link is
 * never followed, a FIFO or device is never opened for reading in a way that
 * could block, and at most 4 MiB is read (a larger file is `too large`).
 * Whatever the file holds, the answer is a description, never a throw.
 *
 * @param file The checkpoint file.
 * @returns What it holds: the record when intact, whether the run was cut
 * off or how it ended, whether the agent wrote text there and marked it
 * INCOMPLETE.
 *
 * @example
 * ```ts
 * import { persistBlock, readCheckpoint } from "./persist.ts";
 * import { renderBlock } from "./_record.ts";
 * import assert from "node:assert/strict";
 * import { appendFileSync, mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "r1.md");
 * assert.equal(readCheckpoint(file).state, "missing");
 * persistBlock(file, renderBlock({
 *   kind: "stall", source: "watchdog", runId: "r1", dialect: "chat", turnsUsed: 4,
 *   elapsedSeconds: 300, caps: {}, tier: 0, persistedAt: new Date().toISOString(),
 *   message: "No hook call for 5m00s.", tools: [], notes: [],
 * }));
 * appendFileSync(file, "Step 3 of 5 done. INCOMPLETE\n");
 * const found = readCheckpoint(file);
 * assert.equal(found.state, "record");
 * assert.equal(found.cutOff, true);
 * assert.equal(found.incomplete, true);
 * ```
 */
export function readCheckpoint(file: string): CheckpointFile {
  const base: CheckpointFile = {
    file,
    runId: path.basename(file).replace(/\.md$/, ""),
    state: "unreadable",
    cutOff: false,
    agentText: false,
    incomplete: false,
    utf8: true,
    size: 0,
    at: 0,
  };
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch (error) {
    const state = codeOf(error) === "ENOENT" ? "missing" : "unreadable";
    return { ...base, state, error: (error as Error).message };
  }
  base.size = st.size;
  base.at = st.mtimeMs;
  if (!st.isFile()) {
    const error = st.isSymbolicLink()
      ? "a symbolic link, not followed"
      : `a ${kindOf(st)}, not a regular file`;
    return { ...base, state: "not a regular file", error };
  }
  if (st.size > MAX_CHECKPOINT_BYTES) {
    return {
      ...base,
      state: "too large",
      error: `${MiB(st.size)}, over the ${MiB(MAX_CHECKPOINT_BYTES)} the library reads`,
    };
  }
  let bytes: Uint8Array;
  try {
    bytes = readCheckpointBytes(file);
  } catch (error) {
    return { ...base, state: "unreadable", error: (error as Error).message };
  }
  return describe(base, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
}
