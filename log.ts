/**
 * Log lines (S12): to the host's logger when it gives one, else to a file in
 * the home directory that is kept under a size bound. Logging never throws.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { ensureDir } from "./persist.ts";

/** One log line as the host's logger receives it. */
export interface LogRecord {
  /** `info`, `warn` or `error`. */
  level: string;
  /** One line, in plain words. */
  message: string;
  /** The run it concerns, when it concerns one. */
  runId?: string;
}

/** A host's logger. */
export type HostLogger = (record: LogRecord) => void;

/** Writes a log line; never throws. */
export type Log = (level: "info" | "warn" | "error", message: string, runId?: string) => void;

/** The log file's size bound; past it the file is rotated to `.1`. */
export const LOG_FILE_LIMIT = 1024 * 1024;

/** The default log file for a home directory. */
export const logFilePath = (home: string) => path.join(home, "logs", "agent-checkpoint.log");

/** Append one line to a bounded log file. */
export function appendLogLine(file: string, record: LogRecord): void {
  try {
    ensureDir(path.dirname(file));
    try {
      if (fs.statSync(file).size > LOG_FILE_LIMIT) fs.renameSync(file, `${file}.1`);
    } catch { /* no file yet */ }
    const run = record.runId === undefined ? "" : ` [${record.runId}]`;
    fs.appendFileSync(
      file,
      `${new Date().toISOString()} ${record.level.toUpperCase()}${run} ${record.message}\n`,
    );
  } catch { /* a log that cannot be written must not break the host */ }
}

/** A logger that goes to `host` when given (and falls back to the file if it throws). */
export function createLog(home: string, host?: HostLogger): Log {
  const file = logFilePath(home);
  return (level, message, runId) => {
    const record: LogRecord = runId === undefined ? { level, message } : { level, message, runId };
    if (host) {
      try {
        host(record);
        return;
      } catch (error) {
        appendLogLine(file, {
          level: "warn",
          message: `the host's logger threw (${errorText(error)}); writing here instead`,
        });
      }
    }
    appendLogLine(file, record);
  };
}

/** A short, safe description of anything thrown. */
export function errorText(error: unknown): string {
  try {
    return error instanceof Error ? error.message : String(error);
  } catch {
    return "unprintable error";
  }
}
