/**
 * A supervised command's process group: signalling all of it, and telling
 * whether anything in it still runs.
 *
 * @module
 */
import * as fs from "node:fs";
import process from "node:process";

/**
 * Send `signal` to every process in the group led by `pgid`; false when
 * there was none left to signal. On Windows, where there are no process
 * groups, only the leader gets it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { spawn } from "node:child_process";
 * import { groupAlive, signalGroup } from "./_group.ts";
 *
 * const child = spawn("sh", ["-c", "sleep 30 & sleep 30"], { detached: true, stdio: "ignore" });
 * await new Promise((resolve) => child.once("spawn", resolve));
 * assert.ok(signalGroup(child.pid!, "SIGKILL"));
 * await new Promise((resolve) => child.once("exit", resolve));
 * for (let i = 0; i < 200 && groupAlive(child.pid!); i++) {
 *   await new Promise((resolve) => setTimeout(resolve, 10));
 * }
 * assert.equal(groupAlive(child.pid!), false);
 * ```
 */
export function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(process.platform === "win32" ? pgid : -pgid, signal);
    return true;
  } catch {
    return false;
  }
}

const hasProc = (() => {
  try {
    return fs.statSync("/proc/self/stat").isFile();
  } catch {
    return false;
  }
})();

/**
 * Whether a process of the group led by `pgid` still runs. A zombie does not
 * count: where nothing reaps orphans (a container whose first process is not
 * an init), a killed grandchild stays a zombie for good. Linux is asked
 * through /proc; elsewhere a signal 0 answers, zombies included.
 */
export function groupAlive(pgid: number): boolean {
  // No process at all, zombies included: the cheap answer, and the usual one.
  if (!signalGroup(pgid, 0)) return false;
  if (!hasProc || process.platform === "win32") return true;
  let names: string[];
  try {
    names = fs.readdirSync("/proc");
  } catch {
    return true;
  }
  for (const name of names) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    let stat: string;
    try {
      stat = fs.readFileSync(`/proc/${name}/stat`, "latin1");
    } catch {
      continue; // gone while we looked
    }
    // pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[2]) === pgid && fields[0] !== "Z" && fields[0] !== "X") return true;
  }
  return false;
}

/**
 * Whether process `pid` still runs (a zombie does not), for tests and benchmarks.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import process from "node:process";
 * import { processAlive } from "./_group.ts";
 *
 * assert.ok(processAlive(process.pid));
 * ```
 */
export function processAlive(pid: number): boolean {
  if (hasProc && process.platform !== "win32") {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, "latin1");
      const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
      return state !== "Z" && state !== "X";
    } catch {
      return false;
    }
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
