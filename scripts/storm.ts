/**
 * The SIGKILL storm (not in CI): host processes sharing one home, each holding LIVE live runs
 * (a model call each about once a second) and starting a short run every EVERY ms (start → a
 * model call with its usage → its checkpoint file → end `done`), are SIGKILLed at random
 * moments, KILLS times in all, a new host taking each killed one's place (HOSTS at a time).
 * Then it checks what a kill must never cost: every run started more than 1 s before its
 * host's kill is in the run ledger with its last status (`done` once its end() had returned,
 * else `live`); no checkpoint file is torn and no temporary file is left; no ledger row names a
 * checkpoint file that is not there.
 * It prints the figures.
 *
 *   deno task storm [--kills 30] [--hosts 2] [--live 200] [--every 50] [--seed N]
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
import { readCheckpoint } from "../persist.ts";
import { flag, runtime, sleep, tempDir } from "./_bench_util.ts";

const args = process.argv.slice(2);
const kills = Number(flag(args, "--kills", "30"));
const hosts = Number(flag(args, "--hosts", "2"));
const live = Number(flag(args, "--live", "200"));
const every = Number(flag(args, "--every", "50"));
let seed = Number(flag(args, "--seed", String(Date.now() % 100_000)));
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
};
/** How long a start or end may take to be durable: the ledger's promise. */
const DURABLE_MS = 1000;

const home = tempDir("ac-storm-");
const host = fileURLToPath(new URL("../tests/fixtures/storm_host.ts", import.meta.url));

interface Said {
  event: string;
  runId?: string;
  at?: number;
  live?: number;
  level?: string;
  message?: string;
}
interface Killed {
  pid: number;
  said: Said[];
  killedAt: number;
}

/** One host's life: started, SIGKILLed at a random moment 1–6 s into its short runs. */
async function oneHost(): Promise<Killed> {
  const child = spawn(runtime, ["run", "-A", "--quiet", host, home, String(live), String(every)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const said: Said[] = [];
  let rest = "";
  child.stdout.on("data", (d) => {
    const lines = (rest + d).split("\n");
    rest = lines.pop()!;
    for (const line of lines) if (line.trim()) said.push(JSON.parse(line));
  });
  child.stderr.on("data", (d) => process.stderr.write(d));
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  const until = Date.now() + 120_000;
  while (!said.some((s) => s.event === "end") && Date.now() < until) await sleep(20);
  await sleep(1000 + random() * 5000);
  const killedAt = Date.now();
  child.kill("SIGKILL");
  await exited;
  return { pid: child.pid!, said, killedAt };
}

const started = Date.now();
const killed: Killed[] = [];
let left = kills;
await Promise.all(Array.from({ length: hosts }, async () => {
  while (left > 0) {
    left--;
    const k = await oneHost();
    killed.push(k);
    process.stdout.write(`  kill ${killed.length}/${kills}: pid ${k.pid}\n`);
  }
}));
const seconds = (Date.now() - started) / 1000;

// ---- what the ledger holds --------------------------------------------------------
const store = openStore({ home, settings: { host_timeout_seconds: 30 } });
if (!store) {
  console.error("no run ledger to check (no SQLite driver?)");
  process.exit(1);
}
const views = store.listSync({ limit: 1_000_000 });
store.closeSync();
const rows = new Map(views.map((v) => [v.record.runId, v.record]));
let shortStarted = 0;
let shortEnded = 0;
let checked = 0;
let missing = 0;
let wrongStatus = 0;
let lockedLines = 0;
let liveChecked = 0;
let liveMissing = 0;
const examples: string[] = [];
const lockedSeen = new Set<string>();
for (const k of killed) {
  const ends = new Map<string, number>();
  for (const s of k.said) if (s.event === "end") ends.set(s.runId!, s.at!);
  for (const s of k.said) {
    if (s.event === "log" && /locked|busy/i.test(s.message ?? "")) {
      lockedLines++;
      if (lockedSeen.size < 5) lockedSeen.add(s.message!.replace(/\d+/g, "N"));
    }
    if (s.event === "ready" && k.killedAt - s.at! > DURABLE_MS) {
      for (let i = 0; i < s.live!; i++) {
        liveChecked++;
        if (!rows.has(`live-${k.pid}-${i}`)) liveMissing++;
      }
    }
    if (s.event !== "start") continue;
    shortStarted++;
    const endedAt = ends.get(s.runId!);
    if (endedAt !== undefined) shortEnded++;
    if (k.killedAt - s.at! <= DURABLE_MS) continue;
    checked++;
    const row = rows.get(s.runId!);
    // Its last status: done once end() returned over a second before the kill.
    const want = endedAt !== undefined && k.killedAt - endedAt > DURABLE_MS ? "done" : undefined;
    if (!row) {
      missing++;
      if (examples.length < 10) {
        examples.push(
          `${s.runId} started ${k.killedAt - s.at!} ms before the kill: not in the ledger`,
        );
      }
    } else if (want && row.status !== want) {
      wrongStatus++;
      if (examples.length < 10) {
        examples.push(
          `${s.runId} ended ${k.killedAt - endedAt!} ms before the kill: reads ${row.status}`,
        );
      }
    }
  }
}

// ---- what the files hold ----------------------------------------------------------
const dir = path.join(home, "agent-checkpoints");
const names = fs.existsSync(dir) ? fs.readdirSync(dir) : [];
let files = 0;
let torn = 0;
const temps = names.filter((n) => !n.endsWith(".md")).length;
for (const name of names) {
  if (!name.endsWith(".md")) continue;
  files++;
  const cp = readCheckpoint(path.join(dir, name));
  if (cp.state !== "record" || !cp.record) torn++;
}
let written = 0;
let namingMissing = 0;
for (const v of views) {
  if (v.record.fileState !== "written" || v.record.checkpointFile === undefined) continue;
  written++;
  if (!fs.existsSync(v.record.checkpointFile)) namingMissing++;
}

console.log(
  `SIGKILL storm: ${killed.length} kills in ${
    seconds.toFixed(0)
  } s, ${hosts} hosts at a time, ${live} live runs each, a short run every ${every} ms (home ${home})`,
);
console.log(`  short runs: ${shortStarted} started, ${shortEnded} ended before their host's kill`);
console.log(
  `  short runs started > ${DURABLE_MS} ms before the kill: ${checked}; missing from the ledger: ${missing}; without their last status: ${wrongStatus}`,
);
console.log(
  `  live runs of hosts up > ${DURABLE_MS} ms before the kill: ${liveChecked}; missing: ${liveMissing}`,
);
console.log(
  `  ledger rows: ${views.length}; naming a written file: ${written}; naming a missing file: ${namingMissing}`,
);
console.log(`  checkpoint files: ${files}; torn: ${torn}; temporary files left: ${temps}`);
console.log(`  "database is locked" lines from the hosts: ${lockedLines}`);
for (const line of lockedSeen) console.log(`    ${line}`);
for (const e of examples) console.log(`    ${e}`);
const failed = missing > 0 || wrongStatus > 0 || liveMissing > 0 || torn > 0 || temps > 0 ||
  namingMissing > 0;
console.log(failed ? "FAILED" : "ok");
if (!failed) fs.rmSync(home, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
