/**
 * The fault soak (`deno task soak --faults`): a host process with RUNS live
 * runs for MINUTES while this process, in turn, holds the run ledger locked,
 * deletes it, damages a page of it, fills the disk under the home (a small
 * tmpfs mounted for it; the step is skipped, said so, when no tmpfs can be
 * mounted) and frees it. After each fault it measures how long the ledger
 * took to show every run again; at the end, that every run is in the ledger
 * with its exact final turns, live, and then ended once the host ends them,
 * and that every run's checkpoint file holds the tier its turns crossed
 * (files written while the disk was full are written once it is not).
 *
 *   deno task soak --faults [--minutes 10] [--runs 100] [--disk 16m]
 *
 * Exits 1 when a check fails.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { openSqliteStore, storeFile } from "../store/sqlite.ts";
import type { RunView } from "../store/types.ts";
import { sqliteDriver } from "../_sqlite.ts";
import { readCheckpoint } from "../persist.ts";
import { loadSettings } from "../config.ts";
import { tierFor, tierPlan } from "../tier.ts";
import { flag, runtime, sleep, tempDir } from "./_bench_util.ts";

const HOST = fileURLToPath(new URL("./_soak_faults_host.ts", import.meta.url));
const LOCKER = fileURLToPath(new URL("../tests/fixtures/ledger_locker.ts", import.meta.url));
const deno = process.execPath.includes("deno");
const script = (file: string, rest: string[]) =>
  deno ? ["run", "-A", file, ...rest] : [file, ...rest];

/** Every run's newest attempt in the ledger, as a reader sees it; undefined when unreadable now. */
function ledger(home: string): Map<string, RunView> | undefined {
  try {
    const store = openSqliteStore({ file: storeFile(home), hostTimeoutSeconds: 30, mode: "read" });
    try {
      return new Map(store.listSync({ limit: 100_000 }).map((v) => [v.record.runId, v]));
    } finally {
      store.closeSync();
    }
  } catch {
    return undefined;
  }
}

/** Run the fault soak; resolves with its exit code. */
export async function soakFaults(args: string[]): Promise<number> {
  const minutes = Number(flag(args, "--minutes", "10"));
  const runs = Number(flag(args, "--runs", "100"));
  const diskSize = flag(args, "--disk", "16m")!;
  const home = tempDir("ac-soak-faults-");
  let mounted = false;
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${diskSize}`, "tmpfs", home], {
      stdio: "pipe",
    });
    mounted = true;
  } catch (error) {
    console.log(
      `  (no tmpfs could be mounted at ${home}: ${
        String(error).split("\n")[0]
      }; the disk-full fault is skipped)`,
    );
  }
  console.log(
    `fault soak: ${runs} live runs for ${minutes} min in ${home}${
      mounted ? ` (a ${diskSize} tmpfs)` : ""
    }; faults in turn: lock, delete, damaged page${mounted ? ", full disk" : ""}`,
  );
  const file = storeFile(home);
  // About one turn every 1.5 s each: a cap a little above that, so the runs cross both tiers.
  const cap = Math.max(10, Math.round((minutes * 60) / 1.5 * 1.1));
  const host: ChildProcess = spawn(
    runtime,
    script(HOST, [home, String(runs), String(Math.round(minutes * 60)), String(cap)]),
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  let final: Record<string, number> | undefined;
  let files: Record<string, string> = {};
  let closed = false;
  const logs: { level: string; message: string; at: number }[] = [];
  let buffer = "";
  host.stdout!.on("data", (d) => {
    buffer += d;
    for (let i = buffer.indexOf("\n"); i >= 0; i = buffer.indexOf("\n")) {
      const line = JSON.parse(buffer.slice(0, i));
      buffer = buffer.slice(i + 1);
      if (line.event === "log") logs.push(line);
      else if (line.event === "final") {
        final = line.turns;
        files = line.files;
      } else if (line.event === "closed") closed = true;
    }
  });
  const exited = new Promise((r) => host.on("close", r));
  const failures: string[] = [];
  const recovered: Record<string, number[]> = {};
  /** Wait (bounded) until the ledger shows every run live again; the time it took, ms. */
  const recovery = async (fault: string, since: number) => {
    const bound = since + 120_000;
    while (Date.now() < bound && final === undefined) {
      const all = ledger(home);
      // Every run there, live, and the host's commits landing again (its heartbeat is newer).
      const views = all ? [...all.values()] : [];
      if (
        all && all.size >= runs && views.every((v) => v.record.status === "live") &&
        views.some((v) => (v.heartbeat?.at ?? 0) > since)
      ) {
        (recovered[fault] ??= []).push(Date.now() - since);
        return;
      }
      await sleep(200);
    }
    if (final === undefined) failures.push(`${fault}: the ledger did not show every run again`);
  };
  const started = Date.now();
  const stop = started + minutes * 60_000;
  const steps = ["lock", "delete", "damage", ...(mounted ? ["full"] : [])];
  const counts: Record<string, number> = {};
  await recovery("start", started);
  for (let k = 0; Date.now() < stop - 20_000 && final === undefined; k++) {
    const step = steps[k % steps.length]!;
    counts[step] = (counts[step] ?? 0) + 1;
    let cleared = Date.now();
    if (step === "lock") {
      const locker = spawn(runtime, script(LOCKER, [file, "5000", "write"]), {
        stdio: ["pipe", "pipe", "inherit"],
      });
      await new Promise((r) => locker.on("close", r));
      cleared = Date.now();
    } else if (step === "delete") {
      for (const f of [file, `${file}-wal`, `${file}-shm`]) fs.rmSync(f, { force: true });
      cleared = Date.now();
    } else if (step === "damage") {
      // The log copied into the file first (bounded wait), so that the damaged page is read.
      try {
        const db = sqliteDriver()!.open(file, { readOnly: false });
        db.exec("PRAGMA busy_timeout = 5000");
        db.get("PRAGMA wal_checkpoint(TRUNCATE)");
        db.close();
      } catch { /* damaged as it is */ }
      const size = fs.statSync(file).size;
      const fd = fs.openSync(file, "r+");
      // Page 3 and on (4 KiB pages): the runs table's root and the pages after it.
      fs.writeSync(
        fd,
        Buffer.alloc(Math.min(16_384, Math.max(0, size - 8192)), 0xa5),
        0,
        undefined,
        8192,
      );
      fs.closeSync(fd);
      cleared = Date.now();
    } else if (step === "full") {
      const filler = path.join(home, "filler");
      const fd = fs.openSync(filler, "w");
      try {
        for (;;) fs.writeSync(fd, Buffer.alloc(64 * 1024, 1));
      } catch { /* full */ }
      try {
        for (;;) fs.writeSync(fd, Buffer.alloc(512, 1));
      } catch { /* to the last block */ }
      fs.closeSync(fd);
      await sleep(10_000);
      fs.rmSync(filler);
      cleared = Date.now();
    }
    await recovery(step, cleared);
    await sleep(Math.min(15_000, Math.max(0, stop - Date.now() - 20_000)));
  }
  while (final === undefined) await sleep(200);
  // Every run, live, with its exact final turns: within a bounded wait of the last hook.
  const last = Date.now();
  let exact = 0;
  let all: Map<string, RunView> | undefined;
  while (Date.now() - last < 60_000) {
    all = ledger(home);
    exact = Object.entries(final).filter(([id, turns]) =>
      all?.get(id)?.record.turnsUsed === turns && all.get(id)?.record.status === "live"
    ).length;
    if (exact === runs) {
      break;
    }
    await sleep(200);
  }
  const liveLag = Date.now() - last;
  if (exact !== runs) failures.push(`${runs - exact} run(s) live without their exact final turns`);
  host.stdin!.end();
  await exited;
  all = ledger(home);
  const ended =
    Object.entries(final).filter(([id, turns]) =>
      all?.get(id)?.record.turnsUsed === turns && all.get(id)?.record.status === "done"
    ).length;
  if (!closed) failures.push("the host did not close");
  if (ended !== runs) failures.push(`${runs - ended} run(s) not ended done with their final turns`);
  // Every run's file holds its end, at the tier its turns crossed.
  const plan = tierPlan({ turns: cap }, loadSettings({ home, env: {} }).settings);
  const byTier = [0, 0, 0];
  let filed = 0;
  for (const [id, turns] of Object.entries(final)) {
    const want = tierFor(plan, turns, 0);
    byTier[want]!++;
    const found = files[id] ? readCheckpoint(files[id]!) : undefined;
    if (found?.record?.tier === want && found.record.turnsUsed === turns) filed++;
  }
  if (filed !== runs) {
    failures.push(`${runs - filed} run(s) without their crossed tier in their file`);
  }
  const aside = fs.readdirSync(path.dirname(file)).filter((f) => /\.corrupt-[^-]*Z?$/.test(f));
  const dropped = logs.filter((l) => /dropped/.test(l.message));
  const byKind = (re: RegExp) => logs.filter((l) => re.test(l.message)).length;
  const totalTurns = Object.values(final).reduce((a, b) => a + b, 0);
  console.log(`  faults: ${Object.entries(counts).map(([k, n]) => `${k} ×${n}`).join(", ")}`);
  for (const [fault, ms] of Object.entries(recovered)) {
    console.log(
      `  ${fault}: every run in the ledger and its commits landing again ${
        ms.map((m) => `${(m / 1000).toFixed(1)}s`).join(", ")
      } after it was cleared`,
    );
  }
  console.log(
    `  at the end: ${exact}/${runs} live runs with their exact final turns (${totalTurns} turns in all) ${
      (liveLag / 1000).toFixed(1)
    }s after the last hook; ${ended}/${runs} ended done with them after close`,
  );
  console.log(
    `  files: ${filed}/${runs} hold the tier their turns crossed (${byTier[1]} at tier 1, ${
      byTier[2]
    } at tier 2, ${byTier[0]} below both; cap ${cap} turns)`,
  );
  console.log(
    `  host log: ${logs.length} lines (${byKind(/could not be written/)} failed commits said, ${
      byKind(/deleted|replaced/)
    } deleted/replaced, ${byKind(/damaged/)} damaged, ${byKind(/takes records again/)} recovered, ${
      byKind(/opened after/)
    } reopened); ${dropped.length} line(s) about dropped records; ${aside.length} damaged file(s) kept aside`,
  );
  if (mounted) {
    try {
      execFileSync("umount", ["-l", home], { stdio: "pipe" });
    } catch { /* left mounted */ }
  }
  if (failures.length > 0) {
    console.log(`FAILED: ${failures.join("; ")}`);
    return 1;
  }
  console.log("  all checks passed");
  return 0;
}
