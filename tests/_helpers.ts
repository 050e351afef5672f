/** Shared test helpers: temporary homes, config files, captured logs, child processes. */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { LogRecord } from "../log.ts";

/** A fresh, empty home directory. */
export function tempHome(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), "ac-test-"));
}

/** Write `<home>/config.yaml`. */
export function writeConfig(home: string, yaml: string): void {
  fs.writeFileSync(path.join(home, "config.yaml"), yaml);
}

/** A logger that keeps what it is given. */
export function captureLog(): { logger: (r: LogRecord) => void; records: LogRecord[] } {
  const records: LogRecord[] = [];
  return { logger: (r) => records.push(r), records };
}

/** Sleep without blocking the event loop. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Block this thread for `ms`, as a host stuck in one long synchronous call. */
export function blockFor(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Block this thread (no event loop) until `check` holds or `ms` passes, as a
 * host stuck in a long synchronous call that lasts until the watchdog has
 * acted; returns whether it held. Bounds lateness without demanding speed.
 */
export function blockUntil(check: () => boolean, ms = 20_000, everyMs = 10): boolean {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    blockFor(everyMs);
  }
  return check();
}

/**
 * Poll until `check` holds or `ms` passes; returns whether it held. The
 * default bound is generous (a worker thread's start on a loaded machine can
 * take seconds): it bounds lateness, and only a failing test waits it out.
 */
export async function waitFor(check: () => boolean, ms = 30_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    await sleep(10);
  }
  return check();
}

/** Whether these tests run under Deno (else Node, from the compiled package). */
export const underDeno = "Deno" in globalThis;

/**
 * The README: the repository's under Deno, the npm package's copy (the same
 * text) for the compiled tests in `npm/esm/tests/`.
 */
export const README = fileURLToPath(
  new URL(underDeno ? "../README.md" : "../../README.md", import.meta.url),
);

/** The reference the README links to, `docs/*.md` (copied into the npm package as well). */
export const DOCS = fileURLToPath(new URL(underDeno ? "../docs/" : "../../docs/", import.meta.url));

/** One page of the reference, `docs/<name>`. */
export function doc(name: string): string {
  return path.join(DOCS, name);
}

/** The README and every page of `docs/`, the Markdown a reader is shown. */
export function markdownFiles(): string[] {
  const pages = fs.readdirSync(DOCS).filter((f) => f.endsWith(".md")).sort();
  return [README, ...pages.map(doc)];
}

/** The file of a fixture script beside this one, in this runtime's extension. */
export function fixture(name: string): string {
  const ext = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
  return fileURLToPath(new URL(`./fixtures/${name}${ext}`, import.meta.url));
}

/** The command that runs a script in this runtime. */
export function scriptCommand(
  script: string,
  args: string[] = [],
  denoFlags: string[] = [],
): [string, string[]] {
  return underDeno
    ? [process.execPath, ["run", "-A", "--quiet", ...denoFlags, script, ...args]]
    : [process.execPath, [script, ...args]];
}

/** Run a script to its end; resolves with its exit code, output and wall time. */
export function runScript(
  script: string,
  args: string[] = [],
  options: {
    env?: Record<string, string>;
    timeoutMs?: number;
    cwd?: string;
    denoFlags?: string[];
  } = {},
): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  const [cmd, argv] = scriptCommand(script, args, options.denoFlags);
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, argv, {
      cwd: options.cwd ?? process.cwd(),
      env: { ...process.env, ...options.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => stdout += d);
    child.stderr.on("data", (d) => stderr += d);
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 60_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/**
 * Another process holding a run ledger locked (see `fixtures/ledger_locker.ts`):
 * `exclusive` lets nobody open, read or write it, `write` lets readers on.
 * `locked` resolves once it holds the lock; `release()` lets go (else it does
 * after `ms`, when `ms` > 0) and resolves when the process has exited.
 */
export function locker(file: string, mode: "exclusive" | "write", ms = 0): {
  locked: Promise<void>;
  released: Promise<void>;
  release: () => Promise<void>;
} {
  const [cmd, argv] = scriptCommand(fixture("ledger_locker"), [file, String(ms), mode]);
  const child = spawn(cmd, argv, { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => out += d);
  child.stderr.on("data", (d) => err += d);
  const exited = new Promise<void>((resolve) => child.on("close", () => resolve()));
  const locked = (async () => {
    const held = await Promise.race([
      waitFor(() => /locked/.test(out), 40_000),
      exited.then(() => /locked/.test(out)),
    ]);
    if (!held) throw new Error(`the locker did not take the lock: ${err}`);
  })();
  return {
    locked,
    released: exited,
    release: () => {
      child.stdin.end();
      return exited;
    },
  };
}

/** What the tests read of the watchdog's progress: the shared run table. */
export interface WatchdogProgress {
  looks(): number;
  settingsSeen(): number;
  wakesServed(): number;
  wake(): number;
}

/**
 * Wake the watchdog and resolve once it has completed `count` more looks at
 * the run table, the last of them begun after this function's last wake (a
 * look weighs every run whose moment has come, and flushes its writes): what
 * it has not written by then it will not write without a new reason, so an
 * absence is checked over looks, not wall time. False when the looks did not
 * come within `ms`.
 */
export async function watchdogLooks(
  table: WatchdogProgress,
  count = 2,
  ms = 30_000,
): Promise<boolean> {
  const start = table.looks();
  let wakes = -Infinity;
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const served = table.wakesServed() >= wakes;
    if (served && table.looks() - start >= count) return true;
    if (served) wakes = table.wake();
    await sleep(5);
  }
  return false;
}

/**
 * Resolve once the watchdog has looked with settings newer than version
 * `before` (it reloads `config.yaml` at its polls); false after `ms`.
 */
export function watchdogReloaded(
  table: WatchdogProgress,
  before: number,
  ms = 30_000,
): Promise<boolean> {
  return waitFor(() => table.settingsSeen() > before, ms);
}
