/**
 * File-system steps as values, run by a synchronous or an asynchronous
 * driver, so that one algorithm (an atomic write, a persist) serves both the
 * hooks, which must be durable before they return, and the watchdog's
 * concurrent bursts; and the library's one atomic write of a whole file
 * built from them. Private: the library imports the write through
 * `persist.ts`. Also the Node built-ins the library loads on first use
 * ({@linkcode builtin}, {@linkcode nodeCrypto}).
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { isMainThread } from "node:worker_threads";
import { Buffer, isUtf8 } from "node:buffer";
import { BLOCK_BEGIN, findBlock } from "./_record.ts";
import { type CheckpointRecord, type EndStatus, parseRecord } from "./_record.ts";
import { createRequire } from "node:module";

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

/** One file-system step. Errors come back into the algorithm as thrown errors. */
export type Op =
  | { op: "lstat"; path: string }
  | { op: "open"; path: string; flags: number; mode?: number }
  | { op: "fstat"; fd: number }
  | { op: "read"; fd: number; length: number; position: number }
  | { op: "write"; fd: number; data: Uint8Array; position: number | null }
  | { op: "fsync"; fd: number }
  | { op: "fchmod"; fd: number; mode: number }
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
      if (!isMainThread) setTimeout(() => void sweepInBackground(dir), 0);
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

/** Run steps on the event loop. */
export async function runAsync<T>(steps: Steps<T>, trace?: StepTrace): Promise<T> {
  let next = steps.next();
  while (!next.done) {
    let value: unknown;
    try {
      value = await doAsync(next.value);
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
    return false;
  }
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
    return undefined;
  }
}

// The bounded reader of checkpoint files: at most 4 MiB, no link followed,
// no FIFO or device opened in a way that blocks; a file is described, never
// thrown over.

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
