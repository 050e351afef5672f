/**
 * Leases, measured: how soon a killed attempt is known dead on another
 * machine, and whether one attempt advances when two start at once. Machines
 * are processes (`tests/fixtures/lease_machine.ts`), each with its own
 * machine name, on the real PostgreSQL server (`AGENT_CHECKPOINT_TEST_PG`,
 * else `postgres://postgres@127.0.0.1:5432/test`, a schema of its own dropped
 * at the end), and the same on SQLite between two processes of one machine.
 *
 * 1. SIGKILL of machine A, which holds a run live → machine B's `startRun` of
 *    that run id (`on_duplicate: refuse`, tried every 10 ms) goes on and sees
 *    `cut off`: p50 and p99 over the kills, against `host_timeout_seconds`
 *    (30 s, how long it took before leases) and against B's own start of a
 *    fresh run id in the same run (the floor: one start's cost).
 * 2. Races of two starts of one run id with `refuse`: how many times exactly
 *    one advanced.
 * 3. Take-overs: how many of the old attempts had a record land after the
 *    new one took the run (goal 0), and whether each said it lost the run.
 *
 *     deno run -A scripts/bench_leases.ts [--quick] [--kills 50] [--races 100] [--takeovers 20]
 *
 * `--quick` makes it 10 kills, 20 races and 5 take-overs.
 *
 * @module
 */
import process from "node:process";
import { tempHome } from "../tests/_helpers.ts";
import { freshSchema } from "../tests/store/_pg.ts";
import { type Machine, machine } from "../tests/store/_machines.ts";
import { openStore } from "../store/mod.ts";
import { openPgStore } from "../store/postgres.ts";
import type { RunStore } from "../store/types.ts";
import { flag, pct } from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const kills = Number(flag(args, "--kills", quick ? "10" : "50"));
const races = Number(flag(args, "--races", quick ? "20" : "100"));
const takeovers = Number(flag(args, "--takeovers", quick ? "5" : "20"));
const FAST = { progress_interval_seconds: 0.2 };

interface Fleet {
  machine(name: string, settings: Record<string, unknown>): Machine;
  store(): RunStore;
  done(): Promise<void>;
}

async function pgFleet(): Promise<Fleet | undefined> {
  const db = await freshSchema().catch(() => undefined);
  if (!db) return undefined;
  const store = openPgStore({ url: db.url, hostTimeoutSeconds: 30 });
  const all: Machine[] = [];
  return {
    machine: (name, settings) => {
      const m = machine(tempHome(), { name, store: db.url, settings: { ...FAST, ...settings } });
      all.push(m);
      return m;
    },
    store: () => store,
    done: async () => {
      await Promise.all(all.map((m) => m.close().catch(() => {})));
      await store.close();
      await db.drop();
    },
  };
}

async function sqliteFleet(): Promise<Fleet> {
  const home = tempHome();
  await openStore({ home, settings: { host_timeout_seconds: 30 } })?.close();
  const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
  const all: Machine[] = [];
  return {
    // One machine: the processes share the home's ledger and know each other's pids.
    machine: (_name, settings) => {
      const m = machine(home, { settings: { ...FAST, ...settings } });
      all.push(m);
      return m;
    },
    store: () => store,
    done: async () => {
      await Promise.all(all.map((m) => m.close().catch(() => {})));
      await store.close();
    },
  };
}

async function measure(engine: string, fleet: Fleet) {
  // 1. Kills.
  const b = fleet.machine("machine-b", { on_duplicate: "refuse" });
  const floor: number[] = [];
  for (let i = 0; i < Math.min(20, kills); i++) {
    const t = Date.now();
    const s = await b.hold(`fresh-${i}`);
    floor.push(s.at - t);
    await b.end(`fresh-${i}`);
  }
  const seen: number[] = [];
  let cutOff = 0;
  for (let i = 0; i < kills; i++) {
    const runId = `killed-${i}`;
    const a = fleet.machine("machine-a", {});
    await a.hold(runId);
    const killedAt = Date.now();
    await a.kill();
    const s = await b.retry(runId);
    seen.push(s.at - killedAt);
    if (s.previous === "cut-off") cutOff++;
    await b.end(runId);
  }
  // 2. Races.
  const one = fleet.machine("runner-1", { on_duplicate: "refuse" });
  const two = fleet.machine("runner-2", { on_duplicate: "refuse" });
  let exactlyOne = 0;
  for (let i = 0; i < races; i++) {
    const runId = `race-${i}`;
    const answers = await Promise.all([one.hold(runId), two.hold(runId)]);
    if (answers.filter((x) => !x.refused).length === 1) exactlyOne++;
    for (const [k, m] of [one, two].entries()) if (!answers[k]!.refused) await m.end(runId);
  }
  // 3. Take-overs.
  const taker = fleet.machine("machine-c", { on_duplicate: "take-over" });
  let landedAfter = 0;
  let said = 0;
  for (let i = 0; i < takeovers; i++) {
    const runId = `taken-${i}`;
    const a = fleet.machine("machine-a", {});
    const held = await a.hold(runId);
    await new Promise((r) => setTimeout(r, 400)); // two intervals of A's records
    const took = await taker.hold(runId);
    await new Promise((r) => setTimeout(r, 600)); // A goes on writing: three intervals
    await a.end(runId);
    const logs = await a.logs();
    await a.close(); // what waits is written (or refused) before it exits
    if (logs.some((l) => l.includes("lost the run"))) said++;
    const old = (await fleet.store().list({ runId })).find((v) =>
      v.record.attempt === held.attempt
    );
    if (!old || old.record.status !== "live" || old.record.updatedAt > took.at) landedAfter++;
    await taker.end(runId);
  }
  const out = {
    engine,
    kills,
    killToCutOffP50Ms: pct(seen, 50),
    killToCutOffP99Ms: pct(seen, 99),
    killToCutOffMaxMs: Math.max(...seen),
    sawCutOff: cutOff,
    startFloorP50Ms: pct(floor, 50),
    races,
    exactlyOne,
    takeovers,
    oldRecordsAfterTakeOver: landedAfter,
    saidLost: said,
  };
  console.log(
    `${engine}: SIGKILL → another machine's start sees cut off: p50 ${out.killToCutOffP50Ms} ms, p99 ${out.killToCutOffP99Ms} ms (max ${out.killToCutOffMaxMs} ms; ${cutOff}/${kills} saw cut off; goal p99 ≤ 2000 ms) = ${
      (out.killToCutOffP99Ms / 30_000).toFixed(3)
    }× host_timeout_seconds (30 s, before leases), ${
      (out.killToCutOffP50Ms / Math.max(1, out.startFloorP50Ms)).toFixed(1)
    }× a fresh start (${out.startFloorP50Ms} ms p50, the floor)`,
  );
  console.log(
    `${engine}: ${races} races of two starts with refuse: exactly one advanced ${exactlyOne}/${races}; ${takeovers} take-overs: old attempt's records landing after ${landedAfter}/${takeovers} (goal 0), said it lost the run ${said}/${takeovers}`,
  );
  return out;
}

const results: unknown[] = [];
const pg = await pgFleet();
if (!pg) console.log("bench_leases: no PostgreSQL server; the fleet part skipped");
else {
  try {
    results.push(await measure("postgres", pg));
  } finally {
    await pg.done();
  }
}
const lite = await sqliteFleet();
try {
  results.push(await measure("sqlite", lite));
} finally {
  await lite.done();
}
console.log(JSON.stringify(results));
