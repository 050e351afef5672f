/**
 * Small helpers shared by the benchmark scripts: statistics, formatting, a
 * shared clock, blocking the main thread, and child processes.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

/** Milliseconds on a clock every process on the machine shares (wall clock, high resolution). */
export const clock = (): number => performance.timeOrigin + performance.now();

/** Block this thread for `ms` without yielding to its event loop. */
export function blockFor(ms: number): void {
  if (ms > 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Block this thread until the shared clock reaches `at`. */
export function blockUntil(at: number): void {
  for (;;) {
    const left = at - clock();
    if (left <= 0) return;
    blockFor(Math.min(left, 50));
  }
}

/** Resolve after `ms`. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A new temporary directory. */
export const tempDir = (prefix = "ac-bench-"): string =>
  fs.mkdtempSync(path.join(os.tmpdir(), prefix));

/** The `p`-th percentile (nearest rank) of `xs`; NaN when empty. */
export function pct(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

/** The median of `xs`; NaN when empty. */
export const median = (xs: number[]): number => pct(xs, 50);

/** A number of milliseconds, readably. */
export function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return "n/a";
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  return `${ms.toFixed(1)} ms`;
}

/** Bytes, readably. */
export function fmtBytes(n: number): string {
  if (!Number.isFinite(n)) return "n/a";
  const a = Math.abs(n);
  if (a >= 1048576) return `${(n / 1048576).toFixed(1)} MiB`;
  if (a >= 1024) return `${(n / 1024).toFixed(2)} KiB`;
  return `${n.toFixed(0)} B`;
}

/** The value of `--name V` in `args`, or `fallback`. */
export function flag(args: string[], name: string, fallback?: string): string | undefined {
  const at = args.indexOf(name);
  return at === -1 || at + 1 >= args.length ? fallback : args[at + 1];
}

/** The runtime running this script: `deno` or `node`. */
export const runtime: string = process.execPath;

/** What a child process printed, and how it ended. */
export interface ChildResult {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

/**
 * Run `deno run -A <script> ...args` (with the V8 flags given) and collect
 * its output. `echo` streams its output through as it comes.
 */
export function runScript(
  script: string,
  args: string[],
  options: { v8Flags?: string; echo?: boolean; timeoutMs?: number; env?: Record<string, string> } =
    {},
): Promise<ChildResult> {
  const argv = ["run", "-A", "--quiet"];
  if (options.v8Flags) argv.push(`--v8-flags=${options.v8Flags}`);
  argv.push(script, ...args);
  return runCommand(runtime, argv, options);
}

/** Run a command and collect its output. */
export function runCommand(
  command: string,
  argv: string[],
  options: { echo?: boolean; timeoutMs?: number; env?: Record<string, string>; cwd?: string } = {},
): Promise<ChildResult> {
  return new Promise((resolve) => {
    const child = spawn(command, argv, {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...options.env },
      cwd: options.cwd,
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
      if (options.echo) process.stdout.write(d);
    });
    child.stderr.on("data", (d) => {
      stderr += d;
      if (options.echo) process.stderr.write(d);
    });
    const timer = options.timeoutMs
      ? setTimeout(() => child.kill("SIGKILL"), options.timeoutMs)
      : undefined;
    child.on("error", (error) => {
      if (timer) clearTimeout(timer);
      resolve({ code: null, signal: null, stdout, stderr: stderr + String(error) });
    });
    child.on("close", (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** The last line of `text` that parses as JSON, or undefined. */
export function lastJson<T>(text: string): T | undefined {
  const lines = text.trim().split("\n").reverse();
  for (const line of lines) {
    if (!line.startsWith("{")) continue;
    try {
      return JSON.parse(line) as T;
    } catch { /* not this one */ }
  }
  return undefined;
}

/** Open file descriptors of this process (Linux), or NaN. */
export function openFds(): number {
  try {
    return fs.readdirSync("/proc/self/fd").length;
  } catch {
    return NaN;
  }
}

/**
 * CPU time (ms) of each thread of this process so far, keyed by
 * `name#tid` (Linux: the first field of /proc/self/task/TID/schedstat, in ns).
 */
export function threadCpu(): Map<string, number> {
  const out = new Map<string, number>();
  try {
    for (const tid of fs.readdirSync("/proc/self/task")) {
      try {
        const name = fs.readFileSync(`/proc/self/task/${tid}/comm`, "utf8").trim();
        const ns = Number(
          fs.readFileSync(`/proc/self/task/${tid}/schedstat`, "utf8").split(" ")[0],
        );
        out.set(`${name}#${tid}`, ns / 1e6);
      } catch { /* the thread ended */ }
    }
  } catch { /* not Linux */ }
  return out;
}

/** One line of the watcher's report. */
export interface Sighting {
  /** The file's name. */
  f: string;
  /** The budget tier its block showed (0: no block). */
  tier: number;
  /** When, on the shared clock. */
  t: number;
}

/** Reads the lines a watcher appends to its report, as they come, without yielding. */
export class ReportReader {
  readonly #file: string;
  #offset = 0;
  #rest = "";

  constructor(file: string) {
    this.#file = file;
  }

  /** The sightings appended since the last call. */
  next(): Sighting[] {
    let fd: number;
    try {
      fd = fs.openSync(this.#file, "r");
    } catch {
      return [];
    }
    const chunks: string[] = [];
    try {
      const buf = new Uint8Array(1 << 20);
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, this.#offset);
        if (n <= 0) break;
        this.#offset += n;
        chunks.push(new TextDecoder().decode(buf.subarray(0, n)));
      }
    } finally {
      fs.closeSync(fd);
    }
    const text = this.#rest + chunks.join("");
    const lines = text.split("\n");
    this.#rest = lines.pop() ?? "";
    const out: Sighting[] = [];
    for (const line of lines) {
      try {
        const v = JSON.parse(line);
        if (typeof v.f === "string") out.push(v as Sighting);
      } catch { /* a partial line */ }
    }
    return out;
  }
}

/** A watcher process started by {@linkcode startWatcher}. */
export interface Watcher {
  report: string;
  reader: ReportReader;
  stop(): Promise<void>;
}

/** Start the separate-process watcher on `dir`; resolves once it watches. */
export async function startWatcher(dir: string): Promise<Watcher> {
  fs.mkdirSync(dir, { recursive: true });
  const report = path.join(tempDir("ac-bench-report-"), "report.jsonl");
  const script = fileURLToPath(new URL("./_bench_watcher.ts", import.meta.url));
  const child = spawn(runtime, ["run", "-A", "--quiet", script, dir, report], {
    stdio: ["pipe", "inherit", "inherit"],
  });
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const until = Date.now() + 60_000;
  while (Date.now() < until) {
    try {
      if (fs.readFileSync(report, "utf8").includes('"ready"')) break;
    } catch { /* not yet */ }
    await sleep(20);
  }
  return {
    report,
    reader: new ReportReader(report),
    async stop() {
      child.stdin?.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
      await closed;
      clearTimeout(timer);
      fs.rmSync(path.dirname(report), { recursive: true, force: true });
    },
  };
}
