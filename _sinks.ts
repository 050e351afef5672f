/**
 * Where the checkpoint writer's news goes, on the main thread: a written
 * checkpoint file to the run ledger (the fleet store keeps its content) and to
 * the host's `onCheckpoint` listener; a kanban task comment to the host's
 * `postComment`, else to the comment module. The host's code may throw or
 * reject: either costs a log line, never the write that called.
 *
 * @module
 */
import { errorText, failOpen, type Log } from "./log.ts";
import type { CheckpointEvent, WriterSinks } from "./_writer.ts";

/** A kanban task comment, as the sinks hand it on. @internal */
export interface KanbanComment {
  /** The kanban task to comment on. */
  taskId: string;
  /** The comment. */
  body: string;
}

/** The host's callbacks the sinks call, as the host gave them. @internal */
export interface HostCallbacks {
  /** Posts a kanban task comment; may return a promise. */
  postComment?: (comment: KanbanComment) => unknown;
  /** An ES module exporting `postComment`, used when there is no `postComment`. */
  commentModule?: string | URL;
  /** Called after every write of a checkpoint file. */
  onCheckpoint?: (event: CheckpointEvent) => void;
}

/** The writer's sinks; a comment needs no run id (the watchdog's come without one). @internal */
export interface HostSinks extends WriterSinks {
  /** Post a kanban task comment. */
  comment(comment: KanbanComment): void;
}

const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  !!value && typeof (value as PromiseLike<unknown>).then === "function";

/**
 * The writer's sinks on the main thread. @internal
 *
 * @param log Where failures of the host's code go.
 * @param host The host's callbacks.
 * @param fileWritten Told of every write first (the run ledger's store), outside the guard.
 * @returns The sinks.
 *
 * @example
 * ```ts
 * import { hostSinks } from "./_sinks.ts";
 * import assert from "node:assert/strict";
 *
 * const lines: string[] = [];
 * const sinks = hostSinks((_level, message) => lines.push(message), {
 *   onCheckpoint: () => {
 *     throw new Error("boom");
 *   },
 * }, () => {});
 * sinks.written({ runId: "r" } as Parameters<typeof sinks.written>[0]);
 * assert.match(lines[0]!, /^onCheckpoint threw: .*boom/);
 * ```
 */
export function hostSinks(
  log: Log,
  host: HostCallbacks,
  fileWritten: (event: CheckpointEvent) => void,
): HostSinks {
  return {
    log,
    comment: (comment) => postComment(log, host, comment),
    written: (event) => {
      fileWritten(event);
      const listener = host.onCheckpoint;
      if (!listener) return;
      failOpen(() => {
        const result: unknown = listener(event);
        if (isThenable(result)) {
          Promise.resolve(result).catch((error) =>
            log("warn", `onCheckpoint failed: ${errorText(error)}`, event.runId)
          );
        }
      }, (error) => log("warn", `onCheckpoint threw: ${errorText(error)}`, event.runId));
    },
  };
}

/** Post a comment through the host's sink, else the comment module. */
function postComment(log: Log, host: HostCallbacks, comment: KanbanComment): void {
  const fail = (error: unknown) =>
    log("warn", `posting the task comment failed: ${errorText(error)}`, comment.taskId);
  failOpen(() => {
    const sink = host.postComment;
    if (sink) {
      const result: unknown = sink(comment);
      if (isThenable(result)) Promise.resolve(result).catch(fail);
    } else if (host.commentModule !== undefined) {
      import(String(host.commentModule)).then((mod) => mod.postComment(comment)).catch(fail);
    }
  }, fail);
}
