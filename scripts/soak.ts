/**
 * The soak test (not in CI): many runs × many hooks with the watchdog on, in
 * child host processes that share one home, some of them killed (SIGKILL)
 * mid-run and restarted, as a supervisor would, to finish their runs (which
 * then resume from their checkpoint files). It prints each host's heap,
 * RSS, open file descriptors and run-table slots before and after, and the
 * home's log size and checkpoint files before and after, then checks what
 * the files hold: no torn file, no temporary file left, no agent line lost;
 * and what the run ledger holds: every run, each killed host's runs cut off
 * with its last commit at most 2 intervals before the kill, and its size.
 *
 *   deno task soak --faults [--minutes 10] [--runs 100]   (see scripts/_soak_faults.ts)
 *   deno task soak [--runs 5000] [--hooks 100] [--hosts 10] [--parallel 2]
 *     [--concurrency 25] [--kill-rate 0.3] [--seed N]
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
import { readCheckpoint } from "../persist.ts";
import { openStore } from "../store/mod.ts";
import { flag, fmtBytes, runtime, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
// The fault soak: the run ledger under a lock, a delete, a damaged page and a full disk.
if (args.includes("--faults")) {
  const { soakFaults } = await import("./_soak_faults.ts");
  process.exit(await soakFaults(args));
}
const runs = Number(flag(args, "--runs", "5000"));
const hooks = Number(flag(args, "--hooks", "100"));
const hosts = Number(flag(args, "--hosts", "10"));
const parallel = Number(flag(args, "--parallel", "2"));
const concurrency = Number(flag(args, "--concurrency", "25"));
const killRate = Number(flag(args, "--kill-rate", "0.3"));
let seed = Number(flag(args, "--seed", String(Date.now() % 100000)));
/** A small seeded generator, so that a soak can be repeated. */
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
const HOST = fileURLToPath(new URL("./_soak_host.ts", import.meta.url));
const MAX_RESTARTS = 5;

interface Figures {
  phase: string;
  pid: number;
  heap: number;
  rss: number;
  fds: number;
  slots: number;
  workerHeap: number;
  watched: number;
}

interface HostOutcome {
  name: string;
  before?: Figures;
  after?: Figures;
  closed?: Figures;
  finished: Set<number>;
  killed: boolean;
  code: number | null;
  stderr: string;
  /** The host's pid, and when it was killed (ms since the epoch). */
  pid?: number;
  killedAt?: number;
}

/** The state of the home: checkpoint files, temporary files, log bytes. */
function homeState(home: string) {
  const dir = path.join(home, "agent-checkpoints");
  const names = fs.existsSync(dir) ? fs.readdirSync(dir) : [];
  let logBytes = 0;
  let logFiles = 0;
  const logs = path.join(home, "logs");
  if (fs.existsSync(logs)) {
    for (const f of fs.readdirSync(logs)) {
      logBytes += fs.statSync(path.join(logs, f)).size;
      logFiles++;
    }
  }
  return {
    files: names.filter((n) => n.endsWith(".md")).length,
    temps: names.filter((n) => n.endsWith(".tmp")).length,
    logBytes,
    logFiles,
  };
}

/** Run one host over `ids`, killing it (maybe) once it has finished `killAfter` runs. */
function runHost(
  home: string,
  name: string,
  ids: number[],
  killAfter: number | undefined,
): Promise<HostOutcome> {
  const idsFile = path.join(home, `ids-${name}.json`);
  fs.writeFileSync(idsFile, JSON.stringify(ids));
  const outcome: HostOutcome = {
    name,
    finished: new Set(),
    killed: false,
    code: null,
    stderr: "",
  };
  return new Promise((resolve) => {
    const child = spawn(runtime, [
      "run",
      "-A",
      "--quiet",
      "--v8-flags=--expose-gc",
      HOST,
      "--home",
      home,
      "--ids",
      idsFile,
      "--hooks",
      String(hooks),
      "--concurrency",
      String(concurrency),
    ], { stdio: ["ignore", "pipe", "pipe"] });
    if (child.pid !== undefined) outcome.pid = child.pid;
    let rest = "";
    child.stdout.on("data", (chunk) => {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) {
        let v: Figures & { done?: number; count?: number };
        try {
          v = JSON.parse(line);
        } catch {
          continue;
        }
        if (v.phase === "before") outcome.before = v;
        else if (v.phase === "after") outcome.after = v;
        else if (v.phase === "closed") outcome.closed = v;
        else if (v.phase === "progress") {
          outcome.finished.add(v.done!);
          if (killAfter !== undefined && !outcome.killed && outcome.finished.size >= killAfter) {
            outcome.killed = true;
            outcome.killedAt = Date.now();
            child.kill("SIGKILL"); // mid-run: other runs of this host are in flight
          }
        }
      }
    });
    child.stderr.on("data", (d) => outcome.stderr += d);
    child.on("close", (code) => {
      outcome.code = code;
      resolve(outcome);
    });
  });
}

const home = tempDir("ac-soak-");
console.log(
  `soak: ${runs} runs × ~${hooks} hooks, ${hosts} hosts (${parallel} at once, ${concurrency} runs each at once), ` +
    `kill rate ${killRate}, seed ${seed}, home ${home}`,
);
const startState = homeState(home);
const started = performance.now();

// The runs, split among the hosts; a killed host's unfinished runs go to its restart.
const queue: Array<{ name: string; ids: number[]; restarts: number }> = [];
const per = Math.ceil(runs / hosts);
for (let h = 0; h < hosts; h++) {
  const ids = Array.from({ length: Math.min(per, runs - h * per) }, (_, k) => h * per + k);
  if (ids.length > 0) queue.push({ name: `h${h}`, ids, restarts: 0 });
}
const outcomes: HostOutcome[] = [];
let unfinished = 0;

// ---- the run ledger at each kill: the host's runs are there, cut off, and fresh -----
/** How far behind the ledger was when each killed host died, ms, by its last commit. */
const staleness: number[] = [];
let cutOffAtKill = 0;
let liveAtKill = 0;
function ledgerAtKill(out: HostOutcome): void {
  const store = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" });
  if (!store) return;
  try {
    const mine = store.listSync({ limit: Number.MAX_SAFE_INTEGER })
      .filter((v) => v.record.host.pid === out.pid && v.record.status === "live");
    for (const v of mine) {
      if (v.state === "cut-off") cutOffAtKill++;
      else liveAtKill++;
    }
    const last = Math.max(0, ...mine.map((v) => v.heartbeat?.at ?? v.record.updatedAt));
    if (mine.length > 0) staleness.push(out.killedAt! - last);
  } finally {
    store.closeSync();
  }
}
async function worker(): Promise<void> {
  for (;;) {
    const job = queue.shift();
    if (!job) return;
    const kill = job.restarts < MAX_RESTARTS - 1 && random() < killRate;
    const killAfter = kill ? 1 + Math.floor(random() * Math.max(1, job.ids.length - 1)) : undefined;
    const out = await runHost(home, job.name, job.ids, killAfter);
    outcomes.push(out);
    if (out.killed) ledgerAtKill(out);
    const left = job.ids.filter((i) => !out.finished.has(i));
    const status = out.killed ? `killed after ${out.finished.size} runs` : `exit ${out.code}`;
    console.log(
      `  ${job.name}: ${job.ids.length} runs, ${status}` +
        (out.code !== 0 && !out.killed
          ? `: ${out.stderr.trim().split("\n").slice(-3).join(" / ")}`
          : ""),
    );
    if (left.length > 0) {
      if (job.restarts + 1 < MAX_RESTARTS) {
        queue.push({
          name: `${job.name.split("r")[0]}r${job.restarts + 1}`,
          ids: left,
          restarts: job.restarts + 1,
        });
      } else unfinished += left.length;
    }
  }
}
await Promise.all(Array.from({ length: parallel }, worker));
const seconds = (performance.now() - started) / 1000;

// ---- what the files hold --------------------------------------------------------
const dir = path.join(home, "agent-checkpoints");
let torn = 0;
let ended = 0;
let cutOff = 0;
let resumed = 0;
const states = new Map<string, number>();
for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
  if (!name.endsWith(".md")) continue;
  const cp = readCheckpoint(path.join(dir, name));
  states.set(cp.state, (states.get(cp.state) ?? 0) + 1);
  if (cp.state !== "record" || !cp.record) {
    torn++;
    continue;
  }
  if (cp.record.end) ended++;
  else cutOff++;
  if ((cp.record.attempt ?? 1) > 1) resumed++;
}
let lines = 0;
let lost = 0;
const appendsDir = path.join(home, "appends");
const contents = new Map<string, string>();
for (const f of fs.existsSync(appendsDir) ? fs.readdirSync(appendsDir) : []) {
  for (const entry of fs.readFileSync(path.join(appendsDir, f), "utf8").split("\n")) {
    const tab = entry.indexOf("\t");
    if (tab === -1) continue;
    const file = entry.slice(0, tab);
    const line = entry.slice(tab + 1);
    lines++;
    let text = contents.get(file);
    if (text === undefined) {
      try {
        text = fs.readFileSync(path.join(dir, file), "utf8");
      } catch {
        text = "";
      }
      contents.set(file, text);
    }
    if (!text.includes(line + "\n")) lost++;
  }
}
const endState = homeState(home);

// ---- the figures ----------------------------------------------------------------
const mib = (n: number | undefined) => n === undefined ? "n/a" : fmtBytes(n);
console.log(`\nhosts (before → after the runs → after close()):`);
console.log("| host | runs | killed | heap | worker heap | RSS | open fds | slots |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
for (const o of outcomes) {
  const b = o.before;
  const a = o.after;
  const c = o.closed;
  const arrow = (k: keyof Figures, f: (n: number) => string) =>
    `${b ? f(b[k] as number) : "n/a"} → ${a ? f(a[k] as number) : "killed"}` +
    (c ? ` → ${f(c[k] as number)}` : "");
  console.log(
    `| ${o.name} | ${o.finished.size} | ${o.killed ? "yes" : "no"} | ${arrow("heap", mib)} | ${
      arrow("workerHeap", mib)
    } | ${arrow("rss", mib)} | ${arrow("fds", String)} | ${arrow("slots", String)} |`,
  );
}
const killed = outcomes.filter((o) => o.killed).length;
console.log(`\nhome, before → after:`);
console.log(`  checkpoint files: ${startState.files} → ${endState.files}`);
console.log(`  temporary files:  ${startState.temps} → ${endState.temps}`);
console.log(
  `  log: ${fmtBytes(startState.logBytes)} in ${startState.logFiles} files → ${
    fmtBytes(endState.logBytes)
  } in ${endState.logFiles} files`,
);
console.log(`\nchecks:`);
console.log(
  `  ${runs} runs in ${
    seconds.toFixed(0)
  } s, ${outcomes.length} host processes, ${killed} killed with SIGKILL`,
);
console.log(`  files by state: ${[...states].map(([k, v]) => `${k} ${v}`).join(", ")}`);
console.log(
  `  ended ${ended}, cut off ${cutOff}, resumed (attempt ≥ 2) ${resumed}, unfinished ${unfinished}`,
);
console.log(`  torn or unreadable files: ${torn}`);
console.log(`  agent lines appended: ${lines}, lost: ${lost}`);
// ---- what the run ledger holds ----------------------------------------------------
const ledger = openStore({ home, settings: { host_timeout_seconds: 30 }, mode: "read" });
const summary = ledger?.summarySync();
ledger?.closeSync();
const db = path.join(home, "agent-checkpoint", "runs.db");
const dbBytes = ["", "-wal", "-shm"].reduce(
  (n, ext) => n + (fs.existsSync(db + ext) ? fs.statSync(db + ext).size : 0),
  0,
);
console.log(
  `  run ledger: ${summary?.total ?? 0} runs (ended ${summary?.byState.ended ?? 0}, cut off ${
    summary?.byState["cut-off"] ?? 0
  }, live ${summary?.byState.live ?? 0}); ${fmtBytes(dbBytes)} (${
    Math.round(dbBytes / Math.max(1, runs))
  } B per run)`,
);
console.log(
  `  at each kill: ${cutOffAtKill} runs of the killed hosts in the ledger, cut off (${liveAtKill} shown live); ` +
    `the ledger's last commit before the kill: max ${
      Math.max(0, ...staleness)
    } ms ago (goal <= 2000)`,
);
const ledgerFailed = !summary || summary.total !== runs ||
  summary.byState.ended !== runs - unfinished ||
  liveAtKill > 0 || staleness.some((ms) => ms > 2000);
const failed = torn > 0 || lost > 0 || endState.temps > 0 || endState.files !== runs ||
  cutOff > 0 ||
  ledgerFailed;
console.log(failed ? "\nsoak: FAILED (see the checks above)" : "\nsoak: all checks passed");
if (!args.includes("--keep")) fs.rmSync(home, { recursive: true, force: true });
else console.log(`kept ${home}`);
process.exit(failed ? 1 : 0);
