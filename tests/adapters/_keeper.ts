/** A library instance for an adapter's tests, with its log, its writes and each run's record. */
import * as fs from "node:fs";
import * as path from "node:path";
import { createAgentCheckpoint } from "../../mod.ts";
import { parseRecord } from "../../_record.ts";
import { checkpointFileName } from "../../persist.ts";
import { captureLog, tempHome } from "../_helpers.ts";

/** The record in a checkpoint file, or undefined. */
export const record = (file: string) =>
  fs.existsSync(file) ? parseRecord(fs.readFileSync(file)) : undefined;

/** A library instance, and the record in a run's checkpoint file (by run id). */
export const make = (settings: Record<string, unknown> = {}) => {
  const log = captureLog();
  const home = tempHome();
  const dir = path.join(home, "checkpoints");
  const written: Array<{ runId: string; kind: string; source: string }> = [];
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { allow_tiny_tier1: true, checkpoint_dir: dir, ...settings },
    logger: log.logger,
    onCheckpoint: (e) => void written.push(e),
  });
  const recordOf = (runId: string) => record(path.join(dir, checkpointFileName(runId)));
  return { ac, log, recordOf, written };
};
