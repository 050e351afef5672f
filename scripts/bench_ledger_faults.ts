/**
 * The run ledger under its faults (beside a floor measured in the same run):
 *
 * - start: what `startRun` and `end()` cost the host's thread while another
 *   process holds the ledger's write lock, against the same with the ledger
 *   free (p50, p99, max), and whether every run then landed;
 * - wal: the write-ahead log's size over time with RUNS live runs changing
 *   every second in a host process and a reader polling the ledger every
 *   2 s, as the web view does (its peak and its last size; goal under 64 MiB).
 *
 *   deno run -A scripts/bench_ledger_faults.ts [--quick] [--runs 20000] [--minutes 10]
 *     [--only start|wal]
 *
 * @module
 */
import * as fs from "node:fs";
import process from "node:process";
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint } from "../mod.ts";
import { openStore, storeFile } from "../store/mod.ts";
import { flag, fmtBytes, fmtMs, pct, runtime, sleep, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const liveRuns = Number(flag(args, "--runs", "20000"));
const minutes = Number(flag(args, "--minutes", quick ? "1" : "10"));
const only = flag(args, "--only");
/** How often the reader polls, ms (0: no reader, the floor). */
const readEveryMs = Number(flag(args, "--read-every-ms", "2000"));
const HOST = fileURLToPath(new URL("./_ledger_host.ts", import.meta.url));
const LOCKER = fileURLToPath(new URL("../tests/fixtures/ledger_locker.ts", import.meta.url));
const deno = process.execPath.includes("deno");
const script = (file: string, rest: string[]) =>
  deno ? ["run", "-A", file, ...rest] : [file, ...rest];

/** Another process holding the ledger's write lock until `release()`. */
async function lockLedger(file: string) {
  const child: ChildProcess = spawn(runtime, script(LOCKER, [file, "0", "write"]), {
    stdio: ["pipe", "pipe", "inherit"],
  });
  let out = "";
  child.stdout!.on("data", (d) => out += d);
  const exited = new Promise((r) => child.on("close", r));
  while (!out.includes("locked")) await sleep(10);
  return {
    release: async () => {
      child.stdin!.end();
      await exited;
    },
  };
}

const us = (ms: number) => `${Math.round(ms * 1000)} µs`;

async function starts(): Promise<void> {
  const n = quick ? 200 : 1000;
  console.log(`\n  startRun and end() on the host's thread, ${n} runs each:`);
  for (const locked of [false, true]) {
    const home = tempDir();
    const ac = createAgentCheckpoint({
      home,
      env: {},
      logger: () => {},
      settings: { mid_run_persist: false, stall_window_seconds: 0 },
    });
    ac.startRun({ sessionId: "warm" }).preLlmCall();
    await sleep(1500); // the worker started and made its first commits
    const lock = locked ? await lockLedger(storeFile(home)) : undefined;
    const startMs: number[] = [];
    const endMs: number[] = [];
    for (let i = 0; i < n; i++) {
      let t = performance.now();
      const run = ac.startRun({ sessionId: `s${i}` });
      startMs.push(performance.now() - t);
      run.preLlmCall();
      t = performance.now();
      run.end({ status: "done" });
      endMs.push(performance.now() - t);
    }
    await lock?.release();
    await ac.close();
    const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" })!;
    const landed = store.listSync({ limit: n + 10 }).filter((v) =>
      v.record.runId.startsWith("s") && v.record.status === "done"
    ).length;
    store.closeSync();
    const fig = (xs: number[]) =>
      `p50 ${us(pct(xs, 50))}, p90 ${us(pct(xs, 90))}, p99 ${us(pct(xs, 99))}`;
    console.log(
      `    ledger ${locked ? "locked by another process" : "free"}: startRun ${
        fig(startMs)
      }; end() ${
        fig(endMs)
      }; ${landed} of ${n} ended runs in the ledger after close (goal: ≤ 2 ms each, none missing)`,
    );
  }
}

async function wal(): Promise<void> {
  const seconds = Math.round(minutes * 60);
  console.log(
    `\n  the write-ahead log, ${liveRuns} live runs changing every second, a reader every 2 s, ${minutes} min:`,
  );
  const home = tempDir();
  const child = spawn(runtime, script(HOST, [home, String(liveRuns), String(seconds)]), {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let done = false;
  let buffer = "";
  child.stdout!.on("data", (d) => {
    buffer += d;
    for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
      const line = JSON.parse(buffer.slice(0, i));
      buffer = buffer.slice(i + 1);
      if (line.event === "idle") done = true;
    }
  });
  const exited = new Promise((r) => child.on("close", r));
  const file = storeFile(home);
  while (!fs.existsSync(file)) await sleep(50);
  const size = () => {
    try {
      return fs.statSync(`${file}-wal`).size;
    } catch {
      return 0;
    }
  };
  const started = Date.now();
  const samples: [number, number][] = [];
  let reads = 0;
  let readFailures = 0;
  let nextRead = Date.now();
  let store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" });
  while (!store) {
    await sleep(100); // the host is making its schema
    store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" });
  }
  while (!done && Date.now() - started < (seconds + 30) * 1000) {
    if (readEveryMs > 0 && Date.now() >= nextRead) {
      nextRead += readEveryMs;
      try {
        // What the web view asks each poll: a page of runs and the counts.
        store.listSync({ limit: 100 });
        store.summarySync({ usage: true });
        reads++;
      } catch {
        readFailures++;
      }
    }
    samples.push([(Date.now() - started) / 1000, size()]);
    await sleep(1000);
  }
  store.closeSync();
  child.kill("SIGTERM");
  await exited;
  const peak = Math.max(...samples.map((s) => s[1]));
  const every = Math.max(1, Math.floor(samples.length / 10));
  console.log(
    `    WAL size: ${
      samples.filter((_, i) => i % every === 0).map(([t, b]) => `${Math.round(t)}s ${fmtBytes(b)}`)
        .join(", ")
    }`,
  );
  console.log(
    `    peak ${fmtBytes(peak)}, last ${fmtBytes(samples.at(-1)?.[1] ?? 0)} over ${
      fmtMs(Date.now() - started)
    }; ${reads} reads (${readFailures} failed); goal: under 64 MiB`,
  );
}

if (!only || only === "start") await starts();
if (!only || only === "wal") await wal();
