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
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { isMainThread } from "node:worker_threads";
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import { BLOCK_BEGIN, findBlock, mergeBlock } from "./_block.ts";
import { type CheckpointRecord, type EndStatus, parseRecord } from "./_record.ts";
import {
  APPEND_FLAGS,
  closeQuietly,
  codeOf,
  CREATE_FLAGS,
  lstatIfThere,
  READ_FLAGS,
  readUpTo,
  runAsync,
  runSync,
  type Steps,
  tempName,
  unlinkQuietly,
} from "./_file_ops.ts";

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

const tempPath = (target: string) =>
  path.join(path.dirname(target), tempName(path.basename(target)));

const MiB = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;

function kindOf(st: fs.Stats): string {
  if (st.isSymbolicLink()) return "symbolic link";
  if (st.isFIFO()) return "FIFO";
  if (st.isDirectory()) return "directory";
  if (st.isSocket()) return "socket";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "device";
  return "special file";
}

const notRegular = (file: string, st: fs.Stats) =>
  new Error(`${file} is a ${kindOf(st)}, not a regular file; the checkpoint was not written`);
class LinkedError extends Error {}
const linked = (file: string, st: fs.Stats) =>
  new LinkedError(
    `${file} has ${st.nlink} hard links, so it may be another file's content; ` +
      "the checkpoint was not written and the file was left as it is",
  );
const tooLarge = (file: string, size: number) =>
  new Error(
    `${file} is ${MiB(size)}, over the ${
      MiB(MAX_CHECKPOINT_BYTES)
    } a checkpoint file may hold; the checkpoint was not written and the file was left as it is`,
  );

/** The steps of an atomic write; the mode of a replaced regular file is kept. */
function* atomicSteps(target: string, data: Uint8Array): Steps<void> {
  const dir = path.dirname(target);
  yield { op: "sweep", dir };
  const st = yield* lstatIfThere(target);
  const tmp = tempPath(target);
  const fd = (yield { op: "open", path: tmp, flags: CREATE_FLAGS, mode: 0o644 }) as number;
  let open: number | undefined = fd;
  try {
    if (st?.isFile()) yield { op: "fchmod", fd, mode: st.mode & 0o7777 };
    yield { op: "write", fd, data, position: 0 };
    yield { op: "fsync", fd };
    open = undefined;
    yield { op: "close", fd };
    yield { op: "rename", from: tmp, to: target };
  } catch (error) {
    yield* closeQuietly(open);
    yield* unlinkQuietly(tmp);
    throw error;
  }
  yield { op: "syncDir", dir };
}

const bytesOf = (data: string | Uint8Array) => typeof data === "string" ? Buffer.from(data) : data;

/**
 * Synchronous twin of {@linkcode writeFileAtomic}: the library's one atomic
 * write of a whole file (the workspace store's files go through it), for
 * where the file must be durable before the call returns.
 *
 * @param target The file to replace or create; its directory must exist.
 * @param data The new content.
 * @throws {Error} The file system's error; nothing is left behind.
 *
 * @example
 * ```ts
 * import { writeFileAtomicSync } from "./persist.ts";
 * import assert from "node:assert/strict";
 * import { chmodSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "private.md");
 * writeFileSync(file, "old");
 * chmodSync(file, 0o600);
 * writeFileAtomicSync(file, "new");
 * assert.equal(readFileSync(file, "utf8"), "new");
 * assert.equal(statSync(file).mode & 0o777, 0o600);
 * ```
 */
export function writeFileAtomicSync(target: string, data: string | Uint8Array): void {
  runSync(atomicSteps(target, bytesOf(data)));
}

/**
 * Write a file atomically: a temporary file in the same directory, flushed to
 * disk, renamed over the target, then the directory flushed. A reader sees the
 * old file or the new one, never a mix, even if the process is killed
 * mid-write. A replaced file keeps its permissions; a symbolic link at the
 * target is replaced, not followed. The temporary files a killed writer of
 * this library left are removed by the process's first write to the same
 * directory; only those: their names carry a check of their own, so no other
 * file is ever removed, whatever its name.
 *
 * @param target The file to replace or create; its directory must exist.
 * @param text The new content.
 * @throws {Error} The file system's error when the directory is missing or
 * not writable; nothing is left behind.
 *
 * @example
 * ```ts
 * import { writeFileAtomic } from "./mod.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, readFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "notes.md");
 * await writeFileAtomic(file, "first\n");
 * await writeFileAtomic(file, "second\n");
 * assert.equal(readFileSync(file, "utf8"), "second\n");
 * ```
 */
export async function writeFileAtomic(target: string, text: string): Promise<void> {
  await runAsync(atomicSteps(target, bytesOf(text)));
}

/**
 * Create a directory and its missing parents. Not `mkdirSync(…, { recursive:
 * true })`: on Node 20 that never returns for a path under /proc, and a hook
 * must not hang. This walk is bounded by the path's depth.
 *
 * @param dir The directory.
 * @throws {Error} When it cannot be created, or a non-directory is in the way.
 *
 * @example
 * ```ts
 * import { ensureDir } from "./persist.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, statSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = join(mkdtempSync(join(tmpdir(), "ac-")), "a", "b");
 * ensureDir(dir);
 * assert.ok(statSync(dir).isDirectory());
 * ```
 */
export function ensureDir(dir: string): void {
  try {
    fs.mkdirSync(dir);
    return;
  } catch (error) {
    const code = codeOf(error);
    if (code === "EEXIST") {
      if (fs.statSync(dir).isDirectory()) return;
      throw new Error(`ENOTDIR: ${dir} exists and is not a directory`);
    }
    if (code !== "ENOENT" || path.dirname(dir) === dir) throw error;
  }
  ensureDir(path.dirname(dir));
  try {
    fs.mkdirSync(dir);
  } catch (error) {
    if (codeOf(error) !== "EEXIST") throw error;
  }
}

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
    stem += "-" + createHash("sha256").update(runId).digest("hex").slice(0, 12);
  }
  return `${stem}.md`;
}

// ---- persisting the block --------------------------------------------------

/** Full re-reads before a persist gives up on a file that keeps changing. */
const MAX_TRIES = 5;
/** Appends folded into the temporary file before the rename, per try. */
const MAX_ROUNDS = 8;
/** Replaced inodes held open in all, across files (the least recently persisted file's go first). */
const MAX_HELD = 64;
/**
 * Replaced inodes held per file: at least the last 3, and any replaced in the
 * last 2 s up to 16, so a writer delayed between its open and its write (a
 * busy machine) loses nothing.
 */
const GENERATIONS = 3;
const HOLD_MS = 2000;
const MAX_GENERATIONS = 16;

/** A replaced inode, held open, and how much of it the file at the path already holds. */
interface Replaced {
  fd: number;
  offset: number;
  /** Whether late bytes reached it at the last persist (a writer keeps it open). */
  active?: boolean;
  /** When it was replaced, ms since the epoch. */
  since: number;
}

/**
 * The replaced inodes of each recently persisted file, oldest first: an agent
 * that opened the file just before a rename (or keeps it open) writes there,
 * and the next persist carries those bytes over. Main thread only.
 */
const held = new Map<string, Replaced[]>();

const EMPTY = new Uint8Array(0);
const concat = (a: Uint8Array, b: Uint8Array) => (b.length === 0 ? a : Buffer.concat([a, b]));
const prefixEqual = (bytes: Uint8Array, prefix: Uint8Array) =>
  bytes.length >= prefix.length &&
  Buffer.compare(
      Buffer.from(bytes.buffer, bytes.byteOffset, prefix.length),
      Buffer.from(prefix.buffer, prefix.byteOffset, prefix.length),
    ) === 0;
const sameInode = (a: fs.Stats | undefined, b: fs.Stats) =>
  a !== undefined && a.ino === b.ino && a.dev === b.dev;

/** Bytes written to a replaced (unlinked) inode past `offset`; none while it still has a name. */
function* lateBytes(fd: number, offset: number): Steps<Uint8Array> {
  try {
    const st = (yield { op: "fstat", fd }) as fs.Stats;
    if (st.nlink !== 0 || st.size <= offset) return EMPTY;
    const bytes = yield* readUpTo(fd, offset, MAX_CHECKPOINT_BYTES, st.size - offset);
    return bytes.length > MAX_CHECKPOINT_BYTES ? bytes.subarray(0, MAX_CHECKPOINT_BYTES) : bytes;
  } catch {
    return EMPTY;
  }
}

function* hold(file: string, replaced: Replaced[]): Steps<void> {
  if (!isMainThread) {
    // A worker thread can be terminated at any moment, and its descriptors would leak.
    for (const r of replaced) yield* closeQuietly(r.fd);
    return;
  }
  // Another persist of this file (another batch, or a hook between a batch's steps) held some too.
  const also = held.get(file);
  if (also) replaced = [...also, ...replaced];
  const now = Date.now();
  while (replaced.length > GENERATIONS) {
    // A file a writer still writes to is kept over a quiet one, a recent one over an old one.
    let drop = replaced.findIndex((r) => !r.active && now - r.since >= HOLD_MS);
    if (drop === -1 && replaced.length > MAX_GENERATIONS) {
      drop = Math.max(0, replaced.findIndex((r) => !r.active));
    }
    if (drop === -1) break;
    const [dropped] = replaced.splice(drop, 1);
    yield* closeQuietly(dropped!.fd);
  }
  held.delete(file);
  let count = replaced.length;
  for (const list of held.values()) count += list.length;
  while (count > MAX_HELD && held.size > 0) {
    const [oldest, list] = held.entries().next().value!;
    held.delete(oldest);
    count -= list.length;
    for (const r of list) yield* closeQuietly(r.fd);
  }
  held.set(file, replaced);
}

/** Append bytes to the file at its path (not through a link), flushed. */
function* appendTo(file: string, bytes: Uint8Array): Steps<void> {
  let out: number | undefined;
  try {
    out = (yield { op: "open", path: file, flags: APPEND_FLAGS }) as number;
    yield { op: "write", fd: out, data: bytes, position: null };
    yield { op: "fsync", fd: out };
  } finally {
    yield* closeQuietly(out);
  }
}

/**
 * After the rename: copy what was appended to the replaced inode since it was
 * read (by a writer that opened it before the rename) to the end of the new
 * file. Returns how many bytes were copied.
 */
function* copyLate(file: string, fd: number, base: Uint8Array): Steps<number> {
  let copied = 0;
  for (let round = 0; round < 3; round++) {
    const st = (yield { op: "fstat", fd }) as fs.Stats;
    const from = base.length + copied;
    if (st.nlink !== 0 || st.size <= from) break;
    if (round === 0) {
      // Appended, not rewritten: the part already merged is unchanged.
      const again = yield* readUpTo(fd, 0, MAX_CHECKPOINT_BYTES, base.length);
      if (!prefixEqual(again, base)) break;
    }
    const late = yield* readUpTo(fd, from, MAX_CHECKPOINT_BYTES, st.size - from);
    if (late.length === 0) break;
    try {
      yield* appendTo(file, late);
    } catch {
      break; // the next persist carries them over
    }
    copied += late.length;
  }
  return copied;
}

/** A try's outcome: the replaced inode to hold, "done" when there was none, or "retry". */
type Try = Replaced | "done" | "retry";

/** One try at a persist; "retry" when the file changed in a way that needs a fresh read. */
function* persistTry(
  file: string,
  block: string,
  carry: Uint8Array,
  flushDir: boolean,
  last: boolean,
): Steps<Try> {
  const st = yield* lstatIfThere(file);
  if (st && !st.isSymbolicLink()) {
    if (!st.isFile()) throw notRegular(file, st);
    if (st.nlink > 1) throw linked(file, st);
    if (st.size > MAX_CHECKPOINT_BYTES) throw tooLarge(file, st.size);
  }
  let fd: number | undefined;
  let tfd: number | undefined;
  let tmp: string | undefined;
  let installed = false;
  try {
    let base: Uint8Array = EMPTY;
    let seen: fs.Stats | undefined;
    if (st?.isFile()) {
      try {
        fd = (yield { op: "open", path: file, flags: READ_FLAGS }) as number;
      } catch (error) {
        if (codeOf(error) === "ENOENT" || codeOf(error) === "ELOOP") return "retry";
        throw error;
      }
      const opened = (yield { op: "fstat", fd }) as fs.Stats;
      if (!opened.isFile() || !sameInode(st, opened)) return "retry";
      base = yield* readUpTo(fd, 0, MAX_CHECKPOINT_BYTES, opened.size);
      if (base.length > MAX_CHECKPOINT_BYTES) throw tooLarge(file, base.length);
      seen = (yield { op: "fstat", fd }) as fs.Stats;
    }
    const merged = mergeBlock(concat(base, carry), block);
    tmp = tempPath(file);
    tfd = (yield { op: "open", path: tmp, flags: CREATE_FLAGS, mode: 0o644 }) as number;
    if (seen) yield { op: "fchmod", fd: tfd, mode: seen.mode & 0o7777 };
    yield { op: "write", fd: tfd, data: merged, position: 0 };
    let length = merged.length;
    // Flushed before the last check, so that only a rename lies between them.
    yield { op: "fsync", fd: tfd };
    for (let round = 0; fd !== undefined && seen; round++) {
      const now = (yield { op: "fstat", fd }) as fs.Stats;
      // The agent replaced the file (an editor's save): never clobber that.
      if (!sameInode(yield* lstatIfThere(file), now)) return "retry";
      const unchanged = now.size === base.length && now.mtimeMs === seen.mtimeMs &&
        now.ctimeMs === seen.ctimeMs;
      if (unchanged || last || round >= MAX_ROUNDS) break; // later appends: copyLate
      if (now.size < base.length) return "retry";
      const again = yield* readUpTo(fd, 0, MAX_CHECKPOINT_BYTES, now.size);
      if (again.length > MAX_CHECKPOINT_BYTES) throw tooLarge(file, again.length);
      if (!prefixEqual(again, base)) return "retry"; // rewritten, not appended
      const appended = again.subarray(base.length);
      yield { op: "write", fd: tfd, data: appended, position: length };
      yield { op: "fsync", fd: tfd };
      length += appended.length;
      base = again;
      seen = (yield { op: "fstat", fd }) as fs.Stats;
    }
    if (st?.isSymbolicLink() && !sameInode(yield* lstatIfThere(file), st)) return "retry";
    const closing = tfd;
    tfd = undefined;
    yield { op: "close", fd: closing };
    if (st) {
      yield { op: "rename", from: tmp, to: file };
    } else {
      // A file the agent creates meanwhile must not be replaced: link() fails on it.
      try {
        yield { op: "link", from: tmp, to: file };
      } catch (error) {
        const code = codeOf(error);
        if (code === "EEXIST") return "retry";
        if (code !== "EPERM" && code !== "ENOTSUP" && code !== "ENOSYS" && code !== "EMLINK") {
          throw error;
        }
        if (yield* lstatIfThere(file)) return "retry";
        yield { op: "rename", from: tmp, to: file };
        tmp = undefined;
      }
    }
    installed = true;
    if (tmp !== undefined) yield* unlinkQuietly(tmp);
    if (flushDir) yield { op: "syncDir", dir: path.dirname(file) };
    if (fd === undefined) return "done";
    const copied = yield* copyLate(file, fd, base);
    const replaced = { fd, offset: base.length + copied, since: Date.now() };
    fd = undefined;
    return replaced;
  } finally {
    yield* closeQuietly(tfd);
    if (!installed && tmp !== undefined) yield* unlinkQuietly(tmp);
    yield* closeQuietly(fd);
  }
}

/** Files with more than one link for which the directory was swept again. */
const relinked = new Set<string>();
const MAX_RELINKED = 256;

function* persistSteps(file: string, block: string, flushDir: boolean): Steps<void> {
  yield { op: "sweep", dir: path.dirname(file) };
  const older = held.get(file) ?? [];
  held.delete(file);
  let outcome: Try = "retry";
  try {
    const late: Uint8Array[] = [];
    for (const r of older) late.push(yield* lateBytes(r.fd, r.offset));
    const carry = late.length === 0 ? EMPTY : Buffer.concat(late);
    for (let attempt = 1; attempt <= MAX_TRIES + 2 && outcome === "retry"; attempt++) {
      try {
        outcome = yield* persistTry(file, block, carry, flushDir, attempt >= MAX_TRIES);
      } catch (error) {
        // A writer killed between its link() and its unlink() leaves a second link: its
        // temporary file. Sweep for it once per file, then judge the links again.
        if (!(error instanceof LinkedError) || relinked.has(file)) throw error;
        if (relinked.size >= MAX_RELINKED) relinked.clear();
        relinked.add(file);
        yield { op: "sweepNow", dir: path.dirname(file) };
      }
    }
    if (outcome === "retry") {
      throw new Error(`${file} kept changing while the checkpoint was written; it was not written`);
    }
    older.forEach((r, i) => {
      r.offset += late[i]!.length;
      r.active = late[i]!.length > 0;
    });
    // A writer that opened an older file even earlier may have written since.
    for (const r of older) {
      const more = yield* lateBytes(r.fd, r.offset);
      if (more.length === 0) continue;
      try {
        yield* appendTo(file, more);
        r.offset += more.length;
        r.active = true;
      } catch { /* the next persist looks again */ }
    }
  } finally {
    const keep = outcome === "retry" || outcome === "done" ? older : [...older, outcome];
    if (keep.length > 0) yield* hold(file, keep);
  }
}

/**
 * A per-file lock that threads of one process share, so that one thread at a
 * time rewrites a checkpoint file (the run table's, for a live run).
 */
export interface FileLock {
  /** Take the lock, blocking the thread up to `ms`; whether it was taken. */
  take(ms: number): boolean;
  /** Take the lock, waiting up to `ms` without blocking the thread; whether it was taken. */
  takeAsync(ms: number): Promise<boolean>;
  /** Give it back; only after a `take` that returned true. */
  release(): void;
}

/**
 * How long a write waits for another thread's write of the same file, in
 * ms; past the wait, the write goes ahead anyway.
 *
 * @example
 * ```ts
 * import { FILE_LOCK_WAIT_MS } from "./persist.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(FILE_LOCK_WAIT_MS, 2000);
 * ```
 */
export const FILE_LOCK_WAIT_MS = 2000;

/**
 * Replace (or append) the plugin's block in a checkpoint file, atomically,
 * keeping every byte the agent wrote. The directory is created when missing.
 * This, and {@linkcode persistBlocks} for a burst, is how every checkpoint
 * file is written.
 *
 * An agent may write to the file meanwhile: appends made while the new
 * content is prepared are folded in before the rename, other changes make it
 * start over (up to five times), appends that reach the replaced file after
 * the rename are copied to the new one, and (on the main thread) bytes
 * written even later through a descriptor the agent kept open are carried
 * over by the next persist. A file the agent creates or replaces meanwhile is
 * never clobbered.
 *
 * A symbolic link at the path is replaced by a regular file, never followed;
 * a FIFO, device or directory there, a file with more than one hard link, or
 * a file over 4 MiB, is refused with an error and left as it is. A replaced
 * file keeps its permissions. Only a block with the library's data line is
 * replaced: a copy of the markers the agent made without one is its text.
 *
 * @param file The checkpoint file.
 * @param block The block, markers included (see `renderBlock`).
 * @param lock The file's lock, held for the write (waiting up to
 * {@linkcode FILE_LOCK_WAIT_MS} for another thread's write).
 * @throws {Error} When the file cannot be written; the file is then unchanged.
 *
 * @example
 * ```ts
 * import { persistBlock } from "./persist.ts";
 * import assert from "node:assert/strict";
 * import { appendFileSync, mkdtempSync, readFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "run.md");
 * const block = (text: string) =>
 *   `<!-- agent-checkpoint:begin -->\n${text}\n<!-- agent-checkpoint:data {"v":1} -->\n` +
 *   "<!-- agent-checkpoint:end -->";
 * persistBlock(file, block("one"));
 * appendFileSync(file, "my notes\n");
 * persistBlock(file, block("two"));
 * assert.equal(readFileSync(file, "utf8"), `${block("two")}\nmy notes\n`);
 * ```
 */
export function persistBlock(file: string, block: string, lock?: FileLock): void {
  const locked = lock?.take(FILE_LOCK_WAIT_MS) ?? false;
  try {
    ensureDir(path.dirname(file));
    runSync(persistSteps(file, block, true));
  } finally {
    if (locked) lock!.release();
  }
}

/** One checkpoint file to write in a burst. */
export interface BlockWrite {
  /** The checkpoint file. */
  file: string;
  /** The block, markers included. */
  block: string;
  /** The file's lock, held for its write, as {@linkcode persistBlock} holds it. */
  lock?: FileLock;
}

/** Options of {@linkcode persistBlocks}. */
export interface PersistBlocksOptions {
  /**
   * How many files are written at once.
   *
   * @default {16}
   */
  concurrency?: number;
}

/**
 * Persist a burst of blocks concurrently, each as {@linkcode persistBlock}
 * writes it (its lock held, waited for without blocking the thread): each
 * file's temporary file is flushed before it is renamed, and each directory
 * is flushed once, after the batch's renames. Writes to the same file are
 * made in the order given.
 *
 * @param items The files, their blocks and their locks.
 * @param options How many writes are in flight at once.
 * @returns One entry per item, in order: undefined when it was written, else
 * the error that left its file unchanged.
 * @throws {RangeError} When `concurrency` is not a positive integer.
 *
 * @example
 * ```ts
 * import { persistBlocks } from "./persist.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, readFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * const block = "<!-- agent-checkpoint:begin -->\n<!-- agent-checkpoint:data {\"v\":1} -->\n" +
 *   "<!-- agent-checkpoint:end -->";
 * const items = ["a", "b", "c"].map((n) => ({ file: join(dir, `${n}.md`), block }));
 * assert.deepEqual(await persistBlocks(items), [undefined, undefined, undefined]);
 * assert.equal(readFileSync(join(dir, "b.md"), "utf8"), `${block}\n`);
 * ```
 */
export async function persistBlocks(
  items: BlockWrite[],
  options: PersistBlocksOptions = {},
): Promise<Array<Error | undefined>> {
  const concurrency = options.concurrency ?? 16;
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new RangeError(`concurrency must be a positive integer, got ${concurrency}`);
  }
  const results: Array<Error | undefined> = items.map(() => undefined);
  const byFile = new Map<string, number[]>();
  items.forEach((item, i) => {
    const list = byFile.get(item?.file);
    if (list) list.push(i);
    else byFile.set(item?.file, [i]);
  });
  const groups = [...byFile.values()];
  const dirs = new Set<string>();
  let next = 0;
  const lane = async () => {
    while (next < groups.length) {
      for (const i of groups[next++]!) {
        const { file, block, lock } = items[i] ?? {};
        let locked = false;
        try {
          if (typeof file !== "string" || typeof block !== "string") {
            throw new TypeError(`item ${i} needs a file and a block, got ${typeof file}`);
          }
          locked = (await lock?.takeAsync(FILE_LOCK_WAIT_MS)) ?? false;
          ensureDir(path.dirname(file));
          await runAsync(persistSteps(file, block, false));
          dirs.add(path.dirname(file));
        } catch (error) {
          results[i] = error instanceof Error ? error : new Error(String(error));
        } finally {
          if (locked) lock!.release();
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, groups.length) }, lane));
  await Promise.all(
    [...dirs].map((dir) =>
      runAsync((function* (): Steps<void> {
        yield { op: "syncDir", dir };
      })())
    ),
  );
  return results;
}

// ---- reading it back ---------------------------------------------------------

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

const strict = new TextDecoder("utf-8", { fatal: true });
const loose = new TextDecoder();
const BEGIN_BYTES = Buffer.from(BLOCK_BEGIN);

/** Describe a checkpoint file's bytes. */
function describe(base: CheckpointFile, bytes: Buffer): CheckpointFile {
  try {
    strict.decode(bytes);
  } catch {
    base.utf8 = false;
  }
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
