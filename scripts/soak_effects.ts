/**
 * The effects soak (not in CI): a host whose tool calls act on the world
 * through `run.once` (scripts/_soak_effects_host.ts), killed by SIGKILL at
 * random moments and started again until its run is done, cycle after
 * cycle, until it has been killed KILLS times; in two variants: its tools
 * append their effect key to a file, or insert it into a PostgreSQL table
 * whose key column is unique (the run ledger is then the fleet store too).
 *
 * After every kill it reads the ledger's effects of the run: each intent
 * without a receipt (outcome unknown) must be named, by its key, in the next
 * attempt's resume text. At the end of each cycle: every step's key applied
 * exactly once (the file has each key once; the table has one row per key);
 * no tool call ran for a key that already had a receipt (every call that ran
 * again was of unknown outcome at the kill before it); and the figures.
 *
 *   deno task soak:effects [--kills 200] [--steps 40] [--seed N] [--variant file|pg|both]
 *   deno task soak:effects --quick        (20 kills per variant)
 *
 * Exits 1 when a check fails.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { openStore } from "../store/mod.ts";
import { loadDriver, openPgStore } from "../store/postgres.ts";
import type { EffectRow } from "../store/types.ts";
import { flag, runtime, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const kills = Number(flag(args, "--kills", quick ? "20" : "200"));
const steps = Number(flag(args, "--steps", "40"));
const variant = flag(args, "--variant", "both")!;
const pgUrl = flag(
  args,
  "--pg",
  process.env.AGENT_CHECKPOINT_TEST_PG ??
    "postgres://postgres@127.0.0.1:5432/test",
)!;
let seed = Number(flag(args, "--seed", String(Date.now() % 100000)));
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
const HOST = fileURLToPath(new URL("./_soak_effects_host.ts", import.meta.url));
const runArgs = runtime.includes("deno") ? ["run", "-A", HOST] : [HOST];

interface Attempt {
  /** It printed `ready` (its resume text is written). */
  ready: boolean;
  done: boolean;
  killed: boolean;
  deduped: number;
  /** From ready to done, ms, when it finished. */
  workMs?: number;
}

/** Start the host; kill it `killAfterMs` after it is ready (never, when undefined). */
function attempt(hostArgs: string[], killAfterMs: number | undefined): Promise<Attempt> {
  return new Promise((resolve) => {
    const child = spawn(runtime, [...runArgs, ...hostArgs], { stdio: ["ignore", "pipe", "pipe"] });
    const out: Attempt = { ready: false, done: false, killed: false, deduped: 0 };
    let readyAt = performance.now();
    let buffer = "";
    child.stdout.on("data", (d) => {
      buffer += d;
      for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        let event: { event?: string; deduped?: number; message?: string };
        try {
          event = JSON.parse(line);
        } catch {
          continue;
        }
        if (event.event === "ready") {
          out.ready = true;
          readyAt = performance.now();
          if (killAfterMs !== undefined) {
            setTimeout(() => {
              out.killed = child.kill("SIGKILL");
            }, killAfterMs);
          }
        } else if (event.event === "done") {
          out.done = true;
          out.deduped = event.deduped ?? 0;
          out.workMs = performance.now() - readyAt;
        } else if (event.event === "log") console.log(`  host: ${event.message}`);
      }
    });
    let stderr = "";
    child.stderr.on("data", (d) => stderr = (stderr + d).slice(-4000));
    child.on("exit", (code, signal) => {
      if (!out.done && signal !== "SIGKILL") console.log(`  host exited ${code}: ${stderr}`);
      resolve(out);
    });
  });
}

interface Figures {
  variant: string;
  cycles: number;
  kills: number;
  attempts: number;
  keys: number;
  executions: number;
  /** Calls that ran again: each of unknown outcome at the kill before. */
  reran: number;
  /** Of those, the ones the target had already taken (the key kept it from applying twice). */
  deduped: number;
  /** Intents without a receipt seen after kills, and how many the next resume text named. */
  unknownSeen: number;
  unknownNamed: number;
  appliedTwice: number;
  ranAfterReceipt: number;
  failures: string[];
}

async function soak(kind: "file" | "pg"): Promise<Figures> {
  const fig: Figures = {
    variant: kind,
    cycles: 0,
    kills: 0,
    attempts: 0,
    keys: 0,
    executions: 0,
    reran: 0,
    deduped: 0,
    unknownSeen: 0,
    unknownNamed: 0,
    appliedTwice: 0,
    ranAfterReceipt: 0,
    failures: [],
  };
  const schema = `ac_soak_fx_${process.pid}`;
  const sql = kind === "pg"
    ? (await loadDriver())(pgUrl, { max: 1, onnotice: () => {}, fetch_types: false })
    : undefined;
  const storeUrl = (() => {
    const u = new URL(pgUrl);
    u.searchParams.set("schema", schema);
    return u.href;
  })();
  if (sql) {
    await sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await sql.unsafe(`CREATE SCHEMA ${schema}`);
    await sql.unsafe(`CREATE TABLE ${schema}.applied (key text PRIMARY KEY)`);
  }
  const pgReader = kind === "pg"
    ? openPgStore({ url: storeUrl, hostTimeoutSeconds: 30 })
    : undefined;
  /** How long a whole run's work takes, ms: the kills land within it. */
  let window = 1000;
  try {
    while (fig.kills < kills) {
      fig.cycles++;
      const home = tempDir("ac-soak-fx-");
      const runId = `fx-${fig.cycles}`;
      const target = path.join(home, "applied.txt");
      const hostArgs = kind === "pg"
        ? [home, runId, String(steps), "pg", storeUrl, `${schema}.applied`]
        : [home, runId, String(steps), "file", target];
      const effectsOf = async (): Promise<EffectRow[]> => {
        if (pgReader) return await pgReader.effects.read(runId);
        const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" });
        try {
          return store?.effectsSync(runId) ?? [];
        } catch {
          return [];
        } finally {
          store?.closeSync();
        }
      };
      const endedDone = async (): Promise<boolean> => {
        if (pgReader) return (await pgReader.latest(runId))?.record.status === "done";
        const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" });
        try {
          return store?.latestSync(runId)?.record.status === "done";
        } catch {
          return false;
        } finally {
          store?.closeSync();
        }
      };
      /** Intents without a receipt after the last kill, waiting to be named by the next resume text. */
      let owed: string[] = [];
      const everUnknown = new Set<string>();
      let attemptNo = 0;
      for (;;) {
        // Kill at a random moment of the attempt's work (as long as a whole run's took), until the
        // kills are spent.
        const killAfter = fig.kills < kills ? Math.floor(random() * window) : undefined;
        const a = await attempt(hostArgs, killAfter);
        fig.attempts++;
        attemptNo++;
        const resumeFile = fs.readdirSync(home).filter((f) => /^resume-\d+\.txt$/.test(f))
          .map((f) => Number(f.slice(7, -4))).sort((x, y) => y - x)[0];
        if (a.ready && owed.length > 0 && resumeFile !== undefined) {
          const text = fs.readFileSync(path.join(home, `resume-${resumeFile}.txt`), "utf8");
          for (const key of owed) {
            if (text.includes(key)) fig.unknownNamed++;
            else {fig.failures.push(
                `${runId}: ${key} (outcome unknown) is not in attempt ${resumeFile}'s resume text`,
              );}
          }
          owed = [];
        }
        if (a.done) {
          fig.deduped += a.deduped;
          if (attemptNo === 1 && a.workMs !== undefined) window = Math.max(20, a.workMs);
          break;
        }
        if (!a.killed) {
          fig.failures.push(`${runId}: attempt ${attemptNo} neither finished nor was killed`);
          break;
        }
        fig.kills++;
        // Killed after its end was recorded (before it could say so): the run is done, and a start
        // now would be a fresh run of the id.
        if (await endedDone()) break;
        const unknown = (await effectsOf()).filter((e) => !e.receipt).map((e) => e.key);
        for (const key of unknown) {
          if (!owed.includes(key)) {
            owed.push(key);
            fig.unknownSeen++;
          }
          everUnknown.add(key);
        }
        if (attemptNo > kills + 50) {
          fig.failures.push(`${runId}: no end after ${attemptNo} attempts`);
          break;
        }
      }
      // What the world holds, and what ran.
      const applied = sql
        ? (await sql.unsafe(`SELECT key FROM ${schema}.applied`)).map((r) => String(r.key))
        : fs.existsSync(target)
        ? fs.readFileSync(target, "utf8").split("\n").filter((l) => l !== "")
        : [];
      const effects = await effectsOf(); // gone once the run is done? No: kept until a fresh start.
      const runKeys = new Set(effects.map((e) => e.key));
      const ours = applied.filter((k) => kind === "file" || runKeys.has(k));
      const counts = new Map<string, number>();
      for (const k of ours) counts.set(k, (counts.get(k) ?? 0) + 1);
      fig.appliedTwice += [...counts.values()].filter((n) => n > 1).length;
      if (counts.size !== steps) {
        fig.failures.push(`${runId}: ${counts.size} of ${steps} steps applied`);
      }
      fig.keys += counts.size;
      const execs = fs.readFileSync(path.join(home, "exec.log"), "utf8").split("\n").filter((l) =>
        l !== ""
      );
      fig.executions += execs.length;
      const ran = new Map<string, number>();
      for (const k of execs) ran.set(k, (ran.get(k) ?? 0) + 1);
      for (const [k, n] of ran) {
        if (n <= 1) continue;
        fig.reran += n - 1;
        // A call runs again only when it was of unknown outcome: never after its receipt.
        if (!everUnknown.has(k)) {
          fig.ranAfterReceipt += n - 1;
          fig.failures.push(`${runId}: ${k} ran ${n} times without being of unknown outcome`);
        }
      }
      fs.rmSync(home, { recursive: true, force: true });
    }
  } finally {
    await pgReader?.close();
    if (sql) {
      await sql.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await sql.end({ timeout: 1 });
    }
  }
  return fig;
}

const variants = variant === "both" ? ["file", "pg"] as const : [variant as "file" | "pg"];
let failed = false;
for (const kind of variants) {
  const t = performance.now();
  const f = await soak(kind);
  const s = ((performance.now() - t) / 1000).toFixed(0);
  console.log(
    `effects soak (${kind}): ${f.kills} SIGKILLs over ${f.cycles} run(s) of ${steps} steps, ${f.attempts} attempts, ${s}s`,
  );
  console.log(
    `  keys applied: ${f.keys}, each once: ${
      f.appliedTwice === 0 ? "yes" : `no (${f.appliedTwice} twice)`
    }`,
  );
  console.log(
    `  tool calls run: ${f.executions}; run again after a kill: ${f.reran} (each of unknown outcome; ${f.deduped} of them already applied, kept from a second application by the key); run again after a receipt: ${f.ranAfterReceipt}`,
  );
  console.log(
    `  intents without a receipt after a kill: ${f.unknownSeen}; named in the next resume text: ${f.unknownNamed}`,
  );
  for (const line of f.failures.slice(0, 20)) console.log(`  FAIL ${line}`);
  if (f.failures.length > 0 || f.appliedTwice > 0 || f.ranAfterReceipt > 0) failed = true;
}
process.exit(failed ? 1 : 0);
