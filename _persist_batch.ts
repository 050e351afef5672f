/**
 * A burst of block persists written concurrently, each under its file's
 * lock, with one directory flush per directory. Private: the library imports
 * it through `persist.ts`.
 *
 * @module
 */
import * as path from "node:path";
import { runAsync, type Steps } from "./_file_ops.ts";
import { ensureDir } from "./_atomic.ts";
import { FILE_LOCK_WAIT_MS, type FileLock, persistSteps } from "./_persist_block.ts";

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
