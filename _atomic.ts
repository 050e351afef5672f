/**
 * The library's one atomic write of a whole file (a temporary file flushed
 * and renamed, then the directory flushed), and the bounded directory
 * creation every writer uses. Private: the library imports it through
 * `persist.ts`.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Buffer } from "node:buffer";
import {
  closeQuietly,
  codeOf,
  CREATE_FLAGS,
  lstatIfThere,
  runAsync,
  runSync,
  type Steps,
  tempName,
  unlinkQuietly,
} from "./_file_ops.ts";

/** The path of a fresh temporary file beside `target`. */
export const tempPath = (target: string) =>
  path.join(path.dirname(target), tempName(path.basename(target)));

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
