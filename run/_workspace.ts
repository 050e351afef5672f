/**
 * A run's working-tree snapshots (S19): before a tool or a write, after
 * them, and at a tier. A part of the run, with the run's working tree.
 *
 * @module
 */
import type { PartContext, RunHost, WorkspaceRef } from "./_host.ts";

/**
 * A run's working-tree snapshots: the hooks call it when the run has a
 * working tree and snapshots are on (`ctx.workspaces`), never otherwise, so a
 * run without them runs no code here. @internal
 */
export class RunWorkspace {
  readonly #host: RunHost;
  readonly #dir: string;

  /** @internal */
  constructor(host: RunHost, dir: string) {
    this.#host = host;
    this.#dir = dir;
  }

  /** The turn the run is on, for the snapshot's name. */
  #turn(ctx: PartContext): number {
    return ctx.shared.turns(this.#host.info.slot);
  }

  /** A snapshot that a tier's record names, when snapshots are on. */
  snapshot(ctx: PartContext, reason: string): WorkspaceRef | undefined {
    return ctx.workspaces?.snapshot(this.#dir, reason, this.#host.runId);
  }

  /** `preToolCall` with an input: synchronous, since the tool runs next and must find its tree stored. */
  toolStart(ctx: PartContext, tool: string, callId: string | undefined, input: unknown): void {
    const ws = ctx.workspaces;
    if (!ws) return;
    const options: { callId?: string; runId: string } = { runId: this.#host.runId };
    if (callId !== undefined) options.callId = callId;
    ws.beforeTool(this.#dir, this.#turn(ctx), tool, input, options);
  }

  /** `postToolCall`, with the settings enabled. */
  toolEnd(
    ctx: PartContext,
    tool: string,
    callId: string | undefined,
    ok: boolean | undefined,
  ): void {
    const ws = ctx.workspaces;
    if (!ws) return;
    const options: { ok?: boolean; callId?: string; runId: string } = { runId: this.#host.runId };
    if (ok !== undefined) options.ok = ok;
    if (callId !== undefined) options.callId = callId;
    ws.afterTool(this.#dir, tool, options);
  }

  /** `beforeWrite`. */
  beforeWrite(ctx: PartContext, paths: string[] | undefined): void {
    ctx.workspaces?.beforeWrite(this.#dir, this.#turn(ctx), paths, this.#host.runId);
  }

  /** `afterWrite`. */
  afterWrite(ctx: PartContext, paths: string[]): void {
    ctx.workspaces?.afterWrite(this.#dir, paths, this.#host.runId);
  }
}
