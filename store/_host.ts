/**
 * This process as the ledger names it, and how another process of this
 * machine is told alive: its pid, and its start time so that a reused pid is
 * not taken for the process that had it.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import process from "node:process";
import { isMainThread } from "../_write_steps.ts";
import { tellNoHostName } from "../log.ts";
import type { HostId, Vantage } from "./types.ts";

let bootId: string | undefined;

/** The machine's boot id (Linux), so start times of two boots never match; empty elsewhere. */
function boot(): string {
  if (bootId === undefined) {
    try {
      bootId = fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    } catch {
      // no boot id on this system: the host is named without one
      bootId = "";
    }
  }
  return bootId;
}

/**
 * The start token of process `pid` of this machine: `null` when no such
 * process runs, `undefined` when the platform cannot tell (not Linux).
 *
 * @example
 * ```ts
 * import { processStart } from "./_host.ts";
 * import assert from "node:assert/strict";
 * import process from "node:process";
 *
 * if (process.platform === "linux") {
 *   assert.equal(typeof processStart(process.pid), "string");
 *   assert.equal(processStart(2 ** 22 + 1), null); // above Linux's pid limit
 * }
 * ```
 */
export function processStart(pid: number): string | null | undefined {
  if (!Number.isInteger(pid) || pid <= 0) return null;
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === "ENOENT" || code === "ESRCH") {
      return fs.existsSync("/proc/self/stat") ? null : alive(pid);
    }
    return undefined;
  }
  // The command name (field 2) may hold spaces and parentheses: fields count from its last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = fields[19]; // field 22, the start time in clock ticks since boot
  if (ticks === undefined || fields[0] === "Z") return fields[0] === "Z" ? null : undefined;
  return `${boot()}/${ticks}`;
}

/** Without `/proc`: whether a process of that pid runs; its start time is not known. */
function alive(pid: number): null | undefined {
  try {
    process.kill(pid, 0);
    return undefined;
  } catch (error) {
    return (error as { code?: string }).code === "ESRCH" ? null : undefined;
  }
}

let self: HostId | undefined;
/** The machine name the settings gave (`machine`), when they gave one. */
let named = "";

/**
 * Name this machine as the settings do (`machine`, or env
 * `AGENT_CHECKPOINT_MACHINE`): runs are recorded under that name, and a
 * record is this machine's when it names it. Empty: the host name.
 *
 * @example
 * ```ts
 * import { nameMachine, thisHost } from "./_host.ts";
 * import assert from "node:assert/strict";
 *
 * nameMachine("runner-7");
 * assert.equal(thisHost().machine, "runner-7");
 * nameMachine("");
 * ```
 */
export function nameMachine(name: unknown): void {
  const next = typeof name === "string" ? name.trim() : "";
  if (next === named) return;
  named = next;
  self = undefined;
}

/** The machine's name: the one the settings gave, else the environment's, else the host name. */
function machineName(): string {
  if (named !== "") return named;
  try {
    const env = process.env.AGENT_CHECKPOINT_MACHINE?.trim();
    if (env) return env;
  } catch { /* no access to the environment */ }
  try {
    return os.hostname();
  } catch (error) {
    // Only heartbeats tell its runs' state then: a limit the host is told of, by its own thread
    // (the library's threads find the same).
    if (isMainThread()) tellNoHostName(/--allow-sys/.test(String((error as Error)?.message)));
    return "";
  }
}

/**
 * This process: machine name (see {@linkcode nameMachine}), pid and start token.
 *
 * @example
 * ```ts
 * import { thisHost } from "./_host.ts";
 * import assert from "node:assert/strict";
 * import process from "node:process";
 *
 * assert.equal(thisHost().pid, process.pid);
 * ```
 */
export function thisHost(): HostId {
  if (self === undefined || self.pid !== process.pid) {
    self = { machine: machineName(), pid: process.pid, start: processStart(process.pid) ?? "" };
  }
  return self;
}

/**
 * Where a record is read from: this machine, now.
 *
 * @param hostTimeoutSeconds The heartbeat age past which a process is gone.
 * @param now Now, ms since the epoch.
 * @returns The vantage {@linkcode runState} needs.
 *
 * @example
 * ```ts
 * import { here } from "./_host.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(here(30, 0).hostTimeoutSeconds, 30);
 * ```
 */
export function here(hostTimeoutSeconds: number, now: number = Date.now()): Vantage {
  // One look per process per read: a listing names the same few processes many times.
  const seen = new Map<number, string | null | undefined>();
  const start = (pid: number) => {
    if (!seen.has(pid)) seen.set(pid, processStart(pid));
    return seen.get(pid);
  };
  return { now, hostTimeoutSeconds, machine: thisHost().machine, processStart: start };
}
