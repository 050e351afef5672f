/**
 * The demo's progress line, drawn from a worker of its own: the demo's main
 * thread is blocked on purpose, so it cannot draw anything itself.
 */
import * as fs from "node:fs";
import { parentPort, workerData } from "node:worker_threads";
import { parseRecord } from "../_record.ts";
import { nowMs } from "../_run_table.ts";
import { formatDuration } from "../template.ts";

interface ProgressData {
  file: string;
  start: number;
  cap: number;
  tier1: number;
  tier2: number;
  until: number;
  tty: boolean;
}

function progress(data: ProgressData): void {
  const seen = new Map<number, number>();
  let lastPrinted = -10;
  const draw = () => {
    const elapsed = (nowMs() - data.start) / 1000;
    let record;
    try {
      record = parseRecord(fs.readFileSync(data.file));
    } catch { /* not written yet */ }
    if (record && !seen.has(record.tier)) seen.set(record.tier, elapsed);
    const mark = (tier: number, at: number) => {
      const when = seen.get(tier);
      return when === undefined
        ? `tier ${tier} at ${formatDuration(at)} …`
        : `tier ${tier} written at ${formatDuration(when)} ✓`;
    };
    const width = 30;
    const filled = Math.min(width, Math.round((elapsed / data.until) * width));
    const line = `  [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${
      formatDuration(elapsed)
    } of ${formatDuration(data.cap)}  |  ${mark(1, data.tier1)}  |  ${mark(2, data.tier2)}`;
    if (data.tty) fs.writeSync(1, `\r${line}\x1b[K`);
    else if (elapsed - lastPrinted >= 10 || seen.size !== (draw as { n?: number }).n) {
      fs.writeSync(1, `${line}\n`);
      lastPrinted = elapsed;
      (draw as { n?: number }).n = seen.size;
    }
  };
  setInterval(draw, 200);
  draw();
}

if (parentPort !== null && workerData !== null) progress(workerData as ProgressData);
