/**
 * The run journal, measured (`deno task bench --only journal`):
 *
 * 1. a journaled model call's commit (`await run.journal.model(request, () =>
 *    response)`, live, a ~2 kB JSON response) beside a bare commit of the same
 *    bytes in the same run: SQLite (WAL, `synchronous = FULL` as the journal
 *    commits, the same driver, the same directory) and PostgreSQL (the fleet
 *    store beside a bare INSERT on a connection of its own, the same driver);
 *    p50, p99 and their ratios; and 16 runs journaling at once (one shared
 *    commit) beside one bare transaction of the same 16 rows;
 * 2. replay: a run of N steps (a model call and a tool call each) journaled by
 *    a process that is then SIGKILLed, retried in a fresh process that
 *    answers every call from the journal; the wall time from the retry's start
 *    (before `createAgentCheckpoint`) to its last replayed call, at 1,000 and
 *    10,000 steps (SQLite and PostgreSQL);
 * 3. bytes per step of a conversation whose requests carry all earlier
 *    messages (each response ~500 B): the journal tables' size at 100 and
 *    1,000 steps, beside the size of every full request kept;
 * 4. the hooks (`preToolCall` + `postToolCall`, `preLlmCall` + `postLlmCall`)
 *    in a run with the journal on and off, interleaved rounds;
 * 5. published per-step figures of other durable-execution tools (constants,
 *    not measured here) beside ours at step 1,000.
 *
 *     deno run -A --v8-flags=--expose-gc scripts/bench_journal.ts [--quick] [--pg URL] [--parts replay,bytes]
 *
 * Figures are ratios to floors measured in the same run; none is asserted.
 * Without a PostgreSQL server its figures say so and are skipped.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createAgentCheckpoint } from "../mod.ts";
import { sqliteDriver } from "../_sqlite.ts";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";
import { loadDriver, openPgStore, type Sql } from "../store/postgres.ts";
import type { RunStore } from "../store/mod.ts";
import { flag, fmtBytes, fmtMs, lastJson, median, pct, runtime, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const pgUrl = flag(
  args,
  "--pg",
  process.env.AGENT_CHECKPOINT_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test",
)!;
const SELF = fileURLToPath(import.meta.url);
/** `--parts commit,replay,bytes,hooks`: only those (all by default). */
const parts = new Set((flag(args, "--parts") ?? "").split(",").filter((x) => x !== ""));

// ---- deterministic payloads ---------------------------------------------------------

const WORDS = (
  "the a of to and in is it that for on with as this be by file line test function return " +
  "value error call tool model step result read write path src index type string number " +
  "import export const let async await promise run agent budget cap turn token usage store " +
  "commit row table query json parse config setting option default true false null array " +
  "object key map set list check fix bug patch diff change update add remove rename move " +
  "build lint format deno node npm package module script bench journal replay ledger"
).split(" ");

/** Text of about `bytes` characters, words drawn by a PRNG seeded with `seed` (as English compresses). */
function words(seed: number, bytes: number): string {
  let s = (seed * 2654435761) >>> 0 || 1;
  const out: string[] = [];
  let n = 0;
  while (n < bytes) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    const w = WORDS[s % WORDS.length]!;
    out.push(w);
    n += w.length + 1;
  }
  return out.join(" ").slice(0, bytes);
}

/** A chat completion of about `bytes` bytes of JSON, a tool call in it: step `i`'s. */
function response(i: number, bytes: number) {
  const r = {
    id: `chatcmpl-${i.toString(36)}`,
    object: "chat.completion",
    created: 1_700_000_000 + i,
    model: "gpt-4o-2024-08-06",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: "",
        tool_calls: [{
          id: `call_${i.toString(36)}`,
          type: "function",
          function: { name: "read_file", arguments: JSON.stringify({ path: `src/f${i}.ts` }) },
        }],
      },
      finish_reason: "tool_calls",
    }],
    usage: { prompt_tokens: 1200 + i, completion_tokens: 380, total_tokens: 1580 + i },
  };
  r.choices[0]!.message.content = words(i + 1, Math.max(0, bytes - JSON.stringify(r).length));
  return r;
}
type Response = ReturnType<typeof response>;

const SYSTEM = { role: "system", content: words(7, 400) };
const TASK = { role: "user", content: words(11, 200) };

/** A request of bounded size: the system text, the task, and the last step's reply and result. */
function request(i: number, last?: { reply: Response; result: unknown }) {
  const messages: unknown[] = [SYSTEM, TASK];
  if (last) {
    messages.push(last.reply.choices[0]!.message);
    messages.push({ role: "tool", content: JSON.stringify(last.result) });
  }
  return { model: "gpt-4o-2024-08-06", temperature: 0, step: i, messages };
}

/** Step `i`'s tool result (~300 B). */
const toolResult = (i: number) => ({ ok: true, content: words(1_000_003 + i, 280) });

const bytesOf = (text: string) => Buffer.byteLength(text, "utf8");
const p = (xs: number[]) => `p50 ${fmtMs(pct(xs, 50))}, p99 ${fmtMs(pct(xs, 99))}`;
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
const spread = (xs: number[]) =>
  xs.length === 0
    ? "n/a"
    : `${fmtMs(Math.min(...xs))} / ${fmtMs(median(xs))} / ${fmtMs(Math.max(...xs))}`;

// ---- child processes: an attempt that records, a retry that replays ----------------------

interface Plan {
  home: string;
  steps: number;
  store?: string;
}

/** The steps' requests, responses and tool calls, as the agent makes them. */
function steps(n: number) {
  const replies: Response[] = [];
  const results: ReturnType<typeof toolResult>[] = [];
  const requests: ReturnType<typeof request>[] = [];
  for (let i = 0; i < n; i++) {
    requests.push(
      request(i, i === 0 ? undefined : { reply: replies[i - 1]!, result: results[i - 1] }),
    );
    replies.push(response(i, 2048));
    results.push(toolResult(i));
  }
  return { requests, replies, results };
}

const keeperOf = (plan: Plan) =>
  createAgentCheckpoint({
    home: plan.home,
    env: {},
    settings: plan.store ? { store: plan.store } : {},
    logger: (r) => r.level !== "info" && console.error(`${r.level}: ${r.message}`),
  });

/**
 * The first attempt: every step journaled (issued 250 steps at a time, so that
 * they share commits: each call takes its index when it is made, so the
 * journal is the one a loop of awaited calls makes), then `RECORDED`, then it
 * waits to be killed.
 */
async function recordChild(plan: Plan): Promise<void> {
  const { requests, replies, results } = steps(plan.steps);
  const ac = keeperOf(plan);
  const run = ac.startRun({ sessionId: "replay", caps: { turns: 1e9 } });
  const t = performance.now();
  for (let at = 0; at < plan.steps; at += 250) {
    const idx = Array.from({ length: Math.min(250, plan.steps - at) }, (_, k) => at + k);
    await Promise.all(idx.map((i) => run.journal.model(requests[i], () => replies[i]!)));
    await Promise.all(
      idx.map((i) => run.journal.tool("read_file", { path: `src/f${i}.ts` }, () => results[i]!)),
    );
  }
  console.log(JSON.stringify({ recordMs: performance.now() - t }));
  console.log("RECORDED");
  setInterval(() => {}, 60_000); // killed here, its run live
}

/** The retry: every step answered from the journal; the time to the last replayed call. */
async function replayChild(plan: Plan): Promise<void> {
  const { requests } = steps(plan.steps);
  const t0 = performance.now();
  const ac = keeperOf(plan);
  const run = ac.startRun({ sessionId: "replay", caps: { turns: 1e9 } });
  const startMs = performance.now() - t0;
  let live = 0;
  let firstMs = NaN;
  for (let i = 0; i < plan.steps; i++) {
    const reply = await run.journal.model(requests[i], () => {
      live++;
      return response(i, 2048);
    });
    if (i === 0) firstMs = performance.now() - t0;
    await run.journal.tool(
      "read_file",
      JSON.parse(reply.choices[0]!.message.tool_calls[0]!.function.arguments),
      () => {
        live++;
        return toolResult(i);
      },
    );
  }
  const replayMs = performance.now() - t0;
  const out = {
    replayMs,
    startMs,
    firstMs,
    live,
    replayed: run.journal.replayed,
    replayedTools: run.journal.replayedTools,
    attempt: run.attempt,
  };
  await ac.close();
  console.log(JSON.stringify(out));
  process.exit(0);
}

/** Run this script as `mode` in a fresh process; `untilLine`: SIGKILL it once it prints that. */
function child(
  mode: string,
  plan: Plan,
  untilLine?: string,
): Promise<{ stdout: string; stderr: string; code: number | null; signal: string | null }> {
  return new Promise((resolve) => {
    const c = spawn(runtime, ["run", "-A", "--quiet", SELF, mode, JSON.stringify(plan)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    c.stdout.on("data", (d) => {
      stdout += d;
      if (untilLine && stdout.includes(`${untilLine}\n`)) c.kill("SIGKILL");
    });
    c.stderr.on("data", (d) => stderr += d);
    const timer = setTimeout(() => c.kill("SIGKILL"), 900_000);
    c.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ stdout, stderr, code, signal });
    });
  });
}

// ---- 1. a journaled call's commit, beside a bare commit ------------------------------------

/** A keeper's run and what one journaled call of step `i` costs. */
interface Journaled {
  one(i: number): Promise<number>;
  many(round: number, runs: number): Promise<number>;
  commits(): number;
  close(): Promise<void>;
}

function journaledKeeper(home: string, settings: Record<string, unknown>): Journaled {
  const ac = createAgentCheckpoint({ home, env: {}, settings: { watchdog: false, ...settings } });
  const run = ac.startRun({ sessionId: "commit" });
  const others = Array.from({ length: 16 }, (_, k) => ac.startRun({ sessionId: `many-${k}` }));
  return {
    async one(i) {
      const req = request(i);
      const res = response(i, 2048);
      const t = performance.now();
      await run.journal.model(req, () => res);
      return performance.now() - t;
    },
    async many(round, n) {
      const reqs = others.slice(0, n).map((_, k) => request(round * 100 + k));
      const ress = others.slice(0, n).map((_, k) => response(1_000_000 + round * 100 + k, 2048));
      const t = performance.now();
      await Promise.all(others.slice(0, n).map((r, k) => r.journal.model(reqs[k], () => ress[k])));
      return performance.now() - t;
    },
    commits: () => ac.effectCommits,
    close: () => ac.close(),
  };
}

/**
 * A journal entry's commit alone: a store's own write of one entry holding
 * `response(i)` (its body hashed, compressed and kept, its row), timed.
 */
async function entryCommit(store: RunStore, i: number): Promise<number> {
  const body = JSON.stringify(response(i, 2048));
  const t = performance.now();
  await store.journal!.write({
    entries: [{ runId: "alone", attempt: 1, kind: "model", index: i, key: `k${i}`, body, at: 1 }],
  });
  return performance.now() - t;
}

/** The same bytes as `response(i)`'s JSON, for a bare commit. */
const bareText = (i: number) => JSON.stringify(response(i, 2048));

async function commits(): Promise<Record<string, number>> {
  const n = quick ? 60 : 300;
  const rounds = quick ? 15 : 60;
  const figures: Record<string, number> = {};
  const size = bytesOf(bareText(0));
  console.log(
    `\n## 1. One journaled model call's commit (a ${size} B JSON response), beside a bare commit` +
      ` of the same bytes (${n} calls, interleaved with the floor's)`,
  );
  // SQLite: the keeper's ledger and a bare file in the same directory, the same driver.
  {
    const home = tempDir("ac-bench-journal-");
    const keeper = journaledKeeper(home, {});
    const db = sqliteDriver()!.open(path.join(home, "bare.db"), { readOnly: false });
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = FULL"); // as the journal's commit sets it
    db.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT NOT NULL)");
    let key = 0;
    const bare = (texts: string[]) => {
      const t = performance.now();
      db.exec("BEGIN IMMEDIATE");
      for (const text of texts) db.run("INSERT INTO t (k, v) VALUES (?, ?)", `k${key++}`, text);
      db.exec("COMMIT");
      return performance.now() - t;
    };
    for (let i = 0; i < 10; i++) {
      await keeper.one(-1 - i);
      bare([bareText(-1 - i)]);
    }
    // The same ledger file, through a store of its own: the entry's commit without the call.
    const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30 });
    await entryCommit(store, -1);
    const journaled: number[] = [];
    const floor: number[] = [];
    const alone: number[] = [];
    for (let i = 0; i < n; i++) {
      const text = bareText(i);
      if (i % 2 === 0) {
        journaled.push(await keeper.one(i));
        alone.push(await entryCommit(store, i));
        floor.push(bare([text]));
      } else {
        floor.push(bare([text]));
        alone.push(await entryCommit(store, i));
        journaled.push(await keeper.one(i));
      }
    }
    const many: number[] = [];
    const manyFloor: number[] = [];
    const before = keeper.commits();
    for (let r = 0; r < rounds; r++) {
      const texts = Array.from({ length: 16 }, (_, k) => bareText(1_000_000 + r * 100 + k));
      manyFloor.push(bare(texts));
      many.push(await keeper.many(r, 16));
    }
    const shared = (keeper.commits() - before) / rounds;
    await keeper.close();
    await store.close();
    db.close();
    fs.rmSync(home, { recursive: true, force: true });
    console.log(`  SQLite, bare commit of the same bytes (WAL, FULL): ${p(floor)} (the floor)`);
    console.log(
      `  SQLite, the entry's commit alone (the store's write of one entry): ${p(alone)} (p50 ${
        ratio(pct(alone, 50), pct(floor, 50))
      }, p99 ${ratio(pct(alone, 99), pct(floor, 99))} the floor; goal ≤ 1.5×)`,
    );
    console.log(
      `  SQLite, await run.journal.model(): ${p(journaled)} (p50 ${
        ratio(pct(journaled, 50), pct(floor, 50))
      }, p99 ${ratio(pct(journaled, 99), pct(floor, 99))} the floor; goal ≤ 1.5×)`,
    );
    console.log(
      `  SQLite, 16 runs at once: ${p(many)} for all 16, ${
        fmtMs(pct(many, 50) / 16)
      } per entry at p50, ${shared.toFixed(2)} commit(s) per round (p50 ${
        ratio(pct(many, 50), pct(manyFloor, 50))
      } one bare transaction of the same 16 rows: ${p(manyFloor)})`,
    );
    figures.sqliteP50 = pct(journaled, 50);
    figures.sqliteFloorP50 = pct(floor, 50);
  }
  // PostgreSQL: the fleet store (its store thread), and a bare INSERT on a connection of its own.
  const sql = await pgConnect();
  if (!sql) return figures;
  const schema = `ac_bench_journal_${process.pid}`;
  await sql.unsafe(`CREATE SCHEMA ${schema}`);
  try {
    await sql.unsafe(`CREATE TABLE ${schema}.t (k text PRIMARY KEY, v text NOT NULL)`);
    const url = new URL(pgUrl);
    url.searchParams.set("schema", schema);
    const home = tempDir("ac-bench-journal-");
    const keeper = journaledKeeper(home, { store: url.href });
    let key = 0;
    const bare = async (texts: string[]) => {
      const values = texts.map((_, k) => `($${2 * k + 1}, $${2 * k + 2})`).join(", ");
      const params = texts.flatMap((text) => [`k${key++}`, text]);
      const t = performance.now();
      await sql.unsafe(`INSERT INTO ${schema}.t (k, v) VALUES ${values}`, params, {
        prepare: true,
      });
      return performance.now() - t;
    };
    for (let i = 0; i < 10; i++) {
      await keeper.one(-1 - i);
      await bare([bareText(-1 - i)]);
    }
    // The same schema, through a store of its own on this thread: the entry's commit alone.
    const store = openPgStore({ url: url.href, hostTimeoutSeconds: 30 });
    await entryCommit(store, -1);
    const journaled: number[] = [];
    const floor: number[] = [];
    const alone: number[] = [];
    for (let i = 0; i < n; i++) {
      const text = bareText(i);
      if (i % 2 === 0) {
        journaled.push(await keeper.one(i));
        alone.push(await entryCommit(store, i));
        floor.push(await bare([text]));
      } else {
        floor.push(await bare([text]));
        alone.push(await entryCommit(store, i));
        journaled.push(await keeper.one(i));
      }
    }
    await store.close();
    const many: number[] = [];
    const manyFloor: number[] = [];
    const before = keeper.commits();
    for (let r = 0; r < rounds; r++) {
      const texts = Array.from({ length: 16 }, (_, k) => bareText(1_000_000 + r * 100 + k));
      manyFloor.push(await bare(texts));
      many.push(await keeper.many(r, 16));
    }
    const shared = (keeper.commits() - before) / rounds;
    await keeper.close();
    fs.rmSync(home, { recursive: true, force: true });
    console.log(`  PostgreSQL, bare INSERT of the same bytes: ${p(floor)} (the floor)`);
    console.log(
      `  PostgreSQL, the entry's commit alone (the store's write of one entry): ${p(alone)} (p50 ${
        ratio(pct(alone, 50), pct(floor, 50))
      }, p99 ${ratio(pct(alone, 99), pct(floor, 99))} the floor; goal ≤ 1.5×)`,
    );
    console.log(
      `  PostgreSQL, await run.journal.model() (fleet store): ${p(journaled)} (p50 ${
        ratio(pct(journaled, 50), pct(floor, 50))
      }, p99 ${ratio(pct(journaled, 99), pct(floor, 99))} the floor; goal ≤ 1.5×)`,
    );
    console.log(
      `  PostgreSQL, 16 runs at once: ${p(many)} for all 16, ${
        fmtMs(pct(many, 50) / 16)
      } per entry at p50, ${shared.toFixed(2)} commit(s) per round (p50 ${
        ratio(pct(many, 50), pct(manyFloor, 50))
      } one bare INSERT of the same 16 rows: ${p(manyFloor)})`,
    );
    figures.pgP50 = pct(journaled, 50);
  } finally {
    await sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await sql.end({ timeout: 1 });
  }
  return figures;
}

async function pgConnect(): Promise<Sql | undefined> {
  try {
    const sql = (await loadDriver())(pgUrl, { max: 1, onnotice: () => {}, connect_timeout: 3 });
    await sql.unsafe("SELECT 1");
    return sql;
  } catch (error) {
    console.log(`  PostgreSQL: not measured (${error instanceof Error ? error.message : error})`);
    return undefined;
  }
}

// ---- 2. replay --------------------------------------------------------------------------

interface Replayed {
  replayMs: number;
  startMs: number;
  firstMs: number;
  live: number;
  replayed: number;
  replayedTools: number;
  attempt: number;
}

/** A run of `n` steps recorded and killed, then `rounds` retries of it; their figures. */
async function replayOf(n: number, rounds: number, store?: string): Promise<Replayed[]> {
  const home = tempDir("ac-bench-journal-");
  const plan: Plan = { home, steps: n, ...(store ? { store } : {}) };
  try {
    const rec = await child("record", plan, "RECORDED");
    if (!rec.stdout.includes("RECORDED\n")) {
      console.log(`  (recording ${n} steps failed: ${rec.stderr.trim().split("\n").slice(-3)})`);
      return [];
    }
    const out: Replayed[] = [];
    for (let r = 0; r < rounds; r++) {
      const got = await child("replay", plan);
      const figures = lastJson<Replayed>(got.stdout);
      if (!figures) {
        console.log(
          `  (a replay of ${n} steps failed: ${got.stderr.trim().split("\n").slice(-3)})`,
        );
        continue;
      }
      if (figures.live > 0 || figures.replayed !== n || figures.replayedTools !== n) {
        console.log(
          `  (a replay of ${n} steps was not whole: ${figures.replayed} model and ${figures.replayedTools} tool calls replayed, ${figures.live} live)`,
        );
      }
      const warned = got.stderr.trim().split("\n").filter((l) => l.startsWith("warn"));
      if (warned.length > 0) console.log(`  (the retry said: ${warned.slice(0, 2).join(" / ")})`);
      out.push(figures);
    }
    return out;
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
}

async function replay(): Promise<Record<string, number>> {
  const rounds = quick ? 2 : 3;
  const figures: Record<string, number> = {};
  console.log(
    `\n## 2. Replay: a run of N steps (a model call, ~2 kB response, and a tool call each) ` +
      `journaled by a process then SIGKILLed; a retry in a fresh process answers every call from the journal ` +
      `(${rounds} retries each; min / median / max)`,
  );
  const sql = await pgConnect();
  const stores: Array<[string, string | undefined]> = [["SQLite", undefined]];
  let schema: string | undefined;
  if (sql) {
    schema = `ac_bench_journal_r${process.pid}`;
    await sql.unsafe(`CREATE SCHEMA ${schema}`);
    const url = new URL(pgUrl);
    url.searchParams.set("schema", schema);
    stores.push(["PostgreSQL", url.href]);
  }
  try {
    for (const [name, store] of stores) {
      const by = new Map<number, Replayed[]>();
      for (const n of [1_000, 10_000]) {
        const got = await replayOf(n, n === 1_000 ? rounds : Math.max(1, rounds - 1), store);
        by.set(n, got);
        const wall = got.map((g) => g.replayMs);
        console.log(
          `  ${name}, ${n.toLocaleString()} steps: retry's start → last replayed call ${
            spread(wall)
          } (from startRun's return: ${spread(got.map((g) => g.replayMs - g.startMs))}; ${
            (median(wall) * 1000 / (2 * n)).toFixed(0)
          } µs per call; createAgentCheckpoint + startRun ${
            fmtMs(median(got.map((g) => g.startMs)))
          }, to the first replayed call ${fmtMs(median(got.map((g) => g.firstMs)))})${
            n === 1_000 ? `; goal < 1 s: ${median(wall) < 1000 ? "met" : "NOT met"}` : ""
          }`,
        );
      }
      const one = median((by.get(1_000) ?? []).map((g) => g.replayMs));
      const ten = median((by.get(10_000) ?? []).map((g) => g.replayMs));
      console.log(
        `  ${name}, 10,000 steps / 1,000 steps: ${(ten / one).toFixed(1)}× (goal < 10×, linear: ${
          ten / one < 10 ? "met" : "NOT met"
        })`,
      );
      figures[`${name}1000`] = one;
      figures[`${name}10000`] = ten;
    }
  } finally {
    if (sql) {
      await sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await sql.end({ timeout: 1 });
    }
  }
  return figures;
}

// ---- 3. bytes per step --------------------------------------------------------------------

interface Growth {
  steps: number;
  tables: number;
  packed: number;
  fileGrowth: number;
  fullRequests: number;
  stepMs: number[];
}

/** A conversation of `n` steps whose every request carries every earlier message. */
async function growing(n: number): Promise<Growth> {
  const home = tempDir("ac-bench-journal-");
  const file = storeFile(home);
  const driver = sqliteDriver()!;
  const fileSize = () => {
    const db = driver.open(file, { readOnly: false });
    try {
      db.get("PRAGMA wal_checkpoint(TRUNCATE)");
      return Number(db.get("PRAGMA page_count")?.page_count) *
        Number(db.get("PRAGMA page_size")?.page_size);
    } finally {
      db.close();
    }
  };
  const ac = createAgentCheckpoint({ home, env: {} });
  const run = ac.startRun({ sessionId: "growing", caps: { turns: 1e9 } });
  // One step first, so the file and the journal's tables are there before the size is taken.
  await run.journal.tool("warm", {}, () => "{}");
  const base = fileSize();
  const messages: unknown[] = [SYSTEM, TASK];
  let fullRequests = 0;
  const stepMs: number[] = [];
  for (let i = 0; i < n; i++) {
    const req = { model: "gpt-4o-2024-08-06", messages };
    fullRequests += bytesOf(JSON.stringify(req));
    const reply = { role: "assistant", content: words(50_000 + i, 440), tool: "read_file" };
    const result = toolResult(i);
    const t = performance.now();
    const got = await run.journal.model(req, () => reply);
    const out = await run.journal.tool("read_file", { path: `src/f${i}.ts` }, () => result);
    stepMs.push(performance.now() - t);
    messages.push(got, { role: "tool", content: JSON.stringify(out) });
  }
  await run.end();
  await ac.close();
  const db = driver.open(file, { readOnly: false });
  let tables = NaN;
  let packed = NaN;
  try {
    db.get("PRAGMA wal_checkpoint(TRUNCATE)");
    packed = Number(db.get("SELECT sum(length(packed)) AS b FROM journal_bodies")?.b);
    try {
      tables = Number(
        db.get(
          `SELECT sum(pgsize) AS b FROM dbstat WHERE name IN ('journal', 'journal_bodies', 'journal_body')
            OR name LIKE 'sqlite_autoindex_journal%'`,
        )?.b,
      );
    } catch { /* no dbstat in this SQLite: the file's growth only */ }
  } finally {
    db.close();
  }
  const fileGrowth = fileSize() - base;
  fs.rmSync(home, { recursive: true, force: true });
  return { steps: n, tables, packed, fileGrowth, fullRequests, stepMs };
}

async function bytesPerStep(): Promise<Growth[]> {
  console.log(
    `\n## 3. Bytes per step, a conversation whose every request carries every earlier message` +
      ` (each response ~500 B, each tool result ~300 B); SQLite`,
  );
  const out: Growth[] = [];
  for (const n of [100, 1_000]) {
    const g = await growing(n);
    out.push(g);
    console.log(
      `  ${n.toLocaleString()} steps: journal tables ${fmtBytes(g.tables)} (${
        fmtBytes(g.tables / n)
      } per step; compressed bodies ${fmtBytes(g.packed / n)} per step), ledger file grew ${
        fmtBytes(g.fileGrowth)
      } (${fmtBytes(g.fileGrowth / n)} per step); every full request kept: ${
        fmtBytes(g.fullRequests)
      } (${fmtBytes(g.fullRequests / n)} per step)`,
    );
  }
  const [a, b] = out as [Growth, Growth];
  console.log(
    `  per step, 1,000 steps / 100 steps: journal tables ${
      ((b.tables / b.steps) / (a.tables / a.steps)).toFixed(2)
    }× (linear: ~1×), full requests ${
      ((b.fullRequests / b.steps) / (a.fullRequests / a.steps)).toFixed(1)
    }× (quadratic: ~10×)`,
  );
  const at = (g: Growth, from: number) => median(g.stepMs.slice(from));
  console.log(
    `  a live step (a journaled model call + tool call, two commits; the request's digest grows with it): ` +
      `median ${fmtMs(at(a, 0))} over steps 1–100, ${fmtMs(at(b, 900))} over steps 901–1,000`,
  );
  return out;
}

// ---- 4. the hooks, journal on and off ----------------------------------------------------

function hookRun(journal: boolean) {
  const home = tempDir("ac-bench-journal-");
  const ac = createAgentCheckpoint({
    home,
    env: {},
    settings: { journal },
  });
  const run = ac.startRun({ sessionId: "hooks", caps: { turns: 1e12 } });
  return {
    /** The ledger's store opened in both (a durable intent), and a call through the journal. */
    warm: async () => {
      await run.effects.intent("warm", {});
      await run.journal.model({ warm: true }, () => ({ ok: true }));
    },
    /** ns per tool pair, and per model pair, over `pairs` pairs each. */
    time(pairs: number): [number, number] {
      let t = performance.now();
      for (let i = 0; i < pairs; i++) {
        run.preToolCall("search", { callId: "c", input: { q: i & 7 } });
        run.postToolCall("search", { callId: "c", ok: true });
      }
      const tool = ((performance.now() - t) * 1e6) / pairs;
      t = performance.now();
      for (let i = 0; i < pairs; i++) {
        run.preLlmCall();
        run.postLlmCall({ inputTokens: 100, outputTokens: 10 });
      }
      return [tool, ((performance.now() - t) * 1e6) / pairs];
    },
    close: async () => {
      await run.end();
      await ac.close();
      fs.rmSync(home, { recursive: true, force: true });
    },
  };
}

async function hooks(): Promise<void> {
  const pairs = quick ? 10_000 : 50_000;
  const rounds = quick ? 7 : 15;
  console.log(
    `\n## 4. The hooks with the journal on and off (${rounds} interleaved rounds × ${pairs.toLocaleString()} pairs; ns per pair, min / median / max)`,
  );
  const on = hookRun(true);
  const off = hookRun(false);
  await on.warm();
  await off.warm();
  on.time(pairs);
  off.time(pairs);
  const t = { on: [[], []] as number[][], off: [[], []] as number[][] };
  for (let r = 0; r < rounds; r++) {
    for (
      const [name, h] of r % 2
        ? [["on", on], ["off", off]] as const
        : [["off", off], ["on", on]] as const
    ) {
      const [tool, llm] = h.time(pairs);
      t[name][0]!.push(tool);
      t[name][1]!.push(llm);
    }
  }
  await on.close();
  await off.close();
  const ns = (xs: number[]) =>
    `${Math.min(...xs).toFixed(0)} / ${median(xs).toFixed(0)} / ${Math.max(...xs).toFixed(0)} ns`;
  for (
    const [k, what] of [[0, "preToolCall + postToolCall"], [1, "preLlmCall + postLlmCall"]] as const
  ) {
    console.log(
      `  ${what}: journal on ${ns(t.on[k]!)}, off ${ns(t.off[k]!)}; on/off ${
        (median(t.on[k]!) / median(t.off[k]!)).toFixed(2)
      }× by medians, ${
        (Math.min(...t.on[k]!) / Math.min(...t.off[k]!)).toFixed(2)
      }× by best rounds (goal ~1.0×)`,
    );
  }
}

// ---- 5. published anchors -----------------------------------------------------------------

/** Published figures, not measured here. */
const VERCEL_BASE_MS = 7.3;
const VERCEL_PER_STEP_MS = 0.074;
const AWS_PER_STEP_MS = 29;

function anchors(growth: Growth[], replayed: Record<string, number>): void {
  const step = 1_000;
  console.log(`\n## 5. Per step at step ${step.toLocaleString()}, beside published figures`);
  console.log(
    `  Vercel Workflow, local step cost (published, not measured here): 7.3 ms + 0.074 ms × step = ${
      fmtMs(VERCEL_BASE_MS + VERCEL_PER_STEP_MS * step)
    }`,
  );
  console.log(
    `  AWS durable functions (published, not measured here): ${fmtMs(AWS_PER_STEP_MS)} per step`,
  );
  const g = growth.find((x) => x.steps === step);
  if (g) {
    console.log(
      `  this library, measured: a live step (journaled model call + tool call, two durable commits, ` +
        `full history in each request) at step ${step.toLocaleString()}: ${
          fmtMs(median(g.stepMs.slice(step - 100)))
        } (median of steps 901–1,000, SQLite)`,
    );
  }
  const r = replayed.SQLite1000;
  if (r !== undefined && Number.isFinite(r)) {
    console.log(
      `  this library, measured: a replayed step (model call + tool call from the journal), ` +
        `1,000-step retry: ${(r * 1000 / step).toFixed(0)} µs per step (SQLite)`,
    );
  }
}

async function main(): Promise<void> {
  console.log(
    `run journal benchmarks, ${new Date().toISOString()}, ${os.cpus().length} cores, load ${
      os.loadavg().map((x) => x.toFixed(1)).join(" ")
    }${quick ? ", --quick" : ""}`,
  );
  const want = (part: string) => parts.size === 0 || parts.has(part);
  if (want("commit")) await commits();
  const replayed = want("replay") ? await replay() : {};
  const growth = want("bytes") ? await bytesPerStep() : [];
  if (want("hooks")) await hooks();
  anchors(growth, replayed);
  console.log(`\n(load now ${os.loadavg().map((x) => x.toFixed(1)).join(" ")})`);
  process.exit(0);
}

const childMode = args[0];
if (childMode === "record" || childMode === "replay") {
  const plan = JSON.parse(args[1]!) as Plan;
  await (childMode === "record" ? recordChild(plan) : replayChild(plan));
} else {
  await main();
}
