/**
 * Side effects across attempts, measured (`deno task bench --only effects`):
 *
 * - the tool hooks' cost (a `preToolCall` + `postToolCall` pair) with no
 *   effect tools, beside the same pair with `effect_tools` naming another
 *   tool (a list to look in, no intent), and with the called tool an effect
 *   tool (its key, and an intent queued for the next commit);
 * - one durable intent (`await run.effects.intent()`, the commit its own), p50/p99,
 *   beside a bare SQLite commit of one row (WAL, `synchronous = FULL`) in the
 *   same directory, and with the fleet store beside a bare PostgreSQL INSERT
 *   on the same server;
 * - a burst of 50 intents at once: one shared commit, its latency.
 *
 * Figures are ratios to the floor measured in the same run.
 *
 * @module
 */
import * as path from "node:path";
import process from "node:process";
import { createAgentCheckpoint } from "../mod.ts";
import { sqliteDriver } from "../_sqlite.ts";
import { loadDriver } from "../store/postgres.ts";
import { flag, fmtMs, pct, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const n = Number(flag(args, "--n", quick ? "100" : "400"));
const pgUrl = flag(
  args,
  "--pg",
  process.env.AGENT_CHECKPOINT_TEST_PG ??
    "postgres://postgres@127.0.0.1:5432/test",
)!;
const ns = (ms: number) => `${Math.round(ms * 1e6)} ns`;
const p = (xs: number[]) => `p50 ${fmtMs(pct(xs, 50))}, p99 ${fmtMs(pct(xs, 99))}`;

type Keeper = typeof createAgentCheckpoint;

/** A run whose hook pairs are timed, in a keeper of `make` with `settings`. */
function hookRun(make: Keeper, settings: Record<string, unknown>, tool: string) {
  const ac = make({
    home: tempDir("ac-bench-fx-"),
    env: {},
    settings: { watchdog: false, ledger: false, ...settings },
  });
  const run = ac.startRun({ sessionId: "hooks" });
  return {
    /** ms per pair over `pairs` pairs. */
    time(pairs: number): number {
      const t = performance.now();
      for (let i = 0; i < pairs; i++) {
        run.preToolCall(tool, { callId: "c", input: { q: i & 7 } });
        run.postToolCall(tool, { callId: "c", ok: true });
      }
      return (performance.now() - t) / pairs;
    },
    close: () => ac.close(),
  };
}

/** The medians of interleaved rounds of each case (A B C A B C …), after a warm-up of each. */
function interleaved(cases: ReturnType<typeof hookRun>[], pairs: number, rounds = 15): number[] {
  for (const c of cases) c.time(pairs);
  const times = cases.map(() => [] as number[]);
  for (let r = 0; r < rounds; r++) cases.forEach((c, i) => times[i]!.push(c.time(pairs)));
  return times.map((t) => pct(t, 50));
}

console.log("## Hook cost (preToolCall + postToolCall), no ledger");
const pairs = quick ? 10_000 : 50_000;
// The code before side effects, when given (`--base DIR`: a checkout of it): the same run's floor.
const baseDir = flag(args, "--base");
const base = baseDir === undefined
  ? undefined
  : (await import(path.resolve(baseDir, "mod.ts"))).createAgentCheckpoint as Keeper;
const cases = [
  hookRun(createAgentCheckpoint, {}, "search"),
  hookRun(createAgentCheckpoint, { effect_tools: ["send_email"] }, "search"),
  ...(base ? [hookRun(base, {}, "search")] : []),
];
const [none, other, before] = interleaved(cases, pairs);
for (const c of cases) await c.close();
if (before !== undefined) console.log(`  before side effects (${baseDir}): ${ns(before)} a pair`);
console.log(
  `  no effect tools: ${ns(none!)} a pair${
    before === undefined ? "" : ` (${(none! / before).toFixed(2)}× the code before)`
  }`,
);
console.log(
  `  effect_tools naming another tool: ${ns(other!)} (${
    (other! / none!).toFixed(2)
  }× no effect tools)`,
);
// An effect tool's pair queues an intent; with no ledger nothing is written, the key is made.
const effectRun = hookRun(createAgentCheckpoint, { effect_tools: ["search"] }, "search");
const [effect] = interleaved([effectRun], quick ? 1_000 : 5_000, 7);
await effectRun.close();
console.log(
  `  the tool an effect tool (its key, an intent queued): ${ns(effect!)} (${
    (effect! / none!).toFixed(1)
  }× no effect tools)`,
);

console.log("\n## One durable intent, beside a bare commit");
{
  const home = tempDir("ac-bench-fx-");
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false } });
  const run = ac.startRun({ sessionId: "intents" });
  await run.effects.intent("warm", {});
  const intents: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await run.effects.intent("pay", { i });
    intents.push(performance.now() - t);
  }
  const burst: number[] = [];
  for (let r = 0; r < (quick ? 5 : 20); r++) {
    const t = performance.now();
    await Promise.all(Array.from({ length: 50 }, (_, i) => run.effects.intent("burst", { r, i })));
    burst.push(performance.now() - t);
  }
  const commitsBefore = ac.effectCommits;
  await Promise.all(Array.from({ length: 50 }, (_, i) => run.effects.intent("one", { i })));
  const shared = ac.effectCommits - commitsBefore;
  await ac.close();
  // The floor: one row committed to a SQLite file beside it, as durable (WAL, FULL).
  const driver = sqliteDriver()!;
  const db = driver.open(path.join(home, "bare.db"), { readOnly: false });
  db.exec("PRAGMA journal_mode = WAL");
  db.exec("PRAGMA synchronous = FULL");
  db.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)");
  const bare: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    db.exec("BEGIN IMMEDIATE");
    db.run("INSERT INTO t (k, v) VALUES (?, ?)", `k${i}`, "x");
    db.exec("COMMIT");
    bare.push(performance.now() - t);
  }
  db.close();
  console.log(`  SQLite, bare commit of one row: ${p(bare)} (the floor)`);
  console.log(
    `  SQLite, await run.effects.intent(): ${p(intents)} (p50 ${
      (pct(intents, 50) / pct(bare, 50)).toFixed(1)
    }× the floor)`,
  );
  console.log(
    `  SQLite, 50 intents at once: ${p(burst)} for all 50, in ${shared} commit(s) (p50 ${
      (pct(burst, 50) / pct(bare, 50)).toFixed(1)
    }× one bare commit)`,
  );
}

{
  let sql;
  try {
    sql = (await loadDriver())(pgUrl, { max: 1, onnotice: () => {}, connect_timeout: 3 });
    await sql.unsafe("SELECT 1");
  } catch (error) {
    console.log(`  PostgreSQL: not measured (${error instanceof Error ? error.message : error})`);
    process.exit(0);
  }
  const schema = `ac_bench_fx_${process.pid}`;
  await sql.unsafe(`CREATE SCHEMA ${schema}`);
  try {
    await sql.unsafe(`CREATE TABLE ${schema}.t (k text PRIMARY KEY, v text)`);
    const bare: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await sql.unsafe(`INSERT INTO ${schema}.t (k, v) VALUES ($1, $2)`, [`k${i}`, "x"]);
      bare.push(performance.now() - t);
    }
    const url = new URL(pgUrl);
    url.searchParams.set("schema", schema);
    const ac = createAgentCheckpoint({
      home: tempDir("ac-bench-fx-"),
      env: {},
      settings: { watchdog: false, store: url.href },
    });
    const run = ac.startRun({ sessionId: "intents" });
    await run.effects.intent("warm", {});
    const intents: number[] = [];
    for (let i = 0; i < n; i++) {
      const t = performance.now();
      await run.effects.intent("pay", { i });
      intents.push(performance.now() - t);
    }
    await ac.close();
    console.log(`  PostgreSQL, bare INSERT of one row: ${p(bare)} (the floor)`);
    console.log(
      `  PostgreSQL, await run.effects.intent(): ${p(intents)} (p50 ${
        (pct(intents, 50) / pct(bare, 50)).toFixed(1)
      }× the floor)`,
    );
  } finally {
    await sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await sql.end({ timeout: 1 });
  }
}
process.exit(0);
