/**
 * Log lines: to the host's logger when it gives one, else to a file in the
 * home directory that is kept under a size bound. Every line is bounded in
 * length. Logging never throws, and a logger that rejects never becomes an
 * unhandled rejection. When no line can be written anywhere, one line says so
 * on stderr, once; under Deno without the permissions checkpoints need, that
 * one line says which flags grant them.
 *
 * Here too is fail-open as one mechanism ({@linkcode failOpen},
 * {@linkcode failOpenAsync}): where the host calls in (a run's start, the
 * keeper's close) and where the library runs on its own (a timer, the
 * process's exit, the watchdog's start, loop and stop), an error becomes what
 * the caller makes of it (most often a log line, else a value to go on with),
 * never a throw into the host. The checkpoint writer guards with it too:
 * its own failures (a record that cannot be made, a file that cannot be
 * written) and its calls to code not its own (the host's listener and comment
 * sink, the run store).
 *
 * And how values are shown in warnings and log lines: short, bounded,
 * never throwing ({@linkcode show}, {@linkcode clip}, {@linkcode errorText}).
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { ensureDir } from "./_file_ops.ts";

/** One log line as the host's logger receives it. */
export interface LogRecord {
  /** `info`, `warn` or `error`. */
  level: string;
  /** One line, in plain words, at most {@linkcode LOG_LINE_LIMIT} characters. */
  message: string;
  /** The run it concerns, when it concerns one. */
  runId?: string;
}

/** A host's logger; it may return a promise, whose rejection costs a line in the log file. */
export type HostLogger = (record: LogRecord) => unknown;

/** Writes a log line; never throws. */
export type Log = (level: "info" | "warn" | "error", message: string, runId?: string) => void;

/** The log file's size bound; past it the file is rotated to `.1`. */
export const LOG_FILE_LIMIT = 1024 * 1024;

/** The most characters of one log message; a longer one is cut, saying how much. */
export const LOG_LINE_LIMIT = 2000;

/** The most characters of a run id in a log line. */
const RUN_ID_LIMIT = 200;

/**
 * The default log file for a home directory.
 *
 * @example
 * ```ts
 * import { logFilePath } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(logFilePath("/h"), "/h/logs/agent-checkpoint.log");
 * ```
 */
export const logFilePath = (home: string): string =>
  path.join(home, "logs", "agent-checkpoint.log");

/** A message made one line (line breaks shown as `\n`) of at most `limit` characters. */
const oneLine = (text: unknown, limit: number): string =>
  clip(String(text).replace(/\r?\n|\r/g, "\\n"), limit);

/**
 * A record as the library hands it on: the message one line of at most
 * {@linkcode LOG_LINE_LIMIT} characters, the run id at most 200.
 *
 * @example
 * ```ts
 * import { boundedRecord, LOG_LINE_LIMIT } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * const record = boundedRecord({ level: "warn", message: "x".repeat(10_000) });
 * assert.ok(record.message.length <= LOG_LINE_LIMIT);
 * assert.match(record.message, /more characters\)$/);
 * ```
 */
export function boundedRecord(record: LogRecord): LogRecord {
  const out: LogRecord = {
    level: oneLine(record.level, 20),
    message: oneLine(record.message, LOG_LINE_LIMIT),
  };
  if (record.runId !== undefined) out.runId = oneLine(record.runId, RUN_ID_LIMIT);
  return out;
}

/**
 * Append one line to a bounded log file, rotated to `.1` past
 * {@linkcode LOG_FILE_LIMIT}. The file is opened non-blocking and must be a
 * regular file (a FIFO or a device is refused). Never throws.
 *
 * @returns Undefined when the line was written, else what failed.
 *
 * @example
 * ```ts
 * import { appendLogLine } from "./log.ts";
 * import assert from "node:assert/strict";
 * import { mkdtempSync, readFileSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const file = join(mkdtempSync(join(tmpdir(), "ac-")), "logs", "a.log");
 * assert.equal(appendLogLine(file, { level: "info", message: "hello" }), undefined);
 * assert.match(readFileSync(file, "utf8"), / INFO hello\n$/);
 * ```
 */
export function appendLogLine(file: string, record: LogRecord): string | undefined {
  let fd: number | undefined;
  try {
    const { level, message, runId } = boundedRecord(record);
    ensureDir(path.dirname(file));
    try {
      if (fs.statSync(file).size > LOG_FILE_LIMIT) fs.renameSync(file, `${file}.1`);
    } catch { /* no file yet */ }
    const c = fs.constants;
    fd = fs.openSync(file, c.O_WRONLY | c.O_APPEND | c.O_CREAT | (c.O_NONBLOCK ?? 0), 0o644);
    if (!fs.fstatSync(fd).isFile()) return `${file} is not a regular file`;
    const run = runId === undefined ? "" : ` [${runId}]`;
    fs.writeSync(fd, `${new Date().toISOString()} ${level.toUpperCase()}${run} ${message}\n`);
    return undefined;
  } catch (error) {
    return errorText(error);
  } finally {
    if (fd !== undefined) {
      try {
        fs.closeSync(fd);
      } catch { /* closed already */ }
    }
  }
}

let toldStderr = false;

/** Deno's words when it denies a permission. */
const DENIED = /Requires (\w+) access(?: to "([^"]*)")?, run again with the (--allow-[\w-]+) flag/;

/** What Deno denied, when `text` (an error's or a log line's) says it denied something. */
function deniedIn(text: string): { access: string; target?: string } | undefined {
  const m = DENIED.exec(text);
  if (!m) return undefined;
  return m[2] === undefined ? { access: m[1]! } : { access: m[1]!, target: m[2] };
}

const deniedBy = (run: () => unknown): boolean => {
  try {
    run();
    return false;
  } catch (error) {
    return deniedIn(errorText(error)) !== undefined;
  }
};

/**
 * Deno's refusal to read a module file, when it refuses (no `--allow-read`
 * for it); undefined when it can be read, or is not a file. Under Deno a
 * worker whose module cannot be read fails with an uncaught error the host
 * cannot catch, so the watchdog asks this first.
 *
 * @param url The module's URL.
 * @returns Deno's message, or undefined.
 *
 * @example
 * ```ts
 * import { deniedRead } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(deniedRead(new URL("https://example.com/mod.ts")), undefined);
 * ```
 */
export function deniedRead(url: URL): string | undefined {
  if (url.protocol !== "file:") return undefined;
  try {
    fs.statSync(fileURLToPath(url));
    return undefined;
  } catch (error) {
    const text = errorText(error);
    return deniedIn(text) ? text : undefined;
  }
}

/** The library's own directory, when it is loaded from files: the watchdog reads its module there. */
function libraryDir(): string | undefined {
  try {
    const url = new URL(".", import.meta.url);
    return url.protocol === "file:" ? fileURLToPath(url).replace(/[\\/]$/, "") : undefined;
  } catch {
    // no module URL to read (an unusual loader): no library directory to leave out
    return undefined;
  }
}

/**
 * The flags that grant what checkpoints need under Deno: read and write for
 * the home, read for the library's files (its watchdog), and the environment
 * and the host name when they cannot be read.
 */
function denoFlags(home: string): string {
  const reads = [home];
  const lib = libraryDir();
  if (lib !== undefined && deniedBy(() => fs.statSync(lib))) reads.push(lib);
  const env = deniedBy(() => process.env.HOME) ? " --allow-env" : "";
  // The machine's name, which the run ledger records (else its runs' liveness waits on heartbeats).
  const sys = deniedBy(() => os.hostname()) ? " --allow-sys=hostname" : "";
  return `${shellWord(`--allow-read=${reads.join(",")}`)} ${
    shellWord(`--allow-write=${home}`)
  }${env}${sys}`;
}

/** A word as a POSIX shell reads it back: quoted when it holds anything but safe characters. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/** Say on stderr, once per thread, that Deno denies what checkpoints need, and the flags. */
function tellDenied(home: string, denied: { access: string; target?: string }): void {
  if (toldStderr) return;
  toldStderr = true;
  const what = denied.target === undefined
    ? `${denied.access} access`
    : `${denied.access} access to ${denied.target}`;
  say(
    `agent-checkpoint: Deno denies ${what}, so no checkpoint file can be written. ` +
      `Fix: run with ${denoFlags(home)}.`,
  );
}

let toldNoHostName = false;

/**
 * Say on stderr, once, that the machine's name cannot be read, so the run
 * ledger records runs without it; not when the line that Deno denies what
 * checkpoints need was said (its flags grant the name too). @internal
 *
 * @param denied Whether Deno denied it (the line then names the flag).
 *
 * @example
 * ```ts
 * import { tellNoHostName } from "./log.ts";
 *
 * tellNoHostName(true); // one line on stderr, the first time only
 * ```
 */
export function tellNoHostName(denied: boolean): void {
  if (toldStderr || toldNoHostName) return;
  toldNoHostName = true;
  say(
    `agent-checkpoint: ${
      denied ? "Deno denies the host name (grant --allow-sys=hostname)" : "no host name"
    }, so runs are recorded without their machine, and one whose process died reads cut off only after host_timeout_seconds; or set AGENT_CHECKPOINT_MACHINE`,
  );
}

/**
 * One line on stderr (line breaks shown as `\n`, at most
 * {@linkcode LOG_LINE_LIMIT} characters), else the console; never throws.
 * For what the host must see even when no log line can be written.
 *
 * @example
 * ```ts
 * import { say } from "./log.ts";
 *
 * say("agent-checkpoint: an example line on stderr");
 * ```
 */
export function say(text: string): void {
  const line = oneLine(text, LOG_LINE_LIMIT) + "\n";
  try {
    process.stderr.write(line);
  } catch {
    try {
      console.error(line.trimEnd());
    } catch { /* nowhere left to say it */ }
  }
}

/**
 * Say on stderr, once per thread, that log lines are being lost, what failed
 * and the fix.
 */
function tellStderr(file: string, failure: string, home: string): void {
  if (toldStderr) return;
  toldStderr = true;
  const fix = deniedIn(failure)
    ? `run with ${denoFlags(home)}; without them no checkpoint file can be written either`
    : `pass a logger to createAgentCheckpoint, or make ${path.dirname(file)} writable`;
  say(
    `agent-checkpoint: cannot write its log file ${file} (${failure}); its log lines are lost. ` +
      `Fix: ${fix}.`,
  );
}

/** Whether a value could be a promise, of this realm or another: an object or function. */
const maybeThenable = (v: unknown): v is object =>
  (typeof v === "object" && v !== null) || typeof v === "function";

/**
 * A logger that goes to `host` when given, else to the home's log file. A
 * host logger that throws or rejects (any thenable, from any realm) costs a
 * line in the log file; when the file cannot take a line either, one line
 * goes to stderr, once.
 *
 * @example
 * ```ts
 * import { createLog } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * const seen: string[] = [];
 * const log = createLog("/nonexistent", (r) => void seen.push(`${r.level}: ${r.message}`));
 * log("warn", "two\nlines");
 * assert.deepEqual(seen, ["warn: two\\nlines"]);
 * ```
 */
export function createLog(home: string, host?: HostLogger): Log {
  const file = logFilePath(home);
  const toFile = (record: LogRecord) => {
    const failure = appendLogLine(file, record);
    if (failure !== undefined) tellStderr(file, failure, home);
  };
  const hostFailed = (what: string) => (error: unknown) =>
    toFile({
      level: "warn",
      message: `the host's logger ${what} (${errorText(error)}); writing here instead`,
    });
  const rejected = hostFailed("rejected");
  return (level, message, runId) => {
    let record: LogRecord;
    try {
      record = boundedRecord(runId === undefined ? { level, message } : { level, message, runId });
    } catch {
      // a line that cannot be made is replaced by one that says so
      record = { level: "error", message: "a log line could not be made" };
    }
    // Under Deno without the permissions checkpoints need, every write fails: say so, once.
    const denied = toldStderr ? undefined : deniedIn(record.message);
    if (denied) tellDenied(home, denied);
    if (typeof host === "function") {
      try {
        const result = host(record);
        if (maybeThenable(result)) {
          try {
            // Promise.resolve adopts a thenable of any realm, and its rejection is handled.
            Promise.resolve(result).then(undefined, (error) => {
              rejected(error);
              toFile(record);
            });
          } catch (error) {
            rejected(error);
            toFile(record);
          }
        }
        return;
      } catch (error) {
        hostFailed("threw")(error);
      }
    }
    toFile(record);
  };
}

/**
 * Whether `value` is a thenable (a promise, of any realm, or anything with a
 * `then` method): what a host's or a framework's callback may return.
 * @internal
 *
 * @example
 * ```ts
 * import { isThenable } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.ok(isThenable(Promise.resolve(1)));
 * assert.ok(isThenable({ then() {} }));
 * assert.ok(!isThenable(undefined) && !isThenable("then") && !isThenable({}));
 * ```
 */
export const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  ((typeof value === "object" && value !== null) || typeof value === "function") &&
  typeof (value as PromiseLike<unknown>).then === "function";

/**
 * What `body` returns; if it throws, what `fallback` makes of the error.
 * @internal
 *
 * @param body The work that may throw.
 * @param fallback Called with what `body` threw; its value is returned instead.
 * @returns `body`'s value, else `fallback`'s.
 *
 * @example
 * ```ts
 * import { failOpen } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(failOpen(() => JSON.parse("{"), () => "not JSON"), "not JSON");
 * assert.equal(failOpen(() => 1, () => 2), 1);
 * ```
 */
export function failOpen<T>(body: () => T, fallback: (error: unknown) => T): T {
  try {
    return body();
  } catch (error) {
    return fallback(error);
  }
}

/**
 * What `body`'s promise resolves to; if `body` throws or its promise rejects,
 * what `fallback` makes of the error. Never rejects unless `fallback` throws.
 * @internal
 *
 * @param body The asynchronous work that may throw or reject.
 * @param fallback Called with the error; its value is resolved instead.
 * @returns `body`'s value, else `fallback`'s.
 *
 * @example
 * ```ts
 * import { failOpenAsync } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * const value = await failOpenAsync(() => Promise.reject(new Error("x")), () => "went on");
 * assert.equal(value, "went on");
 * ```
 */
export function failOpenAsync<T>(
  body: () => Promise<T>,
  fallback: (error: unknown) => T,
): Promise<T> {
  // The executor runs `body` at once, and a throw from it rejects like its promise would.
  return new Promise<T>((resolve) => resolve(body())).catch(fallback);
}

/** How many characters a shown value takes at most, "…" included. */
export const SHOW_LIMIT = 200;

/**
 * Describe a value as JSON would, but bounded in length and work, and with
 * `NaN`, `Infinity`, `-0` and bigints printed as themselves. Never throws.
 *
 * @example
 * ```ts
 * import { show } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(show([NaN, -Infinity, 10n, "a"]), '[NaN,-Infinity,10n,"a"]');
 * assert.equal(show("x".repeat(1000), 10).length, 10);
 * ```
 */
export function show(value: unknown, limit = SHOW_LIMIT): string {
  const out: string[] = [];
  let length = 0;
  let steps = 0;
  const push = (text: string) => {
    out.push(text);
    length += text.length;
  };
  const full = () => length > limit || ++steps > 1000;
  const walk = (v: unknown, depth: number): void => {
    if (full()) return;
    switch (typeof v) {
      case "string":
        push(JSON.stringify(v.length > limit ? v.slice(0, limit) : v));
        return;
      case "number":
        push(Object.is(v, -0) ? "-0" : String(v));
        return;
      case "bigint":
        push(`${v}n`);
        return;
      case "boolean":
        push(String(v));
        return;
      case "undefined":
        push("undefined");
        return;
      case "symbol":
        push("a symbol");
        return;
      case "function":
        push("a function");
        return;
    }
    if (v === null) return push("null");
    if (depth > 4) return push("…");
    try {
      if (Array.isArray(v)) {
        push("[");
        for (let i = 0; i < v.length; i++) {
          if (full()) break;
          if (i > 0) push(",");
          walk(v[i], depth + 1);
        }
        push("]");
        return;
      }
      push("{");
      let first = true;
      for (const key of Object.keys(v as object)) {
        if (full()) break;
        if (!first) push(",");
        first = false;
        push(`${JSON.stringify(key.length > limit ? key.slice(0, limit) : key)}:`);
        walk((v as Record<string, unknown>)[key], depth + 1);
      }
      push("}");
    } catch {
      push("(unreadable)");
    }
  };
  walk(value, 0);
  const text = out.join("");
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

/**
 * Cut a line to at most `limit` characters, saying how much was cut.
 *
 * @example
 * ```ts
 * import { clip } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(clip("short", 100), "short");
 * assert.match(clip("x".repeat(500), 100), /^x{60}… \(440 more characters\)$/);
 * ```
 */
export function clip(line: string, limit: number): string {
  if (line.length <= limit) return line;
  const kept = Math.max(0, limit - 40); // room for the note, whose number has at most 16 digits
  return `${line.slice(0, kept)}… (${line.length - kept} more characters)`;
}

/**
 * A short, safe description of anything thrown, at most 1,000 characters.
 *
 * @example
 * ```ts
 * import { errorText } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(errorText(new Error("disk full")), "disk full");
 * assert.equal(errorText({ toString() { throw 1; } }), "an unprintable error");
 * ```
 */
export function errorText(error: unknown): string {
  let text: string;
  try {
    text = String(error instanceof Error ? error.message : error);
  } catch {
    // the error's own message throws: a fixed text stands in
    text = "an unprintable error";
  }
  return clip(text, 1000);
}

/**
 * Whether a value is a mapping: an object, not null, not an array.
 *
 * @example
 * ```ts
 * import { isMapping } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isMapping({ a: 1 }), true);
 * assert.equal(isMapping([1]), false);
 * assert.equal(isMapping(null), false);
 * ```
 */
export const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * A value that is a non-empty string, else undefined: how an option or an
 * environment variable counts as given.
 *
 * @example
 * ```ts
 * import { nonEmptyText } from "./log.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(nonEmptyText("/srv"), "/srv");
 * assert.equal(nonEmptyText(""), undefined);
 * assert.equal(nonEmptyText(42), undefined);
 * ```
 */
export const nonEmptyText = (v: unknown): string | undefined =>
  typeof v === "string" && v !== "" ? v : undefined;
