/**
 * Lock files shared by the processes that use one snapshot store: a lock per
 * project (snapshots of one project are serialized, with a bounded wait), and
 * the store's prune lock and in-flight writer marks (pruning never deletes
 * the objects of a snapshot still being written).
 *
 * A lock file holds its owner: pid, the process's start time (where the OS
 * tells it) and host name. A lock whose owner is gone is stale and is taken
 * over; a pid reused by another process does not keep a lock alive.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { parseJsonIfValid, readTextIfThere, statSyncIfThere } from "../_file_ops.ts";

/** Who holds a lock. */
export interface LockOwner {
  pid: number;
  /** The process's start time as the OS gives it (Linux: clock ticks after boot). */
  start?: string;
  host: string;
}

/** A lock that stayed held by a live process for longer than the wait allowed. */
export class LockTimeout extends Error {}

/** The start time of a process, where the OS tells it (Linux); undefined elsewhere. */
export function processStart(pid: number): string | undefined {
  const stat = readTextIfThere(`/proc/${pid}/stat`);
  // Field 22, counted after the command name, which may hold spaces and parentheses.
  return stat?.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
}

let self: LockOwner | undefined;

/** This process as a lock owner. */
export function me(): LockOwner {
  if (self === undefined || self.pid !== process.pid) {
    const start = processStart(process.pid);
    self = { pid: process.pid, host: os.hostname(), ...(start === undefined ? {} : { start }) };
  }
  return self;
}

/** Whether a lock's owner still runs (an owner on another host is taken to run). */
export function ownerAlive(owner: LockOwner): boolean {
  if (owner.host !== os.hostname()) return true;
  if (owner.pid === process.pid) return owner.start === me().start;
  try {
    process.kill(owner.pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  if (owner.start === undefined) return true;
  const start = processStart(owner.pid);
  return start === undefined || start === owner.start;
}

/** The owner written in a lock file; null when the file is gone, undefined when unreadable. */
export function readOwner(file: string): LockOwner | null | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT" ? null : undefined;
  }
  const o = parseJsonIfValid(text) as Partial<LockOwner> | null | undefined; // torn or foreign
  if (typeof o?.pid === "number" && typeof o?.host === "string") return o as LockOwner;
  return undefined;
}

/** Block this thread for `ms` (a snapshot is synchronous: the tool runs right after it). */
export function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Create `file` holding this process as owner, atomically and only if absent. */
function create(file: string): boolean {
  const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(me()));
  try {
    fs.linkSync(tmp, file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

/** A lock file no other process can hold at the same time. */
export class FileLock {
  #held = false;
  /** @param file The lock file. @param log Told when a stale lock is taken over. */
  constructor(readonly file: string, readonly log: (message: string) => void = () => {}) {}

  /** Whether this object holds the lock. */
  get held(): boolean {
    return this.#held;
  }

  /** Take the lock if it is free or stale; false when a live process holds it. */
  tryAcquire(): boolean {
    if (this.#held) return true;
    fs.mkdirSync(path.dirname(this.file), { recursive: true });
    if (create(this.file)) return this.#held = true;
    const owner = readOwner(this.file);
    if (owner === null) return this.tryAcquire();
    // An unreadable owner is one killed between creating its temporary file
    // and linking it (impossible: the link is atomic) or a foreign file; only
    // age tells such a lock stale.
    const stale = owner === undefined ? this.#older(60_000) : !ownerAlive(owner);
    if (!stale || !this.#breakStale(owner)) return false;
    this.log(
      `took over the lock ${this.file}, left by ${
        owner ? `process ${owner.pid}, which is gone` : "an unknown process"
      }`,
    );
    return this.tryAcquire();
  }

  /**
   * Take the lock, waiting up to `waitMs` while a live process holds it.
   *
   * @throws {LockTimeout} When it stays held for longer.
   */
  acquire(waitMs: number): void {
    const end = Date.now() + waitMs;
    for (let delay = 2; !this.tryAcquire(); delay = Math.min(delay * 2, 50)) {
      if (Date.now() >= end) {
        const owner = readOwner(this.file);
        throw new LockTimeout(
          `${this.file} is held by ${
            owner ? `process ${owner.pid}` : "another process"
          } for more than ${waitMs < 1000 ? `${waitMs} ms` : `${Math.round(waitMs / 1000)} s`}`,
        );
      }
      pause(delay);
    }
  }

  /** Release the lock (a no-op unless held). */
  release(): void {
    if (!this.#held) return;
    this.#held = false;
    const owner = readOwner(this.file);
    if (owner && owner.pid === process.pid && owner.host === me().host) {
      fs.rmSync(this.file, { force: true });
    }
  }

  #older(ms: number): boolean {
    const st = statSyncIfThere(this.file);
    return st !== undefined && Date.now() - st.mtimeMs > ms;
  }

  /**
   * Remove a stale lock. Breakers take a short lock of their own first, so
   * that two waiters who both saw the same stale owner cannot remove a lock
   * the first of them has taken since.
   */
  #breakStale(seen: LockOwner | undefined): boolean {
    const breaker = `${this.file}.break`;
    if (!create(breaker)) {
      // Breaking takes microseconds: a break lock older than that was left by a kill.
      try {
        if (Date.now() - fs.statSync(breaker).mtimeMs > 10_000) fs.rmSync(breaker, { force: true });
      } catch { /* gone, or not ours to remove */ }
      return false;
    }
    try {
      const now = readOwner(this.file);
      if (JSON.stringify(now) !== JSON.stringify(seen) && now !== null) return false;
      fs.rmSync(this.file, { force: true });
      return true;
    } finally {
      fs.rmSync(breaker, { force: true });
    }
  }
}

/** Whether a lock file is held by a live process. */
export function isHeld(file: string): boolean {
  const owner = readOwner(file);
  if (owner === null) return false;
  return owner === undefined || ownerAlive(owner);
}
