/**
 * The web view with a big ledger: N runs (default 100,000) in a home's store,
 * over a week, on nine machines, a few live (their records and heartbeats
 * kept fresh while the benchmark runs), some cut off, the rest ended.
 * `agent-checkpoint serve` runs as a program; Debian's Chromium, driven by
 * playwright-core, measures from the page:
 *
 * - the API's response time (`fetch` to parsed JSON): the default list (the
 *   newest 500 with the store's counts), a list filtered by an end status,
 *   and one run's detail;
 * - the page's first contentful paint and the time it is usable (its runs
 *   drawn), from navigation start, on a fresh page each time.
 *
 * With `--shot` it then saves a screenshot of the page, a cut-off run's
 * detail open, to `docs/serve.png` (the README's). `--quick` (as `deno task
 * bench --quick` passes it) makes it 10,000 runs.
 *
 * `deno run -A scripts/bench_serve.ts [--runs N] [--quick] [--shot] [--keep]`
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { loadSettings } from "../config.ts";
import { type CheckpointRecord, renderBlock } from "../_record.ts";
import { checkpointFileName, persistBlock } from "../persist.ts";
import { dueTier } from "../tier.ts";
import { openStore, type RunRecord } from "../store/mod.ts";
import type { EndStatus } from "../_record.ts";
import { CHROMIUM, haveBrowser, launchBrowser } from "../tests/serve/_browser.ts";
import { flag, fmtMs, median, pct, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
const N = Number(flag(args, "--runs", args.includes("--quick") ? "10000" : "100000"));
if (!Number.isInteger(N) || N < 1) throw new RangeError(`--runs takes a whole number > 0`);
const shot = args.includes("--shot");
const root = fileURLToPath(new URL("..", import.meta.url));
if (!haveBrowser) {
  console.log(
    `bench_serve: no Chromium at ${CHROMIUM} (apt-get install chromium); nothing measured`,
  );
  process.exit(0);
}

/** A small, seeded generator: the same fleet every time. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = prng(42);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

const MACHINES = [
  "ci-runner-01",
  "ci-runner-02",
  "ci-runner-03",
  "ci-runner-04",
  "ci-runner-05",
  "ci-runner-06",
  "kanban-worker-a",
  "kanban-worker-b",
  "dev-laptop",
];
const TOOLS = ["bash", "edit_file", "read_file", "web_search", "run_tests", "deploy"];
const WEEK = 7 * 86400_000;
const LIVE = 8;

const home = tempDir("ac-bench-serve-");
const { settings } = loadSettings({ home, env: {} });
const dir = settings.checkpoint_dir;
fs.mkdirSync(dir, { recursive: true });
const now = Date.now();

/** One synthetic run, the i-th most recently updated. */
function makeRecord(i: number): RunRecord {
  const machine = pick(MACHINES);
  const kanban = machine.startsWith("kanban");
  const runId = kanban
    ? `task-${(N - i).toString().padStart(6, "0")}`
    : `session-${(N - i).toString(36)}`;
  const turnCap = pick([20, 40, 60, 90, 150]);
  const timeCap = rand() < 0.6 ? pick([600, 1800, 3600, 7200]) : undefined;
  const live = i < LIVE;
  const roll = rand();
  const status: RunRecord["status"] = live ? "live" : roll < 0.04
    ? "live" // its process is gone: cut off
    : roll < 0.70
    ? "done"
    : roll < 0.84
    ? "capped"
    : roll < 0.92
    ? "failed"
    : roll < 0.96
    ? "aborted"
    : "deadline";
  const updatedAt = live ? now : now - 20_000 - i * (WEEK / N);
  const seconds = Math.min(timeCap ?? 7200, 30 + rand() * 2400);
  const turnsUsed = status === "capped"
    ? turnCap
    : Math.max(1, Math.floor(turnCap * (status === "done" ? 0.2 + rand() * 0.6 : rand() * 0.95)));
  const elapsedSeconds = status === "deadline" && timeCap ? timeCap : seconds;
  const startedAt = updatedAt - elapsedSeconds * 1000;
  const caps: RunRecord["caps"] = {
    turns: { value: turnCap, source: kanban ? "kanban db" : "host" },
  };
  if (timeCap) caps.time = { value: timeCap, source: "caps.time_seconds" };
  const tier = dueTier({
    caps: { turns: turnCap, timeSeconds: timeCap },
    turnsUsed,
    elapsedSeconds,
  });
  const recent = Array.from({ length: 3 }, (_, k) => ({
    tool: pick(TOOLS),
    callId: `call_${i}_${k}`,
    status: "ok" as const,
    startedAt: Math.max(0, elapsedSeconds - 30 * (3 - k)),
    durationMs: Math.floor(rand() * 20_000),
  }));
  const record: RunRecord = {
    runId,
    attempt: rand() < 0.05 ? 2 : 1,
    dialect: kanban ? "kanban" : "chat",
    caps,
    turnsUsed,
    elapsedSeconds,
    tier,
    inFlight: status === "live"
      ? [{ tool: pick(TOOLS), callId: `call_${i}_x`, startedAt: updatedAt - 4000 }]
      : [],
    recent,
    notes: rand() < 0.3 ? ["migrating the orders table"] : [],
    checkpointFile: path.join(dir, checkpointFileName(runId)),
    host: { machine, pid: 1000 + (i % 30000), start: `boot/${i}` },
    status,
    startedAt,
    updatedAt,
  };
  if (kanban) record.taskId = runId;
  if (record.attempt === 2) record.attempts = ["attempt 1 cut off after 12 of 60 turns and 8m10s"];
  if (status !== "live") {
    record.end = { status: status as EndStatus, at: updatedAt };
    if (status === "failed") record.end.summary = "the test suite kept failing";
  }
  return record;
}

// ---- fill the store ----------------------------------------------------------
const store = openStore({ home, settings });
if (!store) throw new Error("the ledger cannot be opened (no SQLite driver?)");
const fillStart = performance.now();
const liveRecords: RunRecord[] = [];
let shown: RunRecord | undefined;
for (let from = 0; from < N; from += 5000) {
  const records: RunRecord[] = [];
  for (let i = from; i < Math.min(N, from + 5000); i++) {
    const r = makeRecord(i);
    if (i < LIVE) liveRecords.push(r);
    // The newest run cut off inside a tool call is the one the screenshot opens.
    if (!shown && i >= LIVE && r.status === "live") {
      r.inFlight = [{ tool: "run_tests", callId: "call_7f3a", startedAt: r.updatedAt - 95_000 }];
      shown = r;
    }
    records.push(r);
  }
  await store.write({ records });
}
const heartbeats = () =>
  liveRecords.map((r) => ({ host: r.host, at: Date.now(), intervalSeconds: 1 }));
const beat = async () => {
  const t = Date.now();
  for (const r of liveRecords) {
    r.updatedAt = t;
    r.elapsedSeconds = (t - r.startedAt) / 1000;
    if (rand() < 0.5) r.turnsUsed = Math.min(r.caps.turns!.value - 1, r.turnsUsed + 1);
  }
  const beats = heartbeats();
  for (let k = 0; k < beats.length; k++) {
    await store.write({ records: k === 0 ? liveRecords : [], heartbeat: beats[k]! });
  }
};
await beat();
const keeper = setInterval(() => void beat().catch(() => {}), 1000);
console.log(
  `bench_serve: ${N.toLocaleString("en")} runs written in ${
    fmtMs(performance.now() - fillStart)
  } (${
    (fs.statSync(path.join(home, "agent-checkpoint", "runs.db")).size / 1048576).toFixed(0)
  } MiB)`,
);

// The opened run's checkpoint file, as the library writes one, and the agent's own text.
if (shown) {
  const block: CheckpointRecord = {
    kind: "tier",
    source: "pre_llm_call",
    runId: shown.runId,
    dialect: shown.dialect,
    turnsUsed: shown.turnsUsed,
    elapsedSeconds: shown.elapsedSeconds,
    caps: shown.caps,
    tier: 1,
    persistedAt: new Date(shown.updatedAt - 60_000).toISOString(),
    message: "Budget checkpoint: write what you have done and what is left into this file.",
    tools: shown.recent,
    notes: shown.notes,
  };
  persistBlock(shown.checkpointFile!, renderBlock(block));
  fs.appendFileSync(
    shown.checkpointFile!,
    "\n## Progress\n- Split the orders migration into 4 batches; batches 1-2 applied.\n" +
      "- Next: batch 3, then re-run the integration tests.\nINCOMPLETE\n",
  );
}

// ---- the server, as users run it --------------------------------------------
const cli = path.join(root, "scripts", "cli.ts");
const child = spawn(process.execPath, [
  "run",
  "-A",
  "--quiet",
  cli,
  "serve",
  "--port",
  "0",
  "--home",
  home,
], {
  stdio: ["ignore", "pipe", "inherit"],
});
let out = "";
child.stdout.on("data", (d) => out += d);
const deadline = Date.now() + 60_000;
while (!/http:\/\/\S+\//.test(out)) {
  if (Date.now() > deadline) throw new Error(`serve did not start: ${out}`);
  await new Promise((r) => setTimeout(r, 20));
}
const url = /http:\/\/\S+\//.exec(out)![0];

const browser = await launchBrowser();
try {
  // The API, from the page's own origin.
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForSelector("body[data-ready]");
  const timeApi = (p: string, n: number) =>
    page.evaluate(async ({ p, n }) => {
      const ms: number[] = [];
      let bytes = 0;
      let runs = 0;
      for (let k = 0; k < n; k++) {
        const t0 = performance.now();
        const res = await fetch(p, { cache: "no-store" });
        const text = await res.text();
        const body = JSON.parse(text);
        ms.push(performance.now() - t0);
        bytes = text.length;
        runs = Array.isArray(body.runs) ? body.runs.length : 1;
      }
      return { ms, bytes, runs };
    }, { p, n });
  const rows: [string, string, string, string, string][] = [];
  const api = async (label: string, p: string) => {
    await timeApi(p, 1); // warm
    const r = await timeApi(p, 15);
    rows.push([
      label,
      fmtMs(median(r.ms)),
      fmtMs(pct(r.ms, 90)),
      String(r.runs),
      `${(r.bytes / 1024).toFixed(0)} KiB`,
    ]);
    return r;
  };
  await api("GET /api/runs (newest 500, counts)", "/api/runs");
  await api("GET /api/runs?status=capped", "/api/runs?status=capped");
  await api("GET /api/runs?host=ci-runner-03&since=24h", "/api/runs?host=ci-runner-03&since=24h");
  await api(`GET /api/runs/:id`, `/api/runs/${encodeURIComponent(shown?.runId ?? "")}`);
  await page.close();

  // The page: first contentful paint and usable (its runs drawn), on fresh pages.
  const fcp: number[] = [];
  const usable: number[] = [];
  for (let k = 0; k < 7; k++) {
    const context = await browser.newContext();
    const p = await context.newPage();
    await p.goto(url);
    await p.waitForSelector("body[data-ready]");
    const t = await p.evaluate(() => ({
      fcp: performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? NaN,
      usable: performance.getEntriesByName("usable")[0]?.startTime ?? NaN,
    }));
    if (k > 0) { // the first warms the browser
      fcp.push(t.fcp);
      usable.push(t.usable);
    }
    await context.close();
  }

  console.log(`\nAPI, from the browser (15 requests each after one to warm):`);
  console.log(["request", "median", "p90", "runs", "size"].join(" | "));
  for (const r of rows) console.log(r.join(" | "));
  console.log(`\nPage, from navigation start (${usable.length} fresh pages):`);
  console.log(
    `first contentful paint: median ${fmtMs(median(fcp))}, max ${fmtMs(Math.max(...fcp))}`,
  );
  console.log(
    `usable (500 runs drawn): median ${fmtMs(median(usable))}, max ${fmtMs(Math.max(...usable))}`,
  );
  console.log(`goal: API <= 300 ms, page usable <= 1 s`);

  if (shot && shown) {
    const p = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    await p.goto(`${url}#run=${encodeURIComponent(shown.runId)}`);
    await p.waitForSelector("body[data-ready]");
    await p.locator("#d-file").filter({ hasText: "INCOMPLETE" }).waitFor();
    const file = path.join(root, "docs", "serve.png");
    fs.mkdirSync(path.dirname(file), { recursive: true });
    await p.screenshot({ path: file });
    console.log(`\nscreenshot: ${path.relative(root, file)}`);
    await p.close();
  }
} finally {
  await browser.close();
  clearInterval(keeper);
  child.kill("SIGTERM");
  await new Promise((r) => child.once("exit", r));
  await store.close();
  if (args.includes("--keep")) console.log(`kept ${home}`);
  else fs.rmSync(home, { recursive: true, force: true });
}
