/**
 * Reading checkpoint files back for `ls`, `show` and `audit`: whatever a file
 * holds (a block, only the agent's text, nothing, a truncated block, bytes
 * that are not UTF-8, a link, a FIFO, a file too large) it is described,
 * never a crash and never a hang. A run whose record has no end was cut off.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { EndStatus } from "../_record.ts";
import { type CheckpointFile, type FileState, readCheckpoint } from "../persist.ts";

export type { CheckpointFile, FileState };

/** Directory entries looked at by {@linkcode listCheckpoints}. */
const MAX_LISTED = 100_000;

/**
 * Every checkpoint file in a directory, newest first; none when it does not
 * exist. Each is read with {@linkcode readCheckpoint}'s bounds; at most
 * 100,000 directory entries are looked at.
 *
 * @param dir The checkpoint directory.
 * @returns The files, described.
 *
 * @example
 * ```ts
 * import { listCheckpoints } from "./_inspect.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, writeFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const dir = mkdtempSync(join(tmpdir(), "ac-"));
 * writeFileSync(join(dir, "notes.md"), "only the agent's text");
 * assert.deepEqual(listCheckpoints(dir).map((f) => f.state), ["agent text only"]);
 * assert.deepEqual(listCheckpoints(join(dir, "missing")), []);
 * ```
 */
export function listCheckpoints(dir: string): CheckpointFile[] {
  const names: string[] = [];
  let handle: fs.Dir | undefined;
  try {
    handle = fs.opendirSync(dir);
    for (let n = 0; n < MAX_LISTED; n++) {
      const entry = handle.readSync();
      if (!entry) break;
      if (entry.name.endsWith(".md") && !entry.name.startsWith(".")) names.push(entry.name);
    }
  } catch {
    // a directory that cannot be listed holds no checkpoint file to show
    return [];
  } finally {
    handle?.closeSync(); // closed once, here: it cannot be closed already
  }
  return names.map((n) => readCheckpoint(path.join(dir, n))).sort((a, b) => b.at - a.at);
}

/**
 * How a file's run stands, in a word or two: `cut off` (a record with no
 * end), `ended <status>`, or, for a file with no intact record, its state.
 *
 * @param f A described checkpoint file.
 * @returns The label `ls` and `show` print.
 *
 * @example
 * ```ts
 * import { runStanding } from "./_inspect.ts";
 * import assert from "node:assert/strict";
 *
 * const f = { file: "r.md", runId: "r", state: "record" as const, cutOff: true,
 *   agentText: false, incomplete: false, utf8: true, size: 1, at: 0 };
 * assert.equal(runStanding(f), "cut off");
 * assert.equal(runStanding({ ...f, cutOff: false, ended: "capped" }), "ended capped");
 * ```
 */
export function runStanding(f: CheckpointFile): string {
  if (f.state !== "record") return f.state;
  return f.ended ? `ended ${f.ended}` : "cut off";
}

/** How many runs were cut off, and how many ended with each status. */
export interface EndTally {
  /** Runs with a record and no end. */
  cutOff: number;
  /** Runs that ended, by status (statuses with no run are absent). */
  ended: Partial<Record<EndStatus, number>>;
}

/**
 * Count the cut-off and the ended runs among files, for `audit`.
 *
 * @param files Described checkpoint files.
 * @returns The tally; files without a record are not counted.
 *
 * @example
 * ```ts
 * import { tallyEnds } from "./_inspect.ts";
 * import assert from "node:assert/strict";
 *
 * const f = { file: "r.md", runId: "r", state: "record" as const, cutOff: true,
 *   agentText: false, incomplete: false, utf8: true, size: 1, at: 0 };
 * assert.deepEqual(tallyEnds([f, { ...f, cutOff: false, ended: "done" as const }]), {
 *   cutOff: 1,
 *   ended: { done: 1 },
 * });
 * ```
 */
export function tallyEnds(files: CheckpointFile[]): EndTally {
  const tally: EndTally = { cutOff: 0, ended: {} };
  for (const f of files) {
    if (f.state !== "record") continue;
    if (f.ended) tally.ended[f.ended] = (tally.ended[f.ended] ?? 0) + 1;
    else if (f.cutOff) tally.cutOff++;
  }
  return tally;
}
