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
 * imports; each job lives in a private module: the atomic write in
 * `_atomic.ts`, file names in `_naming.ts`, the block persist in
 * `_persist_block.ts`, the burst in `_persist_batch.ts`, the reader in
 * `_reader.ts` (file-system steps in `_file_ops.ts`).
 *
 * @module
 */
export { ensureDir, writeFileAtomic, writeFileAtomicSync } from "./_atomic.ts";
export { checkpointFileName } from "./_naming.ts";
export { FILE_LOCK_WAIT_MS, type FileLock, persistBlock } from "./_persist_block.ts";
export { type BlockWrite, persistBlocks, type PersistBlocksOptions } from "./_persist_batch.ts";
export {
  type CheckpointFile,
  type FileState,
  MAX_CHECKPOINT_BYTES,
  readCheckpoint,
  readCheckpointBytes,
} from "./_reader.ts";
