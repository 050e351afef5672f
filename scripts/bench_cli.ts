/**
 * How long `agent-checkpoint ls` and `audit` take over a checkpoint directory
 * of N files (each a block of about 1 KiB, as the library writes them), in
 * process, the output collected in memory. Files are written without fsync
 * (the figure is the reading side).
 *
 * `deno run -A scripts/bench_cli.ts [N ...]` (default 0 1000 10000).
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { main } from "../cli/mod.ts";
import { memoryIo } from "../cli/_io.ts";
import { type CheckpointRecord, renderBlock } from "../_record.ts";

const sizes = process.argv.slice(2).map(Number).filter((n) => Number.isInteger(n) && n >= 0);
const counts = sizes.length > 0 ? sizes : [0, 1000, 10000];

function populate(n: number): string {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-cli-"));
  const dir = path.join(home, "agent-checkpoints");
  fs.mkdirSync(dir);
  for (let i = 0; i < n; i++) {
    const record = {
      kind: i % 3 === 0 ? "end" : "tier",
      source: "pre_llm_call",
      runId: `run-${i}`,
      dialect: "chat",
      turnsUsed: 50,
      elapsedSeconds: 600,
      caps: { turns: { value: 100, source: "host" } },
      tier: 1,
      persistedAt: new Date(Date.now() - i * 1000).toISOString(),
      message: "Budget checkpoint: write what you have found so far into the file.",
      tools: [{ tool: "bash", status: "ok", startedAt: 590, durationMs: 120 }],
      notes: [],
      ...(i % 3 === 0 ? { end: { status: "done", at: new Date().toISOString() } } : {}),
    } as unknown as CheckpointRecord;
    fs.writeFileSync(path.join(dir, `run-${i}.md`), renderBlock(record) + "\n");
  }
  return home;
}

async function time(args: string[], runs: number): Promise<number[]> {
  const out: number[] = [];
  for (let r = 0; r < runs; r++) {
    const { io } = memoryIo();
    const t0 = performance.now();
    const code = await main(args, io);
    out.push(performance.now() - t0);
    if (code !== 0) throw new Error(`${args.join(" ")} exited ${code}`);
  }
  return out.sort((a, b) => a - b);
}

const median = (xs: number[]) => xs[Math.floor(xs.length / 2)]!;
console.log("files    ls (ms)   ls --json (ms)   audit (ms)   per file (µs, ls)");
for (const n of counts) {
  const home = populate(n);
  const runs = n >= 10000 ? 3 : 7;
  const ls = median(await time(["ls", "--home", home], runs));
  const lsJson = median(await time(["ls", "--home", home, "--json"], runs));
  const audit = median(await time(["audit", "--home", home], runs));
  console.log(
    `${String(n).padEnd(8)} ${ls.toFixed(1).padStart(7)}   ${lsJson.toFixed(1).padStart(14)}   ${
      audit.toFixed(1).padStart(10)
    }   ${n > 0 ? ((ls / n) * 1000).toFixed(1).padStart(17) : "-".padStart(17)}`,
  );
  fs.rmSync(home, { recursive: true, force: true });
}
