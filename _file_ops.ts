/**
 * Reading files that may not be there, and the checkpoint file's bounded
 * reader: each answers "what is there, or undefined", so a caller's default
 * is a `??`, not a try/catch of its own. The writes (the file-system steps,
 * the atomic write, the persist) live in `_write_steps.ts`; they are
 * re-exported here for the modules that import them with the readers.
 * Private: the library imports the checkpoint reader through `persist.ts`.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Buffer, isUtf8 } from "node:buffer";
import { BLOCK_BEGIN, findBlock } from "./_record.ts";
import { type CheckpointRecord, type EndStatus, parseRecord } from "./_record.ts";
import {
  codeOf,
  kindOf,
  MAX_CHECKPOINT_BYTES,
  MiB,
  READ_FLAGS,
  readUpTo,
  runSync,
} from "./_write_steps.ts";

export {
  APPEND_FLAGS,
  atomicSteps,
  builtin,
  closeQuietly,
  codeOf,
  CREATE_FLAGS,
  ensureDir,
  kindOf,
  lstatIfThere,
  MAX_CHECKPOINT_BYTES,
  MiB,
  nodeCrypto,
  type Op,
  READ_FLAGS,
  readUpTo,
  resetSwept,
  runAsync,
  runSync,
  type Steps,
  type StepTrace,
  sweepNow,
  sweepStaleTemps,
  TEMP_SUFFIX,
  tempName,
  tempPath,
  unlinkQuietly,
  writeFileAtomic,
  writeFileAtomicSync,
} from "./_write_steps.ts";

/**
 * Whether nothing is at a path (not even a dangling link), asked without an
 * exception: a run's start looks for files that are usually not there (an
 * earlier attempt's checkpoint, `state.db`), and a thrown ENOENT costs an
 * error object and its stack each time. False when the answer is anything
 * else (an error other than ENOENT included): the caller reads the path as before.
 *
 * @example
 * ```ts
 * import { nothingAt } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(nothingAt("/nonexistent/file"), true);
 * assert.equal(nothingAt("/"), false);
 * ```
 */
export function nothingAt(file: string): boolean {
  try {
    return fs.lstatSync(file, { throwIfNoEntry: false }) === undefined;
  } catch {
    // lstat failed for another reason (EACCES, ELOOP): something may be there, never taken for absent
    return false;
  }
}

// ---------------------------------------------------------------------------
// Reads that may find nothing. Each answers "what is there, or undefined" for
// a path that may be missing, unreadable, or torn by a concurrent writer, so
// that a caller's default is a `??` rather than a try/catch of its own. Every
// error counts as "not there", as the callers' own catches did: a caller that
// tells ENOENT from other errors keeps its own try.
// ---------------------------------------------------------------------------

/**
 * A file's bytes, or undefined when it cannot be read (missing, a directory,
 * no permission).
 *
 * @param file The file.
 * @returns Its content, or undefined.
 *
 * @example
 * ```ts
 * import { readIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "a.bin"), new Uint8Array([1, 2]));
 * assert.deepEqual([...readIfThere(join(dir, "a.bin")) ?? []], [1, 2]);
 * assert.equal(readIfThere(join(dir, "missing")), undefined);
 * assert.equal(readIfThere(dir), undefined);
 * ```
 */
export function readIfThere(file: fs.PathLike): Buffer | undefined {
  try {
    return fs.readFileSync(file);
  } catch {
    // absent or unreadable: undefined is this function's answer, and its caller's to tell
    return undefined;
  }
}

/**
 * A file's text, or undefined when it cannot be read.
 *
 * @param file The file.
 * @param encoding How its bytes are decoded; `"utf8"` unless given.
 * @returns Its text, or undefined.
 *
 * @example
 * ```ts
 * import { readTextIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "notes.md"), "hello\n");
 * assert.equal(readTextIfThere(join(dir, "notes.md")), "hello\n");
 * assert.equal(readTextIfThere(join(dir, "missing")) ?? "", "");
 * ```
 */
export function readTextIfThere(
  file: fs.PathLike,
  encoding: BufferEncoding = "utf8",
): string | undefined {
  return readIfThere(file)?.toString(encoding);
}

/**
 * JSON text parsed, or undefined when it is not JSON (a line torn by a kill,
 * a foreign file).
 *
 * @param text The text.
 * @returns The value, or undefined.
 *
 * @example
 * ```ts
 * import { parseJsonIfValid } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseJsonIfValid('{"a":1}'), { a: 1 });
 * assert.equal(parseJsonIfValid('{"a":'), undefined);
 * ```
 */
export function parseJsonIfValid(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    // not JSON: undefined is this function's answer
    return undefined;
  }
}

/**
 * A JSON file's value, or undefined when it cannot be read or is not JSON.
 *
 * @param file The file.
 * @returns The value, or undefined.
 *
 * @example
 * ```ts
 * import { jsonIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "state.json"), '{"root":"/w"}');
 * writeFileSync(join(dir, "torn.json"), '{"root":');
 * assert.deepEqual(jsonIfThere(join(dir, "state.json")), { root: "/w" });
 * assert.equal(jsonIfThere(join(dir, "torn.json")), undefined);
 * assert.equal(jsonIfThere(join(dir, "missing.json")), undefined);
 * ```
 */
export function jsonIfThere(file: fs.PathLike): unknown {
  const text = readTextIfThere(file);
  return text === undefined ? undefined : parseJsonIfValid(text);
}

/**
 * A directory's entry names, or undefined when it cannot be listed (missing,
 * not a directory, no permission).
 *
 * @param dir The directory.
 * @returns Its names, or undefined.
 *
 * @example
 * ```ts
 * import { readdirIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "a"), "");
 * assert.deepEqual(readdirIfThere(dir), ["a"]);
 * assert.equal(readdirIfThere(join(dir, "missing")), undefined);
 * assert.deepEqual(readdirIfThere(join(dir, "missing")) ?? [], []);
 * ```
 */
export function readdirIfThere(dir: fs.PathLike): string[] | undefined {
  try {
    return fs.readdirSync(dir, "utf8");
  } catch {
    // absent or unreadable: undefined is this function's answer, and its caller's to tell
    return undefined;
  }
}

/**
 * What is at a path, not following a final symbolic link; undefined when it
 * cannot be looked at (missing, a parent not a directory, no permission).
 *
 * @param file The path.
 * @returns Its status, or undefined.
 *
 * @example
 * ```ts
 * import { lstatSyncIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "a"), "");
 * symlinkSync("missing", join(dir, "link"));
 * assert.ok(lstatSyncIfThere(join(dir, "link"))?.isSymbolicLink());
 * assert.equal(lstatSyncIfThere(join(dir, "missing")), undefined);
 * assert.equal(lstatSyncIfThere(join(dir, "a", "below-a-file")), undefined);
 * ```
 */
export function lstatSyncIfThere(file: fs.PathLike): fs.Stats | undefined {
  try {
    return fs.lstatSync(file, { throwIfNoEntry: false });
  } catch {
    // absent or unreadable: undefined is this function's answer, and its caller's to tell
    return undefined;
  }
}

/**
 * What a path leads to, following symbolic links; undefined when it cannot be
 * looked at (missing, a dangling link, no permission).
 *
 * @param file The path.
 * @returns Its status, or undefined.
 *
 * @example
 * ```ts
 * import { statSyncIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "a"), "abc");
 * symlinkSync("a", join(dir, "link"));
 * symlinkSync("missing", join(dir, "dangling"));
 * assert.equal(statSyncIfThere(join(dir, "link"))?.size, 3);
 * assert.equal(statSyncIfThere(join(dir, "dangling")), undefined);
 * ```
 */
export function statSyncIfThere(file: fs.PathLike): fs.Stats | undefined {
  try {
    return fs.statSync(file, { throwIfNoEntry: false });
  } catch {
    // absent or unreadable: undefined is this function's answer, and its caller's to tell
    return undefined;
  }
}

/**
 * A symbolic link's target as bytes, or undefined when it cannot be read
 * (missing, not a link).
 *
 * @param file The link.
 * @returns Its target, or undefined.
 *
 * @example
 * ```ts
 * import { readlinkIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "a"), "");
 * symlinkSync("target", join(dir, "link"));
 * assert.equal(readlinkIfThere(join(dir, "link"))?.toString(), "target");
 * assert.equal(readlinkIfThere(join(dir, "a")), undefined);
 * ```
 */
export function readlinkIfThere(file: fs.PathLike): Buffer | undefined {
  try {
    // A view, not a copy: Deno gives a plain Uint8Array where Node gives a Buffer.
    const target = fs.readlinkSync(file, { encoding: "buffer" });
    return Buffer.from(target.buffer, target.byteOffset, target.byteLength);
  } catch {
    // not a link, or unreadable: undefined is this function's answer
    return undefined;
  }
}

/**
 * The canonical path (links resolved), or undefined when it cannot be
 * resolved (a missing part, no permission).
 *
 * @param file The path.
 * @returns The resolved path, or undefined.
 *
 * @example
 * ```ts
 * import { realpathIfThere } from "./_file_ops.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, realpathSync, symlinkSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = realpathSync(mkdtempSync(join(tmpdir(), "ac-")));
 * symlinkSync(dir, join(dir, "self"));
 * assert.equal(realpathIfThere(join(dir, "self")), dir);
 * assert.equal(realpathIfThere(join(dir, "missing")), undefined);
 * ```
 */
export function realpathIfThere(file: string): string | undefined {
  try {
    return fs.realpathSync(file);
  } catch {
    // absent or unreadable: undefined is this function's answer, and its caller's to tell
    return undefined;
  }
}

// The bounded reader of checkpoint files: at most 4 MiB, no link followed,
// no FIFO or device opened in a way that blocks; a file is described, never
// thrown over.

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
    // the error goes into the answer, whose caller shows it
    return { ...base, state: "unreadable", error: (error as Error).message };
  }
  return describe(base, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
}
