/**
 * A supervised command's process group: signalling all of it, and telling
 * whether anything in it still runs.
 *
 * @module
 */
import * as fs from "node:fs";
import process from "node:process";
import { readdirIfThere, readTextIfThere, statSyncIfThere } from "../_file_ops.ts";

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
  return sendSignal(process.platform === "win32" ? pgid : -pgid, signal);
}

/** Send `signal` to `pid` (a negative one: its group); false when it could not be sent. */
function sendSignal(pid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(pid, signal);
    return true;
  } catch {
    // the process is gone (or not ours): false is the answer
    return false;
  }
}

const hasProc = statSyncIfThere("/proc/self/stat")?.isFile() ?? false;

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
  const names = readdirIfThere("/proc");
  if (names === undefined) return true;
  for (const name of names) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    const fields = statFields(Number(name));
    if (fields === undefined) continue; // gone while we looked
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
    const state = statFields(pid)?.[0];
    return state !== undefined && state !== "Z" && state !== "X";
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** A /proc/<pid>/stat line's fields after the command name: state is [0], ppid [1], pgrp [2], start time [19]. */
function statFields(pid: number): string[] | undefined {
  // Undefined: gone, or no /proc. The command name (comm) may hold spaces and parentheses.
  const stat = readTextIfThere(`/proc/${pid}/stat`, "latin1");
  return stat?.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** The children of `pid`, from /proc/<pid>/task/<tid>/children; undefined where the kernel has no such file. */
function childrenOf(pid: number): number[] | undefined {
  const tasks = readdirIfThere(`/proc/${pid}/task`);
  if (tasks === undefined) return []; // gone while we looked
  const children: number[] = [];
  for (const tid of tasks) {
    let text: string;
    try {
      text = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, "latin1");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT" && tid === String(pid)) {
        return fs.existsSync(`/proc/${pid}`) ? undefined : [];
      }
      continue;
    }
    for (const child of text.split(" ")) if (child !== "" && child !== "\n") children.push(+child);
  }
  return children;
}

/** Every process's parent, from a scan of /proc: the way when there are no children files. */
function parentsByScan(): Map<number, number[]> {
  const byParent = new Map<number, number[]>();
  // No /proc: nothing to find.
  for (const name of readdirIfThere("/proc") ?? []) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    const ppid = Number(statFields(Number(name))?.[1]);
    if (!(ppid > 0)) continue;
    const list = byParent.get(ppid);
    if (list) list.push(Number(name));
    else byParent.set(ppid, [Number(name)]);
  }
  return byParent;
}

/**
 * The processes a command started that may have left its process group
 * (`setsid`, `setpgid`), found through their parent links on Linux (/proc).
 * `record()` walks the tree under the command and under every process seen
 * before, remembering each process by its id and start time (so that a
 * reused id is never taken for it); `outside()` lists those remembered that
 * still run outside the command's group. A process whose parent ended before
 * any walk saw it (a double fork, reparented to init or a subreaper in
 * between) is not found. Elsewhere it finds nothing.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { spawn } from "node:child_process";
 * import process from "node:process";
 * import { Descendants, processAlive, signalGroup } from "./_group.ts";
 *
 * const child = spawn("sh", ["-c", "setsid sleep 30 & wait"], { detached: true, stdio: "ignore" });
 * await new Promise((resolve) => child.once("spawn", resolve));
 * const tree = new Descendants(child.pid!);
 * let escaped: number[] = [];
 * for (let i = 0; i < 500 && escaped.length === 0; i++) {
 *   await new Promise((resolve) => setTimeout(resolve, 10));
 *   tree.record();
 *   escaped = tree.outside();
 * }
 * if (process.platform === "linux") assert.equal(escaped.length, 1);
 * tree.signal("SIGKILL");
 * signalGroup(child.pid!, "SIGKILL");
 * await new Promise((resolve) => child.once("exit", resolve));
 * for (let i = 0; i < 500 && escaped.some(processAlive); i++) {
 *   await new Promise((resolve) => setTimeout(resolve, 10));
 * }
 * assert.ok(!escaped.some(processAlive));
 * ```
 */
export class Descendants {
  /** Start time of each process seen, by id. */
  readonly #seen = new Map<number, string>();
  readonly #root: number;
  readonly #pgid: number;

  /**
   * @param root The command's process id.
   * @param pgid Its process group. @default {root}
   */
  constructor(root: number, pgid = root) {
    this.#root = root;
    this.#pgid = pgid;
  }

  /** Walk the tree now, remembering every descendant found. Never throws. */
  record(): void {
    if (!hasProc || process.platform === "win32") return;
    try {
      const queue = [this.#root, ...this.#live().keys()];
      let byScan: Map<number, number[]> | undefined;
      const done = new Set<number>();
      while (queue.length > 0) {
        const pid = queue.pop() as number;
        if (done.has(pid)) continue;
        done.add(pid);
        let children = byScan ? byScan.get(pid) ?? [] : childrenOf(pid);
        if (children === undefined) children = (byScan = parentsByScan()).get(pid) ?? [];
        for (const child of children) {
          const start = statFields(child)?.[19];
          if (start === undefined) continue;
          if (!this.#seen.has(child)) this.#seen.set(child, start);
          queue.push(child);
        }
      }
    } catch { /* a walk is a best effort */ }
  }

  /** The processes seen that still run (same start time, not a zombie), with their fields. */
  #live(): Map<number, string[]> {
    const live = new Map<number, string[]>();
    for (const [pid, start] of this.#seen) {
      const fields = statFields(pid);
      if (!fields || fields[19] !== start || fields[0] === "Z" || fields[0] === "X") {
        this.#seen.delete(pid);
      } else live.set(pid, fields);
    }
    return live;
  }

  /** The processes seen that still run outside the command's group. */
  outside(): number[] {
    const out: number[] = [];
    for (const [pid, fields] of this.#live()) if (Number(fields[2]) !== this.#pgid) out.push(pid);
    return out;
  }

  /** Send `signal` to each of {@linkcode outside}; the ids signalled. */
  signal(signal: NodeJS.Signals): number[] {
    const sent: number[] = [];
    // Not sent: gone in between.
    for (const pid of this.outside()) if (sendSignal(pid, signal)) sent.push(pid);
    return sent;
  }
}
