// deno-lint-ignore-file no-import-prefix -- full npm: specifiers let Deno import this by URL
/**
 * The LangChain adapter's LangGraph agent ({@linkcode checkpointedReactAgent}):
 * the compiled `createReactAgent` graph behind a proxy whose `invoke`, `stream`,
 * `streamEvents` and `withConfig` run checkpointed invocations. The public
 * entry is `langchain.ts`.
 *
 * @module
 */
import { type BaseMessage, SystemMessage, ToolMessage } from "npm:@langchain/core@1/messages";
import { IterableReadableStream } from "npm:@langchain/core@1/utils/stream";
import { createReactAgent } from "npm:@langchain/langgraph@1/prebuilt";
import type { AgentCheckpoint, Run } from "../mod.ts";
import {
  effectful,
  errorLine,
  guarded,
  logFault,
  PendingPrologue,
  runSignal,
  startAdapterRun,
  thrownStatus,
  toolCallSignal,
} from "./_shared.ts";
import {
  checkInit,
  DEFAULT_RECURSION_LIMIT,
  type EndOutcome,
  type LangChainInit,
  placeInMessages,
  reportTool,
  reportUsage,
  sessionOf,
  toolContent,
  toolOutcome,
} from "./_langchain_middleware.ts";

/**
 * The `recursionLimit` that lets `createReactAgent` make exactly `maxTurns`
 * model calls, measured: a model and a tools step per turn, so the tools the
 * last call asks for still run; the next model step raises `GraphRecursionError`.
 *
 * @example
 * ```ts
 * import { recursionLimitForReactAgent } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(recursionLimitForReactAgent(12), 24); // LangGraph's default of 25 allows 13
 * ```
 */
export const recursionLimitForReactAgent = (maxTurns: number): number => 2 * maxTurns;

/** `createReactAgent`'s parameters, as this adapter reads them. */
export type ReactAgentParams = Parameters<typeof createReactAgent>[0];

/**
 * The compiled graph `createReactAgent` returns.
 *
 * @example
 * ```ts
 * import type { CheckpointedReactAgent, ReactAgentGraph } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * const graphOf = (agent: CheckpointedReactAgent): ReactAgentGraph => agent.graph;
 * assert.equal(typeof graphOf, "function");
 * ```
 */
export type ReactAgentGraph = ReturnType<typeof createReactAgent>;

/**
 * What {@linkcode checkpointedReactAgent} returns: the compiled graph itself,
 * its whole interface, with `invoke`, `stream` and `streamEvents` each running
 * one checkpointed invocation, plus the graph as built and its `recursionLimit`.
 *
 * @example
 * ```ts
 * import type { CheckpointedReactAgent } from "./langchain.ts";
 * import assert from "node:assert/strict";
 *
 * const limitOf = (agent: CheckpointedReactAgent): number => agent.recursionLimit;
 * assert.equal(typeof limitOf, "function");
 * ```
 */
export type CheckpointedReactAgent = ReactAgentGraph & {
  /** The compiled graph, as `createReactAgent` built it (with the prompt and tools wrapped). */
  readonly graph: ReactAgentGraph;
  /** The `recursionLimit` that allows exactly `maxTurns` model calls (`2 × maxTurns`). */
  readonly recursionLimit: number;
};

const REACT_KEY = "__agent_checkpoint_run";

/** One checkpointed invocation: the config the graph gets, and the ways its run ends (once). */
interface Invocation {
  config: Record<string, unknown>;
  /** A sign of life; `chunk`, when given, is what the graph streamed. */
  activity(chunk?: unknown): void;
  /** The run ended well; `out` is the graph's output, when it gives one. */
  done(out?: unknown): Promise<void>;
  /** The run failed with `error`: resolves to what the host is thrown (`BudgetExceededError` at an enforced cap). */
  failed(error: unknown): Promise<unknown>;
  abandoned(): Promise<void>;
}

/**
 * LangGraph's prebuilt `createReactAgent` as checkpointed runs: sets `prompt`
 * (the host's own prompt, then the budget prologue in the model call it is
 * due for), wraps the tools so each call is reported with its call id, and
 * derives `recursionLimit` from `maxTurns` (a turn is two graph steps).
 *
 * The result is the compiled graph with its whole interface (`getState`,
 * `getGraph`, `batch`, `withConfig`…). Each call of `invoke`, `stream` or
 * `streamEvents` is one run, with the derived `recursionLimit`. A run ends
 * `done` when the graph finishes (for a stream: when its last chunk is read),
 * `capped` on `GraphRecursionError` (rethrown), `failed`, `aborted` (the
 * host's `signal`, or a stream the host stopped reading: a `break`, a
 * `return()` or a `cancel()`, which also stops the graph) or `deadline`.
 * Every chunk a stream yields counts as activity.
 *
 * @param ac The library instance.
 * @param init `maxTurns`, and optionally `sessionId` (else the invocation's `thread_id`), `timeSeconds`, `placement`, `deadline`.
 * @param params `createReactAgent`'s parameters.
 * @returns The compiled graph, checkpointed, with `graph` and `recursionLimit` added.
 * @throws {TypeError} At the call, when a cap, the placement or the session id is unusable;
 *   at an invocation, when its config gives another `recursionLimit`.
 *
 * @example Invoke it, or stream it as any LangGraph agent
 * ```ts
 * import { createAgentCheckpoint } from "../mod.ts";
 * import { checkpointedReactAgent } from "./langchain.ts";
 * import { FakeListChatModel } from "npm:@langchain/core@1/utils/testing";
 * import assert from "node:assert/strict";
 * import { mkdtempSync } from "node:fs";
 * import { tmpdir } from "node:os";
 * import { join } from "node:path";
 *
 * const ac = createAgentCheckpoint({ home: mkdtempSync(join(tmpdir(), "ac-")), env: {} });
 * const model = new FakeListChatModel({ responses: ["done", "streamed"] });
 * model.bindTools = () => model;
 * const agent = checkpointedReactAgent(ac, { maxTurns: 12 }, { llm: model, tools: [] });
 * assert.equal(agent.recursionLimit, 24);
 * const state = await agent.invoke({ messages: [{ role: "user", content: "Hi" }] });
 * assert.equal(state.messages.at(-1)?.content, "done");
 * const updates = [];
 * for await (
 *   const chunk of await agent.stream({ messages: [{ role: "user", content: "Hi" }] }, {
 *     streamMode: "updates",
 *   })
 * ) updates.push(Object.keys(chunk));
 * assert.deepEqual(updates, [["agent"]]);
 * await ac.close();
 * ```
 */
export function checkpointedReactAgent(
  ac: AgentCheckpoint,
  init: LangChainInit,
  params: ReactAgentParams,
): CheckpointedReactAgent {
  checkInit(init);
  // deno-lint-ignore no-explicit-any
  const p = params as any;
  if (p.messageModifier !== undefined) {
    throw new TypeError("messageModifier is not supported here: give prompt instead");
  }
  const placement = init.placement ?? "user";
  const recursionLimit = recursionLimitForReactAgent(init.maxTurns);
  const runs = new Map<string, ReactLive>();
  const liveOf = (config: unknown) => {
    const key = (config as { configurable?: Record<string, unknown> } | undefined)
      ?.configurable?.[REACT_KEY];
    return typeof key === "string" ? runs.get(key) : undefined;
  };
  const userPrompt = p.prompt ?? p.stateModifier;

  const prompt = async (state: { messages: BaseMessage[] }, config: unknown) => {
    const messages = await promptMessages(userPrompt, state, config);
    const live = liveOf(config);
    if (!live) return messages;
    // Stopped by an enforced cap during a tool call: no further model call.
    const stopped = live.run.budget.error();
    if (stopped) throw stopped;
    // The previous model call's usage is in its AIMessage, now in the state.
    reportNewUsage(live, state.messages);
    // The tool results this call carries are in the ledger before the model sees them.
    await live.run.effects.durable();
    const text = live.run.preLlmCall();
    if (text === undefined && !live.pending.waiting) return messages;
    return guarded(
      live.run,
      "langchain: placing the prologue",
      () => placeInMessages(messages, placement, text, live.pending),
      () => messages,
    );
  };

  const replay = init.replay ?? [];
  const tools = Array.isArray(p.tools)
    ? p.tools.map((t: unknown) => wrapTool(t, liveOf, replay))
    : p.tools;
  const { stateModifier: _s, ...rest } = p;

  /** Start an invocation's run; throws the TypeError for a recursionLimit of the host's. */
  const begin = (graph: ReactAgentGraph, given: unknown): Invocation => {
    const config = (given ?? {}) as Record<string, unknown>;
    const bound = (graph.config ?? {}) as Record<string, unknown>; // from withConfig()
    // LangChain's own batch() and withConfig() fill in the default: that is not the host's.
    const limit = config.recursionLimit ?? bound.recursionLimit;
    if (limit !== undefined && limit !== DEFAULT_RECURSION_LIMIT && limit !== recursionLimit) {
      throw new TypeError(
        `recursionLimit is derived from maxTurns (${recursionLimit} for ${init.maxTurns}): do not pass it, got ${
          String(limit)
        }`,
      );
    }
    const configurable = (config.configurable ?? {}) as Record<string, unknown>;
    const run = startAdapterRun(
      ac,
      {
        ...init,
        sessionId: sessionOf(init, {
          ...(bound.configurable as Record<string, unknown> | undefined),
          ...configurable,
        }),
      },
      "maxTurns",
      init.maxTurns,
    );
    const key = `${run.runId}#${crypto.randomUUID()}`;
    const live: ReactLive = { run, pending: new PendingPrologue(), reported: new Set() };
    runs.set(key, live);
    const userSignal = config.signal as AbortSignal | undefined;
    const signal = runSignal(run, init.deadline, userSignal);
    let ending: Promise<void> | undefined;
    const end = (outcome: EndOutcome): Promise<void> => {
      if (ending === undefined) {
        runs.delete(key);
        ending = run.end(outcome).catch((error: unknown) =>
          logFault(run, "langgraph: ending the run", error)
        );
      }
      return ending;
    };
    return {
      config: {
        ...config,
        recursionLimit,
        configurable: { ...configurable, [REACT_KEY]: key },
        ...(signal ? { signal } : {}),
      },
      activity: (chunk?: unknown) => {
        run.activity();
        // A streamed chunk may show the newest model call's message, usage and all.
        if (chunk !== undefined) reportNewUsage(live, messagesIn(chunk));
      },
      done: (out?: unknown) => {
        // The last model call's usage: no prompt comes after it.
        reportNewUsage(live, (out as { messages?: unknown } | undefined)?.messages);
        return end({ status: "done" });
      },
      failed: async (error) => {
        await end({
          status: (error as Error)?.name === "GraphRecursionError"
            ? "capped"
            : thrownStatus(run, init.deadline, userSignal),
          summary: errorLine(error),
        });
        return run.budget.error(error) ?? error;
      },
      abandoned: () =>
        end({ status: "aborted", summary: "the host stopped reading the stream before its end" }),
    };
  };

  /** The graph as a checkpointed agent: its whole interface, three entry points checkpointed. */
  function checkpointed(graph: ReactAgentGraph): CheckpointedReactAgent {
    const invoke = async (input: unknown, config?: unknown) => {
      const call = begin(graph, config);
      try {
        const out = await graph.invoke(input as never, call.config as never);
        await call.done(out);
        return out;
      } catch (error) {
        throw await call.failed(error);
      }
    };

    const stream = async (input: unknown, config?: unknown) => {
      const call = begin(graph, config);
      let source: ReadableStream<unknown>;
      try {
        source = await graph.stream(input as never, call.config as never);
      } catch (error) {
        throw await call.failed(error);
      }
      return new ObservedStream(source, call);
    };

    // Sync for versions "v1" and "v2" (a stream), a promise for "v3" (a run stream with `output`).
    const streamEvents = (input: unknown, options?: unknown, streamOptions?: unknown) => {
      const call = begin(graph, options);
      let out: unknown;
      try {
        out = (graph.streamEvents as (...args: unknown[]) => unknown)(
          input,
          call.config,
          streamOptions,
        );
      } catch (error) {
        void call.failed(error);
        throw error;
      }
      if (out instanceof Promise) {
        return out.then((value) => observeEvents(value, call), async (error) => {
          throw await call.failed(error);
        });
      }
      return observeEvents(out, call);
    };

    const own: Record<PropertyKey, unknown> = {
      graph,
      recursionLimit,
      invoke,
      stream,
      streamEvents,
      // The graph's withConfig() makes a new graph: checkpointed in turn.
      withConfig: (config: Parameters<ReactAgentGraph["withConfig"]>[0]) =>
        checkpointed(graph.withConfig(config) as ReactAgentGraph),
    };
    // The graph's own methods see the proxy as `this`, so `batch` and `pipe`
    // reach the checkpointed `invoke` and `stream`.
    return new Proxy(graph, {
      get: (target, prop, receiver) =>
        Object.hasOwn(own, prop) ? own[prop] : Reflect.get(target, prop, receiver),
      has: (target, prop) => Object.hasOwn(own, prop) || Reflect.has(target, prop),
    }) as CheckpointedReactAgent;
  }

  return checkpointed(createReactAgent({ ...rest, prompt, tools }));
}

/**
 * The graph's stream as a stream of the same kind that ends the invocation's
 * run when it ends, fails or is abandoned (a `break`, `return()` or `cancel()`,
 * the last also while it is being read, as LangGraph's own stream allows);
 * abandoning it cancels the graph's stream, which stops the graph.
 */
class ObservedStream<T> extends IterableReadableStream<T> {
  readonly #abandon: (reason: unknown) => Promise<void>;

  constructor(source: ReadableStream<T>, call: Invocation) {
    const reader = source.getReader();
    const abandon = async (reason: unknown) => {
      await call.abandoned();
      // The graph's stream may reject its cancel with the abort it caused: the host asked for that.
      await reader.cancel(reason).catch(() => {});
    };
    super({
      async pull(controller) {
        let step: Awaited<ReturnType<typeof reader.read>>;
        try {
          step = await reader.read();
        } catch (error) {
          controller.error(await call.failed(error));
          return;
        }
        if (step.done) {
          await call.done();
          controller.close();
          return;
        }
        call.activity(step.value);
        controller.enqueue(step.value);
      },
      cancel: abandon,
    });
    this.#abandon = abandon;
  }

  override cancel(reason?: unknown): Promise<void> {
    return this.locked ? this.#abandon(reason) : super.cancel(reason);
  }
}

/** What `streamEvents` returned, observed: a stream (v1, v2), or a run stream whose `output` settles (v3). */
function observeEvents(out: unknown, call: Invocation): unknown {
  if (out instanceof ReadableStream) return new ObservedStream(out, call);
  const output = (out as { output?: unknown } | null)?.output;
  // A v3 run stream runs the graph to its end whether or not it is read.
  if (output instanceof Promise) output.then(() => call.done(), (error) => call.failed(error));
  else void call.done();
  return out;
}

/**
 * The messages a streamed chunk holds: a state's (`streamMode: "values"`),
 * a node's update's (`"updates"`), an event's output's, or a message itself
 * (`"messages"`, as `[message, metadata]`).
 */
function messagesIn(chunk: unknown): unknown[] {
  const out: unknown[] = [];
  const visit = (v: unknown, depth: number) => {
    if (v === null || typeof v !== "object" || depth > 3) return;
    const o = v as { messages?: unknown; usage_metadata?: unknown };
    if (o.usage_metadata !== undefined) out.push(v);
    else if (Array.isArray(o.messages)) out.push(...o.messages);
    else if (Array.isArray(v)) { for (const x of v.slice(0, 4)) visit(x, depth + 1); }
    else for (const x of Object.values(o).slice(0, 8)) visit(x, depth + 1);
  };
  visit(chunk, 0);
  return out;
}

/** A createReactAgent invocation in flight. */
interface ReactLive {
  run: Run;
  pending: PendingPrologue;
  /** Messages (by id, else by identity) whose usage was reported, or that came with the input. */
  reported: Set<unknown>;
  primed?: boolean;
}

/**
 * Report the usage of the model calls whose messages are new in the state
 * since the last look; the messages the invocation started with are history.
 */
function reportNewUsage(live: ReactLive, messages: unknown): void {
  if (!Array.isArray(messages)) return;
  for (const m of messages) {
    if (m === null || typeof m !== "object") continue;
    // By identity and by id: a streamed message may get its id in the state later.
    const id = (m as { id?: unknown }).id;
    const named = typeof id === "string" && id !== "";
    if (live.reported.has(m) || (named && live.reported.has(id))) continue;
    live.reported.add(m);
    if (named) live.reported.add(id);
    if (live.primed) reportUsage(live.run, m);
  }
  live.primed = true;
}

/** The messages the host's own prompt makes of the state, as createReactAgent would. */
async function promptMessages(
  prompt: unknown,
  state: { messages: BaseMessage[] },
  config: unknown,
): Promise<BaseMessage[]> {
  if (prompt == null) return state.messages;
  if (typeof prompt === "string") return [new SystemMessage(prompt), ...state.messages];
  if (SystemMessage.isInstance(prompt)) return [prompt, ...state.messages];
  let out: unknown;
  if (typeof prompt === "function") out = await prompt(state, config);
  else if (typeof (prompt as { invoke?: unknown }).invoke === "function") {
    out = await (prompt as { invoke(s: unknown, c: unknown): unknown }).invoke(state, config);
  } else throw new TypeError(`prompt must be a string, a SystemMessage, a function or a Runnable`);
  const value = out as { toChatMessages?: () => BaseMessage[] };
  return typeof value?.toChatMessages === "function"
    ? value.toChatMessages()
    : out as BaseMessage[];
}

/**
 * The host's tool, whose `invoke` reports each call to its invocation's run.
 * It stays the same tool (a proxy, not a tool around it), so callbacks and
 * `streamEvents` see one tool run per call, as without the adapter.
 */
function wrapTool(
  original: unknown,
  liveOf: (config: unknown) => { run: Run } | undefined,
  replay: string[],
): unknown {
  const t = original as { name?: unknown; invoke?: unknown };
  if (typeof t?.invoke !== "function" || typeof t.name !== "string") return original;
  const name = t.name;
  const invoke = t.invoke as (input: unknown, config?: unknown) => Promise<unknown>;
  const reported = async function (this: unknown, input: unknown, config?: unknown) {
    const live = liveOf(config);
    if (!live) return invoke.call(original, input, config);
    const call = input as { id?: unknown; args?: unknown; type?: unknown } | undefined;
    const isCall = call?.type === "tool_call";
    const callId = isCall && typeof call.id === "string" ? call.id : undefined;
    const args = isCall ? call.args : input;
    const post = reportTool(live.run, name, callId, args, replay.includes(name));
    try {
      const given = config as
        | { signal?: AbortSignal; configurable?: Record<string, unknown> }
        | undefined;
      let ran: unknown;
      const run = async (effectKey: string) => {
        // The tool reads its effect key from its config: `config.configurable.effectKey`.
        const timed = {
          ...given,
          ...(callId === undefined
            ? {}
            : { signal: toolCallSignal(live.run, callId, given?.signal) }),
          configurable: { ...given?.configurable, effectKey },
        };
        ran = await invoke.call(original, input, timed);
        return toolContent(ran);
      };
      const { value, replayed } = await effectful(live.run, { replay }, name, args, callId, run);
      // Replayed: the tool message its earlier attempt's call gave, from the receipt.
      const out = replayed
        ? new ToolMessage({
          content: typeof value === "string" ? value : JSON.stringify(value),
          tool_call_id: callId ?? "",
          name,
        })
        : ran;
      const outcome = toolOutcome(out);
      post(outcome.ok, outcome.error, outcome.ok ? toolContent(out) : undefined);
      return out;
    } catch (error) {
      post(false, errorLine(error));
      throw error;
    }
  };
  return new Proxy(original as object, {
    get: (target, prop, receiver) =>
      prop === "invoke" ? reported : Reflect.get(target, prop, receiver),
  });
}
