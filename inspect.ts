/**
 * Reading checkpoint files back (S14 `ls`, `show`, `audit`): whatever a file
 * holds (a block, only the agent's text, nothing, a truncated block, bytes
 * that are not UTF-8) it is described, never a crash.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { Buffer } from "node:buffer";
import { BLOCK_BEGIN, findBlock } from "./persist.ts";
import { type CheckpointRecord, parseRecord } from "./record.ts";

/** What a checkpoint file holds. */
export type FileState =
  | "record" // the plugin's block, intact
  | "agent text only" // no block at all
  | "empty"
  | "truncated" // a begin marker without its end, or a block whose data is unreadable
  | "unreadable"; // the file could not be read

/** One checkpoint file, described. */
export interface CheckpointFile {
  file: string;
  /** The record's run id, else the file name without `.md`. */
  runId: string;
  state: FileState;
  record?: CheckpointRecord;
  /** Whether anything but whitespace lies outside the plugin's block. */
  agentText: boolean;
  /** Whether the agent's own text says INCOMPLETE. */
  incomplete: boolean;
  /** Whether the bytes are valid UTF-8. */
  utf8: boolean;
  size: number;
  /** When it was last persisted (the record's time, else the file's mtime), ms since the epoch. */
  at: number;
  error?: string;
}

const strict = new TextDecoder("utf-8", { fatal: true });
const loose = new TextDecoder();

/** Describe one checkpoint file. */
export function inspectFile(file: string): CheckpointFile {
  const base: CheckpointFile = {
    file,
    runId: path.basename(file).replace(/\.md$/, ""),
    state: "unreadable",
    agentText: false,
    incomplete: false,
    utf8: true,
    size: 0,
    at: 0,
  };
  let bytes: Buffer;
  try {
    const stat = fs.statSync(file);
    base.size = stat.size;
    base.at = stat.mtimeMs;
    bytes = fs.readFileSync(file);
  } catch (error) {
    return { ...base, error: (error as Error).message };
  }
  try {
    strict.decode(bytes);
  } catch {
    base.utf8 = false;
  }
  const block = findBlock(bytes);
  const outside = block
    ? Buffer.concat([bytes.subarray(0, block.start), bytes.subarray(block.end)])
    : bytes;
  const agent = loose.decode(outside);
  base.agentText = agent.trim() !== "";
  base.incomplete = /\bINCOMPLETE\b/.test(agent);
  if (bytes.length === 0) return { ...base, state: "empty" };
  const record = block ? parseRecord(bytes) : undefined;
  if (record) {
    const at = Date.parse(record.persistedAt);
    return {
      ...base,
      state: "record",
      record,
      runId: typeof record.runId === "string" ? record.runId : base.runId,
      at: Number.isFinite(at) ? at : base.at,
    };
  }
  const hasBegin = bytes.includes(Buffer.from(BLOCK_BEGIN));
  return { ...base, state: block || hasBegin ? "truncated" : "agent text only" };
}

/** Every checkpoint file in a directory, newest first; none when it does not exist. */
export function listCheckpoints(dir: string): CheckpointFile[] {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  return names
    .filter((n) => n.endsWith(".md") && !n.startsWith("."))
    .map((n) => inspectFile(path.join(dir, n)))
    .sort((a, b) => b.at - a.at);
}
