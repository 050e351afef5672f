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
