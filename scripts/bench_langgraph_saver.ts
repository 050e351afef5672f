// deno-lint-ignore-file no-import-prefix no-explicit-any
/**
 * The LangGraph checkpointer's put latency beside LangGraph's own PostgreSQL
 * saver (`@langchain/langgraph-checkpoint-postgres`) on the same server
 * (`AGENT_CHECKPOINT_TEST_PG`, else `postgres://postgres@127.0.0.1:5432/test`),
 * each in a schema of its own that it drops at the end; and on the embedded
 * store. One step is a `put` of a checkpoint whose message channel changed
 * (about 1 KB) and a `putWrites` of one task, awaited, as a graph's
 * super-step makes them. Rounds alternate the savers; the figures are the
 * medians of each saver's rounds, and the ratio to LangGraph's saver.
 *
 *     deno run -A scripts/bench_langgraph_saver.ts [--steps 300] [--rounds 3]
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { randomBytes } from "node:crypto";
import { PostgresSaver } from "npm:@langchain/langgraph-checkpoint-postgres@1.0.5";
import { emptyCheckpoint, uuid6 } from "npm:@langchain/langgraph-checkpoint@1";
import { createAgentCheckpoint } from "../mod.ts";
import { RunStoreSaver } from "../adapters/langchain.ts";
import { loadDriver } from "../store/postgres.ts";

const BASE = process.env.AGENT_CHECKPOINT_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test";
const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const STEPS = arg("steps", 300);
const ROUNDS = arg("rounds", 3);
const WARM = 20;

/** The median and p95 of one round's steps, ms. */
async function round(saver: any, thread: string): Promise<[number, number]> {
  const times: number[] = [];
  const text = "x".repeat(1000);
  let config: any = { configurable: { thread_id: thread, checkpoint_ns: "" } };
  for (let i = 0; i < STEPS + WARM; i++) {
    const checkpoint = {
      ...emptyCheckpoint(),
      id: uuid6(-1),
      channel_values: { messages: [text, i] },
      channel_versions: { messages: i + 1 },
    };
    const t = performance.now();
    config = await saver.put(config, checkpoint, { source: "loop", step: i, parents: {} }, {
      messages: i + 1,
    });
    await saver.putWrites(config, [["messages", [text]]], `task-${i}`);
    if (i >= WARM) times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  return [times[Math.floor(times.length / 2)]!, times[Math.floor(times.length * 0.95)]!];
}

const postgres = await loadDriver();
const admin = postgres(BASE, { max: 1, onnotice: () => {}, fetch_types: false });
try {
  await admin.unsafe("SELECT 1");
} catch (error) {
  console.log(`no PostgreSQL at ${BASE} (${String(error)}): skipped`);
  process.exit(0);
}
const ours = `ac_bench_${randomBytes(4).toString("hex")}`;
const theirs = `${ours}_lg`;
const url = new URL(BASE);
url.searchParams.set("schema", ours);
const lg = PostgresSaver.fromConnString(BASE, { schema: theirs });
await lg.setup();
const home = (name: string) => fs.mkdtempSync(path.join(os.tmpdir(), `ac-bench-${name}-`));
const fleet = createAgentCheckpoint({ home: home("pg"), env: {}, settings: { store: url.href } });
const local = createAgentCheckpoint({ home: home("sqlite"), env: {} });
const savers: [string, any][] = [
  ["@langchain/langgraph-checkpoint-postgres", lg],
  ["RunStoreSaver, fleet store (PostgreSQL)", new RunStoreSaver(fleet)],
  ["RunStoreSaver, embedded store (SQLite)", new RunStoreSaver(local)],
];
const got = new Map<string, [number, number][]>();
try {
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, saver] of savers) {
      const rounds = got.get(name) ?? [];
      rounds.push(await round(saver, `bench-${r}`));
      got.set(name, rounds);
    }
  }
} finally {
  await lg.end();
  await fleet.close();
  await local.close();
  await admin.unsafe(`DROP SCHEMA IF EXISTS "${ours}" CASCADE`);
  await admin.unsafe(`DROP SCHEMA IF EXISTS "${theirs}" CASCADE`);
  await admin.end();
}
const median = (xs: number[]) => xs.toSorted((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const base = median(got.get(savers[0]![0])!.map((x) => x[0]));
console.log(`one step (put + putWrites), ${STEPS} steps × ${ROUNDS} rounds, medians of rounds:`);
for (const [name] of savers) {
  const rounds = got.get(name)!;
  const p50 = median(rounds.map((x) => x[0]));
  const p95 = median(rounds.map((x) => x[1]));
  console.log(
    `  ${name.padEnd(42)} p50 ${p50.toFixed(2)} ms  p95 ${p95.toFixed(2)} ms  ×${
      (p50 / base).toFixed(2)
    }`,
  );
}
