/**
 * Checkpoint file names: one safe, bounded file name per run id. Private:
 * the library imports it through `persist.ts`.
 *
 * @module
 */
import { createHash } from "node:crypto";

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
