/**
 * The watchdog's ledger progress in one thread, for profiling: N runs in a
 * run table, each making a model call and a tool call between two intervals;
 * prints the CPU time of taking in the changed records (`collect`) and of
 * writing them in one commit (`flush`) per interval, and their median.
 * `--cpu-prof` works here (no worker).
 *
 *   deno run -A scripts/_prof_progress.ts [RUNS=20000] [ROUNDS=8]
 *
 * @module
 */
import { RunTable } from "../_run_table.ts";
import { LedgerProgress, recordOf } from "../_ledger.ts";
import { encodeRunInfo, type RunInfo } from "../_writer.ts";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";
import { thisHost } from "../store/_host.ts";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";

const N = Number(process.argv[2] ?? 20000);
const ROUNDS = Number(process.argv[3] ?? 8);
const home = fs.mkdtempSync(path.join(os.tmpdir(), "prof-"));
const table = new RunTable(undefined, 65536);
while (table.slots < N) table.grow();
const infos: RunInfo[] = [];
const now0 = performance.timeOrigin + performance.now();
const tool = table.internName("step");
for (let slot = 0; slot < N; slot++) {
  const gen = table.claim(slot, now0);
  const info: RunInfo = {
    slot,
    gen,
    runId: `r${slot}`,
    dialect: "chat",
    caps: { turns: { value: 1000, source: "host" } },
    checkpointFile: path.join(home, "agent-checkpoints", `r${slot}.md`),
    notes: [],
    attempt: 1,
  };
  table.writeInfo(slot, encodeRunInfo(info)!);
  infos.push(info);
}
const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
const host = thisHost();
// The starts.
store.writeSync({ records: infos.map((i) => recordOf(i, table, host, now0)) });
let calls = 0;
const timed = {
  ...store,
  write: (b: Parameters<typeof store.write>[0]) => {
    const t = performance.now();
    store.writeSync(b);
    calls += performance.now() - t;
    return Promise.resolve();
  },
} as unknown as typeof store;
const progress = new LedgerProgress(
  {
    write: timed.write,
    prune: () => Promise.resolve(0),
    close: () => Promise.resolve(),
  },
  () => {},
  host,
);
const cache = new Map<number, { seq: number; info: RunInfo }>();
const infoOf = (slot: number) => {
  const c = cache.get(slot);
  if (c && c.seq === table.infoSeq(slot)) return c.info;
  const r = table.readInfo(slot)!;
  const info = JSON.parse(r.text) as RunInfo;
  cache.set(slot, { seq: r.seq, info });
  return info;
};
const cpuCollect: number[] = [];
const cpuFlush: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const now = performance.timeOrigin + performance.now();
  for (let slot = 0; slot < N; slot++) {
    table.addTurn(slot);
    const n = table.toolStart(slot, tool, now, `c${round}`);
    table.toolEnd(slot, n, tool, true, 5, now, `c${round}`);
  }
  calls = 0;
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const c0 = cpu();
  progress.collect(table, infoOf, now);
  const c1 = cpu();
  await progress.flush(now, 1, true);
  const c2 = cpu();
  if (round >= 2) {
    cpuCollect.push(c1 - c0);
    cpuFlush.push(c2 - c1);
  }
  console.log(
    `round ${round}: CPU collect ${(c1 - c0).toFixed(0)} ms, flush ${(c2 - c1).toFixed(0)} ms`,
  );
}
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
console.log(
  `median CPU per interval: collect ${med(cpuCollect).toFixed(0)} ms + flush ${
    med(cpuFlush).toFixed(0)
  } ms = ${(med(cpuCollect) + med(cpuFlush)).toFixed(0)} ms`,
);
// Idle round
{
  const now = performance.timeOrigin + performance.now();
  const t0 = performance.now();
  progress.collect(table, infoOf, now);
  await progress.flush(now, 1, true);
  console.log(`idle: ${(performance.now() - t0).toFixed(1)} ms`);
}
store.closeSync();
