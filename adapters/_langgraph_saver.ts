// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The LangChain adapter's LangGraph checkpointer ({@linkcode RunStoreSaver}):
 * a `BaseCheckpointSaver` over a keeper's run store, the embedded ledger or
 * the fleet store. The public entry is `langchain.ts`.
 *
 * @module
 */
import type { RunnableConfig } from "npm:@langchain/core@1/runnables";
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  compareWritesSortKeys,
  copyCheckpoint,
  maxChannelVersion,
  type PendingWrite,
  type SerializerProtocol,
  TASKS,
  WRITES_IDX_MAP,
  writesSortKey,
} from "npm:@langchain/langgraph-checkpoint@1";
import { isDeepStrictEqual } from "node:util";
import type { AgentCheckpoint } from "../mod.ts";
import type { GraphCheckpointRow, GraphWrite, LedgerCheckpoints, TypedBytes } from "../_ledger.ts";

/** How long a call waits, at most, for a store another process holds locked, ms. */
const BUSY_WAIT_MS = 5000;

/** Whether a store's failure is a lock another process holds for a moment (tried again). */
const busy = (error: unknown) =>
  /database is locked|SQLITE_BUSY|handed on/i.test(
    error instanceof Error ? error.message : String(error),
  );

/**
 * A LangGraph checkpointer kept in the run store of an agent-checkpoint keeper:
 * its embedded ledger (`<home>/agent-checkpoint/runs.db`), or the PostgreSQL
 * fleet store when the keeper's `store` setting names one. Pass it as
 * `checkpointer` as you would LangGraph's own savers: a graph invoked with a
 * `thread_id` resumes from its last super-step in any process, on any machine,
 * whose keeper shares the store.
 *
 * Threads and namespaces (`checkpoint_ns`), pending writes (a special channel's
 * write, such as an interrupt, replaces an earlier one) and each channel's
 * value per version (a checkpoint keeps only the channels that changed) are
 * kept as LangGraph's PostgreSQL saver keeps them. A `list()` with a metadata
 * `filter` reads the matching thread's (or every) checkpoint and filters in
 * this process.
 *
 * @example A graph resumed by its thread from a second keeper on the same store
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { RunStoreSaver } from "./langchain.ts";
 * import { Annotation, END, START, StateGraph } from "npm:@langchain/langgraph@1";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const State = Annotation.Root({ steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }) });
 * const build = (ac: ReturnType<typeof createAgentCheckpoint>) =>
 *   new StateGraph(State)
 *     .addNode("plan", () => ({ steps: ["plan"] }))
 *     .addNode("act", () => ({ steps: ["act"] }))
 *     .addEdge(START, "plan").addEdge("plan", "act").addEdge("act", END)
 *     .compile({ checkpointer: new RunStoreSaver(ac), interruptBefore: ["act"] });
 *
 * const home = mkdtempSync(join(tmpdir(), "ac-"));
 * const config = { configurable: { thread_id: "order-7" } };
 * const first = createAgentCheckpoint({ home, env: {} });
 * await build(first).invoke({ steps: [] }, config); // stops before "act"
 * await first.close();
 *
 * const second = createAgentCheckpoint({ home, env: {} });
 * const done = await build(second).invoke(null, config); // resumes at "act"
 * assert.deepEqual(done.steps, ["plan", "act"]);
 * await second.close();
 * ```
 */
export class RunStoreSaver extends BaseCheckpointSaver {
  readonly #ac: AgentCheckpoint;

  /**
   * A saver over a keeper's run store.
   *
   * @param ac The keeper whose run store keeps the checkpoints.
   * @param serde How values are serialized. @default {LangGraph's `JsonPlusSerializer`}
   */
  constructor(ac: AgentCheckpoint, serde?: SerializerProtocol) {
    super(serde);
    this.#ac = ac;
  }

  /** A call of the store, tried again while another process holds it locked for a moment. */
  async #store<T>(call: (port: LedgerCheckpoints) => Promise<T>): Promise<T> {
    const until = Date.now() + BUSY_WAIT_MS;
    for (let wait = 10;; wait = Math.min(wait * 2, 250)) {
      try {
        return await call(this.#ac.graphCheckpoints());
      } catch (error) {
        if (!busy(error) || Date.now() + wait > until) throw error;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  async #dump(value: unknown): Promise<TypedBytes> {
    const [type, bytes] = await this.serde.dumpsTyped(value);
    return { type, bytes };
  }

  /** A stored checkpoint as LangGraph reads it. */
  async #tuple(row: GraphCheckpointRow): Promise<CheckpointTuple> {
    const checkpoint = await this.serde.loadsTyped(
      row.checkpoint.type,
      row.checkpoint.bytes,
    ) as Checkpoint;
    checkpoint.channel_versions ??= {};
    checkpoint.versions_seen ??= {};
    const values: Record<string, unknown> = {};
    for (const v of row.values) {
      if (v.type !== "empty" && v.bytes) {
        values[v.channel] = await this.serde.loadsTyped(v.type, v.bytes);
      }
    }
    checkpoint.channel_values = values;
    const at = { thread_id: row.thread, checkpoint_ns: row.ns };
    if (checkpoint.v < 4 && row.parent !== undefined) await this.#pendingSends(checkpoint, row);
    const tuple: CheckpointTuple = {
      config: { configurable: { ...at, checkpoint_id: row.id } },
      checkpoint,
      metadata: await this.serde.loadsTyped(
        row.metadata.type,
        row.metadata.bytes,
      ) as CheckpointMetadata,
      pendingWrites: await this.#writes(row.writes),
    };
    if (row.parent !== undefined) {
      tuple.parentConfig = { configurable: { ...at, checkpoint_id: row.parent } };
    }
    return tuple;
  }

  /** Pending writes in the order LangGraph applies them: task path, task id, index. */
  async #writes(writes: GraphWrite[]): Promise<CheckpointPendingWrite[]> {
    const sorted = [...writes].sort((a, b) =>
      compareWritesSortKeys(
        writesSortKey(a.taskPath, a.taskId, a.index),
        writesSortKey(b.taskPath, b.taskId, b.index),
      )
    );
    return await Promise.all(
      sorted.map(async (w): Promise<CheckpointPendingWrite> => [
        w.taskId,
        w.channel,
        await this.serde.loadsTyped(w.type, w.bytes),
      ]),
    );
  }

  /**
   * A checkpoint of a format before 4 gets its parent's pending sends as its
   * `__pm__` channel, as LangGraph's own savers migrate it.
   */
  async #pendingSends(checkpoint: Checkpoint, row: GraphCheckpointRow): Promise<void> {
    const parent = await this.#store((port) =>
      port.get({ thread: row.thread, ns: row.ns, id: row.parent! })
    );
    const sends = (parent?.writes ?? []).filter((w) => w.channel === TASKS)
      .sort((a, b) => (a.taskId < b.taskId ? -1 : a.taskId > b.taskId ? 1 : a.index - b.index));
    checkpoint.channel_values[TASKS] = await Promise.all(
      sends.map((w) => this.serde.loadsTyped(w.type, w.bytes)),
    );
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] = versions.length > 0
      ? maxChannelVersion(...versions)
      : this.getNextVersion(undefined);
  }

  /**
   * The checkpoint `config` names (its `checkpoint_id`), or the newest of its
   * thread and namespace, with its pending writes.
   *
   * @param config The thread, namespace and, when given, the checkpoint's id.
   * @returns The checkpoint tuple, or undefined when there is none.
   */
  override async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const { thread_id, checkpoint_ns = "", checkpoint_id } = config.configurable ?? {};
    if (thread_id === undefined || thread_id === null) return undefined;
    const query = { thread: String(thread_id), ns: String(checkpoint_ns) };
    const row = await this.#store((port) =>
      port.get(checkpoint_id ? { ...query, id: String(checkpoint_id) } : query)
    );
    return row && await this.#tuple(row);
  }

  /**
   * Checkpoints, the newest first: of `config`'s thread (every thread's when
   * it names none) and namespace (every namespace's when it names none).
   *
   * @param config The thread, namespace and checkpoint id to match, each optional.
   * @param options `before` a checkpoint, at most `limit`, and a metadata `filter`.
   * @returns The checkpoint tuples.
   */
  override async *list(
    config: RunnableConfig,
    options?: CheckpointListOptions,
  ): AsyncGenerator<CheckpointTuple> {
    const { thread_id, checkpoint_ns, checkpoint_id } = config.configurable ?? {};
    const filter = Object.entries(options?.filter ?? {});
    const before = options?.before?.configurable?.checkpoint_id;
    const limit = options?.limit;
    const query: Parameters<LedgerCheckpoints["list"]>[0] = {};
    if (thread_id !== undefined && thread_id !== null) query.thread = String(thread_id);
    if (checkpoint_ns !== undefined && checkpoint_ns !== null) query.ns = String(checkpoint_ns);
    if (checkpoint_id) query.id = String(checkpoint_id);
    if (before !== undefined) query.before = String(before);
    // A metadata filter is applied here: the limit counts the checkpoints that match it.
    if (limit !== undefined && filter.length === 0) query.limit = limit;
    const rows = await this.#store((port) => port.list(query));
    let left = limit ?? Infinity;
    for (const row of rows) {
      if (left <= 0) return;
      const tuple = await this.#tuple(row);
      const metadata = (tuple.metadata ?? {}) as Record<string, unknown>;
      if (!filter.every(([key, value]) => isDeepStrictEqual(metadata[key], value))) continue;
      left--;
      yield tuple;
    }
  }

  /**
   * Keep a checkpoint, its metadata and the channel values of `newVersions`,
   * after the checkpoint `config` names (its parent), in one durable commit.
   *
   * @param config The thread, namespace and, when any, the parent checkpoint's id.
   * @param checkpoint The checkpoint.
   * @param metadata Its metadata.
   * @param newVersions The channels whose values changed, at their new versions.
   * @returns The config that names the kept checkpoint.
   * @throws {Error} When `config` names no thread.
   */
  override async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    if (config.configurable === undefined) {
      throw new Error('agent-checkpoint: the checkpoint\'s config has no "configurable"');
    }
    const { thread_id, checkpoint_ns = "", checkpoint_id } = config.configurable;
    if (thread_id === undefined || thread_id === null) {
      throw new Error(
        'agent-checkpoint: the checkpoint\'s config has no "thread_id": pass one in configurable',
      );
    }
    const { channel_values: values, ...rest } = copyCheckpoint(checkpoint);
    const [body, meta, brought] = await Promise.all([
      this.#dump(rest),
      this.#dump(metadata),
      Promise.all(
        Object.entries(newVersions).map(async ([channel, version]) =>
          channel in values
            ? { channel, version: String(version), ...(await this.#dump(values[channel])) }
            : { channel, version: String(version), type: "empty" }
        ),
      ),
    ]);
    const thread = String(thread_id);
    const ns = String(checkpoint_ns);
    await this.#store((port) =>
      port.put({
        thread,
        ns,
        id: checkpoint.id,
        ...(checkpoint_id ? { parent: String(checkpoint_id) } : {}),
        checkpoint: body,
        metadata: meta,
        versions: Object.fromEntries(
          Object.entries(checkpoint.channel_versions ?? {}).map(([k, v]) => [k, String(v)]),
        ),
        values: brought.map((v) => ({
          channel: v.channel,
          version: v.version,
          type: v.type,
          ...("bytes" in v ? { bytes: v.bytes } : {}),
        })),
      })
    );
    return { configurable: { thread_id: thread, checkpoint_ns: ns, checkpoint_id: checkpoint.id } };
  }

  /**
   * Keep a task's pending writes on the checkpoint `config` names, in one
   * durable commit. A special channel's write (an error, an interrupt) gets
   * its fixed negative index and replaces an earlier one.
   *
   * @param config The thread, namespace and checkpoint's id.
   * @param writes The writes, `[channel, value]`.
   * @param taskId The task that made them.
   * @param taskPath The task's path, when given.
   * @throws {Error} When `config` names no thread or no checkpoint.
   */
  override async putWrites(
    config: RunnableConfig,
    writes: PendingWrite[],
    taskId: string,
    taskPath?: string,
  ): Promise<void> {
    const { thread_id, checkpoint_ns = "", checkpoint_id } = config.configurable ?? {};
    if (thread_id === undefined || thread_id === null) {
      throw new Error('agent-checkpoint: the writes\' config has no "thread_id"');
    }
    if (!checkpoint_id) {
      throw new Error('agent-checkpoint: the writes\' config has no "checkpoint_id"');
    }
    const dumped = await Promise.all(
      writes.map(async ([channel, value], index): Promise<GraphWrite> => ({
        taskId,
        index: WRITES_IDX_MAP[channel] ?? index,
        channel,
        ...(await this.#dump(value)),
        taskPath: taskPath ?? "",
      })),
    );
    await this.#store((port) =>
      port.putWrites({
        thread: String(thread_id),
        ns: String(checkpoint_ns),
        id: String(checkpoint_id),
        writes: dumped,
      })
    );
  }

  /**
   * Remove a thread's checkpoints and writes, in every namespace.
   *
   * @param threadId The thread.
   */
  override async deleteThread(threadId: string): Promise<void> {
    await this.#store((port) => port.deleteThread(String(threadId)));
  }
}
