/**
 * Benchmark of the supervisor's hard stop: from the deadline to the command's
 * death, and to the record on disk, against GNU `timeout` killing the same
 * command in the same run. Figures are percentiles over the runs, never a
 * pass/fail on a shared, noisy machine.
 *
 *   deno run -A scripts/bench_deadline.ts [--runs 30] [--deadline 0.3]
 *
 * A second table splits the supervisor's time into its steps, each measured
 * on its own, and times a command that exits at once.
 *
 * The supervisor runs in this process (`supervise()`), so its figures start at
 * its own deadline. `timeout` runs as a child: its figures start at the moment
 * it was spawned plus the same deadline, so they include its exec (about a
 * millisecond), a small handicap noted in the table.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { spawn, spawnSync } from "node:child_process";
import { supervise } from "../supervise/mod.ts";
import { Descendants, groupAlive, signalGroup } from "../supervise/_group.ts";

const arg = (name: string, fallback: number) => {
  const at = process.argv.indexOf(name);
  const value = at === -1 ? NaN : Number(process.argv[at + 1]);
  return Number.isFinite(value) && value > 0 ? value : fallback;
};
const wall = () => performance.timeOrigin + performance.now();
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};
const quiet = { write: () => true };

/** One supervised `sleep 60` cut off at the deadline: ms to its death and to the record. */
async function supervisorOnce(home: string, deadline: number) {
  const r = await supervise({
    command: ["sleep", "60"],
    deadlineSeconds: deadline,
    graceSeconds: 10,
    home,
    stdin: "ignore",
    stdout: quiet,
    stderr: quiet,
    forwardSignals: false,
    notice: () => {},
  });
  if (r.exitCode !== 124 || r.goneAt === undefined || r.writtenAt === undefined) {
    throw new Error(`unexpected supervisor result: ${JSON.stringify(r)}`);
  }
  return { death: r.goneAt - r.deadlineAt!, record: r.writtenAt - r.deadlineAt! };
}

/** One `timeout DEADLINE sleep 60`: ms from its deadline to its exit. */
function timeoutOnce(deadline: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = wall();
    const child = spawn("timeout", [String(deadline), "sleep", "60"], { stdio: "ignore" });
    child.once("error", reject);
    child.once("exit", (code) => {
      if (code !== 124) reject(new Error(`timeout exited ${code}`));
      else resolve(wall() - started - deadline * 1000);
    });
  });
}

/** Runs the comparison and returns the table's rows (also printed). */
export async function benchDeadline(runs = 30, deadline = 0.3): Promise<string[][]> {
  const haveTimeout = spawnSync("timeout", ["--version"], { stdio: "ignore" }).status === 0;
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-deadline-"));
  const death: number[] = [];
  const record: number[] = [];
  const gnu: number[] = [];
  for (let i = 0; i < runs; i++) {
    const s = await supervisorOnce(home, deadline);
    death.push(s.death);
    record.push(s.record);
    if (haveTimeout) gnu.push(await timeoutOnce(deadline));
  }
  const ms = (x: number) => `${x.toFixed(1)} ms`;
  const rows = [
    ["from the deadline to", "p50", "p99", "max"],
    [
      "supervisor: command's group gone",
      ms(pct(death, 50)),
      ms(pct(death, 99)),
      ms(Math.max(...death)),
    ],
    [
      "supervisor: record on disk",
      ms(pct(record, 50)),
      ms(pct(record, 99)),
      ms(Math.max(...record)),
    ],
  ];
  if (haveTimeout) {
    rows.push([
      "GNU timeout: timeout(1) exited (incl. its exec)",
      ms(pct(gnu, 50)),
      ms(pct(gnu, 99)),
      ms(Math.max(...gnu)),
    ]);
  } else rows.push(["GNU timeout: not installed", "-", "-", "-"]);
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  console.log(
    `\n## The hard stop: \`sleep 60\` under a ${deadline}s deadline, ${runs} runs each, interleaved`,
  );
  for (const r of rows) console.log(r.map((cell, c) => cell.padEnd(widths[c]!)).join("  |  "));
  fs.rmSync(home, { recursive: true, force: true });
  return rows;
}

/** A detached `sleep 60`, started. */
async function sleeper() {
  const child = spawn("sleep", ["60"], { detached: true, stdio: "ignore" });
  await new Promise((resolve) => child.once("spawn", resolve));
  return child;
}

/**
 * Where the supervisor's deadline-to-gone time goes, step by step, each
 * measured on its own: the deadline timer's lateness, the process-tree walk
 * (for what left the group), the group's SIGTERM to the child's `exit` event,
 * and the group check after it. And the cost of a command that exits at once
 * (`true`), from the call to the result.
 */
export async function benchSteps(runs = 30, deadline = 0.3): Promise<string[][]> {
  const late: number[] = [];
  const walk: number[] = [];
  const exitEvent: number[] = [];
  const check: number[] = [];
  const quick: number[] = [];
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "ac-bench-steps-"));
  for (let i = 0; i < runs; i++) {
    const asked = wall();
    await new Promise((resolve) => setTimeout(resolve, deadline * 1000));
    late.push(wall() - asked - deadline * 1000);

    const child = await sleeper();
    const pgid = child.pid!;
    const tree = new Descendants(pgid);
    let t = wall();
    tree.record();
    walk.push(wall() - t);
    const exited = new Promise((resolve) => child.once("exit", resolve));
    t = wall();
    signalGroup(pgid, "SIGTERM");
    await exited;
    exitEvent.push(wall() - t);
    t = wall();
    groupAlive(pgid);
    check.push(wall() - t);

    t = wall();
    await supervise({
      command: ["true"],
      home,
      stdin: "ignore",
      stdout: quiet,
      stderr: quiet,
      forwardSignals: false,
      notice: () => {},
    });
    quick.push(wall() - t);
  }
  fs.rmSync(home, { recursive: true, force: true });
  const ms = (x: number) => `${x.toFixed(2)} ms`;
  const row = (name: string, xs: number[]) => [name, ms(pct(xs, 50)), ms(pct(xs, 99))];
  const rows = [
    ["step", "p50", "p99"],
    row(`deadline timer's lateness (${deadline}s timer)`, late),
    row("process-tree walk (Descendants.record)", walk),
    row("group SIGTERM -> child's exit event", exitEvent),
    row("group check once gone (groupAlive)", check),
    row("supervise(['true']), call to result", quick),
  ];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  console.log(`\n## Where the time goes, ${runs} runs each`);
  for (const r of rows) console.log(r.map((cell, c) => cell.padEnd(widths[c]!)).join("  |  "));
  return rows;
}

if (import.meta.main) {
  await benchDeadline(arg("--runs", 30), arg("--deadline", 0.3));
  await benchSteps(arg("--runs", 30), arg("--deadline", 0.3));
}
