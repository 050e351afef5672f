/**
 * Log lines: to the host's logger when it gives one, else to a file in the
 * home directory that is kept under a size bound. Every line is bounded in
 * length. Logging never throws, and a logger that rejects never becomes an
 * unhandled rejection. When no line can be written anywhere, one line says so
 * on stderr, once.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import process from "node:process";
import { ensureDir } from "./persist.ts";
import { clip, errorText } from "./_show.ts";

export { errorText };

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

/**
 * Say on stderr, once per thread, that log lines are being lost, what failed
 * and the fix.
 */
function tellStderr(file: string, failure: string): void {
  if (toldStderr) return;
  toldStderr = true;
  const deno = "Deno" in globalThis
    ? " (under Deno: run with --allow-write for that directory)"
    : "";
  const line = oneLine(
    `agent-checkpoint: cannot write its log file ${file} (${failure}); its log lines are lost. ` +
      `Fix: pass a logger to createAgentCheckpoint, or make ${path.dirname(file)} writable${deno}.`,
    LOG_LINE_LIMIT,
  ) + "\n";
  try {
    process.stderr.write(line);
  } catch {
    try {
      console.error(line.trimEnd());
    } catch { /* nowhere left to say it */ }
  }
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
    if (failure !== undefined) tellStderr(file, failure);
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
      record = { level: "error", message: "a log line could not be made" };
    }
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
