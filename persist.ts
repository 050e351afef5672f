/**
 * The checkpoint file (S8): atomic writes, safe file names, and the delimited
 * block the plugin owns inside a file that is otherwise the agent's.
 *
 * @module
 */
import * as fs from "node:fs";
import * as fsp from "node:fs/promises";
import * as path from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import { createHash, randomBytes } from "node:crypto";

const TEMP_SUFFIX = ".tmp";
const tempPrefix = (target: string) => `.${path.basename(target)}.`;
const tempPath = (target: string) =>
  path.join(
    path.dirname(target),
    `${tempPrefix(target)}${process.pid}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`,
  );

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
};

const swept = new Set<string>();

/**
 * Remove temporary files that a killed writer left beside `target`: once per
 * target and process, and only those whose writing process is gone.
 */
function sweepStaleTemps(target: string): void {
  if (swept.has(target)) return;
  swept.add(target);
  const prefix = tempPrefix(target);
  let names: string[];
  try {
    names = fs.readdirSync(path.dirname(target));
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(prefix) || !name.endsWith(TEMP_SUFFIX)) continue;
    const pid = Number(name.slice(prefix.length).split(".")[0]);
    if (Number.isInteger(pid) && pid !== process.pid && !alive(pid)) {
      try {
        fs.unlinkSync(path.join(path.dirname(target), name));
      } catch { /* another sweeper got it first */ }
    }
  }
}

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

/**
 * Synchronous twin of {@linkcode writeFileAtomic}, for the watchdog worker and
 * tool boundaries, where the file must be durable before the call returns.
 */
export function writeFileAtomicSync(target: string, data: string | Uint8Array): void {
  sweepStaleTemps(target);
  const tmp = tempPath(target);
  const fd = fs.openSync(tmp, "wx", 0o644);
  try {
    try {
      fs.writeFileSync(fd, data);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, target);
  } catch (error) {
    fs.rmSync(tmp, { force: true });
    throw error;
  }
  syncDirSync(path.dirname(target));
}

/**
 * Write a file atomically: a temporary file in the same directory, flushed to
 * disk, renamed over the target, then the directory flushed. A reader sees the
 * old file or the new one, never a mix, even if the process is killed
 * mid-write; temporary files a killed writer left are removed by the next
 * write to the same target.
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
  sweepStaleTemps(target);
  const tmp = tempPath(target);
  const handle = await fsp.open(tmp, "wx", 0o644);
  try {
    try {
      await handle.writeFile(text);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fsp.rename(tmp, target);
  } catch (error) {
    await fsp.rm(tmp, { force: true });
    throw error;
  }
  let dir: fsp.FileHandle | undefined;
  try {
    dir = await fsp.open(path.dirname(target), "r");
    await dir.sync();
  } catch {
    /* as in writeFileAtomicSync */
  } finally {
    await dir?.close();
  }
}

/**
 * Create a directory and its missing parents. Not `mkdirSync(…, { recursive:
 * true })`: on Node 20 that never returns for a path under /proc, and a hook
 * must not hang. This walk is bounded by the path's depth.
 */
export function ensureDir(dir: string): void {
  try {
    fs.mkdirSync(dir);
    return;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
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
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
}

const MAX_STEM = 120;
const HASHED = /-[0-9a-f]{12}$/;

/**
 * The checkpoint file name for a run id: characters outside `A-Za-z0-9._-`
 * replaced, no leading dot, bounded length, and a short hash of the id added
 * whenever anything was changed, so two ids never share a file.
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

/** The marker lines of the plugin's block. */
export const BLOCK_BEGIN = "<!-- agent-checkpoint:begin -->";
/** @see BLOCK_BEGIN */
export const BLOCK_END = "<!-- agent-checkpoint:end -->";
/** The prefix of the machine-readable line inside the block. */
export const DATA_PREFIX = "<!-- agent-checkpoint:data ";

const BEGIN = Buffer.from(BLOCK_BEGIN);
const END = Buffer.from(BLOCK_END);

/**
 * Where the plugin's block lies in a file: the first begin marker followed by
 * an end marker with no other begin marker between them.
 */
export function findBlock(bytes: Uint8Array): { start: number; end: number } | undefined {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let start = buf.indexOf(BEGIN);
  while (start !== -1) {
    const end = buf.indexOf(END, start + BEGIN.length);
    if (end === -1) return undefined;
    const nextBegin = buf.indexOf(BEGIN, start + BEGIN.length);
    if (nextBegin === -1 || nextBegin > end) return { start, end: end + END.length };
    start = nextBegin;
  }
  return undefined;
}

/**
 * Put `block` into the file's bytes: over the plugin's own block when there is
 * one, else appended. Every other byte is kept as it was, whatever encoding.
 */
export function mergeBlock(existing: Uint8Array | undefined, block: string): Buffer {
  const fresh = Buffer.from(block);
  if (!existing || existing.byteLength === 0) return Buffer.concat([fresh, Buffer.from("\n")]);
  const old = Buffer.from(existing.buffer, existing.byteOffset, existing.byteLength);
  const at = findBlock(old);
  if (at) return Buffer.concat([old.subarray(0, at.start), fresh, old.subarray(at.end)]);
  const gap = old[old.length - 1] === 0x0a ? "\n" : "\n\n";
  return Buffer.concat([old, Buffer.from(gap), fresh, Buffer.from("\n")]);
}

const readIfThere = (file: string): Buffer | undefined => {
  try {
    return fs.readFileSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
};

const sameFile = (a: fs.Stats | undefined, b: fs.Stats | undefined) =>
  a === b ||
  (a !== undefined && b !== undefined && a.ino === b.ino && a.size === b.size &&
    a.mtimeMs === b.mtimeMs);

const statIfThere = (file: string) => {
  try {
    return fs.statSync(file);
  } catch {
    return undefined;
  }
};

/**
 * Replace (or append) the plugin's block in a checkpoint file, atomically,
 * keeping every byte the agent wrote. The directory is created when missing.
 * If the file changes while the new content is prepared, the merge is redone
 * so that a concurrent edit by the agent is not lost.
 */
export function persistBlock(file: string, block: string): void {
  ensureDir(path.dirname(file));
  for (let attempt = 0;; attempt++) {
    const before = statIfThere(file);
    const merged = mergeBlock(readIfThere(file), block);
    if (attempt < 3 && !sameFile(before, statIfThere(file))) continue;
    writeFileAtomicSync(file, merged);
    return;
  }
}
