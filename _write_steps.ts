/**
 * Every write of a file, as file-system steps: the steps are values (an
 * {@linkcode Op} each), run by a synchronous or an asynchronous driver, so
 * one algorithm serves both the hooks, which must be durable before they
 * return, and the watchdog's concurrent bursts, and a test can trace them
 * (the flush before each rename). Built from them: the library's one atomic
 * write of a whole file, and the persist of a checkpoint file, which
 * replaces the library's block while keeping every byte the agent wrote
 * (replaced inodes held so late appends are carried over, a per-file lock
 * the threads share, a burst's writes in flight at once with one directory
 * flush per batch). Also the Node built-ins the library loads on first use
 * ({@linkcode builtin}, {@linkcode nodeCrypto}). Private: the library
 * imports the writes through `persist.ts` (and `_file_ops.ts` re-exports
 * the steps for its readers).
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import { createRequire } from "node:module";
import { mergeBlock } from "./_record.ts";

// Node built-ins that cost a host milliseconds to import and that only some calls use are
// required (synchronously) the first time one does. A built-in needs no base to resolve from,
// but `createRequire` wants a file one: a library imported by URL (Deno) has an `https:` or
// `http:` one.
let builtinRequire: ReturnType<typeof createRequire> | undefined;

/** A Node built-in module (`node:…`), loaded on its first use. */
export const builtin = <T>(name: string): T =>
  (builtinRequire ??= createRequire(
    import.meta.url.startsWith("file:") ? import.meta.url : "file:///",
  ))(name) as T;

let cryptoModule: typeof import("node:crypto") | undefined;
/** `node:crypto`, loaded on first use: a host pays for it at its first write, not its import. */
export const nodeCrypto = (): typeof import("node:crypto") =>
  cryptoModule ??= builtin<typeof import("node:crypto")>("node:crypto");

let mainThread: boolean | undefined;
/**
 * Whether this is the process's main thread. `node:worker_threads` is loaded on the first
 * question, not at import: in Node it brings the stream modules with it.
 */
export const isMainThread = (): boolean =>
  mainThread ??= builtin<typeof import("node:worker_threads")>("node:worker_threads").isMainThread;

/** One file-system step. Errors come back into the algorithm as thrown errors. */
export type Op =
  | { op: "lstat"; path: string }
  | { op: "open"; path: string; flags: number; mode?: number }
  | { op: "fstat"; fd: number }
  | { op: "read"; fd: number; length: number; position: number }
  | { op: "write"; fd: number; data: Uint8Array; position: number | null }
  | { op: "fsync"; fd: number }
  | { op: "fchmod"; fd: number; mode: number }
  | { op: "ftruncate"; fd: number; length: number }
  | { op: "close"; fd: number }
  | { op: "rename"; from: string; to: string }
  | { op: "link"; from: string; to: string }
  | { op: "unlink"; path: string }
  | { op: "syncDir"; dir: string }
  | { op: "sweep"; dir: string }
  | { op: "sweepNow"; dir: string };

/** A step sequence: yields steps, is resumed with each step's result. */
export type Steps<T> = Generator<Op, T, unknown>;

const C = fs.constants;
/** Open flags: read without following a link and without blocking on a FIFO. */
export const READ_FLAGS = C.O_RDONLY | (C.O_NOFOLLOW ?? 0) | (C.O_NONBLOCK ?? 0);
/** Open flags: create a new temporary file. */
export const CREATE_FLAGS = C.O_WRONLY | C.O_CREAT | C.O_EXCL | (C.O_NOFOLLOW ?? 0);
/** Open flags: append to an existing file, not through a link. */
export const APPEND_FLAGS = C.O_WRONLY | C.O_APPEND | (C.O_NOFOLLOW ?? 0) | (C.O_NONBLOCK ?? 0);

/** What a non-regular file is, in words: "symbolic link", "FIFO", "directory" … */
export function kindOf(st: fs.Stats): string {
  if (st.isSymbolicLink()) return "symbolic link";
  if (st.isFIFO()) return "FIFO";
  if (st.isDirectory()) return "directory";
  if (st.isSocket()) return "socket";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "device";
  return "special file";
}

/** The error code of a file-system error, if any. */
export const codeOf = (error: unknown): string | undefined =>
  (error as NodeJS.ErrnoException | undefined)?.code;

function syncDirSync(dir: string): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, "r");
    fs.fsyncSync(fd);
  } catch {
    /* some platforms cannot fsync a directory; the rename is still atomic */
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** The temporary files' suffix; their names are made by {@linkcode tempName}. */
export const TEMP_SUFFIX = ".tmp";
/** The mark between a temporary file's target name and its writer's process id. */
const TEMP_MARK = "agent-checkpoint";
const MAX_SWEPT_DIRS = 1024;
/**
 * A directory this large (its own size, in bytes) is swept in the background;
 * a smaller one (about 2,000 entries or fewer) before the write goes on.
 */
const SYNC_SWEEP_DIR_BYTES = 64 * 1024;
const MAX_SWEEP_ENTRIES = 100_000;
const STALE_MS = 60 * 60 * 1000;
const swept = new Set<string>();

/** The check that binds a temporary file's name to its target, writer and nonce. */
const tempCheck = (target: string, pid: number, nonce: string) =>
  nodeCrypto().createHash("sha256").update(`${TEMP_MARK}\0${target}\0${pid}\0${nonce}`)
    .digest("hex").slice(0, 16);

/**
 * The name of a temporary file for `target` (a base name), written by process
 * `pid`: `.<target>.agent-checkpoint.<pid>.<nonce>.<check>.tmp`, where the
 * nonce is random and the check is a hash of the other three. Only a name
 * whose check matches is ever swept, so a file the library did not make is
 * never removed, however it is named.
 *
 * @param target The base name of the file being written.
 * @param pid The writing process.
 * @param nonce Random hex; a fresh one when not given.
 */
export function tempName(target: string, pid = process.pid, nonce?: string): string {
  const n = nonce ?? nodeCrypto().randomBytes(8).toString("hex");
  return `.${target}.${TEMP_MARK}.${pid}.${n}.${tempCheck(target, pid, n)}${TEMP_SUFFIX}`;
}

const TEMP_NAME = new RegExp(
  `^\\.(.+)\\.${TEMP_MARK}\\.([1-9][0-9]{0,9})\\.([0-9a-f]{16})\\.([0-9a-f]{16})\\${TEMP_SUFFIX}$`,
);

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return codeOf(error) === "EPERM";
  }
};

/** The file and writer when `name` is one of the library's own temporary files, else undefined. */
function staleCandidate(dir: string, name: string): { file: string; pid: number } | undefined {
  const m = TEMP_NAME.exec(name);
  if (!m) return undefined;
  const pid = Number(m[2]);
  if (pid === process.pid || tempCheck(m[1]!, pid, m[3]!) !== m[4]) return undefined;
  return { file: path.join(dir, name), pid };
}

function removeIfStale(dir: string, name: string): void {
  const found = staleCandidate(dir, name);
  if (!found) return;
  try {
    if (alive(found.pid) && Date.now() - fs.lstatSync(found.file).mtimeMs < STALE_MS) return;
    fs.unlinkSync(found.file);
  } catch { /* another sweeper got it first */ }
}

async function sweepInBackground(dir: string): Promise<void> {
  let handle: fs.Dir | undefined;
  try {
    handle = await fs.promises.opendir(dir);
    for (let n = 0; n < MAX_SWEEP_ENTRIES; n++) {
      const entry = await handle.read();
      if (!entry) break;
      removeIfStale(dir, entry.name);
    }
  } catch {
    /* the directory went away */
  } finally {
    // the close of a directory handle after its fsync: a failure loses nothing
    await handle?.close().catch(() => {});
  }
}

/**
 * Remove temporary files that killed writers left in a directory: once per
 * directory and thread, at most 100,000 entries looked at, and only files
 * whose writing process is gone (or, if its id was reused, that are over an
 * hour old). A small directory (about 2,000 entries or fewer) is swept before
 * the write goes on. A large one is swept in the background, and only off
 * the main thread (by the watchdog worker): some runtimes list a directory in
 * one blocking step, and the host's thread must not pay for that.
 */
export function sweepStaleTemps(dir: string): void {
  if (swept.has(dir)) return;
  if (swept.size >= MAX_SWEPT_DIRS) swept.clear();
  swept.add(dir);
  try {
    if (fs.statSync(dir).size > SYNC_SWEEP_DIR_BYTES) {
      if (!isMainThread()) setTimeout(() => void sweepInBackground(dir), 0);
      return;
    }
    sweepNow(dir);
  } catch {
    /* an unreadable directory: the write itself will say why */
  }
}

/**
 * Sweep a directory now, whatever its size and whether it was swept before
 * (at most 100,000 entries): for the rare file that a killed writer left
 * hard-linked to its temporary file.
 */
export function sweepNow(dir: string): void {
  let handle: fs.Dir | undefined;
  try {
    handle = fs.opendirSync(dir);
    for (let n = 0; n < MAX_SWEEP_ENTRIES; n++) {
      const entry = handle.readSync();
      if (!entry) break;
      removeIfStale(dir, entry.name);
    }
  } catch {
    /* an unreadable directory: the write itself will say why */
  } finally {
    handle?.closeSync(); // closed once, here: it cannot be closed already
  }
}

/** Forget which directories were swept (tests). */
export function resetSwept(): void {
  swept.clear();
}

function readSync(fd: number, length: number, position: number): Uint8Array {
  const buf = new Uint8Array(length);
  let got = 0;
  while (got < length) {
    const n = fs.readSync(fd, buf, got, length - got, position + got);
    if (n === 0) break;
    got += n;
  }
  return got === length ? buf : buf.subarray(0, got);
}

function doSync(op: Op): unknown {
  switch (op.op) {
    case "lstat":
      return fs.lstatSync(op.path);
    case "open":
      return fs.openSync(op.path, op.flags, op.mode);
    case "fstat":
      return fs.fstatSync(op.fd);
    case "read":
      return readSync(op.fd, op.length, op.position);
    case "write": {
      let done = 0;
      while (done < op.data.length) {
        const at = op.position === null ? null : op.position + done;
        done += fs.writeSync(op.fd, op.data, done, op.data.length - done, at);
      }
      return undefined;
    }
    case "fsync":
      return fs.fsyncSync(op.fd);
    case "fchmod":
      return fs.fchmodSync(op.fd, op.mode);
    case "ftruncate":
      return fs.ftruncateSync(op.fd, op.length);
    case "close":
      return fs.closeSync(op.fd);
    case "rename":
      return fs.renameSync(op.from, op.to);
    case "link":
      return fs.linkSync(op.from, op.to);
    case "unlink":
      return fs.unlinkSync(op.path);
    case "syncDir":
      return syncDirSync(op.dir);
    case "sweep":
      return sweepStaleTemps(op.dir);
    case "sweepNow":
      return sweepNow(op.dir);
  }
}

const cb = <T>(run: (done: (error: Error | null, value?: T) => void) => void) =>
  new Promise<T>((resolve, reject) =>
    run((error, value) => (error ? reject(error) : resolve(value as T)))
  );

async function readAsync(fd: number, length: number, position: number): Promise<Uint8Array> {
  const buf = new Uint8Array(length);
  let got = 0;
  while (got < length) {
    const n = await cb<number>((d) => fs.read(fd, buf, got, length - got, position + got, d));
    if (n === 0) break;
    got += n;
  }
  return got === length ? buf : buf.subarray(0, got);
}

async function syncDirAsync(dir: string): Promise<void> {
  let fd: number | undefined;
  try {
    fd = await cb<number>((d) => fs.open(dir, "r", d));
    await cb((d) => fs.fsync(fd!, d));
  } catch {
    /* as in syncDirSync */
  } finally {
    // the close of a directory after its fsync: a failure loses nothing
    if (fd !== undefined) await cb((d) => fs.close(fd!, d)).catch(() => {});
  }
}

function doAsync(op: Op): Promise<unknown> {
  switch (op.op) {
    case "lstat":
      return cb((d) => fs.lstat(op.path, d));
    case "open":
      return cb((d) => fs.open(op.path, op.flags, op.mode, d));
    case "fstat":
      return cb((d) => fs.fstat(op.fd, d));
    case "read":
      return readAsync(op.fd, op.length, op.position);
    case "write":
      return (async () => {
        let done = 0;
        while (done < op.data.length) {
          const at = op.position === null ? null : op.position + done;
          done += await cb<number>((d) =>
            fs.write(op.fd, op.data, done, op.data.length - done, at, d)
          );
        }
      })();
    case "fsync":
      return cb((d) => fs.fsync(op.fd, d));
    case "fchmod":
      return cb((d) => fs.fchmod(op.fd, op.mode, d));
    case "ftruncate":
      return cb((d) => fs.ftruncate(op.fd, op.length, d));
    case "close":
      return cb((d) => fs.close(op.fd, d));
    case "rename":
      return cb((d) => fs.rename(op.from, op.to, d));
    case "link":
      return cb((d) => fs.link(op.from, op.to, d));
    case "unlink":
      return cb((d) => fs.unlink(op.path, d));
    case "syncDir":
      return syncDirAsync(op.dir);
    case "sweep":
      return Promise.resolve(sweepStaleTemps(op.dir));
    case "sweepNow":
      return Promise.resolve(sweepNow(op.dir));
  }
}

/**
 * Told of each step that succeeded, with its result (an `open`'s descriptor):
 * the steps are data, so a test can check their order (the flush before the rename).
 */
export type StepTrace = (op: Op, result: unknown) => void;

/** Run steps synchronously. */
export function runSync<T>(steps: Steps<T>, trace?: StepTrace): T {
  let next = steps.next();
  while (!next.done) {
    let value: unknown;
    try {
      value = doSync(next.value);
    } catch (error) {
      next = steps.throw(error);
      continue;
    }
    trace?.(next.value, value);
    next = steps.next(value);
  }
  return next.value;
}

/**
 * The steps that wait on the disk (a flush): with `waitsOnly`, only these go
 * through the event loop, so that the lanes of a burst overlap their waits.
 */
const WAITS: ReadonlySet<Op["op"]> = new Set<Op["op"]>(["fsync", "syncDir"]);

/**
 * Run steps on the event loop. `waitsOnly`: the steps that do not wait on the
 * disk (open, write, link, unlink, …: microseconds each) run at once on this
 * thread, each sparing a round trip through the runtime's I/O threads; for a
 * thread of its own (the watchdog's burst), never the host's.
 */
export async function runAsync<T>(
  steps: Steps<T>,
  trace?: StepTrace,
  waitsOnly = false,
): Promise<T> {
  let next = steps.next();
  while (!next.done) {
    let value: unknown;
    try {
      const op = next.value;
      value = waitsOnly && !WAITS.has(op.op) ? doSync(op) : await doAsync(op);
    } catch (error) {
      next = steps.throw(error);
      continue;
    }
    trace?.(next.value, value);
    next = steps.next(value);
  }
  return next.value;
}

/** Best-effort close inside steps: a failing close is not the write's failure. */
export function* closeQuietly(fd: number | undefined): Steps<void> {
  if (fd === undefined) return;
  try {
    yield { op: "close", fd };
  } catch { /* already closed */ }
}

/** Best-effort unlink inside steps. */
export function* unlinkQuietly(file: string): Steps<void> {
  try {
    yield { op: "unlink", path: file };
  } catch { /* gone already */ }
}

/** Stat a path without following a link; undefined when nothing is there. */
export function* lstatIfThere(file: string): Steps<fs.Stats | undefined> {
  try {
    return (yield { op: "lstat", path: file }) as fs.Stats;
  } catch (error) {
    if (codeOf(error) === "ENOENT") return undefined;
    throw error;
  }
}

/**
 * Read a file descriptor from `position` to its end, stopping once more than
 * `max` bytes are read (so a result longer than `max` means "too long");
 * `hint` is the expected length, read in one step when right.
 */
export function* readUpTo(
  fd: number,
  position: number,
  max: number,
  hint: number,
): Steps<Uint8Array> {
  const parts: Uint8Array[] = [];
  let total = 0;
  let want = Math.min(Math.max(hint, 0), max) + 1;
  for (;;) {
    const got = (yield { op: "read", fd, length: want, position: position + total }) as Uint8Array;
    if (got.length > 0) parts.push(got);
    total += got.length;
    if (got.length < want || total > max) break;
    want = Math.min(64 * 1024, max + 1 - total);
  }
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The path of a fresh temporary file beside `target`. */
export const tempPath = (target: string) =>
  path.join(path.dirname(target), tempName(path.basename(target)));

/** The steps of an atomic write; the mode of a replaced regular file is kept. */
export function* atomicSteps(target: string, data: Uint8Array): Steps<void> {
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

// The persist of a block: every byte the agent wrote kept, the file's lock held.

/** A file the library will not touch as it is: never tried again until it changes. */
export class RefusedError extends Error {}
const notRegular = (file: string, st: fs.Stats) =>
  new RefusedError(
    `${file} is a ${kindOf(st)}, not a regular file; the checkpoint was not written`,
  );
class LinkedError extends RefusedError {}
const linked = (file: string, st: fs.Stats) =>
  new LinkedError(
    `${file} has ${st.nlink} hard links, so it may be another file's content; ` +
      "the checkpoint was not written and the file was left as it is",
  );
const tooLarge = (file: string, size: number) =>
  new RefusedError(
    `${file} is ${MiB(size)}, over the ${
      MiB(MAX_CHECKPOINT_BYTES)
    } a checkpoint file may hold; the checkpoint was not written and the file was left as it is`,
  );

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
    // The replaced file cannot be read (an I/O error): it has nothing to give back, and the
    // record goes on what the file's name holds, which the agent's own writes reach too.
    return EMPTY;
  }
}

function* hold(file: string, replaced: Replaced[]): Steps<void> {
  if (!isMainThread()) {
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
  let size: number | undefined;
  try {
    out = (yield { op: "open", path: file, flags: APPEND_FLAGS }) as number;
    size = ((yield { op: "fstat", fd: out }) as fs.Stats).size;
    yield { op: "write", fd: out, data: bytes, position: null };
    yield { op: "fsync", fd: out };
  } catch (error) {
    // A write cut short (a full disk) is taken back, so the bytes are kept whole or not at all.
    if (out !== undefined && size !== undefined) {
      try {
        yield { op: "ftruncate", fd: out, length: size };
      } catch { /* the caller keeps the bytes; at worst a part of them is there twice */ }
    }
    throw error;
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
      // On the main thread the held inode keeps them for the next persist; a worker thread
      // holds no inode (it may be terminated at any moment), so it keeps the bytes instead.
      if (!isMainThread()) keepStuck(file, late);
      break;
    }
    copied += late.length;
  }
  return copied;
}

/**
 * Off the main thread: bytes the agent appended to a replaced file that
 * could not be copied to the new one (a full disk), by file, oldest first.
 * The next persist of the file on the thread folds them in; until then the
 * file counts as owed a write (see {@linkcode stuckBytes}).
 */
const stuck = new Map<string, Uint8Array>();
/** Files whose stuck bytes are kept, at most (the least recently kept go first). */
const MAX_STUCK_FILES = 256;

function keepStuck(file: string, bytes: Uint8Array): void {
  const before = stuck.get(file);
  stuck.delete(file);
  const all = before ? Buffer.concat([before, bytes]) : Buffer.from(bytes);
  stuck.set(file, all.length > MAX_CHECKPOINT_BYTES ? all.subarray(0, MAX_CHECKPOINT_BYTES) : all);
  if (stuck.size > MAX_STUCK_FILES) stuck.delete(stuck.keys().next().value!);
}

/**
 * Bytes the agent appended during an earlier persist of `file` on this
 * thread that are in no file yet (a worker thread's copy after the rename
 * failed); the writer tries the file again until none are left. @internal
 */
export function stuckBytes(file: string): number {
  return stuck.get(file)?.length ?? 0;
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
  fresh = false,
): Steps<Try> {
  // A file thought new is not looked at first: the link() below fails on anything at the path,
  // and the next try looks (one step fewer for each run's first file in a burst).
  const st = fresh ? undefined : yield* lstatIfThere(file);
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

/**
 * The steps of one persist of `block` to `file` (no lock taken: the caller
 * holds it); `flushDir` flushes the directory after the rename. `fresh`: the
 * caller believes nothing is at the path yet (the run's first write), so the
 * first try goes straight to linking a new file into place; a wrong belief
 * costs that try, never the file at the path.
 */
export function* persistSteps(
  file: string,
  block: string,
  flushDir: boolean,
  fresh = false,
): Steps<void> {
  yield { op: "sweep", dir: path.dirname(file) };
  const older = held.get(file) ?? [];
  held.delete(file);
  const kept = stuck.get(file);
  stuck.delete(file);
  let outcome: Try = "retry";
  try {
    const late: Uint8Array[] = kept ? [kept] : [];
    for (const r of older) late.push(yield* lateBytes(r.fd, r.offset));
    const carry = late.length === 0 ? EMPTY : Buffer.concat(late);
    for (let attempt = 1; attempt <= MAX_TRIES + 2 && outcome === "retry"; attempt++) {
      try {
        outcome = yield* persistTry(
          file,
          block,
          carry,
          flushDir,
          attempt >= MAX_TRIES,
          fresh && attempt === 1 && carry.length === 0,
        );
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
    const fromHeld = kept ? late.slice(1) : late;
    older.forEach((r, i) => {
      r.offset += fromHeld[i]!.length;
      r.active = fromHeld[i]!.length > 0;
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
    // Not written: the stuck bytes wait for the next persist, ahead of any kept since.
    if (outcome === "retry" && kept) {
      const since = stuck.get(file);
      stuck.delete(file);
      keepStuck(file, since ? Buffer.concat([kept, since]) : kept);
    }
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
 * @param trace Told of every file-system step and its result, in order
 * (tests check that each file is flushed before its rename; not for hosts).
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
  trace?: StepTrace,
): Promise<Array<Error | undefined>> {
  const concurrency = options.concurrency ?? 16;
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new RangeError(`concurrency must be a positive integer, got ${concurrency}`);
  }
  const results = await writeBurst(
    items.map((item) => item?.file),
    (i) => {
      const { file, block, lock } = items[i] ?? {};
      if (typeof file !== "string" || typeof block !== "string") {
        throw new TypeError(`item ${i} needs a file and a block, got ${typeof file}`);
      }
      return lock ? { block, lock } : { block };
    },
    concurrency,
    trace,
  );
  return results.map((r) => r === SKIPPED ? undefined : r);
}

/** A write of a burst its maker left out (nothing to write). @internal */
export const SKIPPED: unique symbol = Symbol("skipped");

/**
 * The engine of a burst: `files[i]` is the file of write `i`, whose block
 * `make(i)` makes when a lane comes to it (so the first files land while
 * later records are still to be made; undefined leaves it out, a throw is its
 * error). Writes to one file are made in order, each directory is made once
 * (not once per write) and flushed once, after its renames. `waitsOnly`: on
 * a thread of its own, only the flushes go through the event loop (see
 * {@linkcode runAsync}). @internal
 *
 * @returns Per write: undefined when written, {@linkcode SKIPPED}, or its error.
 */
export async function writeBurst(
  files: readonly (string | undefined)[],
  make: (i: number) => { block: string; lock?: FileLock; fresh?: boolean } | undefined,
  concurrency: number,
  trace?: StepTrace,
  waitsOnly = false,
): Promise<Array<Error | undefined | typeof SKIPPED>> {
  const results: Array<Error | undefined | typeof SKIPPED> = files.map(() => undefined);
  const byFile = new Map<string | undefined, number[]>();
  files.forEach((file, i) => {
    const list = byFile.get(file);
    if (list) list.push(i);
    else byFile.set(file, [i]);
  });
  const groups = [...byFile.values()];
  /** Directories made (or found) in this burst, and written to: each is flushed once at the end. */
  const dirs = new Set<string>();
  let next = 0;
  const lane = async () => {
    while (next < groups.length) {
      for (const i of groups[next++]!) {
        let lock: FileLock | undefined;
        let locked = false;
        try {
          const made = make(i);
          if (made === undefined) {
            results[i] = SKIPPED;
            continue;
          }
          const file = files[i]!;
          lock = made.lock;
          locked = (await lock?.takeAsync(FILE_LOCK_WAIT_MS)) ?? false;
          const dir = path.dirname(file);
          if (!dirs.has(dir)) {
            ensureDir(dir);
            dirs.add(dir);
          }
          await runAsync(persistSteps(file, made.block, false, made.fresh), trace, waitsOnly);
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
      runAsync(
        (function* (): Steps<void> {
          yield { op: "syncDir", dir };
        })(),
        trace,
      )
    ),
  );
  return results;
}
