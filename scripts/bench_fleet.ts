/**
 * The fleet store's benchmarks, side by side in one run, against a real
 * PostgreSQL server (`AGENT_CHECKPOINT_TEST_PG`, else
 * `postgres://postgres@127.0.0.1:5432/test`), in a database of its own that
 * it drops at the end:
 *
 * 1. the host's time per tool boundary with the fleet store, against a
 *    LangGraph-style synchronous write of the same record to the same server
 *    on the host's path (one INSERT per step, awaited);
 * 2. P processes × R runs, each run crossing a tool boundary every second:
 *    the age of the runs' records read from another process (p50, p99), the
 *    server's transactions per process per progress interval (round trips),
 *    and its rows and bytes per run;
 * 3. `ls --store` and `audit --store` over N runs.
 *
 *     deno run -A scripts/bench_fleet.ts [--quick] [--processes 8] [--runs 2500] [--seconds 20] [--list 100000]
 *
 * `--quick` makes it 4 processes × 500 runs for 6 s, and 20,000 runs listed.
 * Without a server it says so and skips.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { spawn } from "node:child_process";
import { createAgentCheckpoint } from "../mod.ts";
import { auditCommand, lsCommand } from "../cli/_checkpoints.ts";
import { memoryIo } from "../cli/_io.ts";
import { loadDriver, type Sql } from "../store/postgres.ts";

const BASE = process.env.AGENT_CHECKPOINT_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test";

async function connect(url: string): Promise<Sql> {
  const postgres = await loadDriver();
  return postgres(url, { max: 1, onnotice: () => {}, fetch_types: false });
}

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fmt = (n: number, digits = 1) => n.toFixed(digits);

/** A fleet host: R runs, each crossing a tool boundary every second, until the stop file. */
async function child(): Promise<void> {
  const [, , , home, spec] = process.argv;
  const plan = JSON.parse(spec!) as { prefix: string; runs: number; ready: string; stop: string };
  const ac = createAgentCheckpoint({
    home: home!,
    env: { AGENT_CHECKPOINT_STORE: process.env.AGENT_CHECKPOINT_STORE ?? "" },
    settings: { watchdog_poll_seconds: 1 },
    logger: (r) => r.level !== "info" && console.error(`${r.level}: ${r.message}`),
  });
  const runs: ReturnType<typeof ac.startRun>[] = [];
  for (let i = 0; i < plan.runs; i++) {
    runs.push(ac.startRun({ sessionId: `${plan.prefix}-${i}`, caps: { turns: 10_000 } }));
  }
  fs.writeFileSync(plan.ready, "");
  let maxHookUs = 0;
  let call = 0;
  // The store thread's statements, sampled each second: the parent counts those in its window.
  const statements: [number, number][] = [];
  const sampler = setInterval(() => statements.push([Date.now(), ac.ledgerStatements ?? 0]), 1000);
  // Spread over the second: each run crosses its boundary once a second.
  const slice = Math.max(1, Math.ceil(plan.runs / 20));
  let next = 0;
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      if (fs.existsSync(plan.stop)) {
        clearInterval(timer);
        resolve();
        return;
      }
      for (let k = 0; k < slice; k++) {
        const run = runs[next]!;
        next = (next + 1) % runs.length;
        if (next === 0) call++;
        const t = performance.now();
        run.preToolCall("step", { callId: `c${call}` });
        run.postToolCall("step", { callId: `c${call}`, ok: true });
        maxHookUs = Math.max(maxHookUs, (performance.now() - t) * 1000);
      }
    }, 50);
  });
  clearInterval(sampler);
  for (const run of runs) await run.end({ status: "done" });
  await ac.close();
  console.log(JSON.stringify({ maxHookUs, statements }));
}

/** 1: the host's time per tool boundary, the fleet store against a synchronous INSERT per step. */
async function boundaries(url: string, sql: Sql): Promise<Record<string, number>> {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-"));
  const ac = createAgentCheckpoint({ home, env: { AGENT_CHECKPOINT_STORE: url }, settings: {} });
  // startRun asks the store for the attempt number: one round trip (the first also connects).
  const starts: number[] = [];
  const runs = Array.from({ length: 100 }, (_, i) => {
    const t = performance.now();
    const run = ac.startRun({ sessionId: `b-${i}` });
    starts.push(performance.now() - t);
    return run;
  });
  const N = 50_000;
  const each: number[] = [];
  for (let i = 0; i < 2000; i++) {
    const run = runs[i % runs.length]!;
    run.preToolCall("warm");
    run.postToolCall("warm", { ok: true });
  }
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    const run = runs[i % runs.length]!;
    const t = performance.now();
    run.preToolCall("step", { callId: `c${i}` });
    run.postToolCall("step", { callId: `c${i}`, ok: true });
    if (i % 10 === 0) each.push(performance.now() - t);
  }
  const fleetUs = ((performance.now() - t0) / N) * 1000;
  await sleep(1500); // the store thread writes what changed
  const sample = await sql.unsafe(
    `SELECT record FROM bench.runs WHERE run_id = 'b-0' ORDER BY attempt DESC LIMIT 1`,
  );
  const record = String(sample[0]?.record ?? "{}");
  for (const run of runs) await run.end({ status: "done" });
  await ac.close();
  // LangGraph's Postgres checkpointer writes a checkpoint per step, awaited on the host's path.
  await sql.unsafe(`CREATE TABLE IF NOT EXISTS bench.lg_checkpoints (
    thread_id text, step integer, checkpoint jsonb, PRIMARY KEY (thread_id, step))`);
  const M = 2000;
  const lg: number[] = [];
  const t1 = performance.now();
  for (let i = 0; i < M; i++) {
    const t = performance.now();
    await sql.unsafe(
      `INSERT INTO bench.lg_checkpoints (thread_id, step, checkpoint) VALUES ($1, $2, $3::text::jsonb)`,
      [`b-${i % 100}`, String(i), record],
    );
    lg.push(performance.now() - t);
  }
  const syncUs = ((performance.now() - t1) / M) * 1000;
  return {
    fleetUs,
    fleetP99Us: pct(each, 99) * 1000,
    syncUs,
    syncP99Us: pct(lg, 99) * 1000,
    recordBytes: record.length,
    firstStartMs: starts[0]!,
    startP50Ms: pct(starts.slice(1), 50),
    startP99Ms: pct(starts.slice(1), 99),
  };
}

/** 2: P processes × R runs against one server. */
async function fleet(
  url: string,
  dbName: string,
  sql: Sql,
  processes: number,
  runsEach: number,
  seconds: number,
): Promise<Record<string, number | string>> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-fleet-"));
  const stop = path.join(dir, "stop");
  const self = fileURLToPath(import.meta.url);
  const kids = Array.from({ length: processes }, (_, p) => {
    const ready = path.join(dir, `ready${p}`);
    const childHome = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-host-"));
    const spec = JSON.stringify({ prefix: `p${p}`, runs: runsEach, ready, stop });
    const proc = spawn(
      process.execPath,
      ["run", "-A", "--quiet", self, "--child", childHome, spec],
      {
        env: { ...process.env, AGENT_CHECKPOINT_STORE: url },
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    let out = "";
    proc.stdout!.on("data", (d) => out += d);
    const done = new Promise<string>((resolve) => proc.on("close", () => resolve(out)));
    return { ready, done };
  });
  try {
    return await measure();
  } finally {
    // The hosts end their runs and exit, whatever happened here.
    fs.writeFileSync(stop, "");
  }

  async function measure(): Promise<Record<string, number | string>> {
    const startAt = performance.now();
    while (!kids.every((k) => fs.existsSync(k.ready))) await sleep(200);
    const startSeconds = (performance.now() - startAt) / 1000;
    const total = processes * runsEach;
    // Every run listed live before the window opens.
    for (;;) {
      const rows = await sql.unsafe(
        `SELECT count(*) AS n FROM bench.runs WHERE newest AND status = 'live'`,
      );
      if (Number(rows[0]?.n) >= total) break;
      await sleep(250);
    }
    await sleep(3000); // steady state
    const xacts = async () => {
      const rows = await sql.unsafe(
        `SELECT pg_stat_clear_snapshot(), (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1) AS n`,
        [dbName],
      );
      return Number(rows[0]?.n);
    };
    await sleep(1100); // the server's counters reach its statistics
    const x0 = await xacts();
    let own = 1;
    const ages: number[] = [];
    const windowStart = performance.now();
    const windowFrom = Date.now();
    while (performance.now() - windowStart < seconds * 1000) {
      const rows = await sql.unsafe(
        `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint - updated_at AS age
        FROM bench.runs WHERE newest AND status = 'live'`,
      );
      own++;
      for (const r of rows) ages.push(Number(r.age));
      await sleep(500);
    }
    const windowSeconds = (performance.now() - windowStart) / 1000;
    const windowTo = Date.now();
    await sleep(1100);
    const x1 = await xacts();
    own++;
    const size = await sql.unsafe(
      `SELECT (SELECT count(*) FROM bench.runs) AS rows, (SELECT count(DISTINCT run_id) FROM bench.runs) AS runs,
      pg_total_relation_size('bench.runs') AS runs_bytes,
      pg_total_relation_size('bench.heartbeats') AS hb_bytes,
      (SELECT count(*) FROM bench.heartbeats) AS hb_rows,
      (SELECT avg(pg_column_size(r.*)) FROM bench.runs r) AS row_bytes`,
    );
    fs.writeFileSync(stop, "");
    const outs = await Promise.all(kids.map((k) => k.done));
    const reports = outs.map((o) =>
      JSON.parse(o.trim().split("\n").at(-1) || "{}") as {
        maxHookUs?: number;
        statements?: [number, number][];
      }
    );
    const maxHookUs = Math.max(...reports.map((r) => Number(r.maxHookUs ?? NaN)));
    // Each process's own count of statements sent, over the window (first and last sample in it).
    const rates = reports.map((r) => {
      const inside = (r.statements ?? []).filter(([t]) => t >= windowFrom && t <= windowTo);
      const first = inside[0];
      const last = inside.at(-1);
      return first && last && last[0] > first[0]
        ? (last[1] - first[1]) / ((last[0] - first[0]) / 1000)
        : NaN;
    });
    const s = size[0]!;
    // The reader's own statements and the two counter reads are its, not the fleet's.
    const fleetXacts = x1 - x0 - own - 1;
    return {
      startSeconds,
      windowSeconds,
      ageP50Ms: pct(ages, 50),
      ageP99Ms: pct(ages, 99),
      ageMaxMs: ages.reduce((a, b) => Math.max(a, b), 0),
      roundTripsPerProcessInterval: rates.reduce((a, b) => a + b, 0) / rates.length,
      serverXactsPerProcessSecond: fleetXacts / processes / windowSeconds,
      rowsPerRun: (Number(s.rows) + Number(s.hb_rows)) / Number(s.runs),
      bytesPerRun: (Number(s.runs_bytes) + Number(s.hb_bytes)) / Number(s.runs),
      rowBytes: Number(s.row_bytes),
      maxHookUs,
    };
  }
}

/** 3: `ls --store` and `audit --store` over N runs. */
async function listing(url: string, sql: Sql, n: number): Promise<Record<string, number>> {
  const sample = await sql.unsafe(
    `SELECT record FROM bench.runs WHERE status = 'done' ORDER BY updated_at DESC LIMIT 1`,
  );
  await sql.unsafe(`CREATE SCHEMA many`);
  // The schema as the store makes it.
  const { openPgStore } = await import("../store/postgres.ts");
  const manyUrl = new URL(url);
  manyUrl.searchParams.set("schema", "many");
  const store = openPgStore({ url: manyUrl.href, hostTimeoutSeconds: 30 });
  await store.ping();
  await store.close();
  const now = Date.now();
  // N runs over 100 machines: 70% ended, 20% live (their processes heartbeat), 10% cut off.
  await sql.unsafe(
    `INSERT INTO many.runs (run_id, attempt, newest, status, machine, pid, host_start,
        started_at, updated_at, record, file_content)
      SELECT 'run-' || i, 1, true,
        CASE WHEN i % 10 < 7 THEN (CASE WHEN i % 10 = 6 THEN 'failed' ELSE 'done' END) ELSE 'live' END,
        'machine-' || (i % 100), 1000 + (i % 100) + (CASE WHEN i % 10 = 9 THEN 100000 ELSE 0 END), '',
        $1::bigint - i * 10, $1::bigint - i * 10,
        replace($2, '"runId":', '"runId":"run-' || i || '","x":'), NULL
      FROM generate_series(1, $3::integer) AS i`,
    [String(now), String(sample[0]?.record ?? "{}"), String(n)],
  );
  await sql.unsafe(
    `INSERT INTO many.heartbeats (machine, pid, host_start, at, interval_seconds)
      SELECT 'machine-' || m, 1000 + m, '', $1::bigint, 1 FROM generate_series(0, 99) AS m`,
    [String(now)],
  );
  await sql.unsafe(`ANALYZE many.runs; ANALYZE many.heartbeats`);
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-cli-"));
  const time = async (command: typeof lsCommand, args: string[]) => {
    const times: number[] = [];
    let out = "";
    for (let i = 0; i < 5; i++) {
      const m = memoryIo();
      const t = performance.now();
      await command.run(["--home", home, "--store", manyUrl.href, ...args], m.io);
      times.push(performance.now() - t);
      out = m.stdout();
    }
    return { ms: pct(times, 50), out };
  };
  const ls = await time(lsCommand, []);
  const lsLive = await time(lsCommand, ["--status", "live"]);
  const lsHost = await time(lsCommand, ["--host", "machine-7"]);
  const audit = await time(auditCommand, []);
  const auditHost = await time(auditCommand, ["--host", "machine-7"]);
  return {
    runs: n,
    lsMs: ls.ms,
    lsLines: ls.out.split("\n").length,
    lsLiveMs: lsLive.ms,
    lsHostMs: lsHost.ms,
    auditMs: audit.ms,
    auditHostMs: auditHost.ms,
  };
}

async function main(): Promise<void> {
  const quick = process.argv.includes("--quick");
  const processes = arg("processes", quick ? 4 : 8);
  const runsEach = arg("runs", quick ? 500 : 2500);
  const seconds = arg("seconds", quick ? 6 : 20);
  const n = arg("list", quick ? 20_000 : 100_000);
  const dbName = `ac_bench_${process.pid}`;
  const root = await connect(BASE);
  try {
    await root.unsafe("SELECT 1");
  } catch (error) {
    console.log(`bench_fleet: no PostgreSQL at ${BASE} (${String(error)}); skipped`);
    await root.end({ timeout: 0 }).catch(() => {});
    return;
  }
  await root.unsafe(`CREATE DATABASE ${dbName}`);
  const dbUrl = new URL(BASE);
  dbUrl.pathname = `/${dbName}`;
  const url = new URL(dbUrl.href);
  url.searchParams.set("schema", "bench");
  const sql = await connect(dbUrl.href);
  try {
    console.log(`bench_fleet: PostgreSQL ${dbUrl.host}, database ${dbName}`);
    const b = await boundaries(url.href, sql);
    console.log(
      `1. host time per tool boundary: fleet store ${fmt(b.fleetUs!, 2)} µs (p99 ${
        fmt(b.fleetP99Us!, 1)
      } µs) vs synchronous INSERT per step ${fmt(b.syncUs!, 0)} µs (p99 ${
        fmt(b.syncP99Us!, 0)
      } µs): ${fmt(b.syncUs! / b.fleetUs!, 0)}x less (record ${b.recordBytes} bytes); startRun ${
        fmt(b.startP50Ms!, 2)
      } ms p50, ${fmt(b.startP99Ms!, 2)} ms p99 (the first, which connects, ${
        fmt(b.firstStartMs!, 0)
      } ms)`,
    );
    await sql.unsafe(`TRUNCATE bench.runs, bench.heartbeats`);
    const f = await fleet(url.href, dbName, sql, processes, runsEach, seconds);
    console.log(
      `2. ${processes} processes x ${runsEach} runs, a tool boundary per run per second, ${
        fmt(Number(f.windowSeconds), 0)
      } s: record age p50 ${f.ageP50Ms} ms, p99 ${f.ageP99Ms} ms (max ${f.ageMaxMs} ms); ${
        fmt(Number(f.roundTripsPerProcessInterval), 2)
      } round trips per process per interval (counted by each process; the server counted ${
        fmt(Number(f.serverXactsPerProcessSecond), 2)
      } transactions per process per second, its own work included); ${
        fmt(Number(f.rowsPerRun), 3)
      } rows and ${fmt(Number(f.bytesPerRun), 0)} bytes per run on disk (a row ${
        fmt(Number(f.rowBytes), 0)
      } bytes; the rest is earlier versions awaiting vacuum, and indexes); slowest hook ${
        fmt(Number(f.maxHookUs), 0)
      } µs; all started in ${fmt(Number(f.startSeconds), 1)} s`,
    );
    const l = await listing(url.href, sql, n);
    console.log(
      `3. ${l.runs} runs: ls --store ${fmt(l.lsMs!, 0)} ms (${l.lsLines} lines), ls --status live ${
        fmt(l.lsLiveMs!, 0)
      } ms, ls --host ${fmt(l.lsHostMs!, 0)} ms, audit --store ${
        fmt(l.auditMs!, 0)
      } ms, audit --host ${fmt(l.auditHostMs!, 0)} ms`,
    );
  } finally {
    await sql.end({ timeout: 1 });
    await root.unsafe(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await root.end({ timeout: 1 });
  }
}

if (process.argv.includes("--child")) await child();
else await main();
